import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { ProviderId } from "../../src/providers/provider-id.js";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import { type FakeUsage, providerA, providerB } from "../fakes/fake-upstream-responses.js";
import { clockAwayFromMonthEnd } from "../support/away-from-month-end.js";
import { startLocalServer } from "../support/local-server.js";
import { proxiedChat, proxiedChatStatus } from "../support/proxied-chat.js";
import { redisAvailable, redisTestSpace, redisUrl } from "../support/services.js";
import {
  createTestProject,
  projectUsageRows,
  startTestGateway,
  type TestGateway,
  type TestProject,
  titleSchema,
  usageRowOf,
} from "../support/test-gateway.js";

describe("monthly spend cap", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    // Within one month: its spend, which the cap is held to, starts again at 0 on the 1st (UTC).
    // A call of unknown cost counts toward the cap at 0.25 USD at least (SLUICE_UNPRICED_CALL_USD).
    sluice = await startTestGateway(
      { ...providerBaseUrls(fake), unpricedCallUsd: 0.25 },
      { now: clockAwayFromMonthEnd() },
    );
  });
  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });

  const chat = (project: TestProject) =>
    proxiedChat(sluice.url, project, { body: { model: "gpt-4o", messages: [] } });

  /** Twenty calls sent at once (`send`), each answer read to its end. */
  const twentyAtOnce = (send: () => Promise<Response>) =>
    Promise.all(
      Array.from({ length: 20 }, async () => {
        const response = await send();
        await response.arrayBuffer();
        return response;
      }),
    );

  it("answers 403 FORBIDDEN once the month's known cost reaches the cap, and again when an admin raises it", async () => {
    fake.setUsage({ input: 1_000_000, output: 1_000_000, cached: 0, reasoning: 0 });
    const project = await createTestProject(sluice.gateway, { monthlySpendCapUsd: 1 });
    const call = () => chat(project);
    const first = await call();
    expect(first.status).toBe(200);
    expect((await usageRowOf(sluice.gateway, first)).cost_usd).toBe(12.5);
    const capped = await call();
    expect(capped.status).toBe(403);
    const body = (await capped.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("FORBIDDEN");
    expect(body.error.message).toContain("monthly spend cap of 1 USD");
    expect(fake.requests).toHaveLength(1);
    await sluice.gateway.admin.updateProject(project.projectId, { monthlySpendCapUsd: 100 });
    expect((await call()).status).toBe(200);
  });

  it("does not count a request the cap refuses against the rate limits", async () => {
    fake.setUsage({ input: 1_000_000, output: 1_000_000, cached: 0, reasoning: 0 });
    const project = await createTestProject(sluice.gateway, {
      monthlySpendCapUsd: 1,
      rateLimits: { perMinute: 3 },
    });
    const call = () => chat(project);
    expect((await call()).status).toBe(200);
    for (let index = 0; index < 5; index++) expect((await call()).status).toBe(403);
    await sluice.gateway.admin.updateProject(project.projectId, { monthlySpendCapUsd: 100 });
    // One of the three was used; the five refusals used none.
    const statuses = [];
    for (let index = 0; index < 3; index++) statuses.push((await call()).status);
    expect(statuses).toEqual([200, 200, 429]);
  });

  it("is reached when the month's cost equals the cap exactly, though the sum of its floats falls short", async () => {
    // gpt-4o: 2.50 USD per 1M input tokens, so 40,000 tokens cost exactly 0.1; ten of them, 1.
    fake.setUsage({ input: 40_000, output: 0, cached: 0, reasoning: 0 });
    const project = await createTestProject(sluice.gateway, { monthlySpendCapUsd: 1 });
    for (let index = 0; index < 10; index++) {
      const response = await chat(project);
      expect(response.status).toBe(200);
      expect((await usageRowOf(sluice.gateway, response)).cost_usd).toBe(0.1);
    }
    const eleventh = await chat(project);
    await eleventh.arrayBuffer();
    expect(eleventh.status).toBe(403);
  });

  // A client chooses what its prompt holds: a part it adds must not take its calls out of the cap.
  it("counts a call with audio input (provider C) or an advisor (provider B) against the cap", async () => {
    const post = (project: TestProject, path: string, body: unknown, headers: Record<string, string> = {}) =>
      fetch(`${sluice.url}/v1/provider-${path}`.replace("{id}", project.projectId), {
        method: "POST",
        headers: { "content-type": "application/json", ...headers },
        body: JSON.stringify(body),
      });
    const calls = async (call: () => Promise<Response>) => {
      const statuses = [];
      for (let index = 0; index < 3; index++) {
        const response = await call();
        await response.arrayBuffer();
        statuses.push(response.status);
      }
      return statuses;
    };
    // One 1M-token gemini-2.5-pro prompt with a single audio token: 2.65 USD, over the 1 USD cap.
    fake.setUsage({ input: 1_000_000, output: 10_000, cached: 0, reasoning: 0, audioInput: 1 });
    const gemini = await createTestProject(sluice.gateway, { monthlySpendCapUsd: 1 });
    const generate = () =>
      post(
        gemini,
        "c/{id}/v1beta/models/gemini-2.5-pro:generateContent",
        {
          contents: [{ role: "user", parts: [{ text: "hi" }] }],
        },
        { "x-goog-api-key": gemini.bearer("provider-c") },
      );
    expect(await calls(generate)).toEqual([200, 403, 403]);
    // An advisor on claude-opus-4-1 beside a 1M-token claude-haiku-4-5 call: over the cap likewise.
    fake.setUsage({
      input: 1_000_000,
      output: 10_000,
      cached: 0,
      reasoning: 0,
      audioInput: 0,
      advisor: { model: "claude-opus-4-1", input: 1, output: 0 },
    });
    const claude = await createTestProject(sluice.gateway, { monthlySpendCapUsd: 1 });
    const message = () =>
      post(
        claude,
        "b/{id}/v1/messages",
        { model: "claude-haiku-4-5", max_tokens: 64, messages: [{ role: "user", content: "hi" }] },
        { "x-api-key": claude.bearer("provider-b"), "anthropic-beta": "advisor-tool-2026-03-01" },
      );
    expect(await calls(message)).toEqual([200, 403, 403]);
    fake.setUsage({ advisor: undefined } as Partial<FakeUsage>);
  });

  // A proxy's client chooses the model: one the catalogue has no price for made every call one of
  // unknown cost, and the cap counted none of them (all 200, however many; a partial key spent
  // without limit under a cap). Each counts now at the largest known cost of one call this month.
  it("counts a call of unknown cost toward the cap at the largest known cost of one call this month", async () => {
    fake.setUsage({ input: 1_000_000, output: 1_000_000, cached: 0, reasoning: 0 });
    const project = await createTestProject(sluice.gateway, { monthlySpendCapUsd: 30 });
    const priced = await chat(project);
    await priced.arrayBuffer();
    expect((await usageRowOf(sluice.gateway, priced)).cost_usd).toBe(12.5);
    const statuses = [];
    const unpriced = [];
    for (let index = 0; index < 4; index++) {
      const response = await proxiedChat(sluice.url, project, {
        body: { model: "gpt-not-in-the-catalogue", messages: [] },
      });
      await response.arrayBuffer();
      statuses.push(response.status);
      if (response.status === 200) unpriced.push(response);
    }
    // 12.50 known, then 12.50 + 12.50 estimated (25: admitted), 12.50 + 2 x 12.50 (37.50): the cap.
    expect(statuses).toEqual([200, 200, 403, 403]);
    for (const response of unpriced) expect((await usageRowOf(sluice.gateway, response)).cost_usd).toBeNull();
    // The estimate is the cap's alone: the report counts the known cost, and the calls unpriced.
    const report = await sluice.gateway.admin.usageReport(project.projectId, {
      from: "2000-01-01",
      to: "2100-01-01",
      groupBy: "endpoint",
    });
    expect(report.rows).toMatchObject([{ costUsd: 12.5, unpricedRequests: 2 }]);
  });

  // Before any known cost of the month there is no largest one: a call of unknown cost counts at
  // SLUICE_UNPRICED_CALL_USD (0.25 here), never at nothing.
  it("counts a call of unknown cost at SLUICE_UNPRICED_CALL_USD before any call of the month has a known cost", async () => {
    fake.setUsage({ input: 10, output: 10, cached: 0, reasoning: 0 });
    const project = await createTestProject(sluice.gateway, { monthlySpendCapUsd: 1 });
    const statuses = [];
    for (let index = 0; index < 6; index++) {
      const response = await proxiedChat(sluice.url, project, {
        body: { model: "gpt-not-in-the-catalogue", messages: [] },
      });
      await response.arrayBuffer();
      statuses.push(response.status);
    }
    // 4 x 0.25 = 1: the cap.
    expect(statuses).toEqual([200, 200, 200, 200, 403, 403]);
  });

  // A client that leaves mid-upload sends nothing to the provider, which bills nothing: its row
  // (499, aborted, no tokens, no cost) is no call of unknown cost. Before, each counted at the
  // estimate, so a few dropped uploads (a phone losing its network) used up a month's cap.
  it("does not count a client that left mid-upload, nothing sent to the provider, toward the cap", async () => {
    fake.setUsage({ input: 10, output: 10, cached: 0, reasoning: 0 });
    const project = await createTestProject(sluice.gateway, { monthlySpendCapUsd: 1 });
    const before = fake.requests.length;
    for (let index = 0; index < 4; index++) {
      await new Promise<void>((resolve, reject) => {
        const socket = connect(Number(new URL(sluice.url).port), "127.0.0.1", () => {
          socket.write(
            `POST /v1/provider-a/${project.projectId}/chat/completions HTTP/1.1\r\nhost: x\r\n` +
              `authorization: Bearer ${project.bearer("provider-a")}\r\ncontent-type: application/json\r\n` +
              'content-length: 1000\r\n\r\n{"model":',
          );
          setTimeout(() => socket.destroy(), 100);
        });
        socket.once("error", reject);
        socket.once("close", () => resolve());
      });
    }
    await vi.waitFor(
      async () => {
        await sluice.gateway.flushUsage();
        const rows = await projectUsageRows(sluice, project);
        expect(rows.map((row) => [row.status, row.outcome, row.cost_usd])).toEqual(
          Array(4).fill([499, "aborted", 0]),
        );
      },
      { timeout: 5000, interval: 20 },
    );
    expect(fake.requests.length - before).toBe(0);
    // 4 x 0.25 would be the 1 USD cap: nothing was spent, so the call is admitted.
    expect(await proxiedChatStatus(sluice.url, project, { body: { model: "gpt-4o", messages: [] } })).toBe(
      200,
    );
  });

  // A client that sends many calls at once while its project is just under the cap: before, every
  // one was admitted (the cost of a call is known only when it ends), 20 calls of 12.50 USD on a
  // 13 USD cap, and 200 or 1000 at once as readily.
  it("admits calls at once only while those in flight, each at the largest cost seen, leave room under the cap", async () => {
    fake.setUsage({ input: 1_000_000, output: 1_000_000, cached: 0, reasoning: 0 });
    const project = await createTestProject(sluice.gateway, { monthlySpendCapUsd: 30 });
    const first = await chat(project);
    await first.arrayBuffer();
    expect(first.status).toBe(200);
    // 12.50 USD spent, calls of 1.25 now, each in flight counted at 12.50 (the largest seen): the
    // first is admitted (12.50 spent), the second too (12.50 + 12.50 in flight), not a third (37.50).
    fake.setUsage({ input: 100_000, output: 100_000 });
    // Long enough that all 20 are admitted or refused before the first two end (on a loaded machine
    // 300 ms was not: a call sent after the first ended was rightly admitted, a third 200).
    fake.setLatencyMs(2_000);
    const before = fake.requests.length;
    try {
      const burst = await twentyAtOnce(() => chat(project));
      const statuses = burst.map((response) => response.status);
      expect(statuses.filter((status) => status === 200)).toHaveLength(2);
      expect(statuses.filter((status) => status === 429)).toHaveLength(18);
      expect(fake.requests.length - before).toBe(2);
      const refused = burst.find((response) => response.status === 429)!;
      expect(refused.headers.get("retry-after")).toBe("1");
      // No request quota refused it: no RateLimit fields (decision 0056).
      expect(refused.headers.get("ratelimit")).toBeNull();
      expect(refused.headers.get("ratelimit-policy")).toBeNull();
      expect(await usageRowOf(sluice.gateway, refused)).toMatchObject({
        status: 429,
        error_code: "TOO_MANY_REQUESTS",
      });
    } finally {
      fake.setLatencyMs(0);
    }
    // Both ended (15 USD spent): calls are admitted again, one after another up to the cap.
    const after = [];
    for (let index = 0; index < 14; index++) {
      const response = await chat(project);
      await response.arrayBuffer();
      after.push(response.status);
    }
    // 15 + 12 x 1.25 = 30: the cap.
    expect(after).toEqual([...Array(12).fill(200), 403, 403]);
  });

  // Before the month's first call of known cost there is no largest one: the calls in flight counted
  // for nothing, and a burst sent at once on a fresh month all ran, however many (20 on a 1 USD cap),
  // before any ended and counted. Each in flight counts now at SLUICE_UNPRICED_CALL_USD (0.25 here).
  it("admits calls at once on a month with no known cost only while those in flight, each at SLUICE_UNPRICED_CALL_USD, leave room", async () => {
    fake.setUsage({ input: 10, output: 10, cached: 0, reasoning: 0 });
    const project = await createTestProject(sluice.gateway, { monthlySpendCapUsd: 1 });
    // Long enough that all 20 are admitted or refused before the first ends (its known cost then
    // becomes the figure).
    fake.setLatencyMs(2_000);
    const before = fake.requests.length;
    try {
      const burst = await twentyAtOnce(() => chat(project));
      const statuses = burst.map((response) => response.status);
      // 1 / 0.25: four in flight at once (the fourth admitted with three at 0.75), not a fifth (1.00).
      expect(statuses.filter((status) => status === 200)).toHaveLength(4);
      expect(statuses.filter((status) => status === 429)).toHaveLength(16);
      expect(fake.requests.length - before).toBe(4);
      const refused = burst.find((response) => response.status === 429)!;
      expect(refused.headers.get("retry-after")).toBe("1");
      expect(await usageRowOf(sluice.gateway, refused)).toMatchObject({
        status: 429,
        error_code: "TOO_MANY_REQUESTS",
      });
    } finally {
      fake.setLatencyMs(0);
    }
    // Known costs now (tiny ones): the largest of them is the figure, not the floor, so calls of a
    // cheap model are not held back by it (20 more at once, all admitted).
    fake.setLatencyMs(500);
    try {
      const statuses = (await twentyAtOnce(() => chat(project))).map((response) => response.status);
      expect(statuses).toEqual(Array(20).fill(200));
    } finally {
      fake.setLatencyMs(0);
    }
  });

  // The largest cost of one call was this instance's own: one just started (or a second instance)
  // had recorded none for the project, and admitted every call sent at once just under the cap (20
  // calls of 1.25 USD on a 13 USD cap with 12.50 spent: 37.50). The month's read holds it now.
  it("holds calls at once on a gateway just started over the month's rows, at the largest cost the database holds", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "sluice-spend-restart-"));
    const config = { ...providerBaseUrls(fake), dataDir, masterKey: randomBytes(32).toString("base64") };
    const injected = { now: clockAwayFromMonthEnd() };
    try {
      // One call of 12.50 USD on a 13 USD cap, its row written; then the gateway stops.
      const earlier = await startTestGateway(config, injected);
      let project: TestProject;
      try {
        fake.setUsage({ input: 1_000_000, output: 1_000_000, cached: 0, reasoning: 0 });
        project = await createTestProject(earlier.gateway, { monthlySpendCapUsd: 13 });
        const first = await proxiedChat(earlier.url, project, { body: { model: "gpt-4o", messages: [] } });
        await first.arrayBuffer();
        expect(first.status).toBe(200);
        expect((await usageRowOf(earlier.gateway, first)).cost_usd).toBe(12.5);
      } finally {
        await earlier.close();
      }
      // Started again over the same database: 12.50 spent, each call in flight counted at 12.50 (the
      // largest row of the month): the first is admitted (12.50), not a second (25).
      const started = await startTestGateway(config, injected);
      fake.setUsage({ input: 100_000, output: 100_000 });
      fake.setLatencyMs(300);
      const before = fake.requests.length;
      try {
        const statuses = (
          await twentyAtOnce(() =>
            proxiedChat(started.url, project, { body: { model: "gpt-4o", messages: [] } }),
          )
        ).map((response) => response.status);
        expect(statuses.filter((status) => status === 200)).toHaveLength(1);
        expect(statuses.filter((status) => status === 429)).toHaveLength(19);
        expect(fake.requests.length - before).toBe(1);
      } finally {
        fake.setLatencyMs(0);
        await started.close();
      }
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

// A call the provider answered with a success (2xx), and billed, whose answer Sluice could not read
// (past SLUICE_MAX_PROVIDER_RESPONSE_BYTES, cut short): its row is an error without tokens or cost,
// as a refusal's is, and before it counted nothing toward the cap. A client could bring the first
// about on /v1/image (many large images in one call) and be answered 502 without limit, each call billed.
describe("monthly spend cap, calls the provider answered that Sluice could not read", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway(
      {
        ...providerBaseUrls(fake),
        unpricedCallUsd: 0.25,
        maxProviderResponseBytes: 64 * 1024,
        // A stream the provider goes silent in is cut after this long.
        upstreamIdleTimeoutMs: 300,
      },
      { now: clockAwayFromMonthEnd() },
    );
  });
  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });

  /**
   * Six calls sent one after another (`send`), each answer read to its end (`cut`: or to where the
   * provider cut it): their statuses, and the usage rows of those answered `counted`.
   */
  async function sixInTurn(
    gateway: TestGateway,
    send: () => Promise<Response>,
    { counted, cut = false }: { counted?: number; cut?: boolean } = {},
  ) {
    const statuses: number[] = [];
    const rows: Awaited<ReturnType<typeof usageRowOf>>[] = [];
    for (let index = 0; index < 6; index++) {
      const response = await send();
      await (cut ? response.arrayBuffer().catch(() => {}) : response.arrayBuffer());
      statuses.push(response.status);
      if (response.status === counted) rows.push(await usageRowOf(gateway.gateway, response));
    }
    return { statuses, rows };
  }

  /** A /v1/image call of gpt-image-2, one image of `prompt`. */
  const imageCall = (project: TestProject, prompt: string) =>
    fetch(`${sluice.url}/v1/image/${project.projectId}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${project.bearer("provider-a")}`,
        "content-type": "application/json",
      },
      body: JSON.stringify({ prompt, model: "gpt-image-2", n: 1 }),
    });

  it("counts each toward the cap at the estimate of a call of unknown cost: an image answer past the response limit", async () => {
    const project = await createTestProject(sluice.gateway, {
      provider: "provider-a",
      monthlySpendCapUsd: 1,
    });
    // A 200 of the provider's shape, larger than the limit: as many large images in one call make it.
    const large = { created: 1, data: [{ b64_json: "A".repeat(100 * 1024) }] };
    const { statuses, rows } = await sixInTurn(
      sluice,
      () => {
        fake.enqueueResponse({ status: 200, headers: { "content-type": "application/json" }, body: large });
        return imageCall(project, "many large images");
      },
      { counted: 502 },
    );
    fake.clear();
    // 4 x 0.25 = 1: the cap.
    expect(statuses).toEqual([502, 502, 502, 502, 403, 403]);
    for (const row of rows)
      expect(row).toMatchObject({
        outcome: "error",
        cost_usd: null,
        input_tokens: null,
        provider_answered: 1,
      });
    const report = await sluice.gateway.admin.usageReport(project.projectId, {
      from: "2000-01-01",
      to: "2100-01-01",
      groupBy: "endpoint",
    });
    expect(report.rows).toMatchObject([{ group: "image", unpricedRequests: 4 }]);
  });

  /**
   * A /v1/text call (of the project's provider, `provider`), each of its provider calls answered in
   * turn with one of `answers` (200 JSON).
   */
  const textCall = (project: TestProject, ...answers: unknown[]) =>
    textCallOf(project, "provider-a", answers);
  const textCallOf = (project: TestProject, provider: ProviderId, answers: unknown[]) => {
    for (const body of answers)
      fake.enqueueResponse({ status: 200, headers: { "content-type": "application/json" }, body });
    return fetch(`${sluice.url}/v1/text/${project.projectId}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${project.bearer(provider)}`,
        "content-type": "application/json",
      },
      body: JSON.stringify({ text: "x" }),
    });
  };
  /** Provider A's answer with `text` and `usage`, and without its choices (`choices: []`), with or without usage. */
  const answerA = (text: string, usage: Partial<FakeUsage>) =>
    providerA.chat("gpt-5.4-mini", text, { input: 0, output: 0, cached: 0, reasoning: 0, ...usage });
  const noChoices = (usage?: Partial<FakeUsage>) => {
    const { usage: reported, ...rest } = answerA("", usage ?? {});
    return { ...rest, choices: [], ...(usage === undefined ? {} : { usage: reported }) };
  };
  const structuredProject = () =>
    createTestProject(sluice.gateway, {
      provider: "provider-a",
      outputSchema: titleSchema,
      monthlySpendCapUsd: 1,
    });

  // Before, the row was an error without tokens nor `provider_answered`: it counted nothing.
  it("counts each toward the cap at the estimate of a call of unknown cost: a structured answer of no choices", async () => {
    const project = await structuredProject();
    const { statuses, rows } = await sixInTurn(sluice, () => textCall(project, noChoices()), {
      counted: 502,
    });
    fake.clear();
    expect(statuses).toEqual([502, 502, 502, 502, 403, 403]);
    for (const row of rows)
      expect(row).toMatchObject({
        outcome: "error",
        cost_usd: null,
        input_tokens: null,
        provider_answered: 1,
      });
  });

  // Before, its usage was dropped as above: the call, billed, counted nothing.
  it("prices a structured answer of no choices at the usage it reports", async () => {
    const project = await structuredProject();
    // 400k input tokens of gpt-5.4-mini: 0.30 USD a call, so the fourth passes the cap.
    const { statuses, rows } = await sixInTurn(
      sluice,
      () => textCall(project, noChoices({ input: 400_000 })),
      {
        counted: 502,
      },
    );
    fake.clear();
    expect(statuses).toEqual([502, 502, 502, 502, 403, 403]);
    for (const row of rows)
      expect(row).toMatchObject({
        outcome: "error",
        cost_usd: 0.3,
        input_tokens: 400_000,
        output_tokens: 0,
        provider_answered: 1,
      });
  });

  // Provider B's empty `content` and provider C's answer of no candidates are empty answers to the
  // AI SDK: repaired once, and the row priced from both attempts' usage, as any answer that fails the schema.
  it.each([
    [
      "provider-b",
      providerB.message("claude-sonnet-4-6", [], { input: 1000, output: 100, cached: 0, reasoning: 0 }),
    ],
    [
      "provider-c",
      { usageMetadata: { promptTokenCount: 1000, candidatesTokenCount: 100, totalTokenCount: 1100 } },
    ],
  ] as const)("prices %s's empty structured answer at the usage it reports", async (provider, empty) => {
    const project = await createTestProject(sluice.gateway, { provider, outputSchema: titleSchema });
    const response = await textCallOf(project, provider, [empty, empty]);
    expect(response.status).toBe(502);
    expect(fake.requests).toHaveLength(2);
    fake.clear();
    expect(await usageRowOf(sluice.gateway, response)).toMatchObject({
      outcome: "error",
      input_tokens: 2000,
      output_tokens: 200,
      cost_usd: expect.any(Number),
      provider_answered: 1,
    });
  });

  // Before, the row held the first attempt's cost (0.0012 USD) alone: the billed repair counted
  // nothing, and a 1 USD cap let 800 such calls through. It now holds that cost, and counts at the
  // estimate of a call of unknown cost besides (0.2512 USD).
  it("counts a structured call whose repair's answer it could not read at the estimate of a call of unknown cost", async () => {
    const project = await structuredProject();
    const { statuses, rows } = await sixInTurn(
      sluice,
      () => textCall(project, answerA('{"nope":1}', { input: 1000, output: 100 }), noChoices()),
      { counted: 502 },
    );
    // Two provider calls each for the four admitted.
    expect(fake.requests).toHaveLength(8);
    fake.clear();
    expect(statuses).toEqual([502, 502, 502, 502, 403, 403]);
    for (const row of rows)
      expect(row).toMatchObject({
        outcome: "error",
        cost_usd: 0.0012,
        input_tokens: 1000,
        output_tokens: 100,
        provider_answered: 2,
      });
  });

  // Before, the row held neither the first attempt's tokens nor its cost (0.30 USD), and counted at
  // the estimate alone (0.25 USD): a 1 USD cap let four such calls through, 1.20 USD known spent.
  it("keeps the first attempt's tokens and cost when the repair's answer could not be read, and counts the estimate on top", async () => {
    const project = await structuredProject();
    const { statuses, rows } = await sixInTurn(
      sluice,
      () => textCall(project, answerA('{"nope":1}', { input: 400_000 }), noChoices()),
      { counted: 502 },
    );
    expect(fake.requests).toHaveLength(4);
    fake.clear();
    // Each counts at its known 0.30 USD plus the estimate, max(0.30 largest known, 0.25): 0.60.
    expect(statuses).toEqual([502, 502, 403, 403, 403, 403]);
    for (const row of rows)
      expect(row).toMatchObject({
        outcome: "error",
        cost_usd: 0.3,
        input_tokens: 400_000,
        output_tokens: 0,
        provider_answered: 2,
      });
    const report = await sluice.gateway.admin.usageReport(project.projectId, {
      from: "2000-01-01",
      to: "2100-01-01",
      groupBy: "endpoint",
    });
    expect(report.rows).toMatchObject([
      { group: "text", inputTokens: 800_000, costUsd: 0.6, unpricedRequests: 2 },
    ]);
  });

  it("counts each toward the cap at the estimate of a call of unknown cost: a proxied 200 the provider cut short", async () => {
    const project = await createTestProject(sluice.gateway, { monthlySpendCapUsd: 1 });
    fake.setPlan(() => ({ cutBody: true }));
    const { statuses, rows } = await sixInTurn(
      sluice,
      () => proxiedChat(sluice.url, project, { body: { model: "gpt-4o", messages: [] } }),
      { counted: 200, cut: true },
    ).finally(() => fake.setPlan(null));
    expect(statuses).toEqual([200, 200, 200, 200, 403, 403]);
    for (const row of rows)
      expect(row).toMatchObject({
        status: 200,
        outcome: "error",
        input_tokens: null,
        cost_usd: null,
        provider_answered: 1,
      });
  });

  it("counts each toward the cap at the estimate of a call of unknown cost: a proxied stream cut before its usage", async () => {
    const project = await createTestProject(sluice.gateway, { monthlySpendCapUsd: 1 });
    // The first event, then silence: the gateway cuts the stream at its idle timeout, no usage read.
    fake.setPlan(() => ({ hangStreamsAfter: 1 }));
    const { statuses, rows } = await sixInTurn(
      sluice,
      () => proxiedChat(sluice.url, project, { body: { model: "gpt-4o", messages: [], stream: true } }),
      { counted: 200, cut: true },
    ).finally(() => fake.setPlan(null));
    expect(statuses).toEqual([200, 200, 200, 200, 403, 403]);
    for (const row of rows)
      expect(row).toMatchObject({
        status: 200,
        streamed: 1,
        outcome: "error",
        input_tokens: null,
        cost_usd: null,
        provider_answered: 1,
      });
  });

  it("counts each toward the cap at the estimate of a call of unknown cost: a proxied 200 cut before any of its body", async () => {
    // Its status line and headers, then the connection dropped: nothing reached the client (502).
    const upstream = await startLocalServer((request, response) => {
      request.resume();
      request.on("end", () => {
        response.writeHead(200, { "content-type": "application/json", "content-length": "500" });
        response.flushHeaders();
        setTimeout(() => response.socket?.destroy(), 20);
      });
    });
    const gateway = await startTestGateway(
      { providerABaseUrl: `${upstream.url}/a/v1`, unpricedCallUsd: 0.25 },
      { now: clockAwayFromMonthEnd() },
    );
    try {
      const project = await createTestProject(gateway.gateway, { monthlySpendCapUsd: 1 });
      const { statuses, rows } = await sixInTurn(
        gateway,
        () => proxiedChat(gateway.url, project, { body: { model: "gpt-4o", messages: [] } }),
        { counted: 502 },
      );
      expect(statuses).toEqual([502, 502, 502, 502, 403, 403]);
      for (const row of rows)
        expect(row).toMatchObject({
          status: 502,
          outcome: "error",
          input_tokens: null,
          provider_answered: 1,
        });
    } finally {
      await gateway.close();
      await upstream.close();
    }
  });

  it("counts nothing for a call the provider failed (its 5xx), its row an error without tokens", async () => {
    const project = await createTestProject(sluice.gateway, {
      provider: "provider-a",
      monthlySpendCapUsd: 1,
    });
    const { statuses } = await sixInTurn(sluice, () => {
      fake.failNext(500);
      return imageCall(project, "a fox");
    });
    fake.clear();
    expect(statuses).toEqual([502, 502, 502, 502, 502, 502]);
  });
});

