import { createAnthropic } from "@ai-sdk/anthropic";
import { createGoogleGenerativeAI } from "@ai-sdk/google";
import { createOpenAI } from "@ai-sdk/openai";
import {
  APICallError,
  embed,
  embedMany,
  generateImage,
  generateText,
  type LanguageModelUsage,
  Output,
  streamText,
  type TextStreamPart,
  type ToolSet,
} from "ai";
import { beforeEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { aiSdkClients } from "../support/ai-sdk-clients.js";
import { aiSdkRows } from "../support/ai-sdk-rows.js";
import { useProxyStage } from "../support/proxy-stage.js";

/**
 * The proxies driven by the Vercel AI SDK as an app would use it: each provider package pointed at
 * Sluice by its base URL and given `<partial_key>.<test_key>` as its API key. What the app sees
 * (text, objects, the usage the SDK reports) and what Sluice records (the usage row) must agree,
 * and a streamed call must record the same tokens and cost as the same call not streamed.
 */
describe("proxies driven by the AI SDK", () => {
  /** No retries, so every call reaches Sluice once. */
  const once = { maxRetries: 0 } as const;
  const schema = z.object({ answer: z.string(), confidence: z.number() });
  const structured = { answer: "fake", confidence: 0.5 };
  const greeting = "Hello from the fake upstream";

  const stage = useProxyStage(aiSdkClients);

  beforeEach(() => {
    stage.fake.clear();
    stage.fake.setStructuredOutput(structured);
  });

  /** The usage row of a call, from the response headers the AI SDK exposes. */
  const rowFor = (headers: Record<string, string> | undefined) =>
    aiSdkRows(stage.sluice, stage.project).rowFor(headers);
  type UsageRow = Awaited<ReturnType<typeof rowFor>>;

  /** The text of a stream, failing on the first error part (streamText reports errors in the stream). */
  async function textOf(parts: AsyncIterable<TextStreamPart<ToolSet>>): Promise<string> {
    let text = "";
    for await (const part of parts) {
      if (part.type === "error") throw part.error;
      if (part.type === "text-delta") text += part.text;
    }
    return text;
  }

  /** The tokens the AI SDK reported to the app are the tokens Sluice recorded. */
  function expectSameTokens(usage: LanguageModelUsage, row: UsageRow) {
    expect({
      input: row.input_tokens,
      output: row.output_tokens,
      cached: row.cached_tokens,
      reasoning: row.reasoning_tokens,
    }).toEqual({
      input: usage.inputTokens ?? null,
      output: usage.outputTokens ?? null,
      cached: usage.inputTokenDetails.cacheReadTokens ?? null,
      reasoning: usage.outputTokenDetails.reasoningTokens ?? null,
    });
  }

  /** A streamed call's row records what its unstreamed twin's does, but for being streamed. */
  function expectSameRecord(streamed: UsageRow, buffered: UsageRow) {
    expect(streamed).toMatchObject({ streamed: 1, status: 200, outcome: "ok" });
    expect(buffered).toMatchObject({ streamed: 0, status: 200, outcome: "ok" });
    for (const column of [
      "provider",
      "model",
      "input_tokens",
      "output_tokens",
      "cached_tokens",
      "reasoning_tokens",
      "cost_usd",
    ] as const)
      expect(streamed[column], column).toEqual(buffered[column]);
  }

  // The fake reports 11 input tokens (3 of them cached) and 7 output tokens (2 of them reasoning).
  /** gpt-4o-mini, per 1M: 0.15 input, 0.075 cached input, 0.6 output. */
  const gpt4oMiniCost = ((11 - 3) * 0.15 + 3 * 0.075 + 7 * 0.6) / 1e6;

  describe("provider A", () => {
    it("answers generateText and streamText on the Responses API, and records identical rows", async () => {
      const buffered = await generateText({ model: stage.openai("gpt-4o-mini"), prompt: "Hi", ...once });
      expect(buffered.text).toBe(greeting);
      expect(stage.fake.last()).toMatchObject({ method: "POST", path: "/a/v1/responses" });
      expect(stage.fake.last()!.headers.authorization).toBe(
        `Bearer ${stage.project.providerKeys["provider-a"]}`,
      );
      expect(buffered.usage).toMatchObject({ inputTokens: 11, outputTokens: 7, totalTokens: 18 });

      const streamed = streamText({ model: stage.openai("gpt-4o-mini"), prompt: "Hi", ...once });
      expect(await textOf(streamed.fullStream)).toBe(greeting);
      expect(stage.fake.last()).toMatchObject({ path: "/a/v1/responses", json: { stream: true } });
      const streamedUsage = await streamed.usage;
      expect(streamedUsage).toEqual(buffered.usage);

      const bufferedRow = await rowFor(buffered.response.headers);
      const streamedRow = await rowFor((await streamed.response).headers);
      expect(bufferedRow).toMatchObject({
        endpoint: "proxy",
        provider: "provider-a",
        model: "gpt-4o-mini",
        auth_method: "bearer-test-key",
      });
      expectSameTokens(buffered.usage, bufferedRow);
      expectSameTokens(streamedUsage, streamedRow);
      expect(bufferedRow.cost_usd).toBeCloseTo(gpt4oMiniCost, 12);
      expectSameRecord(streamedRow, bufferedRow);
    });

    it("answers generateText and streamText on chat completions, and records identical rows", async () => {
      const buffered = await generateText({ model: stage.openai.chat("gpt-4o-mini"), prompt: "Hi", ...once });
      expect(buffered.text).toBe(greeting);
      expect(stage.fake.last()).toMatchObject({ method: "POST", path: "/a/v1/chat/completions" });

      const streamed = streamText({ model: stage.openai.chat("gpt-4o-mini"), prompt: "Hi", ...once });
      expect(await textOf(streamed.fullStream)).toBe(greeting);
      // The AI SDK asks for the usage chunk itself, so Sluice leaves the body and the stream as they
      // are and the chunk reaches the SDK (its usage below).
      expect(stage.fake.last()!.json).toMatchObject({
        stream: true,
        stream_options: { include_usage: true },
      });
      const streamedUsage = await streamed.usage;
      expect(streamedUsage).toEqual(buffered.usage);

      const bufferedRow = await rowFor(buffered.response.headers);
      const streamedRow = await rowFor((await streamed.response).headers);
      expectSameTokens(buffered.usage, bufferedRow);
      expectSameTokens(streamedUsage, streamedRow);
      expect(bufferedRow.cost_usd).toBeCloseTo(gpt4oMiniCost, 12);
      expectSameRecord(streamedRow, bufferedRow);
    });

    it.each([
      ["the Responses API", "/a/v1/responses", (id: string) => stage.openai(id)],
      ["chat completions", "/a/v1/chat/completions", (id: string) => stage.openai.chat(id)],
    ])(
      "answers Output.object on %s, streamed or not, and records identical rows",
      async (_api, path, model) => {
        const buffered = await generateText({
          model: model("gpt-4o-mini"),
          prompt: "Hi",
          output: Output.object({ schema }),
          ...once,
        });
        expect(buffered.output).toEqual(structured);
        expect(stage.fake.last()!.path).toBe(path);

        const streamed = streamText({
          model: model("gpt-4o-mini"),
          prompt: "Hi",
          output: Output.object({ schema }),
          ...once,
        });
        await textOf(streamed.fullStream);
        expect(await streamed.output).toEqual(structured);

        const bufferedRow = await rowFor(buffered.response.headers);
        const streamedRow = await rowFor((await streamed.response).headers);
        expectSameTokens(buffered.usage, bufferedRow);
        expectSameTokens(await streamed.usage, streamedRow);
        expect(bufferedRow.cost_usd).toBeCloseTo(gpt4oMiniCost, 12);
        expectSameRecord(streamedRow, bufferedRow);
      },
    );

    it("answers embed and embedMany, and records the embedding's tokens and cost", async () => {
      const model = stage.openai.embedding("text-embedding-3-small");
      const one = await embed({ model, value: "Hi", ...once });
      expect(one.embedding).toHaveLength(3);
      expect(one.usage).toEqual({ tokens: 11 });
      expect(stage.fake.last()).toMatchObject({ path: "/a/v1/embeddings", json: { input: ["Hi"] } });
      const many = await embedMany({ model, values: ["a", "b"], ...once });
      expect(many.embeddings).toHaveLength(2);
      expect(many.usage).toEqual({ tokens: 11 });

      const rows = [await rowFor(one.response?.headers), await rowFor(many.responses?.[0]?.headers)];
      for (const row of rows) {
        // Embeddings report no output tokens: 0, so the cost is known (0.02 per 1M input tokens).
        expect(row).toMatchObject({
          provider: "provider-a",
          model: "text-embedding-3-small",
          status: 200,
          streamed: 0,
          input_tokens: 11,
          output_tokens: 0,
        });
        expect(row.cost_usd).toBeCloseTo((11 * 0.02) / 1e6, 15);
      }
    });

    it("answers generateImage, priced per image at the quality and size the answer names", async () => {
      const result = await generateImage({
        model: stage.openai.image("gpt-image-1"),
        prompt: "A lighthouse",
        n: 2,
        size: "1024x1024",
        providerOptions: { openai: { quality: "low" } },
        ...once,
      });
      expect(result.images).toHaveLength(2);
      expect(stage.fake.last()).toMatchObject({
        path: "/a/v1/images/generations",
        json: { n: 2, quality: "low" },
      });
      const row = await rowFor(result.responses[0]?.headers);
      // gpt-image-1 reports tokens, which are kept; its cost is per image (low, 1024x1024: 0.011).
      expect(row).toMatchObject({
        model: "gpt-image-1",
        input_tokens: result.usage.inputTokens,
        output_tokens: result.usage.outputTokens,
      });
      expect(row.cost_usd).toBeCloseTo(2 * 0.011, 12);
    });

    it("records a stream the app aborts as aborted, and cuts the provider's stream", async () => {
      stage.fake.setSseDelayMs(100);
      try {
        const before = new Set((await stage.usageRows()).map((row) => row.request_id));
        const controller = new AbortController();
        const streamed = streamText({
          model: stage.openai("gpt-4o-mini"),
          prompt: "Hi",
          abortSignal: controller.signal,
          ...once,
        });
        const parts: string[] = [];
        for await (const part of streamed.fullStream) {
          parts.push(part.type);
          if (part.type === "text-delta") controller.abort();
        }
        // The app sees the abort; the response (and its headers) never completes.
        expect(parts.at(-1)).toBe("abort");
        await expect(streamed.response).rejects.toMatchObject({ name: "AbortError" });
        const upstream = await stage.fake.waitForAbort(5000);
        expect(upstream.path).toBe("/a/v1/responses");
        await new Promise((resolve) => setTimeout(resolve, 50));
        const added = (await stage.usageRows()).filter((row) => !before.has(row.request_id));
        expect(added).toHaveLength(1);
        expect(added[0]).toMatchObject({ provider: "provider-a", streamed: 1, outcome: "aborted" });
      } finally {
        stage.fake.setSseDelayMs(0);
      }
    });
  });

  describe("provider B", () => {
    /** claude-sonnet-4-5, per 1M: 3 input, 0.3 cache read, 15 output. */
    const sonnetCost = ((11 - 3) * 3 + 3 * 0.3 + 7 * 15) / 1e6;

    it("answers generateText and streamText on messages, and records identical rows", async () => {
      const buffered = await generateText({
        model: stage.anthropic("claude-sonnet-4-5"),
        prompt: "Hi",
        ...once,
      });
      expect(buffered.text).toBe(greeting);
      expect(buffered.usage).toMatchObject({ inputTokens: 11, outputTokens: 7 });
      const upstream = stage.fake.last()!;
      expect(upstream).toMatchObject({ method: "POST", path: "/b/v1/messages" });
      expect(upstream.headers["x-api-key"]).toBe(stage.project.providerKeys["provider-b"]);
      expect(upstream.headers["anthropic-version"]).toBe("2023-06-01");

      const streamed = streamText({ model: stage.anthropic("claude-sonnet-4-5"), prompt: "Hi", ...once });
      expect(await textOf(streamed.fullStream)).toBe(greeting);
      expect(stage.fake.last()).toMatchObject({ path: "/b/v1/messages", json: { stream: true } });
      const streamedUsage = await streamed.usage;
      expect(streamedUsage).toMatchObject({ inputTokens: 11, outputTokens: 7 });

      const bufferedRow = await rowFor(buffered.response.headers);
      const streamedRow = await rowFor((await streamed.response).headers);
      expect(bufferedRow).toMatchObject({ provider: "provider-b", model: "claude-sonnet-4-5" });
      expectSameTokens(buffered.usage, bufferedRow);
      expectSameTokens(streamedUsage, streamedRow);
      expect(bufferedRow.cost_usd).toBeCloseTo(sonnetCost, 12);
      expectSameRecord(streamedRow, bufferedRow);
    });

    it("answers Output.object, streamed or not, and records identical rows", async () => {
      const model = stage.anthropic("claude-sonnet-4-5");
      const buffered = await generateText({
        model,
        prompt: "Hi",
        output: Output.object({ schema }),
        ...once,
      });
      expect(buffered.output).toEqual(structured);
      const streamed = streamText({ model, prompt: "Hi", output: Output.object({ schema }), ...once });
      await textOf(streamed.fullStream);
      expect(await streamed.output).toEqual(structured);
      const bufferedRow = await rowFor(buffered.response.headers);
      expect(bufferedRow.cost_usd).toBeCloseTo(sonnetCost, 12);
      expectSameRecord(await rowFor((await streamed.response).headers), bufferedRow);
    });
  });

  describe("provider C", () => {
    /** gemini-2.5-flash, per 1M: 0.3 input, 0.075 cached input, 2.5 output (thinking included). */
    const flashCost = ((11 - 3) * 0.3 + 3 * 0.075 + 7 * 2.5) / 1e6;

    it("answers generateText and streamText (SSE), and records identical rows", async () => {
      const buffered = await generateText({ model: stage.google("gemini-2.5-flash"), prompt: "Hi", ...once });
      expect(buffered.text).toBe(greeting);
      const upstream = stage.fake.last()!;
      expect(upstream).toMatchObject({
        method: "POST",
        path: "/c/v1beta/models/gemini-2.5-flash:generateContent",
      });
      expect(upstream.headers["x-goog-api-key"]).toBe(stage.project.providerKeys["provider-c"]);

      const streamed = streamText({ model: stage.google("gemini-2.5-flash"), prompt: "Hi", ...once });
      expect(await textOf(streamed.fullStream)).toBe(greeting);
      expect(stage.fake.last()!.path).toBe("/c/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse");
      const streamedUsage = await streamed.usage;
      expect(streamedUsage).toEqual(buffered.usage);

      const bufferedRow = await rowFor(buffered.response.headers);
      const streamedRow = await rowFor((await streamed.response).headers);
      expect(bufferedRow).toMatchObject({ provider: "provider-c", model: "gemini-2.5-flash" });
      expectSameTokens(buffered.usage, bufferedRow);
      expectSameTokens(streamedUsage, streamedRow);
      expect(bufferedRow.cost_usd).toBeCloseTo(flashCost, 12);
      expectSameRecord(streamedRow, bufferedRow);
    });

    it("answers Output.object, streamed or not, and records identical rows", async () => {
      const model = stage.google("gemini-2.5-flash");
      const buffered = await generateText({
        model,
        prompt: "Hi",
        output: Output.object({ schema }),
        ...once,
      });
      expect(buffered.output).toEqual(structured);
      expect(stage.fake.last()!.json).toMatchObject({
        generationConfig: { responseMimeType: "application/json" },
      });
      const streamed = streamText({ model, prompt: "Hi", output: Output.object({ schema }), ...once });
      await textOf(streamed.fullStream);
      expect(await streamed.output).toEqual(structured);
      const bufferedRow = await rowFor(buffered.response.headers);
      expect(bufferedRow.cost_usd).toBeCloseTo(flashCost, 12);
      expectSameRecord(await rowFor((await streamed.response).headers), bufferedRow);
    });

    it("answers embed and embedMany; the provider reports no tokens for them, so the rows have none", async () => {
      const model = stage.google.embedding("gemini-embedding-001");
      const one = await embed({ model, value: "Hi", ...once });
      expect(one.embedding).toHaveLength(3);
      expect(stage.fake.last()!.path).toBe("/c/v1beta/models/gemini-embedding-001:embedContent");
      const many = await embedMany({ model, values: ["a", "b"], ...once });
      expect(many.embeddings).toHaveLength(2);
      expect(stage.fake.last()!.path).toBe("/c/v1beta/models/gemini-embedding-001:batchEmbedContents");

      for (const headers of [one.response?.headers, many.responses?.[0]?.headers])
        expect(await rowFor(headers)).toMatchObject({
          provider: "provider-c",
          model: "gemini-embedding-001",
          status: 200,
          outcome: "ok",
          input_tokens: null,
          output_tokens: null,
          cost_usd: null,
        });
    });

    it("answers generateImage (Imagen), priced per image", async () => {
      const result = await generateImage({
        model: stage.google.image("imagen-4.0-generate-001"),
        prompt: "A lighthouse",
        n: 2,
        ...once,
      });
      expect(result.images).toHaveLength(2);
      expect(stage.fake.last()).toMatchObject({
        path: "/c/v1beta/models/imagen-4.0-generate-001:predict",
        json: { parameters: { sampleCount: 2 } },
      });
      const row = await rowFor(result.responses[0]?.headers);
      expect(row).toMatchObject({ model: "imagen-4.0-generate-001", status: 200 });
      expect(row.cost_usd).toBeCloseTo(2 * 0.04, 12);
    });
  });

  it("reaches the same provider paths when B's and C's base URLs leave out the version segment", async () => {
    const base = (provider: string) => `${stage.sluice.url}/v1/${provider}/${stage.project.projectId}`;
    const unversioned = [
      createAnthropic({ baseURL: base("provider-b"), apiKey: stage.project.bearer("provider-b") })(
        "claude-sonnet-4-5",
      ),
      createGoogleGenerativeAI({ baseURL: base("provider-c"), apiKey: stage.project.bearer("provider-c") })(
        "gemini-2.5-flash",
      ),
    ];
    for (const model of unversioned)
      expect((await generateText({ model, prompt: "Hi", ...once })).text, model.provider).toBe(greeting);
    expect(stage.fake.requests.map((request) => request.path)).toEqual([
      "/b/v1/messages",
      "/c/v1beta/models/gemini-2.5-flash:generateContent",
    ]);
  });

  it("gives the app Sluice's own refusal as an APICallError with its status and error envelope", async () => {
    const base = (provider: string) => `${stage.sluice.url}/v1/${provider}/${stage.project.projectId}`;
    const wrongKey = `${stage.project.partialKeys["provider-a"]}.not-the-test-key`;
    const models = [
      createOpenAI({ baseURL: base("provider-a"), apiKey: wrongKey })("gpt-4o-mini"),
      createAnthropic({ baseURL: `${base("provider-b")}/v1`, apiKey: wrongKey })("claude-sonnet-4-5"),
      createGoogleGenerativeAI({ baseURL: `${base("provider-c")}/v1beta`, apiKey: wrongKey })(
        "gemini-2.5-flash",
      ),
    ];
    for (const model of models) {
      const error = await generateText({ model, prompt: "Hi", ...once }).catch((caught: unknown) => caught);
      expect(APICallError.isInstance(error), model.provider).toBe(true);
      const { statusCode, isRetryable, responseBody } = error as APICallError;
      expect({ statusCode, isRetryable }, model.provider).toEqual({ statusCode: 401, isRetryable: false });
      expect(JSON.parse(responseBody ?? "{}"), model.provider).toMatchObject({
        error: { code: "UNAUTHORIZED" },
      });
    }
    expect(stage.fake.requests).toHaveLength(0);
  });
});
