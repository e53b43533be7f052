import { APICallError, generateText, type LanguageModel, streamText } from "ai";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { FakeUpstream } from "../fakes/fake-upstream.js";
import { aiSdkClients } from "../support/ai-sdk-clients.js";
import { aiSdkRows } from "../support/ai-sdk-rows.js";
import { type ProxyStage, startProxyStage } from "../support/proxy-stage.js";

/**
 * The proxies driven by the Vercel AI SDK when things go wrong: the provider's errors, before a
 * stream and inside one, and the app's abort. Each attempt of the SDK's own retries reaches the
 * provider once, through Sluice, with a usage row of its own; the error the app gets is the
 * provider's; an aborted call cuts the provider's request, and its row records what was seen.
 */
describe("proxies driven by the AI SDK, when calls fail", () => {
  let fake: FakeUpstream;
  let stage: ProxyStage;
  let clients: ReturnType<typeof aiSdkClients>;
  let recorded: ReturnType<typeof aiSdkRows>;
  const newRows = (before: Set<string>) => recorded.newRows(before);
  const newRowsOnce = (before: Set<string>, count: number) => recorded.newRowsOnce(before, count);
  const rowIds = () => recorded.rowIds();
  const greeting = "Hello from the fake upstream";

  beforeAll(async () => {
    stage = await startProxyStage();
    fake = stage.fake;
    clients = aiSdkClients(stage.sluice, stage.project);
    recorded = aiSdkRows(stage.sluice, stage.project);
  });
  afterAll(() => stage.close());
  beforeEach(() => fake.clear());

  const apis: Array<[string, () => LanguageModel]> = [
    ["A, the Responses API", () => clients.openai("gpt-4o-mini")],
    ["A, chat completions", () => clients.openai.chat("gpt-4o-mini")],
    ["B, messages", () => clients.anthropic("claude-sonnet-4-5")],
    ["C, generateContent", () => clients.google("gemini-2.5-flash")],
  ];

  const failures: Array<[string, () => LanguageModel, number, unknown]> = [
    [
      "A's 500",
      () => clients.openai("gpt-4o-mini"),
      500,
      {
        error: {
          message: "The server had an error while processing your request.",
          type: "server_error",
          param: null,
          code: null,
        },
      },
    ],
    [
      "A's 429",
      () => clients.openai.chat("gpt-4o-mini"),
      429,
      {
        error: {
          message: "Rate limit reached for gpt-4o-mini.",
          type: "requests",
          param: null,
          code: "rate_limit_exceeded",
        },
      },
    ],
    [
      "B's 529 overloaded",
      () => clients.anthropic("claude-sonnet-4-5"),
      529,
      { type: "error", error: { type: "overloaded_error", message: "Overloaded" } },
    ],
    [
      "C's 503",
      () => clients.google("gemini-2.5-flash"),
      503,
      {
        error: {
          code: 503,
          message: "The model is overloaded. Please try again later.",
          status: "UNAVAILABLE",
        },
      },
    ],
  ];

  it.each(failures)(
    "gives the app %s as the provider's APICallError, once per attempt of the SDK's own",
    async (_name, model, status, body) => {
      for (const streamed of [false, true]) {
        fake.clear();
        const before = await rowIds();
        for (let attempt = 0; attempt < 3; attempt++)
          fake.enqueueResponse({ status, body, headers: { "retry-after-ms": "1" } });
        const options = { model: model(), prompt: "Hi", maxRetries: 2 };
        let caught: unknown;
        if (streamed) {
          for await (const part of streamText({ ...options, onError: () => {} }).fullStream)
            if (part.type === "error") caught = part.error;
        } else caught = await generateText(options).catch((error: unknown) => error);
        const errors = (caught as { errors?: unknown[] }).errors ?? [];
        expect(errors, "the SDK tried three times").toHaveLength(3);
        for (const error of errors) {
          expect(APICallError.isInstance(error)).toBe(true);
          const { statusCode, isRetryable, responseBody, responseHeaders } = error as APICallError;
          expect({ statusCode, isRetryable }).toEqual({ statusCode: status, isRetryable: true });
          expect(JSON.parse(responseBody ?? "null")).toEqual(body);
          expect(responseHeaders?.["retry-after-ms"]).toBe("1");
        }
        // Sluice retried none of them: three attempts, three provider calls, three rows.
        expect(fake.requests).toHaveLength(3);
        const rows = await newRows(before);
        expect(rows).toHaveLength(3);
        for (const row of rows)
          expect(row).toMatchObject({
            status,
            outcome: "error",
            // The answer was no stream, though the SDK asked for one.
            streamed: 0,
            input_tokens: null,
            output_tokens: null,
            cost_usd: null,
          });
      }
    },
  );

  it.each([
    [
      "B",
      () => clients.anthropic("claude-sonnet-4-5"),
      "/b/v1/messages",
      { input: 11, output: 1, cached: 3 },
    ],
    [
      "C",
      () => clients.google("gemini-2.5-flash"),
      "/c/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
      { input: 11, output: 0, cached: null },
    ],
  ] as const)(
    "records what %s's stream reported before the app aborted it, and cuts the provider's stream",
    async (_name, model, path, seen) => {
      fake.setSseDelayMs(100);
      try {
        const before = await rowIds();
        const controller = new AbortController();
        const result = streamText({
          model: model(),
          prompt: "Hi",
          abortSignal: controller.signal,
          maxRetries: 0,
        });
        const parts: string[] = [];
        for await (const part of result.fullStream) {
          parts.push(part.type);
          if (part.type === "text-delta") controller.abort();
        }
        expect(parts.at(-1)).toBe("abort");
        expect((await fake.waitForAbort(5000)).path).toBe(path);
        const rows = await newRowsOnce(before, 1);
        expect(rows).toHaveLength(1);
        expect(rows[0]).toMatchObject({ streamed: 1, status: 200, outcome: "aborted" });
        expect({
          input: rows[0]!.input_tokens,
          output: rows[0]!.output_tokens,
          cached: rows[0]!.cached_tokens,
        }).toEqual(seen);
      } finally {
        fake.setSseDelayMs(0);
      }
    },
  );

  it.each(apis)(
    "records a call not streamed that %s's app aborts as aborted, and cuts the provider's request",
    async (_name, model) => {
      fake.setLatencyMs(1000);
      try {
        const before = await rowIds();
        const controller = new AbortController();
        setTimeout(() => controller.abort(), 100);
        const caught = await generateText({
          model: model(),
          prompt: "Hi",
          abortSignal: controller.signal,
          maxRetries: 0,
        }).catch((error: unknown) => error);
        expect(caught).toMatchObject({ name: "AbortError" });
        await fake.waitForAbort(5000);
        const rows = await newRowsOnce(before, 1);
        expect(rows).toHaveLength(1);
        expect(rows[0]).toMatchObject({ status: 499, outcome: "aborted", streamed: 0, input_tokens: null });
      } finally {
        fake.setLatencyMs(0);
      }
    },
  );

  const sse = (event: string | null, data: unknown) =>
    `${event === null ? "" : `event: ${event}\n`}data: ${JSON.stringify(data)}\n\n`;
  const midStreamErrors: Array<[string, () => LanguageModel, string[], Record<string, unknown>, boolean]> = [
    [
      "B's overloaded_error event",
      () => clients.anthropic("claude-sonnet-4-5"),
      [
        sse("message_start", {
          type: "message_start",
          message: {
            id: "msg_1",
            type: "message",
            role: "assistant",
            model: "claude-sonnet-4-5",
            content: [],
            stop_reason: null,
            stop_sequence: null,
            usage: {
              input_tokens: 8,
              cache_creation_input_tokens: 0,
              cache_read_input_tokens: 3,
              output_tokens: 1,
            },
          },
        }),
        sse("content_block_start", {
          type: "content_block_start",
          index: 0,
          content_block: { type: "text", text: "" },
        }),
        sse("content_block_delta", {
          type: "content_block_delta",
          index: 0,
          delta: { type: "text_delta", text: "Hel" },
        }),
        sse("error", { type: "error", error: { type: "overloaded_error", message: "Overloaded" } }),
      ],
      { model: "claude-sonnet-4-5", input_tokens: 11, output_tokens: 1, cached_tokens: 3 },
      false,
    ],
    [
      "the Responses API's error event",
      () => clients.openai("gpt-4o-mini"),
      [
        sse("response.created", {
          type: "response.created",
          sequence_number: 0,
          response: {
            id: "resp_1",
            object: "response",
            created_at: 1,
            status: "in_progress",
            model: "gpt-4o-mini",
            output: [],
            usage: null,
          },
        }),
        sse("response.output_item.added", {
          type: "response.output_item.added",
          sequence_number: 1,
          output_index: 0,
          item: { id: "msg_1", type: "message", status: "in_progress", role: "assistant", content: [] },
        }),
        sse("response.output_text.delta", {
          type: "response.output_text.delta",
          sequence_number: 1,
          item_id: "msg_1",
          output_index: 0,
          content_index: 0,
          delta: "Hel",
        }),
        sse("error", {
          type: "error",
          sequence_number: 2,
          code: "server_error",
          message: "The server had an error",
          param: null,
        }),
      ],
      { model: "gpt-4o-mini", input_tokens: null, output_tokens: null },
      false,
    ],
    [
      "C's error chunk",
      () => clients.google("gemini-2.5-flash"),
      [
        `data: ${JSON.stringify({
          candidates: [{ content: { parts: [{ text: "Hel" }], role: "model" }, index: 0 }],
          usageMetadata: { promptTokenCount: 11, totalTokenCount: 11 },
          modelVersion: "gemini-2.5-flash",
        })}\r\n\r\n`,
        `data: ${JSON.stringify({ error: { code: 503, message: "The model is overloaded.", status: "UNAVAILABLE" } })}\r\n\r\n`,
      ],
      { model: "gemini-2.5-flash", input_tokens: 11, output_tokens: 0 },
      true,
    ],
  ];

  it.each(midStreamErrors)(
    "gives the app %s in a 200 stream as the stream's error, once, and records the stream's tokens so far",
    async (_name, model, parts, row, apiCallError) => {
      const before = await rowIds();
      fake.enqueueResponse({ status: 200, headers: { "content-type": "text/event-stream" }, parts });
      const result = streamText({ model: model(), prompt: "Hi", maxRetries: 2, onError: () => {} });
      const errors: unknown[] = [];
      for await (const part of result.fullStream) if (part.type === "error") errors.push(part.error);
      expect(await result.finishReason).toBe("error");
      expect(errors).toHaveLength(1);
      expect(APICallError.isInstance(errors[0])).toBe(apiCallError);
      // Not retried: the SDK does not retry a stream that began.
      expect(fake.requests).toHaveLength(1);
      const rows = await newRows(before);
      expect(rows).toHaveLength(1);
      expect(rows[0]).toMatchObject({ status: 200, outcome: "error", streamed: 1, ...row });
    },
  );

  it("gives the app an error event before any output of A's stream as an APICallError, which the SDK retries, a row per attempt", async () => {
    const before = await rowIds();
    fake.enqueueResponse({
      status: 200,
      // The SDK's wait before it retries is read from the answer's headers.
      headers: { "content-type": "text/event-stream", "retry-after-ms": "1" },
      parts: [
        sse("error", {
          type: "error",
          sequence_number: 0,
          code: "server_error",
          message: "The server had an error",
          param: null,
        }),
      ],
    });
    const result = streamText({
      model: clients.openai("gpt-4o-mini"),
      prompt: "Hi",
      maxRetries: 1,
      onError: () => {},
    });
    expect(await result.text).toBe(greeting);
    expect(fake.requests).toHaveLength(2);
    const rows = await newRows(before);
    expect(rows.map((row) => [row.status, row.outcome, row.streamed]).sort()).toEqual([
      [200, "error", 1],
      [200, "ok", 1],
    ]);
  });
});