// An image call's price is known before it runs (n x the pricing table's price for its model,
// quality and size). Before, the cap counted it in flight at the month's largest call only: with a
// 1 USD cap and 0.011 USD spent, calls of 20 high-quality 1536x1024 images (5 USD each) were
// admitted, each counted at 0.011, and ran (up to 89 at once, the body budget aside).
// With REDIS_URL the place is taken there; the price is counted on the instance (one here).
for (const { shared, name } of [
  { shared: false, name: "in memory" },
  { shared: true, name: "with the calls in flight in Redis" },
])
  describe.skipIf(shared && !redisAvailable)(
    `monthly spend cap, image calls of a known price (${name})`,
    () => {
      let fake: FakeUpstream;
      let sluice: TestGateway;
      const space = redisTestSpace("spend-known-price");

      beforeAll(async () => {
        fake = await startFakeUpstream();
        sluice = await startTestGateway(
          {
            ...providerBaseUrls(fake),
            ...(shared ? { redisUrl, redisKeyPrefix: `${space.nextPrefix()}:` } : {}),
          },
          { now: clockAwayFromMonthEnd() },
        );
      });
      afterAll(async () => {
        await sluice.close();
        await fake.close();
        await space.cleanup();
      });

      /** A /v1/image call of gpt-image-1: `n` images at `quality` and `size` (none: the model's default `auto`). */
      const imageCall = (project: TestProject, n: number, quality?: string, size?: string) =>
        fetch(`${sluice.url}/v1/image/${project.projectId}`, {
          method: "POST",
          headers: {
            authorization: `Bearer ${project.bearer("provider-a")}`,
            "content-type": "application/json",
          },
          body: JSON.stringify({
            prompt: "a lighthouse",
            model: "gpt-image-1",
            n,
            ...(size ? { size } : {}),
            ...(quality ? { providerOptions: { "provider-a": { quality } } } : {}),
          }),
        });

      /** A project of a 1 USD cap with 0.011 USD spent (one low-quality 1024x1024 image): the month's largest call. */
      async function projectWithOneCheapCall() {
        const project = await createTestProject(sluice.gateway, {
          provider: "provider-a",
          monthlySpendCapUsd: 1,
        });
        const first = await imageCall(project, 1, "low", "1024x1024");
        expect(first.status).toBe(200);
        expect((await usageRowOf(sluice.gateway, first)).cost_usd).toBe(0.011);
        return project;
      }

      it("refuses a call whose own price would pass the cap with the cap's 403, before any provider call", async () => {
        const project = await projectWithOneCheapCall();
        const before = fake.requests.length;
        // 20 x 0.25 = 5 USD, against 0.989 left under the cap.
        const refused = await imageCall(project, 20, "high", "1536x1024");
        expect(refused.status).toBe(403);
        const body = (await refused.json()) as { error: { code: string; message: string } };
        expect(body.error.code).toBe("FORBIDDEN");
        expect(body.error.message).toContain("price, 5 USD,");
        expect(body.error.message).toContain("monthly spend cap of 1 USD");
        expect(fake.requests.length).toBe(before);
        expect(await usageRowOf(sluice.gateway, refused)).toMatchObject({
          status: 403,
          error_code: "FORBIDDEN",
          cost_usd: null,
        });
        // 30 such calls at once: none runs.
        const burst = await Promise.all(
          Array.from({ length: 30 }, async () => {
            const response = await imageCall(project, 20, "high", "1536x1024");
            await response.arrayBuffer();
            return response.status;
          }),
        );
        expect(burst).toEqual(Array(30).fill(403));
        expect(fake.requests.length).toBe(before);
        // One whose price fits what is left is admitted: 3 x 0.25 = 0.75, the month at 0.761.
        const fits = await imageCall(project, 3, "high", "1536x1024");
        expect(fits.status).toBe(200);
        expect((await usageRowOf(sluice.gateway, fits)).cost_usd).toBe(0.75);
        // 0.25 more would pass the cap (1.011); 0.167 would not (0.928).
        expect((await imageCall(project, 1, "high", "1536x1024")).status).toBe(403);
        expect((await imageCall(project, 1, "high", "1024x1024")).status).toBe(200);
      });

      it("counts a call of known price in flight at its price: calls sent at once whose sum passes the cap are not all admitted", async () => {
        const project = await projectWithOneCheapCall();
        const before = fake.requests.length;
        fake.setLatencyMs(2_000);
        try {
          // 2 x 0.25 = 0.50 each: the first admitted (0.011 + 0.50), not a second (0.011 + 0.50 in
          // flight + 0.50 = 1.011). Counted at 0.011 each, all ten ran.
          const burst = await Promise.all(
            Array.from({ length: 10 }, async () => {
              const response = await imageCall(project, 2, "high", "1536x1024");
              await response.arrayBuffer();
              return response;
            }),
          );
          const statuses = burst.map((response) => response.status);
          expect(statuses.filter((status) => status === 200)).toHaveLength(1);
          // Each would fit alone: the calls in flight's 429, to retry once they end.
          expect(statuses.filter((status) => status === 429)).toHaveLength(9);
          expect(fake.requests.length - before).toBe(1);
          const refused = burst.find((response) => response.status === 429)!;
          expect(refused.headers.get("retry-after")).toBe("1");
        } finally {
          fake.setLatencyMs(0);
        }
        // It ended (0.511 spent): one more of 0.50 fits (1.011 > 1 would not: 0.511 + 0.25 x 1 does).
        expect((await imageCall(project, 2, "high", "1536x1024")).status).toBe(403);
        expect((await imageCall(project, 1, "high", "1536x1024")).status).toBe(200);
      });

      it("leaves a call whose price is not known before it runs to the estimate of decision 0057", async () => {
        const project = await projectWithOneCheapCall();
        // gpt-image-1's default quality (`auto`) has no price: the call runs, priced by what its answer
        // names (the fake: medium, 1024x1024, 20 x 0.042 = 0.84).
        const unknown = await imageCall(project, 20);
        expect(unknown.status).toBe(200);
        expect((await usageRowOf(sluice.gateway, unknown)).cost_usd).toBe(0.84);
      });
    },
  );
