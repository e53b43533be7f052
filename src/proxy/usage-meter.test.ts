import { describe, expect, it, vi } from "vitest";
import { meterRun as meter } from "../../test/support/meter-run.js";
import { referenceSseEvents } from "../../test/support/reference-sse.js";
import { slowdownAtSixteenTimes } from "../../test/support/slowdown-at-sixteen-times.js";
import type { ProviderId } from "../providers/provider-id.js";
import { emptyUsage } from "../usage/token-usage.js";
import { SseEventScanner } from "./sse-event-scanner.js";
import { answerCarriesNoUsage } from "./usage-meter.js";

const openAiStream = [
  'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini-2024-07-18","choices":[{"index":0,"delta":{"role":"assistant","content":""}}],"usage":null}',
  'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini-2024-07-18","choices":[{"index":0,"delta":{"content":"Hé 🙂"}}],"usage":null}',
  'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini-2024-07-18","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":7,"total_tokens":19,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":2}}}',
  "data: [DONE]",
]
  .map((line) => `${line}\n\n`)
  .join("");

const openAiJson = JSON.stringify({
  id: "chatcmpl-1",
  object: "chat.completion",
  model: "gpt-4o-mini-2024-07-18",
  choices: [{ index: 0, message: { role: "assistant", content: "Hé 🙂" }, finish_reason: "stop" }],
  usage: {
    prompt_tokens: 12,
    completion_tokens: 7,
    total_tokens: 19,
    prompt_tokens_details: { cached_tokens: 4 },
    completion_tokens_details: { reasoning_tokens: 2 },
  },
});

const responsesStream = [
  'event: response.created\ndata: {"type":"response.created","response":{"id":"resp_1","model":"gpt-4.1","usage":null}}',
  'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"Hi"}',
  'event: response.completed\ndata: {"type":"response.completed","response":{"id":"resp_1","model":"gpt-4.1","usage":{"input_tokens":30,"input_tokens_details":{"cached_tokens":10},"output_tokens":8,"output_tokens_details":{"reasoning_tokens":3},"total_tokens":38}}}',
]
  .map((event) => `${event}\n\n`)
  .join("");

const anthropicStream = [
  'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":0,"cache_read_input_tokens":5,"output_tokens":1}}}',
  'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}',
  'event: ping\ndata: {"type": "ping"}',
  'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}',
  'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}',
  'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}',
  'event: message_stop\ndata: {"type":"message_stop"}',
]
  .map((event) => `${event}\n\n`)
  .join("");

const anthropicJson = JSON.stringify({
  id: "msg_1",
  type: "message",
  model: "claude-sonnet-4-5-20250929",
  content: [{ type: "text", text: "Hello" }],
  usage: { input_tokens: 25, cache_creation_input_tokens: 0, cache_read_input_tokens: 5, output_tokens: 15 },
});

const geminiChunk = (text: string, candidates: number) =>
  JSON.stringify({
    candidates: [{ content: { parts: [{ text }], role: "model" }, index: 0 }],
    usageMetadata: {
      promptTokenCount: 9,
      candidatesTokenCount: candidates,
      totalTokenCount: 9 + candidates + 4,
      thoughtsTokenCount: 4,
      cachedContentTokenCount: 2,
    },
    modelVersion: "gemini-2.5-flash",
    responseId: "r1",
  });
const geminiSse = `data: ${geminiChunk("Hel", 1)}\r\n\r\ndata: ${geminiChunk("lo", 6)}\r\n\r\n`;
const geminiArray = `[${geminiChunk("Hel", 1)}\n,\r\n${geminiChunk("lo", 6)}]`;
/** The JSON-array stream as the API sends it: each chunk indented over several lines. */
const geminiPrettyArray = `[${[geminiChunk("Hel", 1), geminiChunk("lo", 6)]
  .map((chunk) => JSON.stringify(JSON.parse(chunk), null, 2))
  .join("\r\n,\r\n")}]`;

const expectations: Array<[string, ProviderId, string, boolean, object]> = [
  [
    "provider A chat stream",
    "provider-a",
    openAiStream,
    true,
    { inputTokens: 12, outputTokens: 7, cachedInputTokens: 4, reasoningTokens: 2 },
  ],
  [
    "provider A chat JSON",
    "provider-a",
    openAiJson,
    false,
    { inputTokens: 12, outputTokens: 7, cachedInputTokens: 4, reasoningTokens: 2 },
  ],
  [
    "provider A Responses stream",
    "provider-a",
    responsesStream,
    true,
    { inputTokens: 30, outputTokens: 8, cachedInputTokens: 10, reasoningTokens: 3 },
  ],
  [
    "provider B stream",
    "provider-b",
    anthropicStream,
    true,
    { inputTokens: 30, outputTokens: 15, cachedInputTokens: 5, reasoningTokens: null },
  ],
  [
    "provider A Responses stream without event lines, usage before type",
    "provider-a",
    responsesStream
      .split("\n")
      .filter((line) => !line.startsWith("event:"))
      .join("\n")
      .replace(
        '{"type":"response.completed","response":{"id":"resp_1","model":"gpt-4.1",',
        '{"response":{"model":"gpt-4.1","id":"resp_1",',
      )
      .replace('"total_tokens":38}}}', '"total_tokens":38}},"type":"response.completed"}'),
    true,
    { inputTokens: 30, outputTokens: 8, cachedInputTokens: 10, reasoningTokens: 3 },
  ],
  [
    "provider A Responses stream whose output holds non-ASCII text and a quoted usage object",
    "provider-a",
    responsesStream.replace(
      '"model":"gpt-4.1","usage":{"input_tokens":30',
      `"model":"gpt-4.1","output":[{"type":"message","content":[{"type":"output_text","text":${JSON.stringify('Grüße 😀 — "usage":{"input_tokens":999}')}}]}],"usage":{"input_tokens":30`,
    ),
    true,
    { inputTokens: 30, outputTokens: 8, cachedInputTokens: 10, reasoningTokens: 3 },
  ],
  [
    "provider B stream without event lines",
    "provider-b",
    anthropicStream
      .split("\n")
      .filter((line) => !line.startsWith("event:"))
      .join("\n"),
    true,
    { inputTokens: 30, outputTokens: 15, cachedInputTokens: 5, reasoningTokens: null },
  ],
  [
    "provider B JSON",
    "provider-b",
    anthropicJson,
    false,
    { inputTokens: 30, outputTokens: 15, cachedInputTokens: 5, reasoningTokens: null },
  ],
  [
    "provider C SSE",
    "provider-c",
    geminiSse,
    true,
    { inputTokens: 9, outputTokens: 10, cachedInputTokens: 2, reasoningTokens: 4 },
  ],
  [
    "provider C JSON array",
    "provider-c",
    geminiArray,
    false,
    { inputTokens: 9, outputTokens: 10, cachedInputTokens: 2, reasoningTokens: 4 },
  ],
  [
    "provider C JSON array, indented",
    "provider-c",
    geminiPrettyArray,
    false,
    { inputTokens: 9, outputTokens: 10, cachedInputTokens: 2, reasoningTokens: 4 },
  ],
];

