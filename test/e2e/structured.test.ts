import { createServer, type Server } from "node:http";
import { type AddressInfo, connect } from "node:net";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { ProviderId } from "../../src/providers/provider-id.js";
import { createSafePdfFetcher } from "../../src/structured/safe-pdf-fetch.js";
import { costOfTokens } from "../../src/usage/token-cost.js";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import { providerA, providerB, tinyPng } from "../fakes/fake-upstream-responses.js";
import {
  adminToken,
  createProjectOnEachProvider,
  createTestProject,
  logLinesOf,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowOf,
} from "../support/test-gateway.js";

const schema = {
  type: "object",
  properties: {
    title: { type: "string" },
    score: { type: "integer", minimum: 0, maximum: 10 },
    tags: { type: "array", items: { type: "string" } },
  },
  required: ["title", "score"],
  additionalProperties: false,
};
const answer = { title: "A calm lake", score: 7, tags: ["nature"] };
const pdf = Buffer.from("%PDF-1.4\n1 0 obj\n<<>>\nendobj\ntrailer\n<<>>\n%%EOF\n");
const pdfDataUrl = `data:application/pdf;base64,${pdf.toString("base64")}`;

describe("structured analysis", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let pdfServer: Server;
  let pdfServerConnections = 0;
  /** When the connection of the last `/drip.pdf` download started and closed (ms since the epoch). */
  const drip: { started?: number; closed?: number } = {};
  let pdfUrl: string;
  let projects: Record<"provider-a" | "provider-b" | "provider-c", TestProject>;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    pdfServer = createServer((request, response) => {
      if (request.url !== "/drip.pdf") return void response.end(pdf);
      // The headers at once, then one byte every 100 ms (the PDF, then spaces), never ending: only
      // the fetch's deadline (60 s) or the client leaving ends it.
      drip.started = Date.now();
      drip.closed = undefined;
      response.writeHead(200, { "content-type": "application/pdf" });
      let index = 0;
      const timer = setInterval(() => {
        response.write(index < pdf.length ? pdf.subarray(index, ++index) : " ");
      }, 100);
      response.on("close", () => {
        clearInterval(timer);
        drip.closed = Date.now();
      });
    });
    pdfServer.on("connection", () => pdfServerConnections++);
    await new Promise<void>((resolve) => pdfServer.listen(0, "127.0.0.5", resolve));
    pdfUrl = `http://127.0.0.5:${(pdfServer.address() as AddressInfo).port}/doc.pdf`;
    sluice = await startTestGateway(
      {
        ...providerBaseUrls(fake),
        upstreamHeadersTimeoutMs: 1500,
        maxImageBytes: 4096,
      },
      // Production's fetcher, except that the one local PDF server counts as a public address.
      {
        fetchPdf: createSafePdfFetcher({
          isAllowedAddress: (ip) => ip === "127.0.0.5",
          allowedProtocols: ["http:", "https:"],
          maxBytes: 1 << 20,
          timeoutMs: 60_000,
        }),
      },
    );
    projects = await createProjectOnEachProvider(sluice.gateway, { outputSchema: schema });
  });

  afterAll(async () => {
    await sluice.close();
    await fake.close();
    pdfServer.closeAllConnections();
    await new Promise((resolve) => pdfServer.close(resolve));
  });

  beforeEach(() => {
    fake.clear();
    fake.setStructuredOutput(answer);
    fake.setLatencyMs(0);
  });

  function post(
    path: string,
    project: TestProject,
    body: unknown,
    headers: Record<string, string> = {},
    provider = projectProvider(project),
  ) {
    return fetch(`${sluice.url}${path}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${project.bearer(provider)}`,
        "content-type": "application/json",
        ...headers,
      },
      body: typeof body === "string" ? body : JSON.stringify(body),
    });
  }

  function projectProvider(project: TestProject): ProviderId {
    return (Object.entries(projects).find(([, candidate]) => candidate === project)?.[0] ??
      "provider-a") as ProviderId;
  }

  async function expectError(response: Response, status: number, code: string) {
    const body = (await response.json()) as { error: { code: string; message: string; requestId: string } };
    expect({ status: response.status, code: body.error.code }).toEqual({ status, code });
    expect(body.error.requestId).toBe(response.headers.get("x-request-id"));
    return body.error;
  }

  const rowFor = (response: Response) => usageRowOf(sluice.gateway, response);

  const keyHeader = {
    "provider-a": "authorization",
    "provider-b": "x-api-key",
    "provider-c": "x-goog-api-key",
  } as const;

  for (const provider of ["provider-a", "provider-b", "provider-c"] as const) {
    describe(provider, () => {
      const inputs = [
        ["text", { text: "A calm lake at dawn" }],
        ["vision", { image: `data:image/png;base64,${tinyPng.toString("base64")}` }],
        ["pdf", { pdf: pdfDataUrl }],
      ] as const;

      it.each(inputs)("answers /v1/%s with exactly the schema-shaped object", async (kind, body) => {
        const project = projects[provider];
        const response = await post(`/v1/${kind}/${project.projectId}`, project, body);
        expect(response.status).toBe(200);
        expect(await response.json()).toEqual(answer);
        expect(fake.requests).toHaveLength(1);
        const upstream = fake.last()!;
        const key = String(upstream.headers[keyHeader[provider]]);
        expect(key.endsWith(project.providerKeys[provider])).toBe(true);
        const sent = JSON.stringify(upstream.json);
        if (provider === "provider-a")
          expect(upstream.json).toMatchObject({ response_format: { type: "json_schema" } });
        if (provider === "provider-b")
          expect(upstream.json).toMatchObject({ output_config: { format: { type: "json_schema" } } });
        if (provider === "provider-c")
          expect(upstream.json).toMatchObject({ generationConfig: { responseMimeType: "application/json" } });
        if (kind === "vision") expect(sent).toContain(tinyPng.toString("base64"));
        if (kind === "pdf") expect(sent).toContain(pdf.toString("base64"));
        const row = await rowFor(response);
        expect(row).toMatchObject({
          endpoint: kind,
          provider,
          status: 200,
          outcome: "ok",
          input_tokens: 11,
          output_tokens: 7,
        });
        expect(row.model).toBeTruthy();
        expect(row.cost_usd).toBeGreaterThan(0);
      });

      it("records a token count that is not a whole number of tokens as unknown, and keeps the row", async () => {
        fake.setUsage({ input: 2.5, output: 2 ** 53 + 10, cached: -1, reasoning: 0 });
        try {
          const response = await post(`/v1/text/${projects[provider].projectId}`, projects[provider], {
            text: "x",
          });
          expect(response.status).toBe(200);
          const row = await rowFor(response);
          expect(row).toMatchObject({ status: 200, input_tokens: null, output_tokens: null });
          expect(row).toMatchObject({ cached_tokens: null, cost_usd: null });
        } finally {
          fake.setUsage({ input: 11, output: 7, cached: 3, reasoning: 2 });
        }
      });

      // An empty answer is not sent back as an empty message, which provider B refuses.
      it.each([
        ["an invalid answer", { title: "No score" }],
        ["an empty answer", ""],
      ])("repairs %s, then answers 200", async (_name, first) => {
        let calls = 0;
        fake.setStructuredOutput(() => (++calls === 1 ? first : answer));
        const response = await post(
          "/v1/text",
          projects[provider],
          { text: "x" },
          { "x-project-id": projects[provider].projectId },
        );
        expect(response.status).toBe(200);
        expect(await response.json()).toEqual(answer);
        expect(fake.requests).toHaveLength(2);
      });

      it("answers 502 when the repair fails too", async () => {
        fake.setStructuredOutput("not json at all");
        const response = await post(
          "/v1/text",
          projects[provider],
          { text: "x" },
          { "x-project-id": projects[provider].projectId },
        );
        await expectError(response, 502, "PROVIDER_ERROR");
        expect(fake.requests).toHaveLength(2);
      });

      // Provider A's chat answer says so with finish_reason "length".
      if (provider === "provider-a")
        it("asks again for a shorter answer when one is cut off at the token limit, and says so when the repair is too", async () => {
          const cutAnswer = {
            id: "chatcmpl-cut",
            object: "chat.completion",
            created: 1_700_000_000,
            model: "gpt-4o-mini",
            choices: [
              {
                index: 0,
                message: { role: "assistant", content: '{"title": "A calm la' },
                finish_reason: "length",
              },
            ],
            usage: { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 },
          };
          fake.enqueueResponse({ status: 200, body: cutAnswer });
          fake.enqueueResponse({ status: 200, body: cutAnswer });
          const response = await post(
            "/v1/text",
            projects[provider],
            { text: "x" },
            { "x-project-id": projects[provider].projectId },
          );
          const error = await expectError(response, 502, "PROVIDER_ERROR");
          expect(error.message).toMatch(/cut off at its output token limit/);
          // The cut text is not sent back; the repair asks for a shorter answer.
          const repair = fake.last()?.json as { messages: Array<{ role: string; content: unknown }> };
          expect(JSON.stringify(repair.messages)).not.toContain("A calm la");
          expect(JSON.stringify(repair.messages.at(-1))).toContain("cut off at the output token limit");
        });

      it("records the model, tokens and cost of both attempts when the repair fails too", async () => {
        const project = projects[provider];
        const oneAttempt = await rowFor(await post(`/v1/text/${project.projectId}`, project, { text: "x" }));
        fake.setStructuredOutput({ answer: "neither a title nor a score" });
        const response = await post(`/v1/text/${project.projectId}`, project, { text: "x" });
        await expectError(response, 502, "PROVIDER_ERROR");
        const row = await rowFor(response);
        expect(row).toMatchObject({
          status: 502,
          error_code: "PROVIDER_ERROR",
          model: oneAttempt.model,
          input_tokens: 22,
          output_tokens: 14,
        });
        expect(oneAttempt.cost_usd).toBeGreaterThan(0);
        expect(row.cost_usd).toBeCloseTo(2 * (oneAttempt.cost_usd ?? 0), 12);
      });

      it("records the first attempt's tokens when the repair fails at the provider", async () => {
        const project = projects[provider];
        const oneAttempt = await rowFor(await post(`/v1/text/${project.projectId}`, project, { text: "x" }));
        fake.setStructuredOutput(() => {
          fake.failNext(500); // the repair request
          return { answer: "neither a title nor a score" };
        });
        const response = await post(`/v1/text/${project.projectId}`, project, { text: "x" });
        const error = await expectError(response, 502, "PROVIDER_ERROR");
        expect(
          fake.requests.filter((request) => request.headers["x-sluice-test-key"] === undefined),
        ).toHaveLength(3);
        const row = await rowFor(response);
        expect(row).toMatchObject({
          status: 502,
          error_code: "PROVIDER_ERROR",
          input_tokens: 11,
          output_tokens: 7,
        });
        expect(row.cost_usd).toBeCloseTo(oneAttempt.cost_usd ?? 0, 12);
        // The first attempt was billed: its model and tokens are in the details, as in the row.
        expect((error as { details?: unknown }).details).toMatchObject({
          providerStatus: 500,
          model: row.model,
          usage: { inputTokens: 11, outputTokens: 7 },
        });
      });

      it("answers 502 when the provider fails", async () => {
        fake.failNext(500);
        const response = await post(`/v1/text/${projects[provider].projectId}`, projects[provider], {
          text: "x",
        });
        const error = await expectError(response, 502, "PROVIDER_ERROR");
        expect(error.message).not.toContain(projects[provider].providerKeys[provider]);
        expect((await rowFor(response)).error_code).toBe("PROVIDER_ERROR");
      });
    });
  }

  it("says so when the project's model is one its provider has shut down", async () => {
    // Anthropic retired Claude Opus 4.1 on 2026-08-05 (it names no replacement).
    const project = await createTestProject(sluice.gateway, {
      provider: "provider-b",
      model: "claude-opus-4-1",
      outputSchema: schema,
    });
    fake.failNext(404);
    const response = await post(`/v1/text/${project.projectId}`, project, { text: "x" }, {}, "provider-b");
    const error = await expectError(response, 502, "PROVIDER_ERROR");
    expect(error.message).toBe(
      "The provider failed to process the request (status 404): its model claude-opus-4-1 was shut down by provider-b on 2026-08-05",
    );
  });

  // JSON.parse reads 1e999 as Infinity, which the schema's number admits; sent, it would be null.
  describe("an answer with a number JSON cannot carry", () => {
    const unbounded = {
      type: "object",
      properties: { title: { type: "string" }, score: { type: "number" } },
      required: ["title", "score"],
    };
    const overflow = '{"title":"A","score":1e999}';

    for (const provider of ["provider-a", "provider-b", "provider-c"] as const) {
      it(`is repaired like any invalid output on ${provider}, or answered 502`, async () => {
        const project = await createTestProject(sluice.gateway, { provider, outputSchema: unbounded });
        let calls = 0;
        fake.setStructuredOutput(() => (++calls === 1 ? overflow : { title: "A", score: 1 }));
        const repaired = await post(`/v1/text/${project.projectId}`, project, { text: "x" }, {}, provider);
        expect(repaired.status).toBe(200);
        expect(await repaired.json()).toEqual({ title: "A", score: 1 });
        expect(fake.requests).toHaveLength(2);
        expect(JSON.stringify(fake.last()!.json)).toContain("/score must be a finite number");

        fake.clear();
        fake.setStructuredOutput(overflow);
        const refused = await post(`/v1/text/${project.projectId}`, project, { text: "x" }, {}, provider);
        await expectError(refused, 502, "PROVIDER_ERROR");
        expect(fake.requests).toHaveLength(2);
      });
    }
  });

  it("records the cost when provider B answers an alias model with the snapshot it resolved to", async () => {
    const project = await createTestProject(sluice.gateway, {
      provider: "provider-b",
      outputSchema: schema,
      model: "claude-3-5-haiku-latest",
    });
    const usage = { input: 11, output: 7, cached: 3, reasoning: 2 };
    fake.enqueueResponse({
      status: 200,
      body: providerB.message(
        "claude-3-5-haiku-20241022",
        [{ type: "text", text: JSON.stringify(answer) }],
        usage,
      ),
    });
    const response = await post(`/v1/text/${project.projectId}`, project, { text: "x" }, {}, "provider-b");
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual(answer);
    expect(fake.last()!.json).toMatchObject({ model: "claude-3-5-haiku-latest" });
    const row = await rowFor(response);
    expect(row).toMatchObject({ status: 200, model: "claude-3-5-haiku-20241022", input_tokens: 11 });
    const expected = costOfTokens("provider-b", "claude-3-5-haiku-latest", {
      inputTokens: row.input_tokens,
      outputTokens: row.output_tokens,
      cachedInputTokens: row.cached_tokens,
      reasoningTokens: row.reasoning_tokens,
    });
    expect(expected).toBeGreaterThan(0);
    expect(row.cost_usd).toBeCloseTo(expected ?? Number.NaN, 12);
  });

  // The proxies price these from the provider's own usage object; the AI SDK's summary of it leaves
  // out what is billed apart (cache writes, their lifetimes), which was priced as plain input.
  it("prices provider A's cache writes as the proxy does, at the cache-write price", async () => {
    const project = await createTestProject(sluice.gateway, {
      provider: "provider-a",
      outputSchema: schema,
      model: "gpt-6-sol",
    });
    fake.setUsage({ input: 10_000, output: 100, cached: 2_000, reasoning: 0, cacheWrite: 5_000 });
    try {
      const response = await post(`/v1/text/${project.projectId}`, project, { text: "x" }, {}, "provider-a");
      expect(response.status).toBe(200);
      const row = await rowFor(response);
      expect(row).toMatchObject({ input_tokens: 10_000, output_tokens: 100, cached_tokens: 2_000 });
      const expected = costOfTokens("provider-a", "gpt-6-sol", {
        inputTokens: 10_000,
        outputTokens: 100,
        cachedInputTokens: 2_000,
        reasoningTokens: 0,
        cacheWriteTokens: { thirtyMinutes: 5_000 },
      });
      // 3,000 fresh at $2, 2,000 cached at $0.20, 5,000 written at $2.50, 100 out at $10 (per 1M).
      expect(expected).toBeCloseTo(0.0199, 12);
      expect(row.cost_usd).toBeCloseTo(expected ?? Number.NaN, 12);
    } finally {
      fake.setUsage({ input: 11, output: 7, cached: 3, reasoning: 2, cacheWrite: undefined });
    }
  });

  it("prices provider B's cache writes by their lifetime, as the proxy does", async () => {
    const project = await createTestProject(sluice.gateway, {
      provider: "provider-b",
      outputSchema: schema,
      model: "claude-sonnet-4-5",
    });
    const message = providerB.message(
      "claude-sonnet-4-5-20250929",
      [{ type: "text", text: JSON.stringify(answer) }],
      { input: 11, output: 7, cached: 3, reasoning: 2 },
    );
    message.usage = {
      ...message.usage,
      input_tokens: 1_000,
      cache_read_input_tokens: 2_000,
      cache_creation_input_tokens: 4_000,
      cache_creation: { ephemeral_5m_input_tokens: 1_000, ephemeral_1h_input_tokens: 3_000 },
      output_tokens: 100,
    };
    fake.enqueueResponse({ status: 200, body: message });
    const response = await post(`/v1/text/${project.projectId}`, project, { text: "x" }, {}, "provider-b");
    expect(response.status).toBe(200);
    const row = await rowFor(response);
    expect(row).toMatchObject({ input_tokens: 7_000, output_tokens: 100, cached_tokens: 2_000 });
    const expected = costOfTokens("provider-b", "claude-sonnet-4-5", {
      inputTokens: 7_000,
      outputTokens: 100,
      cachedInputTokens: 2_000,
      reasoningTokens: null,
      cacheWriteTokens: { fiveMinutes: 1_000, oneHour: 3_000 },
    });
    // 1,000 fresh at $3, 2,000 read at $0.30, 1,000 written for 5 minutes at $3.75 and 3,000 for an
    // hour at $6, 100 out at $15 (per 1M).
    expect(expected).toBeCloseTo(0.02685, 12);
    expect(row.cost_usd).toBeCloseTo(expected ?? Number.NaN, 12);
  });

  // The route asks for no tier, but a project's default tier (OpenAI's project setting, Anthropic's
  // Priority Tier commitment) may serve the call on another: the answer says which, as on the proxies.
  it("prices the service tier the answer says served the call (A: priority prices; B: Priority Tier unknown)", async () => {
    const projectA = await createTestProject(sluice.gateway, {
      provider: "provider-a",
      outputSchema: schema,
      model: "gpt-5",
    });
    const counts = { input: 1_000, output: 100, cached: 200, reasoning: 0 };
    fake.enqueueResponse({
      status: 200,
      body: {
        ...providerA.chat("gpt-5-2025-08-07", JSON.stringify(answer), counts),
        service_tier: "priority",
      },
    });
    const responseA = await post(`/v1/text/${projectA.projectId}`, projectA, { text: "x" }, {}, "provider-a");
    expect(responseA.status).toBe(200);
    const rowA = await rowFor(responseA);
    expect(rowA).toMatchObject({ input_tokens: 1_000, output_tokens: 100, cached_tokens: 200 });
    // gpt-5 priority per 1M: 800 in at $2.50, 200 cached at $0.25, 100 out at $20.
    expect(rowA.cost_usd).toBeCloseTo(0.00405, 12);

    // An answer that is no JSON (the SDK's error path) and its repair, each at its own tier.
    fake.enqueueResponse({
      status: 200,
      body: { ...providerA.chat("gpt-5-2025-08-07", "no JSON here", counts), service_tier: "priority" },
    });
    fake.enqueueResponse({
      status: 200,
      body: providerA.chat("gpt-5-2025-08-07", JSON.stringify(answer), counts),
    });
    const repaired = await post(`/v1/text/${projectA.projectId}`, projectA, { text: "x" }, {}, "provider-a");
    expect(repaired.status).toBe(200);
    // 0.00405 at priority, then 800 x $1.25 + 200 x $0.125 + 100 x $10 at the standard tier.
    expect((await rowFor(repaired)).cost_usd).toBeCloseTo(0.00405 + 0.002025, 12);

    const projectB = await createTestProject(sluice.gateway, {
      provider: "provider-b",
      outputSchema: schema,
      model: "claude-sonnet-4-5",
    });
    const message = providerB.message(
      "claude-sonnet-4-5-20250929",
      [{ type: "text", text: JSON.stringify(answer) }],
      counts,
    );
    message.usage = { ...message.usage, service_tier: "priority" };
    fake.enqueueResponse({ status: 200, body: message });
    const responseB = await post(`/v1/text/${projectB.projectId}`, projectB, { text: "x" }, {}, "provider-b");
    expect(responseB.status).toBe(200);
    expect(await rowFor(responseB)).toMatchObject({ output_tokens: 100, cost_usd: null });
  });

  // Each attempt is a provider call of its own, which the provider holds to the long-context
  // threshold alone: two prompts under it are not billed as one over it.
  it("prices a repaired call's attempts each against the long-context threshold", async () => {
    const project = await createTestProject(sluice.gateway, {
      provider: "provider-c",
      outputSchema: schema,
      model: "gemini-2.5-pro",
    });
    fake.setUsage({ input: 150_000, output: 100, cached: 0, reasoning: 0 });
    try {
      let calls = 0;
      fake.setStructuredOutput(() => (++calls === 1 ? { title: "No score" } : answer));
      const response = await post(`/v1/text/${project.projectId}`, project, { text: "x" }, {}, "provider-c");
      expect(response.status).toBe(200);
      expect(fake.requests).toHaveLength(2);
      const row = await rowFor(response);
      expect(row).toMatchObject({ input_tokens: 300_000, output_tokens: 200 });
      // Each: 150,000 in at $1.25 and 100 out at $10 (per 1M), the prices up to 200k.
      expect(row.cost_usd).toBeCloseTo(2 * 0.1885, 12);
    } finally {
      fake.setUsage({ input: 11, output: 7, cached: 3, reasoning: 2 });
    }
  });

  it("answers 504 when the repair times out, with the first attempt's model and tokens in its details", async () => {
    const project = projects["provider-a"];
    fake.setStructuredOutput(() => {
      fake.setLatencyMs(3000); // the repair request
      return { answer: "neither a title nor a score" };
    });
    const response = await post(`/v1/text/${project.projectId}`, project, { text: "x" });
    const error = await expectError(response, 504, "PROVIDER_TIMEOUT");
    const row = await rowFor(response);
    expect(row).toMatchObject({ status: 504, input_tokens: 11, output_tokens: 7 });
    expect((error as { details?: unknown }).details).toMatchObject({
      model: row.model,
      usage: { inputTokens: 11, outputTokens: 7 },
    });
  });

  it("answers 504 when the provider does not answer in time", async () => {
    fake.setLatencyMs(3000);
    const response = await post(`/v1/text/${projects["provider-a"].projectId}`, projects["provider-a"], {
      text: "x",
    });
    await expectError(response, 504, "PROVIDER_TIMEOUT");
  });

  it("refuses a project without an output schema, or with an invalid one, before any provider call", async () => {
    const bare = await createTestProject(sluice.gateway, { provider: "provider-a" });
    await expectError(await post(`/v1/text/${bare.projectId}`, bare, { text: "x" }), 422, "VALIDATION_ERROR");
    const broken = await createTestProject(sluice.gateway, { provider: "provider-a" });
    await sluice.gateway.database.db
      .updateTable("projects")
      .set({ output_schema: '{"type":"object","oneOf":[]}' })
      .where("id", "=", broken.projectId)
      .execute();
    const error = await expectError(
      await post(`/v1/text/${broken.projectId}`, broken, { text: "x" }),
      422,
      "VALIDATION_ERROR",
    );
    expect(error.message).toContain("oneOf");
    // Stored as no JSON object (text written by hand, a JSON string): refused on every call.
    for (const stored of ["{not json", '"a string"']) {
      const unread = await createTestProject(sluice.gateway, { provider: "provider-a" });
      await sluice.gateway.database.db
        .updateTable("projects")
        .set({ output_schema: stored })
        .where("id", "=", unread.projectId)
        .execute();
      for (let call = 0; call < 2; call++) {
        const refused = await expectError(
          await post(`/v1/text/${unread.projectId}`, unread, { text: "x" }),
          422,
          "VALIDATION_ERROR",
        );
        expect(refused.message).toContain("must be a JSON object");
      }
    }
    expect(fake.requests).toHaveLength(0);
  });

  // Before, these were saved (201) and every call was the provider's 400, Sluice's 502.
  const refusedByProviderC: Array<[string, Record<string, unknown>]> = [
    ["an enum holding an object", { type: "object", properties: { kind: { enum: [{ a: 1 }, "two"] } } }],
    [
      "a map",
      {
        type: "object",
        properties: { scores: { type: "object", additionalProperties: { type: "number" } } },
      },
    ],
    ["a map at the root", { type: "object", additionalProperties: { type: "string" } }],
    [
      "a required name without a property",
      { type: "object", properties: { a: { type: "string" } }, required: ["a", "b"] },
    ],
  ];

  it.each(refusedByProviderC)(
    "refuses %s for provider C when saved, and when the provider of a project holding it becomes C",
    async (_name, outputSchema) => {
      await expect(
        sluice.gateway.admin.createProject({ name: "c", provider: "provider-c", outputSchema }),
      ).rejects.toMatchObject({ code: "VALIDATION_ERROR", message: expect.stringContaining("provider-c") });
      const onA = await createTestProject(sluice.gateway, { provider: "provider-a", outputSchema });
      await expect(
        sluice.gateway.admin.updateProject(onA.projectId, { provider: "provider-c" }),
      ).rejects.toMatchObject({ code: "VALIDATION_ERROR" });
      const onC = await createTestProject(sluice.gateway, { provider: "provider-c" });
      await expect(sluice.gateway.admin.updateProject(onC.projectId, { outputSchema })).rejects.toMatchObject(
        { code: "VALIDATION_ERROR" },
      );
    },
  );

  it.each(refusedByProviderC)(
    "answers 422 for %s on a provider C project saved before the rule, without a provider call",
    async (_name, outputSchema) => {
      const project = await createTestProject(sluice.gateway, { provider: "provider-c" });
      await sluice.gateway.database.db
        .updateTable("projects")
        .set({ output_schema: JSON.stringify(outputSchema) })
        .where("id", "=", project.projectId)
        .execute();
      // Other changes still go through: the provider's rules run where the schema or provider change.
      await sluice.gateway.admin.updateProject(project.projectId, { name: "renamed" });
      const response = await post(`/v1/text/${project.projectId}`, project, { text: "x" }, {}, "provider-c");
      const error = await expectError(response, 422, "VALIDATION_ERROR");
      expect(error.message).toContain("provider-c");
      expect(fake.requests).toHaveLength(0);
      expect(await rowFor(response)).toMatchObject({
        status: 422,
        error_code: "VALIDATION_ERROR",
        cost_usd: null,
      });
    },
  );

  // Before, these were saved (201), and every call was answered, refused by the validator, repaired
  // (a second billed call) and answered 502 PROVIDER_ERROR, blaming the provider for the schema.
  const unmeetable: Array<[string, Record<string, unknown>]> = [
    ["a minimum above its maximum", { type: "integer", minimum: 10, maximum: 0 }],
    ["a minLength above its maxLength", { type: "string", minLength: 5, maxLength: 2 }],
    ["an enum none of whose values has its type", { type: "string", enum: [1, 2] }],
  ];

  it.each(unmeetable)(
    "refuses an output schema with %s when saved, and answers 422 without a provider call for one saved before",
    async (_name, score) => {
      const outputSchema = { ...schema, properties: { ...schema.properties, score } };
      await expect(
        sluice.gateway.admin.createProject({ name: "u", provider: "provider-a", outputSchema }),
      ).rejects.toMatchObject({
        code: "VALIDATION_ERROR",
        message: expect.stringContaining("#/properties/score"),
      });
      const project = await createTestProject(sluice.gateway, { provider: "provider-a" });
      await sluice.gateway.database.db
        .updateTable("projects")
        .set({ output_schema: JSON.stringify(outputSchema) })
        .where("id", "=", project.projectId)
        .execute();
      const response = await post(`/v1/text/${project.projectId}`, project, { text: "x" });
      const error = await expectError(response, 422, "VALIDATION_ERROR");
      expect(error.message).toContain("no value can match it");
      expect(fake.requests).toHaveLength(0);
    },
  );

  // Before, providers B's and C's converters dropped `nullable`: the model could never answer null.
  it.each(["provider-a", "provider-b", "provider-c"] as const)(
    "sends %s a `nullable: true` property as one that takes null, and a null answer passes",
    async (provider) => {
      const outputSchema = {
        type: "object",
        properties: {
          dueDate: { type: "string", nullable: true, description: "null when the text names none" },
          kind: { type: "string", enum: ["a", "b", null], nullable: true },
        },
        required: ["dueDate", "kind"],
      };
      const project = await createTestProject(sluice.gateway, { provider, outputSchema });
      fake.setStructuredOutput({ dueDate: null, kind: null });
      const response = await post(`/v1/text/${project.projectId}`, project, { text: "x" }, {}, provider);
      expect(response.status).toBe(200);
      expect(await response.json()).toEqual({ dueDate: null, kind: null });
      // biome-ignore lint/suspicious/noExplicitAny: each provider's request body, read by its own path
      type Json = any;
      const body = fake.last()!.json as Json;
      const sent =
        provider === "provider-a"
          ? body.response_format?.json_schema?.schema
          : provider === "provider-b"
            ? (body.output_config?.format?.schema ?? body.tools?.[0]?.input_schema)
            : body.generationConfig?.responseSchema;
      const takesNull = (property: Json) =>
        property.nullable === true ||
        (Array.isArray(property.type) && property.type.includes("null")) ||
        (Array.isArray(property.anyOf) && property.anyOf.some((branch: Json) => branch.type === "null"));
      expect(takesNull(sent.properties.dueDate), JSON.stringify(sent)).toBe(true);
      expect(takesNull(sent.properties.kind), JSON.stringify(sent)).toBe(true);
    },
  );

  // Before, `$comment`, `examples`, `deprecated`, `readOnly`, `writeOnly` and `$id` were refused when
  // saved (422), and provider A was sent `default` (which its strict mode refuses) and `$schema`.
  const annotatedSchema = {
    $schema: "https://json-schema.org/draft/2020-12/schema",
    $id: "https://example.com/review.schema.json",
    $comment: "Version 2",
    title: "Review",
    description: "A product review",
    type: "object",
    examples: [{ title: "Good", description: "Works", stars: 5 }],
    properties: {
      title: {
        type: "string",
        description: "Its headline",
        examples: ["Good"],
        default: "Untitled",
        $comment: "short",
      },
      description: { type: "string", title: "Body", deprecated: false, readOnly: true, writeOnly: false },
      stars: { type: "integer", description: "1 to 5", default: 3, examples: [5] },
    },
    required: ["title", "description", "stars"],
  };
  /** Annotations no provider is sent: C's Schema has no such field, B's structured outputs list none. */
  const notTaken = ["$comment", "examples", "deprecated", "readOnly", "writeOnly", "$schema", "$id"];
  const notSent: Record<ProviderId, string[]> = {
    "provider-a": [...notTaken, "default"], // its strict structured outputs refuse `default` too
    "provider-b": notTaken,
    "provider-c": notTaken,
  };
  /** Every keyword of a schema as a provider got it: properties' names are not keywords. */
  const keywordsOf = (schema: unknown): string[] => {
    if (typeof schema !== "object" || schema === null) return [];
    const node = schema as Record<string, unknown>;
    const children = [
      ...Object.values((node.properties ?? {}) as object),
      ...Object.values((node.$defs ?? {}) as object),
      node.items,
      node.additionalProperties,
      ...(Array.isArray(node.anyOf) ? node.anyOf : []),
    ];
    return [...Object.keys(node), ...children.flatMap(keywordsOf)];
  };
  // biome-ignore lint/suspicious/noExplicitAny: each provider's request body, read by its own path
  type Body = any;
  it.each([
    [
      "provider-a",
      "response_format",
      annotatedSchema,
      (body: Body) => body.response_format?.json_schema?.schema,
    ],
    ["provider-b", "output_config", annotatedSchema, (body: Body) => body.output_config?.format?.schema],
    [
      "provider-b",
      "the JSON tool an open object takes",
      { ...annotatedSchema, additionalProperties: true },
      (body: Body) => body.tools?.[0]?.input_schema,
    ],
    ["provider-c", "responseSchema", annotatedSchema, (body: Body) => body.generationConfig?.responseSchema],
  ] as const)(
    "saves a schema with annotations as given, and sends %s (%s) none it refuses, descriptions kept",
    async (provider, _mode, outputSchema, sentSchemaOf) => {
      const project = await createTestProject(sluice.gateway, { provider, outputSchema });
      const saved = await fetch(`${sluice.url}/admin/v1/projects/${project.projectId}`, {
        headers: { authorization: `Bearer ${adminToken}` },
      });
      expect(((await saved.json()) as { outputSchema: unknown }).outputSchema).toEqual(outputSchema);
      const reviewed = { title: "Good", description: "Works", stars: 5 };
      fake.setStructuredOutput(reviewed);
      const response = await post(`/v1/text/${project.projectId}`, project, { text: "x" }, {}, provider);
      expect(response.status).toBe(200);
      expect(await response.json()).toEqual(reviewed);
      const sent = sentSchemaOf(fake.last()!.json as Body);
      expect(keywordsOf(sent).filter((keyword) => notSent[provider].includes(keyword))).toEqual([]);
      expect(Object.keys(sent.properties)).toEqual(["title", "description", "stars"]);
      expect(sent.properties.title.description).toContain("Its headline");
      expect(sent.properties.stars.description).toContain("1 to 5");
    },
  );

  // Provider B's structured outputs take no recursive schema: the AI SDK sends it as a `json` tool,
  // forced (`any`) on a model that takes forced tool use, offered (`auto`) to one that refuses it, as
  // provider B's default claude-sonnet-5-5 does.
  it.each([
    ["claude-haiku-4-5", "any"],
    [null, "auto"],
  ] as const)(
    "answers a recursive schema on provider B (model %s) through the AI SDK's JSON-tool fallback, tool_choice %s",
    async (model, toolChoice) => {
      const outputSchema = {
        type: "object",
        $defs: {
          node: {
            type: "object",
            properties: {
              name: { type: "string" },
              kids: { type: "array", items: { $ref: "#/$defs/node" } },
            },
          },
        },
        properties: { root: { $ref: "#/$defs/node" } },
        required: ["root"],
      };
      const tree = { root: { name: "a", kids: [{ name: "b", kids: [] }] } };
      fake.setStructuredOutput(tree);
      const project = await createTestProject(sluice.gateway, {
        provider: "provider-b",
        model,
        outputSchema,
      });
      const response = await post(`/v1/text/${project.projectId}`, project, { text: "x" }, {}, "provider-b");
      expect(response.status).toBe(200);
      expect(await response.json()).toEqual(tree);
      const sent = fake.last()!.json as { model: string; tool_choice?: { type: string } };
      expect(sent.model).toBe(model ?? "claude-sonnet-5-5");
      expect(sent.tool_choice?.type).toBe(toolChoice);
    },
  );

  it.each([
    ["/v1/text", "{not json", 400, "BAD_REQUEST"],
    ["/v1/text", { nottext: "x" }, 400, "BAD_REQUEST"],
    ["/v1/text", { text: 42 }, 400, "BAD_REQUEST"],
    // Nothing to analyse, and the provider would bill the call.
    ["/v1/text", { text: " \n\t " }, 400, "BAD_REQUEST"],
    ["/v1/vision", {}, 400, "BAD_REQUEST"],
    ["/v1/vision", { image: "%%%notbase64" }, 422, "VALIDATION_ERROR"],
    [
      "/v1/vision",
      { image: Buffer.from("plain text, not an image").toString("base64") },
      422,
      "VALIDATION_ERROR",
    ],
    [
      "/v1/vision",
      { image: Buffer.concat([tinyPng, Buffer.alloc(8000)]).toString("base64") },
      413,
      "PAYLOAD_TOO_LARGE",
    ],
    // Found by the fuzz test: a PNG or GIF whose header is missing is no image; never sent (and billed).
    ["/v1/vision", { image: tinyPng.subarray(0, 8).toString("base64") }, 422, "VALIDATION_ERROR"],
    // A JPEG that ends before its scan holds no pixels, nor a WebP without its frame header: no
    // provider reads them. Before, they were sent (a billed call) and the provider's 400 was a 502.
    [
      "/v1/vision",
      { image: Buffer.from("ffd8ffe000104a464946", "hex").toString("base64") },
      422,
      "VALIDATION_ERROR",
    ],
    [
      "/v1/vision",
      {
        image: `data:image/webp;base64,${Buffer.from("RIFF\x24\0\0\0WEBPVP8 ", "latin1").toString("base64")}`,
      },
      422,
      "VALIDATION_ERROR",
    ],
    [
      "/v1/vision",
      { image: `data:image/gif;base64,${Buffer.from("GIF89a").toString("base64")}` },
      422,
      "VALIDATION_ERROR",
    ],
    ["/v1/pdf", {}, 400, "BAD_REQUEST"],
    [
      "/v1/pdf",
      { pdf: `data:application/octet-stream;base64,${pdf.toString("base64")}` },
      400,
      "BAD_REQUEST",
    ],
    ["/v1/pdf", { pdf: `data:application/pdf;base64,${tinyPng.toString("base64")}` }, 400, "BAD_REQUEST"],
    ["/v1/pdf", { pdf: "ftp://example.com/a.pdf" }, 400, "BAD_REQUEST"],
  ])("answers %s with %j as %i %s and calls no provider", async (path, body, status, code) => {
    const project = projects["provider-a"];
    await expectError(await post(path, project, body, { "x-project-id": project.projectId }), status, code);
    expect(fake.requests).toHaveLength(0);
  });

  const gif = Buffer.concat([Buffer.from("GIF89a"), Buffer.alloc(32, 1)]);
  const heic = Buffer.concat([Buffer.from([0, 0, 0, 24]), Buffer.from("ftypheic"), Buffer.alloc(32, 1)]);

  it.each([
    ["provider-c", "GIF", gif],
    ["provider-a", "HEIC", heic],
    ["provider-b", "HEIC", heic],
  ] as const)(
    "answers 422 for an image type %s does not read (%s), naming the ones it does, and calls no provider",
    async (provider, type, bytes) => {
      const project = projects[provider];
      const response = await post(`/v1/vision/${project.projectId}`, project, {
        image: bytes.toString("base64"),
      });
      const error = await expectError(response, 422, "VALIDATION_ERROR");
      expect(error.message).toContain(`does not read ${type} images`);
      expect(error.message).toContain("PNG");
      expect(fake.requests).toHaveLength(0);
    },
  );

  it("sends GIF to the providers that read it and HEIC to provider C", async () => {
    for (const [provider, bytes, mediaType] of [
      ["provider-b", gif, "image/gif"],
      ["provider-c", heic, "image/heic"],
    ] as const) {
      const project = projects[provider];
      const response = await post(`/v1/vision/${project.projectId}`, project, {
        image: bytes.toString("base64"),
      });
      expect(response.status, provider).toBe(200);
      expect(JSON.stringify(fake.last()!.json)).toContain(mediaType);
    }
  });

  it("takes a PDF or image body as large as its own cap needs in base64, above SLUICE_MAX_BODY_BYTES", async () => {
    await withCappedGateway(8192, async (send) => {
      const bigPdf = Buffer.concat([pdf, Buffer.alloc(6000, 0x20)]);
      const pdfAnswer = await send("/v1/pdf", {
        pdf: `data:application/pdf;base64,${bigPdf.toString("base64")}`,
      });
      expect(pdfAnswer.status).toBe(200);
      const bigPng = Buffer.concat([tinyPng, Buffer.alloc(6000)]);
      expect((await send("/v1/vision", { image: bigPng.toString("base64") })).status).toBe(200);
      // Over the PDF cap: the PDF's own 413, not the body's.
      const tooBig = Buffer.concat([pdf, Buffer.alloc(9000, 0x20)]);
      const refused = await send("/v1/pdf", {
        pdf: `data:application/pdf;base64,${tooBig.toString("base64")}`,
      });
      expect(refused.status).toBe(413);
      expect(((await refused.json()) as { error: { message: string } }).error.message).toContain("PDF");
      // Text keeps SLUICE_MAX_BODY_BYTES.
      expect((await send("/v1/text", { text: "x".repeat(5000) })).status).toBe(413);
    });
  });

  // The caps are on decoded bytes: MIME (76) or PEM (64) line breaks do not count towards them.
  it("takes a PDF or image in line-wrapped base64 just under its cap", async () => {
    await withCappedGateway(200_000, async (send) => {
      const wrap = (bytes: Buffer, width: number) =>
        bytes.toString("base64").replace(new RegExp(`(.{${width}})`, "g"), "$1\r\n");
      const bigPdf = Buffer.concat([pdf, Buffer.alloc(200_000 - pdf.length, 0x20)]);
      const bigPng = Buffer.concat([tinyPng, Buffer.alloc(200_000 - tinyPng.length)]);
      for (const width of [76, 64]) {
        const pdfAnswer = await send("/v1/pdf", {
          pdf: `data:application/pdf;base64,${wrap(bigPdf, width)}`,
        });
        expect(pdfAnswer.status, `pdf wrapped at ${width}`).toBe(200);
        const imageAnswer = await send("/v1/vision", { image: wrap(bigPng, width) });
        expect(imageAnswer.status, `image wrapped at ${width}`).toBe(200);
      }
      const tooBig = Buffer.concat([bigPdf, pdf]);
      const refused = await send("/v1/pdf", { pdf: `data:application/pdf;base64,${wrap(tooBig, 76)}` });
      expect(refused.status).toBe(413);
      expect(((await refused.json()) as { error: { message: string } }).error.message).toContain("PDF");
    });
  });

  /**
   * A provider C gateway with SLUICE_MAX_BODY_BYTES at 4096 and the PDF and image caps at
   * `cap`; `send` posts a JSON body to a structured path of its project.
   */
  async function withCappedGateway(
    cap: number,
    run: (send: (path: string, body: unknown) => Promise<Response>) => Promise<void>,
  ): Promise<void> {
    const small = await startTestGateway({
      providerCBaseUrl: `${fake.url}/c/v1beta`,
      maxBodyBytes: 4096,
      maxPdfBytes: cap,
      maxImageBytes: cap,
    });
    try {
      const project = await createTestProject(small.gateway, {
        provider: "provider-c",
        outputSchema: schema,
      });
      await run((path, body) =>
        fetch(`${small.url}${path}/${project.projectId}`, {
          method: "POST",
          headers: {
            authorization: `Bearer ${project.bearer("provider-c")}`,
            "content-type": "application/json",
          },
          body: JSON.stringify(body),
        }),
      );
    } finally {
      await small.close();
    }
  }

  it.each(["text", "vision", "pdf"] as const)(
    "refuses a /v1/%s body nested past 64 levels or holding over 10000 values with 400, before parsing it",
    async (kind) => {
      const project = projects["provider-a"];
      const field = { text: "text", vision: "image", pdf: "pdf" }[kind];
      const takes = `/v1/${kind} takes one JSON object such as {"${field}": "…"}`;
      const refusals = [
        [
          `{"${field}":"x","a":${"[".repeat(1_000_000)}`,
          `nests objects and arrays more than 64 deep: ${takes}`,
        ],
        [
          `{"${field}":"x","a":[${"0,".repeat(10_000)}0]}`,
          `holds more than 10000 object members and array elements: ${takes}`,
        ],
        [
          `{"${field}":"x",${Array.from({ length: 10_000 }, (_, index) => `"${index}":0`).join(",")}}`,
          `holds more than 10000 object members and array elements: ${takes}`,
        ],
      ] as const;
      for (const [body, says] of refusals) {
        const response = await post(`/v1/${kind}/${project.projectId}`, project, body);
        expect(await response.json()).toEqual({
          error: {
            code: "BAD_REQUEST",
            message: `The request body ${says}`,
            requestId: response.headers.get("x-request-id"),
            details: { maxDepth: 64, maxValues: 10000 },
          },
        });
        expect(response.status).toBe(400);
        expect(await rowFor(response)).toMatchObject({ status: 400, error_code: "BAD_REQUEST" });
      }
      expect(fake.requests).toHaveLength(0);
    },
  );

  it("takes a body at the bounds, and brackets, colons and commas inside strings at any count", async () => {
    const project = projects["provider-a"];
    const text = `[{"a":1},${'\\"[{:,'.repeat(20_000)}`;
    const body = `\ufeff{"text":${JSON.stringify(text)},"deep":${"[".repeat(63)}${"]".repeat(63)},"wide":[${"0,".repeat(9_997)}0]}`;
    const response = await post(`/v1/text/${project.projectId}`, project, body);
    expect(response.status).toBe(200);
    expect(JSON.stringify(fake.last()!.json)).toContain(JSON.stringify(text).slice(1, 200));
  });

  it("answers 415 without a JSON content type", async () => {
    const project = projects["provider-a"];
    const response = await post(`/v1/text/${project.projectId}`, project, "text=x", {
      "content-type": "text/plain",
    });
    await expectError(response, 415, "UNSUPPORTED_MEDIA_TYPE");
  });

  it("fetches a PDF by URL from an allowed host, and refuses loopback URLs without connecting", async () => {
    const project = projects["provider-c"];
    const fetched = await post(`/v1/pdf/${project.projectId}`, project, { pdf: pdfUrl });
    expect(fetched.status).toBe(200);
    expect(JSON.stringify(fake.last()!.json)).toContain(pdf.toString("base64"));
    const before = pdfServerConnections;
    const port = new URL(pdfUrl).port;
    for (const target of [
      `https://127.0.0.1:${port}/doc.pdf`,
      `https://127.1:${port}/doc.pdf`,
      `https://[::ffff:127.0.0.1]:${port}/doc.pdf`,
      "https://169.254.169.254/latest/meta-data",
    ]) {
      // Refused for its address: nothing listens there, so a connection tried would fail with 400 too.
      const error = await expectError(
        await post(`/v1/pdf/${project.projectId}`, project, { pdf: target }),
        400,
        "BAD_REQUEST",
      );
      expect(error.message).toBe("the PDF URL's host has no public address");
    }
    expect(pdfServerConnections).toBe(before);
  });

  it("uses a fetcher that refuses the local PDF server when none is injected, as production does", async () => {
    // The gateway's own fetcher, as deps.ts builds it: no test's allowance reaches production.
    const own = await startTestGateway(providerBaseUrls(fake));
    try {
      const project = await createTestProject(own.gateway, { provider: "provider-a", outputSchema: schema });
      const before = pdfServerConnections;
      const refusals: string[] = [];
      const requestIds: string[] = [];
      const logsBefore = own.logs.length;
      for (const target of [pdfUrl, pdfUrl.replace("http:", "https:")]) {
        const response = await fetch(`${own.url}/v1/pdf/${project.projectId}`, {
          method: "POST",
          headers: {
            authorization: `Bearer ${project.bearer("provider-a")}`,
            "content-type": "application/json",
          },
          body: JSON.stringify({ pdf: target }),
        });
        const body = (await response.json()) as { error: { code: string; message: string } };
        expect({ status: response.status, code: body.error.code }).toEqual({
          status: 400,
          code: "BAD_REQUEST",
        });
        refusals.push(body.error.message);
        requestIds.push(response.headers.get("x-request-id") ?? "");
      }
      expect(refusals).toEqual(["the PDF URL must use https", "the PDF URL's host has no public address"]);
      // The client is told no more; the operator's log (at debug) says why, and for which request.
      expect(logLinesOf(own, logsBefore).filter((line) => line.msg === "PDF URL host refused")).toEqual([
        expect.objectContaining({
          level: "debug",
          host: "127.0.0.5",
          reason: "nonPublicAddress",
          address: "127.0.0.5",
          requestId: requestIds[1],
        }),
      ]);
      expect(pdfServerConnections).toBe(before);
      expect(fake.requests).toHaveLength(0);
    } finally {
      await own.close();
    }
  });

  it("stops fetching a PDF by URL at once when the client leaves, and records the request as aborted", async () => {
    const project = projects["provider-a"];
    const body = JSON.stringify({ pdf: pdfUrl.replace("doc.pdf", "drip.pdf") });
    drip.started = undefined;
    const socket = connect(Number(new URL(sluice.url).port), "127.0.0.1");
    socket.on("error", () => {});
    socket.write(
      `POST /v1/pdf/${project.projectId} HTTP/1.1\r\nhost: x\r\n` +
        `authorization: Bearer ${project.bearer("provider-a")}\r\ncontent-type: application/json\r\n` +
        `content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    const waitFor = async (done: () => boolean, ms: number) => {
      const until = Date.now() + ms;
      while (!done() && Date.now() < until) await new Promise((resolve) => setTimeout(resolve, 10));
    };
    await waitFor(() => drip.started !== undefined, 10_000);
    expect(drip.started).toBeDefined();
    await new Promise((resolve) => setTimeout(resolve, 100));
    const left = Date.now();
    socket.destroy();
    await waitFor(() => drip.closed !== undefined, 10_000);
    // The download never ends and the fetch's deadline is 60 s: one closed within 10 s was stopped
    // by the client leaving (a few ms; over a second on a loaded machine), not by the deadline.
    expect((drip.closed ?? Number.POSITIVE_INFINITY) - left).toBeLessThan(10_000);
    // The row is written once the gateway has seen the client leave: waited for, not assumed.
    const aborted = async () => {
      await sluice.gateway.flushUsage();
      return sluice.gateway.database.db
        .selectFrom("usage_records")
        .selectAll()
        .where("project_id", "=", project.projectId)
        .where("endpoint", "=", "pdf")
        .where("status", "=", 499)
        .execute();
    };
    let rows = await aborted();
    for (const deadline = Date.now() + 5000; rows.length === 0 && Date.now() < deadline; ) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      rows = await aborted();
    }
    expect(rows).toHaveLength(1);
    // Nothing went to the provider: a cost of 0, not an unknown one the spend cap would count.
    expect(rows[0]).toMatchObject({ outcome: "aborted", cost_usd: 0 });
    // The row is written when the client leaves, not once the download ends (at its 60 s deadline).
    expect(Number(rows[0]!.latency_ms)).toBeLessThan(10_000);
    expect(fake.requests).toHaveLength(0);
  });

  // SPEC /v1/pdf: "Needs a multimodal model. The service selects a suitable model from the project's
  // provider." A project's custom model that cannot read the input is not sent it.
  it("analyses a PDF with the provider's PDF model when the project's model cannot read PDFs, and keeps it elsewhere", async () => {
    const b = await createTestProject(sluice.gateway, {
      provider: "provider-b",
      outputSchema: schema,
      model: "claude-3-5-haiku-latest",
    });
    const sentModel = async (kind: string, body: unknown, project: TestProject, provider: ProviderId) => {
      const response = await post(`/v1/${kind}/${project.projectId}`, project, body, {}, provider);
      expect(response.status, kind).toBe(200);
      return (fake.last()!.json as { model: string }).model;
    };
    expect(await sentModel("pdf", { pdf: pdfDataUrl }, b, "provider-b")).toBe("claude-sonnet-5-5");
    const image = { image: tinyPng.toString("base64") };
    expect(await sentModel("vision", image, b, "provider-b")).toBe("claude-3-5-haiku-latest");
    expect(await sentModel("text", { text: "x" }, b, "provider-b")).toBe("claude-3-5-haiku-latest");
    // An image model (the project's /v1/image model) reads neither images nor PDFs.
    const a = await createTestProject(sluice.gateway, {
      provider: "provider-a",
      outputSchema: schema,
      model: "gpt-image-1",
    });
    expect(await sentModel("vision", image, a, "provider-a")).toBe("gpt-5.4-mini");
    expect(await sentModel("pdf", { pdf: pdfDataUrl }, a, "provider-a")).toBe("gpt-5.4-mini");
  });

  it("takes the project id from the path over x-project-id, and 401s without credentials", async () => {
    const a = projects["provider-a"];
    const response = await post(
      `/v1/text/${a.projectId}`,
      a,
      { text: "x" },
      { "x-project-id": projects["provider-b"].projectId },
    );
    expect(response.status).toBe(200);
    const anonymous = await fetch(`${sluice.url}/v1/text/${a.projectId}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    const body = (await anonymous.json()) as Record<string, unknown>;
    expect(anonymous.status).toBe(401);
    expect(body).toEqual({
      error: {
        code: "UNAUTHORIZED",
        message: expect.any(String),
        requestId: anonymous.headers.get("x-request-id"),
      },
    });
    await expectError(
      await post("/v1/text", a, { text: "x" }, { "x-project-id": "nope" }),
      404,
      "PROJECT_NOT_FOUND",
    );
    // No project id: no method can succeed, so it is SPEC's 401, naming what is missing.
    const missing = await expectError(await post("/v1/text", a, { text: "x" }), 401, "UNAUTHORIZED");
    expect(missing.message).toMatch(/project id is required/);
  });
});
