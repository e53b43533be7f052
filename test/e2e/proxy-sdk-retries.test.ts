import Anthropic from "@anthropic-ai/sdk";
import { GoogleGenAI } from "@google/genai";
import OpenAI from "openai";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type ProxyStage, startProxyStage } from "../support/proxy-stage.js";
import { createTestProject, type TestProject } from "../support/test-gateway.js";

/**
 * The official SDKs with their retries on, as apps run them (the other suites set `maxRetries: 0`
 * so that each call reaches Sluice once; the AI SDK's retries: proxy-ai-sdk-failures.test.ts).
 * Sluice never retries a call that reached the provider (docs/proxy.md, "The Vercel AI SDK"): each
 * attempt the SDK makes after the provider's 429 or 5xx is a provider call and a usage row of its
 * own, and the provider's `retry-after-ms`, which the SDKs wait out, reaches them. Sluice's own
 * rate-limit refusal reaches each SDK as its 429 error, with `Retry-After` and Sluice's message.
 */
describe("the official SDKs' retries through the proxies", () => {
  let stage: ProxyStage;
  const base = (provider: string, project: TestProject = stage.project) =>
    `${stage.sluice.url}/v1/${provider}/${project.projectId}`;

  beforeAll(async () => {
    stage = await startProxyStage();
  });
  afterAll(() => stage.close());
  beforeEach(() => {
    stage.fake.clear();
    waits.length = 0;
  });

  /** The rows `run` adds, `count` of them, waited for up to five seconds, by status. */
  async function rowsAddedBy(count: number, run: () => Promise<unknown>) {
    const before = new Set((await stage.usageRows()).map((row) => row.request_id));
    await run();
    for (const deadline = Date.now() + 5000; ; ) {
      const added = (await stage.usageRows()).filter((row) => !before.has(row.request_id));
      if (added.length >= count || Date.now() > deadline) {
        expect(added).toHaveLength(count);
        return (status: number) => added.find((row) => row.status === status);
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  /** A short wait the provider names: the SDKs wait it out instead of their backoff (0.5 s and up). */
  const briefly = { "retry-after-ms": "10" };
  /** The `retry-after-ms` of each answer the SDK got from Sluice, in order. */
  const waits: Array<string | null> = [];
  const recording: typeof fetch = async (input, init) => {
    const response = await fetch(input, init);
    waits.push(response.headers.get("retry-after-ms"));
    return response;
  };
  it.each([
    {
      name: "openai",
      status: 500,
      call: () =>
        new OpenAI({
          baseURL: base("provider-a"),
          apiKey: stage.project.bearer("provider-a"),
          fetch: recording,
        }).chat.completions
          .create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Hi" }] })
          .then((completion) => completion.choices[0]?.message.content),
      model: "gpt-4o-mini",
    },
    {
      name: "openai, streamed",
      status: 429,
      call: async () => {
        const openai = new OpenAI({
          baseURL: base("provider-a"),
          apiKey: stage.project.bearer("provider-a"),
          fetch: recording,
        });
        const stream = await openai.chat.completions.create({
          model: "gpt-4o-mini",
          messages: [{ role: "user", content: "Hi" }],
          stream: true,
        });
        let text = "";
        for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
        return text;
      },
      model: "gpt-4o-mini",
    },
    {
      name: "@anthropic-ai/sdk",
      status: 529,
      call: () =>
        new Anthropic({
          baseURL: base("provider-b"),
          apiKey: stage.project.bearer("provider-b"),
          fetch: recording,
        }).messages
          .stream({ model: "claude-sonnet-4-5", max_tokens: 64, messages: [{ role: "user", content: "Hi" }] })
          .finalText(),
      model: "claude-sonnet-4-5",
    },
  ])(
    "$name retries the provider's $status: two provider calls, two rows, the retry count forwarded",
    async ({ status, call, model }) => {
      stage.fake.enqueueResponse({ status, headers: briefly });
      const rows = await rowsAddedBy(2, async () => {
        expect(await call()).toBe("Hello from the fake upstream");
      });
      expect(stage.fake.requests.map((request) => request.headers["x-stainless-retry-count"])).toEqual([
        "0",
        "1",
      ]);
      // The provider's wait reached the SDK, which waited it out.
      expect(waits).toEqual(["10", null]);
      expect(rows(status)).toMatchObject({ model, outcome: "error", input_tokens: null, cost_usd: null });
      expect(rows(200)).toMatchObject({ model, outcome: "ok", input_tokens: 11, output_tokens: 7 });
      expect(rows(200)?.cost_usd).toBeGreaterThan(0);
    },
  );

  it("@google/genai retries the provider's 503 with retryOptions set: two provider calls, two rows", async () => {
    const google = new GoogleGenAI({
      apiKey: stage.project.bearer("provider-c"),
      httpOptions: {
        baseUrl: base("provider-c"),
        retryOptions: { attempts: 2, initialDelay: 0.01, maxDelay: 0.05 },
      },
    });
    stage.fake.enqueueResponse({ status: 503 });
    const rows = await rowsAddedBy(2, async () => {
      const stream = await google.models.generateContentStream({ model: "gemini-2.5-flash", contents: "Hi" });
      let text = "";
      for await (const chunk of stream) text += chunk.text ?? "";
      expect(text).toBe("Hello from the fake upstream");
    });
    expect(stage.fake.requests).toHaveLength(2);
    expect(rows(503)).toMatchObject({ outcome: "error", input_tokens: null });
    expect(rows(200)).toMatchObject({ outcome: "ok", streamed: 1, input_tokens: 11, output_tokens: 7 });
  });

  it("gives each SDK Sluice's rate-limit refusal as its 429 error, with Retry-After and Sluice's message, and no provider call", async () => {
    const limited = await createTestProject(stage.sluice.gateway, { rateLimits: { perMinute: 1 } });
    const openai = new OpenAI({
      baseURL: base("provider-a", limited),
      apiKey: limited.bearer("provider-a"),
      maxRetries: 0,
    });
    await openai.chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "Hi" }],
    });
    stage.fake.clear();
    const message = "Rate limit exceeded (project: 1 per 60s)";

    const a = await openai.chat.completions
      .create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Hi" }] })
      .catch((caught: unknown) => caught);
    expect(a).toBeInstanceOf(OpenAI.RateLimitError);
    const refusedA = a as InstanceType<typeof OpenAI.RateLimitError>;
    // The openai SDK reads the envelope's `error` as its own: the message, the code, the request id.
    expect(refusedA).toMatchObject({ status: 429, message: `429 ${message}`, code: "TOO_MANY_REQUESTS" });
    expect(refusedA.requestID).toMatch(/^req_/);
    expect(Number(refusedA.headers.get("retry-after"))).toBeGreaterThan(0);

    const b = await new Anthropic({
      baseURL: base("provider-b", limited),
      apiKey: limited.bearer("provider-b"),
      maxRetries: 0,
    }).messages
      .create({ model: "claude-sonnet-4-5", max_tokens: 64, messages: [{ role: "user", content: "Hi" }] })
      .catch((caught: unknown) => caught);
    expect(b).toBeInstanceOf(Anthropic.RateLimitError);
    const refusedB = b as InstanceType<typeof Anthropic.RateLimitError>;
    // @anthropic-ai/sdk shows a body not of provider B's shape as its JSON, which names the message.
    expect(refusedB.status).toBe(429);
    expect(refusedB.message).toContain(message);
    expect(refusedB.error).toMatchObject({ error: { code: "TOO_MANY_REQUESTS", message } });
    expect(Number(refusedB.headers.get("retry-after"))).toBeGreaterThan(0);

    const c = await new GoogleGenAI({
      apiKey: limited.bearer("provider-c"),
      httpOptions: { baseUrl: base("provider-c", limited) },
    }).models
      .generateContent({ model: "gemini-2.5-flash", contents: "Hi" })
      .catch((caught: unknown) => caught);
    expect(c).toMatchObject({ name: "ApiError", status: 429 });
    expect((c as Error).message).toContain(message);

    expect(stage.fake.requests).toHaveLength(0);
  });
});