describe("usage meter", () => {
  it.each(expectations)("reads %s", (_name, provider, body, streaming, usage) => {
    expect(meter(provider, body, streaming).usage).toEqual(usage);
  });

  it.each(expectations)(
    "reads %s identically at every split point",
    (_name, provider, body, streaming, usage) => {
      const length = Buffer.byteLength(body);
      for (let split = 1; split < length; split++) {
        expect(meter(provider, body, streaming, [split]).usage).toEqual(usage);
      }
    },
  );

  it.each(expectations)("reads %s identically byte by byte", (_name, provider, body, streaming, usage) => {
    const length = Buffer.byteLength(body);
    expect(
      meter(
        provider,
        body,
        streaming,
        Array.from({ length: length - 1 }, (_, index) => index + 1),
      ).usage,
    ).toEqual(usage);
  });

  it("reports the model the provider says answered", () => {
    expect(meter("provider-a", openAiStream, true).model).toBe("gpt-4o-mini-2024-07-18");
    expect(meter("provider-a", responsesStream, true).model).toBe("gpt-4.1");
    expect(meter("provider-b", anthropicStream, true).model).toBe("claude-sonnet-4-5-20250929");
    expect(meter("provider-c", geminiSse, true).model).toBe("gemini-2.5-flash");
  });

  it("reports provider C's modelVersion written before its usageMetadata, streamed as buffered, not one in a function call's arguments", () => {
    const chunk = (args: object) =>
      JSON.stringify({
        candidates: [{ content: { parts: [{ functionCall: { name: "f", args } }], role: "model" } }],
        modelVersion: "gemini-2.5-flash",
        usageMetadata: { promptTokenCount: 9, candidatesTokenCount: 3, totalTokenCount: 12 },
        responseId: "r1",
      });
    for (const args of [{}, { modelVersion: "gemini-written-by-the-model" }]) {
      const json = chunk(args);
      expect(meter("provider-c", `data: ${json}\n\n`, true).model).toBe("gemini-2.5-flash");
      for (const ended of [false, true])
        expect(meter("provider-c", json, false, [], undefined, ended)).toEqual({
          usage: { inputTokens: 9, outputTokens: 3, cachedInputTokens: null, reasoningTokens: null },
          model: "gemini-2.5-flash",
        });
    }
  });

  it("reports the model a provider B server-side fallback served, streamed as buffered", () => {
    const counts = { input_tokens: 25, cache_creation_input_tokens: 0, cache_read_input_tokens: 5 };
    const usage = {
      ...counts,
      output_tokens: 15,
      iterations: [
        { type: "message", model: "claude-fable-5", ...counts, output_tokens: 0 },
        { type: "fallback_message", model: "claude-opus-4-8", ...counts, output_tokens: 15 },
      ],
    };
    const json = JSON.stringify({
      id: "msg_1",
      type: "message",
      model: "claude-opus-4-8",
      content: [],
      usage,
    });
    const start = anthropicStream.split("\n\n")[0]!.replace("claude-sonnet-4-5-20250929", "claude-fable-5");
    const delta = (pad: string) =>
      `event: message_delta\ndata: ${JSON.stringify({ type: "message_delta", delta: { stop_reason: "end_turn", pad }, usage })}\n\n`;
    const buffered = meter("provider-b", json, false);
    expect(buffered.model).toBe("claude-opus-4-8");
    // Its message_start, sent before the refusal, names the requested model; a message_delta over
    // the scanner's cap is read from its ends.
    for (const pad of ["", "x".repeat(1_100_000)]) {
      const streamed = meter("provider-b", `${start}\n\n${delta(pad)}`, true);
      expect(streamed.model, `pad ${pad.length}`).toBe("claude-opus-4-8");
      expect(streamed.usage).toEqual(buffered.usage);
    }
    // Without a fallback the requested model is kept.
    expect(meter("provider-b", anthropicStream, true).model).toBe("claude-sonnet-4-5-20250929");
  });

  it("gives the same usage streamed and buffered", () => {
    expect(meter("provider-a", openAiStream, true).usage).toEqual(
      meter("provider-a", openAiJson, false).usage,
    );
    expect(meter("provider-b", anthropicStream, true).usage).toEqual(
      meter("provider-b", anthropicJson, false).usage,
    );
    expect(meter("provider-c", geminiSse, true).usage).toEqual(meter("provider-c", geminiArray, false).usage);
  });

  it("keeps provider B's counts that a message_delta leaves out or sends as null, as its SDK does", () => {
    const start =
      'event: message_start\ndata: {"type":"message_start","message":{"model":"claude-sonnet-4-5-20250929","usage":{"input_tokens":400,"cache_creation_input_tokens":30,"cache_read_input_tokens":50,"output_tokens":1}}}\n\n';
    const delta = (usage: object) =>
      `event: message_delta\ndata: ${JSON.stringify({ type: "message_delta", delta: {}, usage })}\n\n`;
    const total = {
      inputTokens: 480,
      outputTokens: 90,
      cachedInputTokens: 50,
      reasoningTokens: null,
      cacheWriteTokens: { fiveMinutes: 30, oneHour: 0 },
    };
    for (const usage of [
      { output_tokens: 90 },
      {
        input_tokens: 400,
        cache_creation_input_tokens: null,
        cache_read_input_tokens: null,
        output_tokens: 90,
      },
      { input_tokens: null, cache_read_input_tokens: 50, output_tokens: 90 },
    ])
      expect(meter("provider-b", start + delta(usage), true).usage, JSON.stringify(usage)).toEqual(total);
    // Cache writes with their lifetimes, the same buffered and streamed.
    const cacheUsage = {
      input_tokens: 100,
      cache_creation_input_tokens: 1000,
      cache_read_input_tokens: 0,
      cache_creation: { ephemeral_5m_input_tokens: 400, ephemeral_1h_input_tokens: 600 },
      output_tokens: 5,
    };
    const cacheWrites = { inputTokens: 1100, cacheWriteTokens: { fiveMinutes: 400, oneHour: 600 } };
    const answer = JSON.stringify({ type: "message", model: "claude-sonnet-4-5", usage: cacheUsage });
    expect(meter("provider-b", answer, false).usage).toMatchObject(cacheWrites);
    const cacheStart = `event: message_start\ndata: ${JSON.stringify({ type: "message_start", message: { usage: cacheUsage } })}\n\n`;
    expect(meter("provider-b", cacheStart + delta({ output_tokens: 5 }), true).usage).toMatchObject(
      cacheWrites,
    );
    // A later report of a count replaces it (the counts are cumulative).
    expect(
      meter(
        "provider-b",
        start + delta({ input_tokens: 410, cache_read_input_tokens: 60, output_tokens: 90 }),
        true,
      ).usage,
    ).toEqual({ ...total, inputTokens: 500, cachedInputTokens: 60 });
  });

  it("reads provider B's thinking tokens (output_tokens_details) as reasoning, buffered and streamed", () => {
    const usage = {
      input_tokens: 25,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 5,
      output_tokens: 500,
      output_tokens_details: { thinking_tokens: 420 },
    };
    const expected = { inputTokens: 30, outputTokens: 500, cachedInputTokens: 5, reasoningTokens: 420 };
    const answer = JSON.stringify({ type: "message", model: "claude-sonnet-4-5", content: [], usage });
    expect(meter("provider-b", answer, false).usage).toEqual(expected);
    // The stream reports them in its last message_delta (cumulative), not in message_start.
    const start = `event: message_start\ndata: ${JSON.stringify({ type: "message_start", message: { model: "claude-sonnet-4-5", usage: { ...usage, output_tokens: 1, output_tokens_details: null } } })}\n\n`;
    const delta = `event: message_delta\ndata: ${JSON.stringify({ type: "message_delta", delta: {}, usage })}\n\n`;
    expect(meter("provider-b", start + delta, true).usage).toEqual(expected);
    // A delta that leaves them out keeps what came before, as for any count.
    const bare = `event: message_delta\ndata: ${JSON.stringify({ type: "message_delta", delta: {}, usage: { output_tokens: 501 } })}\n\n`;
    expect(meter("provider-b", start + delta + bare, true).usage).toEqual({ ...expected, outputTokens: 501 });
  });

  it("reads the service tier provider A's answer names at its top level, buffered and streamed", () => {
    const usage = { prompt_tokens: 12, completion_tokens: 7, total_tokens: 19 };
    const chat = (tier: unknown) =>
      JSON.stringify({
        id: "chatcmpl-1",
        object: "chat.completion",
        model: "gpt-5",
        choices: [],
        usage,
        service_tier: tier,
        system_fingerprint: "fp",
      });
    expect(meter("provider-a", chat("flex"), false).usage.serviceTier).toBe("flex");
    expect(meter("provider-a", chat("priority"), false).usage.serviceTier).toBe("priority");
    expect(meter("provider-a", chat("default"), false).usage).not.toHaveProperty("serviceTier");
    expect(meter("provider-a", openAiJson, false).usage).not.toHaveProperty("serviceTier");
    // The stream's usage chunk names it as every chunk does.
    const chunk = (tier: string, chunkUsage: unknown) =>
      `data: ${JSON.stringify({ id: "chatcmpl-1", object: "chat.completion.chunk", model: "gpt-5", choices: [], usage: chunkUsage, service_tier: tier })}\n\n`;
    const stream = `${chunk("flex", null)}${chunk("flex", usage)}data: [DONE]\n\n`;
    expect(meter("provider-a", stream, true).usage).toMatchObject({ inputTokens: 12, serviceTier: "flex" });
    expect(meter("provider-a", chunk("default", usage), true).usage).not.toHaveProperty("serviceTier");
  });

  it("reads the Responses API's tier from the response object itself, not from its metadata, buffered and streamed", () => {
    const usage = { input_tokens: 30, output_tokens: 8, total_tokens: 38 };
    // The tier comes before the usage; the app's own `metadata` (after it) may hold a key of that
    // name, and so may a tool's schema: neither is the response's.
    const response = (status: string, tier: string, responseUsage: unknown) => ({
      id: "resp_1",
      object: "response",
      status,
      model: "gpt-5",
      output: [],
      service_tier: tier,
      tools: [
        { type: "function", name: "f", parameters: { properties: { service_tier: { const: "flex" } } } },
      ],
      usage: responseUsage,
      metadata: { service_tier: "flex" },
    });
    const body = JSON.stringify(response("completed", "priority", usage));
    expect(meter("provider-a", body, false).usage.serviceTier).toBe("priority");
    expect(meter("provider-a", body, false, [], "post").usage.serviceTier).toBe("priority");
    const standard = JSON.stringify(response("completed", "default", usage));
    expect(meter("provider-a", standard, false).usage).not.toHaveProperty("serviceTier");
    // response.created says what was asked (auto); response.completed what served it.
    const events = [
      `event: response.created\ndata: ${JSON.stringify({ type: "response.created", sequence_number: 0, response: response("in_progress", "auto", null) })}`,
      `event: response.completed\ndata: ${JSON.stringify({ type: "response.completed", sequence_number: 1, response: response("completed", "priority", usage) })}`,
    ]
      .map((event) => `${event}\n\n`)
      .join("");
    expect(meter("provider-a", events, true).usage).toMatchObject({
      inputTokens: 30,
      serviceTier: "priority",
    });
    expect(meter("provider-a", events, true, [], "post").usage.serviceTier).toBe("priority");
    const standardEvents = events.replace('"service_tier":"priority"', '"service_tier":"default"');
    expect(meter("provider-a", standardEvents, true).usage).not.toHaveProperty("serviceTier");
  });

  // The app's own tool schemas, echoed after the response's own tier, are the client's to write:
  // with nine string-valued keys of that name in them, the tier was given up on as unreadable, and
  // the call's cost was unknown (null), which the spend cap does not count.
  it("reads provider A's tier past any number of keys of that name in the app's own tool schemas", () => {
    const usage = { input_tokens: 30, output_tokens: 8, total_tokens: 38 };
    const tools = Array.from({ length: 12 }, (_, index) => ({
      type: "function",
      name: `f${index}`,
      parameters: { type: "object", properties: {}, service_tier: "flex" },
    }));
    const response = {
      id: "resp_1",
      object: "response",
      model: "gpt-5",
      output: [],
      service_tier: "priority",
      tools,
      usage,
    };
    const completed = JSON.stringify({ type: "response.completed", sequence_number: 1, response });
    const stream = `event: response.completed\ndata: ${completed}\n\n`;
    expect(meter("provider-a", stream, true).usage).toMatchObject({
      inputTokens: 30,
      serviceTier: "priority",
    });
    const standard = stream.replace('"service_tier":"priority"', '"service_tier":"default"');
    expect(meter("provider-a", standard, true).usage).not.toHaveProperty("serviceTier");
  });

  it("reads provider B's and C's service tier from their usage, buffered and streamed", () => {
    const usage = { input_tokens: 40, output_tokens: 9, service_tier: "priority" };
    const answer = JSON.stringify({ type: "message", model: "claude-sonnet-4-6", content: [], usage });
    expect(meter("provider-b", answer, false).usage.serviceTier).toBe("priority");
    const start = `event: message_start\ndata: ${JSON.stringify({ type: "message_start", message: { model: "claude-sonnet-4-6", usage: { ...usage, output_tokens: 1 } } })}\n\n`;
    const delta = `event: message_delta\ndata: ${JSON.stringify({ type: "message_delta", delta: {}, usage: { output_tokens: 9 } })}\n\n`;
    expect(meter("provider-b", start + delta, true).usage).toMatchObject({
      outputTokens: 9,
      serviceTier: "priority",
    });
    const metadata = { promptTokenCount: 10, candidatesTokenCount: 5, serviceTier: "flex" };
    const gemini = JSON.stringify({
      candidates: [],
      usageMetadata: metadata,
      modelVersion: "gemini-2.5-flash",
    });
    expect(meter("provider-c", gemini, false).usage.serviceTier).toBe("flex");
    expect(meter("provider-c", `data: ${gemini}\r\n\r\n`, true).usage.serviceTier).toBe("flex");
    expect(meter("provider-c", `[${gemini}]`, false).usage.serviceTier).toBe("flex");
  });

  it("reads provider B's fast mode and US-only inference (speed, inference_geo), buffered and streamed", () => {
    const usage = { input_tokens: 40, output_tokens: 9, speed: "fast", inference_geo: "us" };
    const answer = JSON.stringify({ type: "message", model: "claude-opus-5-5", content: [], usage });
    const premiums = { fastMode: true, usOnlyInference: true };
    expect(meter("provider-b", answer, false).usage).toMatchObject(premiums);
    // The stream says so in message_start; a message_delta that leaves them out keeps them.
    const start = `event: message_start\ndata: ${JSON.stringify({ type: "message_start", message: { model: "claude-opus-5-5", usage: { ...usage, output_tokens: 1 } } })}\n\n`;
    const delta = `event: message_delta\ndata: ${JSON.stringify({ type: "message_delta", delta: {}, usage: { output_tokens: 9 } })}\n\n`;
    expect(meter("provider-b", start + delta, true).usage).toMatchObject({ ...premiums, outputTokens: 9 });
    // Standard speed, global inference: neither.
    const standard = JSON.stringify({
      type: "message",
      model: "claude-opus-5-5",
      usage: { ...usage, speed: "standard", inference_geo: "global" },
    });
    expect(meter("provider-b", standard, false).usage).toEqual({
      inputTokens: 40,
      outputTokens: 9,
      cachedInputTokens: null,
      reasoningTokens: null,
    });
  });

  it("reads provider B's web searches (server_tool_use), buffered and streamed, the last report's count", () => {
    const usage = {
      input_tokens: 5000,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 0,
      output_tokens: 300,
      server_tool_use: { web_search_requests: 3, web_fetch_requests: 1 },
    };
    const answer = JSON.stringify({ type: "message", model: "claude-sonnet-4-5", content: [], usage });
    expect(meter("provider-b", answer, false).usage).toMatchObject({ inputTokens: 5000, webSearches: 3 });
    const start = `event: message_start\ndata: ${JSON.stringify({ type: "message_start", message: { model: "claude-sonnet-4-5", usage: { ...usage, input_tokens: 40, output_tokens: 1, server_tool_use: null } } })}\n\n`;
    const delta = (searches: number) =>
      `event: message_delta\ndata: ${JSON.stringify({ type: "message_delta", delta: {}, usage: { ...usage, server_tool_use: { web_search_requests: searches, web_fetch_requests: 0 } } })}\n\n`;
    expect(meter("provider-b", start + delta(2) + delta(3), true).usage).toMatchObject({ webSearches: 3 });
    // None: no count at all, as before.
    expect(meter("provider-b", start + delta(0), true).usage.webSearches).toBeUndefined();
    expect(meter("provider-b", anthropicJson, false).usage.webSearches).toBeUndefined();
  });

  it("adds provider B's compaction iterations, which its top-level counts leave out, and keeps each iteration's counts apart, an advisor's with its model", () => {
    const iteration = (type: string, input: number, output: number, fields: object = {}) => ({
      type,
      input_tokens: input,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 0,
      cache_creation: null,
      output_tokens: output,
      ...fields,
    });
    const usage = {
      input_tokens: 23_000,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 1000,
      output_tokens: 1000,
      iterations: [
        iteration("compaction", 180_000, 3500, {
          cache_read_input_tokens: 2000,
          cache_creation_input_tokens: 500,
          cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 500 },
        }),
        iteration("message", 23_000, 1000, { cache_read_input_tokens: 1000, model: null }),
      ],
    };
    const counts = (inputTokens: number, outputTokens: number, cachedInputTokens: number) => ({
      inputTokens,
      outputTokens,
      cachedInputTokens,
      reasoningTokens: null,
    });
    const expected = {
      ...counts(24_000 + 182_500, 4500, 3000),
      cacheWriteTokens: { fiveMinutes: 0, oneHour: 500 },
      // Each sampling as the cost prices it: the answer's own (the top-level counts), the compaction's.
      samplings: [
        { usage: counts(24_000, 1000, 1000) },
        { usage: { ...counts(182_500, 3500, 2000), cacheWriteTokens: { fiveMinutes: 0, oneHour: 500 } } },
      ],
    };
    const answer = JSON.stringify({ type: "message", model: "claude-sonnet-4-5", content: [], usage });
    expect(meter("provider-b", answer, false).usage).toEqual(expected);
    const start = `event: message_start\ndata: ${JSON.stringify({ type: "message_start", message: { model: "claude-sonnet-4-5", usage: { ...usage, output_tokens: 1, iterations: null } } })}\n\n`;
    const delta = (value: object) =>
      `event: message_delta\ndata: ${JSON.stringify({ type: "message_delta", delta: {}, usage: value })}\n\n`;
    expect(meter("provider-b", start + delta(usage), true).usage).toEqual(expected);
    // A later delta without iterations keeps them (its counts are cumulative, as the others').
    expect(meter("provider-b", start + delta(usage) + delta({ output_tokens: 1001 }), true).usage).toEqual({
      ...expected,
      outputTokens: 4501,
      samplings: [{ usage: counts(24_000, 1001, 1000) }, expected.samplings[1]],
    });
    // An advisor's sub-inference ran on another model: not this model's tokens, but kept apart with its model.
    const advised = {
      ...usage,
      iterations: [iteration("advisor_message", 30_000, 1600, { model: "claude-opus-4-6" })],
    };
    const advisedAnswer = JSON.stringify({ type: "message", model: "claude-haiku-4-5", usage: advised });
    const advisedUsage = {
      ...counts(24_000, 1000, 1000),
      samplings: [
        { usage: counts(24_000, 1000, 1000) },
        { usage: counts(30_000, 1600, 0), otherModel: "claude-opus-4-6" },
      ],
    };
    expect(meter("provider-b", advisedAnswer, false).usage).toEqual(advisedUsage);
    expect(meter("provider-b", start + delta(advised), true).usage).toEqual(advisedUsage);
    // Iterations of the answer's own sampling alone (`message` entries) add nothing, and no samplings.
    const plain = {
      ...usage,
      iterations: [iteration("message", 23_000, 1000, { cache_read_input_tokens: 1000 })],
    };
    const plainAnswer = JSON.stringify({ type: "message", model: "claude-haiku-4-5", usage: plain });
    expect(meter("provider-b", plainAnswer, false).usage).toEqual(counts(24_000, 1000, 1000));
  });

  it("reports what a cut stream showed so far", () => {
    const cutB = anthropicStream.slice(0, anthropicStream.indexOf("event: message_delta"));
    expect(meter("provider-b", cutB, true).usage).toEqual({
      inputTokens: 30,
      outputTokens: 1,
      cachedInputTokens: 5,
      reasoningTokens: null,
    });
    const cutC = geminiSse.slice(0, geminiSse.lastIndexOf("data:") + 40);
    expect(meter("provider-c", cutC, true).usage.outputTokens).toBe(5);
    const cutArray = geminiArray.slice(0, geminiArray.lastIndexOf('"candidatesTokenCount"') + 5);
    expect(meter("provider-c", cutArray, false).usage.outputTokens).toBe(5);
    expect(meter("provider-a", openAiStream.slice(0, 100), true).usage.inputTokens).toBeNull();
  });

  it("reads a JSON answer whose usage key is written with escapes (\\u0075sage), as JSON.parse reads it", () => {
    const escaped = (json: string, key: string) =>
      json.replace(`"${key}":`, `"\\u00${key.charCodeAt(0).toString(16)}${key.slice(1)}":`);
    for (const [provider, json, key] of [
      ["provider-a", openAiJson, "usage"],
      ["provider-b", anthropicJson, "usage"],
      ["provider-c", geminiChunk("Hello", 6), "usageMetadata"],
    ] as const) {
      const body = escaped(json, key);
      expect(body).toContain("\\u00");
      expect(JSON.parse(body)).toEqual(JSON.parse(json));
      for (const ended of [false, true])
        expect(meter(provider, body, false, [], undefined, ended), `${provider} ended ${ended}`).toEqual(
          meter(provider, json, false, [], undefined, ended),
        );
    }
    // Provider C's JSON-array stream, with every element's key escaped.
    const array = `[${geminiChunk("Hel", 1)},${geminiChunk("lo", 6)}]`;
    const escapedArray = array.replaceAll('"usageMetadata":', '"\\u0075sageMetadata":');
    for (const ended of [false, true])
      expect(meter("provider-c", escapedArray, false, [], undefined, ended)).toEqual(
        meter("provider-c", array, false, [], undefined, ended),
      );
  });

  it("never throws on garbage", () => {
    for (const provider of ["provider-a", "provider-b", "provider-c"] as const) {
      for (const streaming of [true, false]) {
        expect(() =>
          meter(provider, 'data: {"usage":{broken\n\nevent: message_start\ndata: nope\n\n', streaming),
        ).not.toThrow();
        expect(meter(provider, "\u0000\u0001{{{", streaming).usage.inputTokens).toBeNull();
      }
    }
  });

  it("reads a Responses API stream whose metadata has a key named usage as it reads the JSON response", () => {
    const response = {
      id: "resp_1",
      model: "gpt-4.1",
      output: [],
      usage: { input_tokens: 30, output_tokens: 8, output_tokens_details: { reasoning_tokens: 3 } },
      user: null,
      metadata: { usage: "internal-billing", usage_note: "x" },
    };
    const expected = { inputTokens: 30, outputTokens: 8, cachedInputTokens: null, reasoningTokens: 3 };
    expect(meter("provider-a", JSON.stringify(response), false).usage).toEqual(expected);
    const stream = `event: response.completed\ndata: ${JSON.stringify({ type: "response.completed", response })}\n\n`;
    expect(meter("provider-a", stream, true)).toEqual({ usage: expected, model: "gpt-4.1" });
  });

  it("does not parse a large JSON body whole: one without a usage key (a batch of embeddings) or a Gemini JSON-array stream, and still names the model", () => {
    const values = Array.from({ length: 3072 }, (_, index) => ((index % 97) - 48) / 1000);
    const embeddings = JSON.stringify({ embeddings: Array.from({ length: 60 }, () => ({ values })) });
    const files = JSON.stringify({
      object: "fine_tuning.job",
      model: "gpt-4o-mini-2024-07-18",
      events: Array.from({ length: 20_000 }, (_, index) => ({ id: index, message: "step" })),
    });
    expect(embeddings.length).toBeGreaterThan(1024 * 1024);
    // A long Gemini JSON-array stream (under the 4 MiB cap): only its last usage object is read.
    const longText = "Grüße 😀 ".repeat(2000);
    const longArray = `[${Array.from({ length: 120 }, (_, index) => geminiChunk(longText, index + 1)).join(",\r\n")}]`;
    expect(longArray.length).toBeGreaterThan(1024 * 1024);
    const parse = vi.spyOn(JSON, "parse");
    try {
      expect(meter("provider-c", longArray, false)).toEqual({
        usage: { inputTokens: 9, outputTokens: 124, cachedInputTokens: 2, reasoningTokens: 4 },
        model: "gemini-2.5-flash",
      });
      expect(meter("provider-c", embeddings, false)).toEqual({ usage: emptyUsage(), model: null });
      expect(meter("provider-a", files, false)).toEqual({
        usage: emptyUsage(),
        model: "gpt-4o-mini-2024-07-18",
      });
      // Escapes in its keys and values that spell no usage key: not parsed whole either.
      const escaped = files.replaceAll('"message":"step"', '"\\u006dessage":"st\\u00e9p \\"usage\\": 1"');
      expect(escaped).toContain('"\\u006dessage":"st\\u00e9p');
      for (const ended of [false, true])
        expect(meter("provider-a", escaped, false, [], undefined, ended)).toEqual({
          usage: emptyUsage(),
          model: "gpt-4o-mini-2024-07-18",
        });
      const large = parse.mock.calls.filter(([text]) => text.length > 64 * 1024);
      expect(large).toHaveLength(0);
    } finally {
      parse.mockRestore();
    }
  });

  it("records no token count that is negative, fractional, beyond 2^53 or not a number", () => {
    const none = { inputTokens: null, outputTokens: null, cachedInputTokens: null, reasoningTokens: null };
    const chat = JSON.stringify({
      model: "gpt-4o-mini",
      usage: {
        prompt_tokens: -50,
        completion_tokens: 1.5e300,
        prompt_tokens_details: { cached_tokens: 2.5 },
        completion_tokens_details: { reasoning_tokens: "3" },
      },
    });
    expect(meter("provider-a", chat, false).usage).toEqual(none);
    expect(meter("provider-a", `data: ${chat}\n\n`, true).usage).toEqual(none);
    const message = JSON.stringify({
      model: "claude-sonnet-4-5",
      usage: { input_tokens: 2 ** 60, cache_read_input_tokens: -1, output_tokens: 0.5 },
    });
    expect(meter("provider-b", message, false).usage).toEqual(none);
    const gemini = JSON.stringify({
      usageMetadata: { promptTokenCount: 9, candidatesTokenCount: -7, thoughtsTokenCount: 2 ** 53 },
    });
    expect(meter("provider-c", gemini, false).usage).toEqual({ ...none, inputTokens: 9 });
  });

  it("tells provider C's audio input apart (promptTokensDetails), JSON, SSE and JSON array", () => {
    const metadata = {
      promptTokenCount: 1000,
      candidatesTokenCount: 20,
      totalTokenCount: 1020,
      promptTokensDetails: [
        { modality: "TEXT", tokenCount: 100 },
        { modality: "AUDIO", tokenCount: 900 },
      ],
    };
    const body = JSON.stringify({ modelVersion: "gemini-2.5-flash", usageMetadata: metadata });
    const expected = { inputTokens: 1000, outputTokens: 20, audioInputTokens: 900 };
    expect(meter("provider-c", body, false).usage).toMatchObject(expected);
    expect(meter("provider-c", `data: ${body}\r\n\r\n`, true).usage).toMatchObject(expected);
    expect(meter("provider-c", `[${body}]`, false).usage).toMatchObject(expected);
    // Text, images, video and documents alone are priced as text: nothing to tell apart.
    const text = { ...metadata, promptTokensDetails: [{ modality: "TEXT", tokenCount: 1000 }] };
    const plain = JSON.stringify({ modelVersion: "gemini-2.5-flash", usageMetadata: text });
    expect(meter("provider-c", plain, false).usage.audioInputTokens).toBeUndefined();
    expect(meter("provider-c", geminiSse, true).usage.audioInputTokens).toBeUndefined();
    // The cached part's breakdown (cacheTokensDetails) tells the cached audio apart.
    const cached = {
      ...metadata,
      cachedContentTokenCount: 600,
      cacheTokensDetails: [
        { modality: "AUDIO", tokenCount: 500 },
        { modality: "TEXT", tokenCount: 100 },
      ],
    };
    const cachedBody = JSON.stringify({ modelVersion: "gemini-2.5-flash", usageMetadata: cached });
    expect(meter("provider-c", cachedBody, false).usage).toMatchObject({
      cachedInputTokens: 600,
      audioInputTokens: 900,
      cachedAudioInputTokens: 500,
    });
    expect(meter("provider-c", body, false).usage.cachedAudioInputTokens).toBeUndefined();
  });

  it("counts what a provider C built-in tool brought in (toolUsePromptTokenCount) as input", () => {
    const metadata = {
      promptTokenCount: 10,
      candidatesTokenCount: 20,
      toolUsePromptTokenCount: 5000,
      thoughtsTokenCount: 30,
      totalTokenCount: 5060,
    };
    const body = JSON.stringify({ modelVersion: "gemini-2.5-flash", usageMetadata: metadata });
    for (const streamed of [false, true]) {
      const usage = meter("provider-c", streamed ? `data: ${body}\r\n\r\n` : body, streamed).usage;
      expect(usage).toMatchObject({ inputTokens: 5010, outputTokens: 50, reasoningTokens: 30 });
    }
    const notACount = JSON.stringify({ usageMetadata: { ...metadata, toolUsePromptTokenCount: -1 } });
    expect(meter("provider-c", notACount, false).usage.inputTokens).toBeNull();
  });

  // A count left out when zero is 0; one that is there but not a count is unknown, and so is the
  // input without its uncached count: a partial count would be priced as the whole.
  it("reads a count a provider leaves out when zero as 0, and a part that is not a count as unknown", () => {
    const none = { inputTokens: null, outputTokens: null, cachedInputTokens: null, reasoningTokens: null };
    const gemini = (usageMetadata: object) =>
      meter("provider-c", JSON.stringify({ usageMetadata }), false).usage;
    // A prompt blocked before any answer: no candidatesTokenCount, and no thoughts from this model.
    expect(gemini({ promptTokenCount: 9, totalTokenCount: 9 })).toEqual({
      ...none,
      inputTokens: 9,
      outputTokens: 0,
    });
    expect(gemini({ promptTokenCount: 9, thoughtsTokenCount: 4, totalTokenCount: 13 })).toEqual({
      ...none,
      inputTokens: 9,
      outputTokens: 4,
      reasoningTokens: 4,
    });
    expect(
      gemini({ promptTokenCount: 9, candidatesTokenCount: 5, thoughtsTokenCount: 2.5 }).outputTokens,
    ).toBeNull();
    expect(gemini({ promptTokenCount: 9, candidatesTokenCount: 2.5 }).outputTokens).toBeNull();
    expect(gemini({ totalTokenCount: "9" })).toEqual(none);
    const chat = (usage: object) =>
      meter("provider-a", JSON.stringify({ model: "gpt-4o-mini", usage }), false).usage;
    expect(chat({ prompt_tokens: 12, completion_tokens: 2.5 })).toEqual({ ...none, inputTokens: 12 });
    const message = JSON.stringify({
      model: "claude-sonnet-4-5",
      usage: { input_tokens: 2.5, cache_read_input_tokens: 50, output_tokens: 9 },
    });
    expect(meter("provider-b", message, false).usage).toEqual({
      ...none,
      outputTokens: 9,
      cachedInputTokens: 50,
    });
  });

  it("reads embeddings usage as zero output", () => {
    const body = JSON.stringify({
      object: "list",
      data: [],
      model: "text-embedding-3-small",
      usage: { prompt_tokens: 8, total_tokens: 8 },
    });
    expect(meter("provider-a", body, false).usage).toEqual({
      inputTokens: 8,
      outputTokens: 0,
      cachedInputTokens: null,
      reasoningTokens: null,
    });
  });
});

describe("usage meter on Responses API calls", () => {
  const usage = { input_tokens: 30, output_tokens: 8, output_tokens_details: { reasoning_tokens: 3 } };
  const tokens = { inputTokens: 30, outputTokens: 8, cachedInputTokens: null, reasoningTokens: 3 };
  const response = (status: string, background: boolean) => ({
    id: "resp_1",
    object: "response",
    created_at: 1_763_000_000,
    status,
    background,
    model: "gpt-4.1",
    output: [{ id: "msg_1", type: "message", status: "completed", content: [] }],
    tools: [{ type: "image_generation", background: "opaque" }],
    usage: status === "completed" ? usage : null,
  });
  const fields = (status: string, background: boolean) => ({
    id: "resp_1",
    object: "response",
    status,
    background,
    createdAt: 1_763_000_000,
  });
  const completedEvent = (background: boolean) =>
    `event: response.created\ndata: ${JSON.stringify({ type: "response.created", response: response("queued", background) })}\n\n` +
    `event: response.completed\ndata: ${JSON.stringify({ type: "response.completed", sequence_number: 2, response: response("completed", background) })}\n\n`;
  const run = (responses: "post" | "poll", text: string, streaming: boolean, splits: number[] = []) =>
    meter("provider-a", text, streaming, splits, responses);

  it("reads the response object's fields beside the usage, from the body or the usage event", () => {
    const finished = { usage: tokens, model: "gpt-4.1", response: fields("completed", true) };
    expect(run("post", JSON.stringify(response("completed", true)), false)).toEqual(finished);
    expect(run("poll", JSON.stringify(response("completed", true)), false)).toEqual(finished);
    expect(run("post", completedEvent(true), true)).toEqual(finished);
    expect(run("poll", completedEvent(true), true)).toEqual(finished);
    const stream = completedEvent(true);
    for (let split = 1; split < stream.length; split += 7)
      expect(run("poll", stream, true, [split])).toEqual(finished);
  });

  it("reports no tokens to a poll but a finished background run's", () => {
    for (const streaming of [false, true]) {
      const foreground = streaming ? completedEvent(false) : JSON.stringify(response("completed", false));
      expect(run("poll", foreground, streaming)).toEqual({
        usage: emptyUsage(),
        model: null,
        response: fields("completed", false),
      });
      expect(run("post", foreground, streaming).usage).toEqual(tokens);
    }
    expect(run("poll", JSON.stringify(response("in_progress", true)), false)).toEqual({
      usage: emptyUsage(),
      model: null,
      response: fields("in_progress", true),
    });
  });

  it("reads the model after a long `instructions` as the stream of the same answer reports it", () => {
    // The API puts `instructions` (a stored prompt's, say) before `model`.
    const { model, ...rest } = response("completed", false);
    const answer = { ...rest, instructions: `Be "brief". ${"x".repeat(6000)}`, model };
    const event = `event: response.completed\ndata: ${JSON.stringify({ type: "response.completed", response: answer })}\n\n`;
    for (const responses of [undefined, "post"] as const) {
      expect(meter("provider-a", JSON.stringify(answer), false, [], responses).model).toBe("gpt-4.1");
      expect(meter("provider-a", event, true, [], responses).model).toBe("gpt-4.1");
    }
  });

  it("reads the model of a large answer that names it after its data (embeddings) from its last bytes", () => {
    const embedding = Array.from({ length: 1536 }, (_, index) => (index % 7) / 7);
    const data = Array.from({ length: 40 }, (_, index) => ({ object: "embedding", index, embedding }));
    const answer = JSON.stringify({
      object: "list",
      data,
      model: "text-embedding-3-small",
      usage: { prompt_tokens: 80, total_tokens: 80 },
    });
    expect(answer.length).toBeGreaterThan(256 * 1024);
    expect(meter("provider-a", answer, false)).toMatchObject({
      model: "text-embedding-3-small",
      usage: { inputTokens: 80, outputTokens: 0 },
    });
  });

  it("reads a large Responses API answer's own model, not one in the metadata or tools it echoes after it", () => {
    // The API echoes `tools` and `metadata` (the app's: any key, any string) after `usage`; long
    // instructions before `model` keep it out of the first bytes, and a long output out of the last:
    // the last bytes' `"model"` was the app's own (an unpriced name, or a cheaper model's), which
    // priced the call.
    const tools = [
      {
        type: "function",
        name: "pick",
        parameters: { type: "object", examples: [{ model: "gpt-4.1-nano" }] },
      },
    ];
    for (const [echoed, metadata] of [
      [[], { model: "not-a-model" }],
      [tools, {}],
    ] as const) {
      const answer = {
        id: "resp_1",
        object: "response",
        status: "completed",
        instructions: "Be brief. ".repeat(500),
        model: "gpt-5.4",
        output: [{ type: "message", content: [{ type: "output_text", text: "word ".repeat(60_000) }] }],
        tools: echoed,
        usage: { input_tokens: 1500, output_tokens: 60_000 },
        user: null,
        metadata,
      };
      const body = JSON.stringify(answer);
      expect(body.length).toBeGreaterThan(256 * 1024);
      for (const responses of [undefined, "post"] as const)
        for (const ended of [false, true])
          expect(meter("provider-a", body, false, [], responses, ended).model).toBe("gpt-5.4");
    }
  });

  it("takes no usage from the app's tool schemas the answer echoes, where the response's own is null or not in the event", () => {
    // A function tool whose JSON Schema gives an example holding a `usage` object with counts: the
    // API echoes `tools` (and an MCP server's schemas, in an mcp_list_tools item) as they were sent.
    const parameters = {
      type: "object",
      properties: {
        report: { type: "object", examples: [{ usage: { input_tokens: 5000, output_tokens: 5000 } }] },
      },
    };
    const echoed = (status: string, reported: unknown) => ({
      ...response(status, true),
      tools: [{ type: "function", name: "log_call", strict: false, parameters }],
      usage: reported,
      user: null,
      metadata: {},
    });
    const none = emptyUsage();
    // A background run answers queued, its usage null; a failed one may report none; a cancel too.
    const answered = (body: object) => meter("provider-a", JSON.stringify(body), false, [], "post", true);
    for (const status of ["queued", "failed", "cancelled"])
      expect(answered(echoed(status, null)).usage, status).toEqual(none);
    const event = (type: string, body: object) =>
      `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: 0, ...body })}\n\n`;
    const created = event("response.created", { response: echoed("in_progress", null) });
    const listed = event("response.output_item.done", {
      output_index: 0,
      item: {
        type: "mcp_list_tools",
        id: "mcpl_1",
        server_label: "s",
        tools: [{ name: "t", input_schema: parameters }],
      },
    });
    // A stream cut (the client left) before its completion: nothing reported the run's usage yet.
    expect(run("post", created, true).usage).toEqual(none);
    expect(run("post", `${created}${listed}`, true).usage).toEqual(none);
    expect(run("post", listed.replace(/^event: .*\n/, ""), true).usage).toEqual(none);
    expect(run("post", event("response.failed", { response: echoed("failed", null) }), true).usage).toEqual(
      none,
    );
    // Its completion's usage, after the echoed tools, is still read.
    const completed = event("response.completed", { response: echoed("completed", usage) });
    expect(run("post", `${created}${listed}${completed}`, true).usage).toEqual(tokens);
    expect(answered(echoed("completed", usage)).usage).toEqual(tokens);
  });

  it("reads the response's own usage where a server puts it before the tools it echoes, not a schema's after it", () => {
    // A compatible server may write `usage` before `tools`: the last usage object in the text is
    // then in a schema the app wrote (an example with counts of its own, or a property's schema).
    const example = { type: "object", examples: [{ usage: { input_tokens: 1, output_tokens: 1 } }] };
    const property = { type: "object", properties: { usage: { type: "object", properties: {} } } };
    const none = { type: "object", examples: [{ usage: null }] };
    for (const parameters of [example, property, none]) {
      const { tools: _tools, usage: _usage, ...rest } = response("completed", false);
      const answer = {
        ...rest,
        usage,
        tools: [{ type: "function", name: "log_call", strict: false, parameters }],
        user: null,
        metadata: {},
      };
      const event = `event: response.completed\ndata: ${JSON.stringify({ type: "response.completed", response: answer, sequence_number: 3 })}\n\n`;
      for (const responses of [undefined, "post"] as const) {
        expect(meter("provider-a", JSON.stringify(answer), false, [], responses, true).usage).toEqual(tokens);
        expect(meter("provider-a", event, true, [], responses, true).usage).toEqual(tokens);
      }
    }
  });

  // The API writes `tool_usage` before the `tools` it echoes (the app's): with eight object-valued
  // keys of that name in their schemas, the response's own was given up on, and a call whose image
  // generation tool ran was priced at its model tokens alone.
  /** A Responses API answer whose hosted tools ran, echoing the app's one function tool of `properties`. */
  const responseEchoingTool = (properties: Record<string, unknown>) => ({
    id: "resp_1",
    object: "response",
    model: "gpt-5",
    output: [],
    tool_usage: { image_gen: { input_tokens: 50, output_tokens: 4160, total_tokens: 4210 } },
    tools: [{ type: "function", name: "f", strict: false, parameters: { type: "object", properties } }],
    usage,
  });

  // Each null-valued key of that name in the app's tool schemas (`{"p0":{"tool_usage":null},…}`)
  // was checked, without a bound, for being the answer's own by reading its siblings to their end:
  // quadratic in their number, a 450 KB body of them held the event loop for ~20 seconds.
  it("reads the usage past any number of null-valued keys of its names in the app's tool schemas, in linear time", () => {
    const answer = (keys: number, name: string) =>
      responseEchoingTool(
        Object.fromEntries(Array.from({ length: keys }, (_, index) => [`p${index}`, { [name]: null }])),
      );
    const json = (keys: number, name: string) => JSON.stringify(answer(keys, name));
    const event = (keys: number, name: string) =>
      `event: response.completed\ndata: ${JSON.stringify({ type: "response.completed", response: answer(keys, name) })}\n\n`;
    for (const name of ["tool_usage", "usage"]) {
      expect(meter("provider-a", json(50, name), false, [], "post", true).usage).toEqual({
        ...tokens,
        hostedToolUse: true,
      });
      expect(meter("provider-a", event(50, name), true, [], "post", true).usage).toEqual({
        ...tokens,
        hostedToolUse: true,
      });
      for (const [text, streaming] of [
        [json, false],
        [event, true],
      ] as const) {
        const bodies = new Map([60, 960].map((keys) => [keys, text(keys, name)]));
        const slowdown = slowdownAtSixteenTimes(
          (keys) => meter("provider-a", bodies.get(keys) as string, streaming, [], "post", true),
          60,
          3,
        );
        expect(slowdown).toBeLessThan(64);
      }
    }
  });

  it("reads the response's own tool_usage past any number of object keys of that name in the app's tool schemas", () => {
    const properties = Object.fromEntries(
      Array.from({ length: 8 }, (_, index) => [
        `p${index}`,
        { type: "object", properties: { tool_usage: {} } },
      ]),
    );
    const answer = responseEchoingTool(properties);
    const json = JSON.stringify(answer);
    const event = `event: response.completed\ndata: ${JSON.stringify({ type: "response.completed", response: answer })}\n\n`;
    expect(meter("provider-a", json, false, [], "post", true).usage).toEqual({
      ...tokens,
      hostedToolUse: true,
    });
    expect(meter("provider-a", event, true, [], "post", true).usage).toEqual({
      ...tokens,
      hostedToolUse: true,
    });
  });

  it("leaves other calls' readings as they were", () => {
    expect(meter("provider-a", responsesStream, true)).toEqual({
      usage: { inputTokens: 30, outputTokens: 8, cachedInputTokens: 10, reasoningTokens: 3 },
      model: "gpt-4.1",
    });
    expect("response" in meter("provider-a", openAiJson, false)).toBe(false);
    expect("response" in meter("provider-a", openAiStream, true)).toBe(false);
  });
});

describe("usage meter, an event stream's last event left without its blank line", () => {
  /** The stream without the line ends after its last event's data. */
  const unterminated = (stream: string) => stream.replace(/[\r\n]+$/, "");
  const run = (provider: ProviderId, text: string, ended: boolean, splits: number[] = []) =>
    meter(provider, text, true, splits, undefined, ended);

  it("reads provider A's at a clean end, as openai's SDK gives it to its user, and not after a cut", () => {
    const stream = unterminated(responsesStream);
    const tokens = { inputTokens: 30, outputTokens: 8, cachedInputTokens: 10, reasoningTokens: 3 };
    for (let split = 1; split < stream.length; split += 13) {
      expect(run("provider-a", stream, true, [split]), `split at ${split}`).toEqual({
        usage: tokens,
        model: "gpt-4.1",
      });
      expect(run("provider-a", stream, false, [split]).usage, `split at ${split}`).toEqual(emptyUsage());
    }
    // Ended by one line end, not two: no blank line either.
    expect(run("provider-a", `${stream}\r\n`, true).usage).toEqual(tokens);
    // A Responses API call's reading (the response object's fields) comes from it too.
    expect(meter("provider-a", stream, true, [], "post", true)).toMatchObject({
      usage: tokens,
      response: { id: "resp_1" },
    });
  });

  it("reads provider A's event over the scanner's cap at a clean end, from its kept ends", () => {
    const completed = responsesStream.slice(responsesStream.indexOf("event: response.completed"));
    const large = completed.replace(
      '"id":"resp_1"',
      `"id":"resp_1","instructions":"${"x".repeat(2 * 1024 * 1024)}"`,
    );
    const stream = unterminated(large);
    expect(run("provider-a", stream, true, [1000, 1024 * 1024]).usage).toEqual({
      inputTokens: 30,
      outputTokens: 8,
      cachedInputTokens: 10,
      reasoningTokens: 3,
    });
    expect(run("provider-a", stream, false, [1000]).usage).toEqual(emptyUsage());
  });

  it("never reads provider B's or C's, whose clients drop it (or throw on it)", () => {
    // B: message_delta last, left open: message_start's counts.
    const stopAt = anthropicStream.indexOf("event: message_stop");
    const deltaLast = unterminated(anthropicStream.slice(0, stopAt));
    for (const ended of [true, false])
      expect(run("provider-b", deltaLast, ended).usage).toEqual({
        inputTokens: 30,
        outputTokens: 1,
        cachedInputTokens: 5,
        reasoningTokens: null,
      });
    // C: the last chunk (the totals) left open: the chunk before's.
    for (const ended of [true, false])
      expect(run("provider-c", unterminated(geminiSse), ended).usage.outputTokens).toBe(5);
    // Terminated, both read their last event as ever.
    expect(run("provider-c", geminiSse, true).usage.outputTokens).toBe(10);
  });
});

describe("SSE event scanner", () => {
  function events(chunks: string[]) {
    const seen: Array<[string | undefined, string]> = [];
    const scanner = new SseEventScanner((event, data) => seen.push([event, data]));
    for (const chunk of chunks) scanner.push(Buffer.from(chunk));
    scanner.end();
    return seen;
  }

  it("follows the WHATWG rules for fields, comments, multi-line data and line ends", () => {
    expect(
      events([
        ": comment\nevent: a\ndata: one\ndata:two\n\n",
        "data: three\r\n\r\n",
        "data: four\r\rdata: unterminated",
      ]),
    ).toEqual([
      ["a", "one\ntwo"],
      [undefined, "three"],
      [undefined, "four"],
    ]);
  });

  it("tells where each blank line ends an event in the chunk pushed, dispatched or not", () => {
    const ends: Array<[number, number]> = [];
    let chunk = 0;
    const scanner = new SseEventScanner(
      () => {},
      undefined,
      (at) => ends.push([chunk, at]),
    );
    for (const piece of ["data: a\n\n: c\r\n\r", "\ndata: b\r\r\n\n"]) {
      scanner.push(Buffer.from(piece));
      chunk++;
    }
    // The LF of a CRLF split across chunks (chunk 1, index 0) ends no second line.
    expect(ends).toEqual([
      [0, 8],
      [0, 14],
      [1, 9],
      [1, 11],
    ]);
  });

  it("ignores one leading byte order mark, however the chunks split it, and only at the stream's start", () => {
    const bom = "\uFEFF";
    const stream = `${bom}event: a\ndata: one\n\ndata: ${bom}two\n\n`;
    const bytes = Buffer.from(stream);
    for (let cut = 0; cut <= 4; cut++) {
      const chunks = [bytes.subarray(0, cut), bytes.subarray(cut)].map((part) => part.toString("latin1"));
      const seen: Array<[string | undefined, string]> = [];
      const scanner = new SseEventScanner((event, data) => seen.push([event, data]));
      for (const chunk of chunks) scanner.push(Buffer.from(chunk, "latin1"));
      expect(seen, `cut at ${cut}`).toEqual([
        ["a", "one"],
        [undefined, `${bom}two`],
      ]);
    }
    // Bytes that only begin like a mark belong to the first line; a second mark is no field's name.
    expect(events(["\xEF", "data: x\n\n"])).toEqual([]);
    expect(events([`${bom}${bom}data: x\n\n`, "data: y\n\n"])).toEqual([[undefined, "y"]]);
  });

  it("reads the usage of a one-event stream that starts with a byte order mark", () => {
    const usage = {
      inputTokens: 12,
      outputTokens: 7,
      cachedInputTokens: 4,
      reasoningTokens: 2,
    };
    const single = openAiStream.split("\n\n")[2] as string;
    for (const splits of [[], [1], [2], [3]])
      expect(meter("provider-a", `\uFEFF${single}\n\n`, true, splits).usage).toEqual(usage);
  });

  it("dispatches an unterminated last event only when asked to at the end, taking its last line as one", () => {
    const ended = (chunks: string[], dispatchLast: boolean) => {
      const seen: Array<[string | undefined, string]> = [];
      const scanner = new SseEventScanner((event, data) => seen.push([event, data]));
      for (const chunk of chunks) scanner.push(Buffer.from(chunk));
      scanner.end(dispatchLast);
      return seen;
    };
    const chunks = ["data: one\n\nevent: e\ndata: two\nda", "ta: three"];
    expect(ended(chunks, false)).toEqual([[undefined, "one"]]);
    expect(ended(chunks, true)).toEqual([
      [undefined, "one"],
      ["e", "two\nthree"],
    ]);
    expect(ended(["data: x\r"], true)).toEqual([[undefined, "x"]]);
    // Nothing open: nothing more; an event without data is not dispatched.
    expect(ended(["data: x\n\n"], true)).toEqual([[undefined, "x"]]);
    expect(ended(["data: x\n\nevent: e\n: c"], true)).toEqual([[undefined, "x"]]);
  });

  it("handles a CRLF split across chunks", () => {
    expect(events(["data: x\r", "\n\r", "\ndata: y\n\n"])).toEqual([
      [undefined, "x"],
      [undefined, "y"],
    ]);
  });

  it("finds the same events as a whole-text reading, however the bytes are split, at a clean end or not", () => {
    const reference = (text: string, dispatchLast: boolean) =>
      referenceSseEvents(text, dispatchLast).map(({ event, data }): [string | undefined, string] => [
        event,
        data,
      ]);
    const pieces = [
      "data: x",
      "data:é🙂",
      "data",
      "data:",
      "data:  two",
      "event: e",
      "event",
      ": c",
      "id: 1",
      "datum: no",
      "",
      "",
    ];
    const ends = ["\n", "\r", "\r\n"];
    let seed = 7;
    const random = (below: number) => {
      seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648;
      return seed % below;
    };
    for (let stream = 0; stream < 300; stream++) {
      let text = "";
      for (let line = 0; line < 12; line++)
        text += `${pieces[random(pieces.length)]}${ends[random(ends.length)]}`;
      // A third of the streams end inside their last line, or right after it (no blank line).
      if (random(3) === 0) text += pieces[random(pieces.length)];
      const bytes = Buffer.from(text);
      const chunks: string[] = [];
      const seen: Array<[string | undefined, string]> = [];
      const seenToEnd: Array<[string | undefined, string]> = [];
      const scanner = new SseEventScanner((event, data) => seen.push([event, data]));
      const toEnd = new SseEventScanner((event, data) => seenToEnd.push([event, data]));
      for (let at = 0; at < bytes.length; ) {
        const size = 1 + random(8);
        scanner.push(bytes.subarray(at, at + size));
        toEnd.push(bytes.subarray(at, at + size));
        chunks.push(bytes.subarray(at, at + size).toString("latin1"));
        at += size;
      }
      scanner.end();
      toEnd.end(true);
      expect(seen, JSON.stringify(chunks)).toEqual(reference(text, false));
      expect(seenToEnd, `${JSON.stringify(chunks)}, dispatching the last`).toEqual(reference(text, true));
    }
  });

  it("passes an event larger than its cap as cut (its data's ends) and carries on", () => {
    const seen: Array<[string, string | undefined]> = [];
    const scanner = new SseEventScanner(
      (_event, data, cutTail) => seen.push([data, cutTail?.toString()]),
      64,
    );
    scanner.push(Buffer.from(`data: ${"x".repeat(100)}\n\ndata: small\n\n`));
    // Split: the oversized line arrives in pieces, with a second data line in the same event.
    scanner.push(Buffer.from(`data: ${"y".repeat(40)}`));
    scanner.push(Buffer.from(`${"y".repeat(40)}\ndata: same event\n`));
    scanner.push(Buffer.from("\ndata: next\n\n"));
    const long = `${"y".repeat(80)}\nsame event`;
    expect(seen).toEqual([
      ["x".repeat(100), "x".repeat(100)],
      ["small", undefined],
      [long, long],
      ["next", undefined],
    ]);
  });
});

describe("answerCarriesNoUsage", () => {
  it("names the types that hold no JSON document: binary formats and JSON Lines", () => {
    for (const type of [
      "audio/mpeg",
      "audio/wav",
      "Audio/Ogg",
      "image/png",
      "video/mp4",
      "application/octet-stream",
      " application/octet-stream ; x=1",
      "application/pdf",
      "application/jsonl",
      "application/jsonl;charset=utf-8",
      "application/jsonlines",
      "application/x-ndjson; charset=utf-8",
    ])
      expect({ type, none: answerCarriesNoUsage(type) }).toEqual({ type, none: true });
  });

  it("reads every other type as JSON: a compatible server may send JSON as text/plain, or with none", () => {
    for (const type of [
      "",
      "application/json",
      "application/json; charset=utf-8",
      "application/json;charset=utf-8",
      "application/problem+json",
      "text/plain",
      "text/html",
      "application/x-unknown",
      "audio",
      "/mpeg",
    ])
      expect({ type, none: answerCarriesNoUsage(type) }).toEqual({ type, none: false });
  });
});
