import { describe, expect, it } from "vitest";
import { meterRun as meter } from "../../test/support/meter-run.js";
import { referenceSseEvents } from "../../test/support/reference-sse.js";
import { seededBelow } from "../../test/support/seeded-random.js";
import type { ProviderId } from "../providers/provider-id.js";
import { SseEventScanner } from "./sse-event-scanner.js";
import { createUsageMeter } from "./usage-meter.js";

// Responses larger than the meter keeps whole: JSON bodies over 4 MiB and SSE events over 1 MiB.
// Their usage sits at the end (of the top-level object, of the event), so it is read from a tail.

/** Chunk boundaries: mostly socket-sized reads, with runs of tiny ones that split lines, keys and characters. */
function randomSplits(length: number, seed: number): number[] {
  const random = seededBelow(seed);
  const points: number[] = [];
  for (let at = 0; ; ) {
    at += random(4) === 0 ? 1 + random(16) : 1 + random(96 * 1024);
    if (at >= length) return points;
    points.push(at);
  }
}

/** Text with multi-byte characters and, near its end, a quoted usage object that must not count. */
const longText = (bytes: number) =>
  `${"Grüße 😀 — ".repeat(Math.ceil(bytes / 16))}then: "usage":{"input_tokens":999,"output_tokens":999}`;
const base64Image = (bytes: number) => `iVBORw0KGgo${"QUJD".repeat(Math.ceil(bytes / 4))}`;

const vector = `[${Array.from({ length: 1536 }, (_, index) => (Math.sin(index) / 10).toFixed(18)).join(",")}]`;
// Repro: 300 embeddings of 1536 floats (~9.7 MB); provider A puts model and usage after the data.
const embeddingsJson = `{"object":"list","data":[${Array.from(
  { length: 300 },
  (_, index) => `{"object":"embedding","index":${index},"embedding":${vector}}`,
).join(",")}],"model":"text-embedding-3-small","usage":{"prompt_tokens":1234,"total_tokens":1234}}`;

const chatJson = JSON.stringify({
  id: "chatcmpl-1",
  object: "chat.completion",
  created: 1,
  model: "gpt-4.1-2025-04-14",
  choices: [
    { index: 0, message: { role: "assistant", content: longText(5_000_000) }, finish_reason: "stop" },
  ],
  usage: {
    prompt_tokens: 12,
    completion_tokens: 1_500_000,
    total_tokens: 1_500_012,
    prompt_tokens_details: { cached_tokens: 4 },
    completion_tokens_details: { reasoning_tokens: 2 },
  },
  service_tier: "default",
  system_fingerprint: "fp_1",
});

const messageJson = JSON.stringify({
  id: "msg_1",
  type: "message",
  role: "assistant",
  model: "claude-sonnet-4-5-20250929",
  content: [{ type: "text", text: longText(5_000_000) }],
  stop_reason: "end_turn",
  stop_sequence: null,
  usage: {
    input_tokens: 25,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: 5,
    output_tokens: 4000,
  },
});

const geminiImage = (candidates: number, imageBytes: number) => ({
  candidates: [
    {
      content: {
        parts: [{ inlineData: { mimeType: "image/png", data: base64Image(imageBytes) } }],
        role: "model",
      },
      finishReason: "STOP",
      index: 0,
    },
  ],
  usageMetadata: { promptTokenCount: 9, candidatesTokenCount: candidates, totalTokenCount: 9 + candidates },
  modelVersion: "gemini-2.5-flash-image",
  responseId: "r1",
});
const geminiText = (candidates: number) => ({
  candidates: [{ content: { parts: [{ text: "Done 🙂" }], role: "model" }, finishReason: "STOP", index: 0 }],
  usageMetadata: {
    promptTokenCount: 9,
    candidatesTokenCount: candidates,
    totalTokenCount: 9 + candidates + 4,
    thoughtsTokenCount: 4,
  },
  modelVersion: "gemini-2.5-flash-image",
  responseId: "r1",
});

const jsonCases: Array<[string, ProviderId, string, object, string | null]> = [
  [
    "provider A embeddings (the model comes after the data, so the request's model is used)",
    "provider-a",
    embeddingsJson,
    { inputTokens: 1234, outputTokens: 0, cachedInputTokens: null, reasoningTokens: null },
    null,
  ],
  [
    "provider A chat completion",
    "provider-a",
    chatJson,
    { inputTokens: 12, outputTokens: 1_500_000, cachedInputTokens: 4, reasoningTokens: 2 },
    "gpt-4.1-2025-04-14",
  ],
  [
    "provider B message",
    "provider-b",
    messageJson,
    { inputTokens: 30, outputTokens: 4000, cachedInputTokens: 5, reasoningTokens: null },
    "claude-sonnet-4-5-20250929",
  ],
  [
    "provider C image",
    "provider-c",
    JSON.stringify(geminiImage(1290, 5_000_000)),
    { inputTokens: 9, outputTokens: 1290, cachedInputTokens: null, reasoningTokens: null },
    "gemini-2.5-flash-image",
  ],
  [
    "provider C JSON array",
    "provider-c",
    JSON.stringify([geminiImage(1290, 5_000_000), geminiText(30)]),
    { inputTokens: 9, outputTokens: 34, cachedInputTokens: null, reasoningTokens: 4 },
    "gemini-2.5-flash-image",
  ],
];

describe("usage meter, JSON bodies over 4 MiB", () => {
  it.each(jsonCases)("reads the usage of a large %s", (_name, provider, text, usage, model) => {
    const body = Buffer.from(text);
    expect(body.length).toBeGreaterThan(4 * 1024 * 1024);
    expect(meter(provider, body, false)).toEqual({ usage, model });
    for (let seed = 1; seed <= 6; seed++) {
      expect(meter(provider, body, false, randomSplits(body.length, seed))).toEqual({ usage, model });
    }
    // Split inside the usage object and right around it.
    const at = body.lastIndexOf(provider === "provider-c" ? '"usageMetadata"' : '"usage"');
    for (let split = at - 3; split < at + 40; split++) {
      expect(meter(provider, body, false, [split]).usage).toEqual(usage);
    }
  });

  it("reads provider A's service tier, beside the usage object, from a large body's last bytes", () => {
    const body = Buffer.from(chatJson.replace('"service_tier":"default"', '"service_tier":"flex"'));
    expect(body.length).toBeGreaterThan(4 * 1024 * 1024);
    expect(meter("provider-a", body, false).usage.serviceTier).toBe("flex");
    expect(meter("provider-a", body, false, randomSplits(body.length, 1)).usage.serviceTier).toBe("flex");
  });

  it("records nothing, and does not throw, when the usage object is longer than the kept tail", () => {
    const body = Buffer.from(
      embeddingsJson.replace('"usage":{', `"usage":{"note":"${"x".repeat(70 * 1024)}",`),
    );
    expect(meter("provider-a", body, false).usage.inputTokens).toBeNull();
  });

  it("keeps only copies of a bounded head and tail: memory stays flat and pushed chunks are not held", () => {
    const usage = createUsageMeter("provider-a", { streaming: false });
    const head = Buffer.from('{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4.1","choices":[');
    const end = Buffer.from('],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}');
    const reused = Buffer.from(`${'{"index":0,"message":{"content":"x"}},'.repeat(1724)}`);
    const before = process.memoryUsage().arrayBuffers;
    usage.push(head);
    for (let index = 0; index < 1600; index++) usage.push(reused); // ~100 MiB
    usage.push(end);
    const grown = process.memoryUsage().arrayBuffers - before;
    // The caller may reuse every chunk once pushed: the meter kept copies, not references.
    head.fill(0x20);
    end.fill(0x20);
    reused.fill(0x20);
    expect(usage.finish()).toEqual({
      usage: { inputTokens: 7, outputTokens: 3, cachedInputTokens: null, reasoningTokens: null },
      model: "gpt-4.1",
    });
    expect(grown).toBeLessThan(8 * 1024 * 1024);
  });
});

const sse = (events: Array<[string, unknown]>, lineEnd = "\n") =>
  events
    .map(([name, data]) => `event: ${name}${lineEnd}data: ${JSON.stringify(data)}${lineEnd}${lineEnd}`)
    .join("");
const withoutEventLines = (stream: string) =>
  stream
    .split("\n")
    .filter((line) => !line.startsWith("event:"))
    .join("\n");

const imageCall = {
  type: "image_generation_call",
  id: "ig_1",
  status: "completed",
  result: base64Image(1_500_000),
};
const response = (status: string, output: unknown[], usage: unknown) => ({
  id: "resp_1",
  object: "response",
  created_at: 1,
  status,
  instructions: null,
  model: "gpt-4.1",
  output,
  parallel_tool_calls: true,
  tools: [{ type: "image_generation" }],
  usage,
  user: null,
  metadata: {},
});
const message = { type: "message", content: [{ type: "output_text", text: longText(2000) }] };
// Repro: the completed event holds the whole response, here with a 1.5 MB image.
const responsesImageStream = sse([
  ["response.created", { type: "response.created", response: response("in_progress", [], null) }],
  ["response.output_item.done", { type: "response.output_item.done", output_index: 0, item: imageCall }],
  ["response.output_text.delta", { type: "response.output_text.delta", delta: "Grüße" }],
  [
    "response.completed",
    {
      type: "response.completed",
      response: response("completed", [imageCall, message], { input_tokens: 50, output_tokens: 1000 }),
    },
  ],
]);
const messageStart = (contentBytes: number) => ({
  type: "message_start",
  message: {
    id: "msg_1",
    type: "message",
    role: "assistant",
    model: "claude-sonnet-4-5-20250929",
    content: [{ type: "text", text: longText(contentBytes) }],
    stop_reason: null,
    usage: { input_tokens: 25, cache_creation_input_tokens: 0, cache_read_input_tokens: 5, output_tokens: 1 },
  },
});
const messageStream = sse([
  ["message_start", messageStart(1_500_000)],
  ["ping", { type: "ping" }],
  [
    "message_delta",
    { type: "message_delta", delta: { stop_reason: "end_turn" }, usage: { output_tokens: 15 } },
  ],
  ["message_stop", { type: "message_stop" }],
]);
const geminiSse = (chunks: unknown[]) =>
  chunks.map((chunk) => `data: ${JSON.stringify(chunk)}\r\n\r\n`).join("");

const sseCases: Array<[string, ProviderId, string, object, string | null]> = [
  [
    "provider A Responses stream with a 1.5 MB response.completed",
    "provider-a",
    responsesImageStream,
    { inputTokens: 50, outputTokens: 1000, cachedInputTokens: null, reasoningTokens: null },
    "gpt-4.1",
  ],
  [
    "provider A Responses stream of the oversized event alone, without event lines",
    "provider-a",
    withoutEventLines(responsesImageStream.slice(responsesImageStream.indexOf("event: response.completed"))),
    { inputTokens: 50, outputTokens: 1000, cachedInputTokens: null, reasoningTokens: null },
    "gpt-4.1",
  ],
  [
    "provider B stream with an oversized message_start",
    "provider-b",
    messageStream,
    { inputTokens: 30, outputTokens: 15, cachedInputTokens: 5, reasoningTokens: null },
    "claude-sonnet-4-5-20250929",
  ],
  [
    "provider B stream with an oversized message_start, without event lines",
    "provider-b",
    withoutEventLines(messageStream),
    { inputTokens: 30, outputTokens: 15, cachedInputTokens: 5, reasoningTokens: null },
    "claude-sonnet-4-5-20250929",
  ],
  [
    "provider C stream whose last chunk is an oversized image",
    "provider-c",
    geminiSse([geminiText(1), geminiImage(1290, 1_500_000)]),
    { inputTokens: 9, outputTokens: 1290, cachedInputTokens: null, reasoningTokens: null },
    "gemini-2.5-flash-image",
  ],
  [
    "provider C stream with an oversized image before its last chunk",
    "provider-c",
    geminiSse([geminiImage(1290, 1_500_000), geminiText(30)]),
    { inputTokens: 9, outputTokens: 34, cachedInputTokens: null, reasoningTokens: 4 },
    "gemini-2.5-flash-image",
  ],
];

describe("usage meter, SSE events over 1 MiB", () => {
  it.each(sseCases)("reads the usage of a %s", (_name, provider, text, usage, model) => {
    const body = Buffer.from(text);
    expect(meter(provider, body, true)).toEqual({ usage, model });
    for (let seed = 1; seed <= 6; seed++) {
      expect(meter(provider, body, true, randomSplits(body.length, seed))).toEqual({ usage, model });
    }
  });

  it("reads provider A's service tier from the end of a response.completed over 1 MiB", () => {
    const tiered = responsesImageStream.replaceAll(
      '"parallel_tool_calls":true,"tools"',
      '"parallel_tool_calls":true,"service_tier":"flex","tools"',
    );
    expect(tiered).not.toBe(responsesImageStream);
    const body = Buffer.from(tiered);
    expect(meter("provider-a", body, true).usage.serviceTier).toBe("flex");
    expect(meter("provider-a", body, true, randomSplits(body.length, 2)).usage.serviceTier).toBe("flex");
  });

  it("keeps only a bounded tail of an event: memory stays flat however large it grows", () => {
    const usage = createUsageMeter("provider-a", { streaming: true });
    usage.push(Buffer.from('event: response.completed\ndata: {"type":"response.completed","response":{'));
    usage.push(Buffer.from('"model":"gpt-4.1","output":[{"type":"image_generation_call","result":"'));
    const reused = Buffer.from("QUJD".repeat(16 * 1024));
    const before = process.memoryUsage().arrayBuffers;
    for (let index = 0; index < 1600; index++) usage.push(reused); // ~100 MiB in one event
    usage.push(Buffer.from('"}],"usage":{"input_tokens":50,"output_tokens":1000}}}\n\n'));
    const grown = process.memoryUsage().arrayBuffers - before;
    expect(usage.finish()).toEqual({
      usage: { inputTokens: 50, outputTokens: 1000, cachedInputTokens: null, reasoningTokens: null },
      model: "gpt-4.1",
    });
    expect(grown).toBeLessThan(8 * 1024 * 1024);
  });
});

describe("usage meter, a Responses API answer holding a generated image", () => {
  // The image generation tool's tokens come in `tool_usage`, beside the model's `usage` (openai's
  // `Response.tool_usage`), after the image: read from the kept tail of the event or the body.
  const toolUsage = {
    image_gen: { input_tokens: 50, output_tokens: 4160, total_tokens: 4210 },
    web_search: { num_requests: 0 },
  };
  const withToolUse = (output: unknown[]) => {
    const { usage, ...rest } = response("completed", output, { input_tokens: 50, output_tokens: 1000 });
    return { ...rest, tool_usage: toolUsage, usage };
  };
  const metered = (text: string, streaming: boolean, seed: number) =>
    [
      meter("provider-a", text, streaming, [], "post"),
      meter("provider-a", text, streaming, randomSplits(text.length, seed), "post"),
    ].map((reading) => reading.usage);

  it("marks the hosted tool use of a response.completed over 1 MiB and of a JSON body over 4 MiB", () => {
    const stream = sse([
      ["response.created", { type: "response.created", response: response("in_progress", [], null) }],
      ["response.completed", { type: "response.completed", response: withToolUse([imageCall]) }],
    ]);
    const body = JSON.stringify(withToolUse([imageCall, imageCall, imageCall]));
    expect(body.length).toBeGreaterThan(4 * 1024 * 1024);
    for (const usage of [...metered(stream, true, 7), ...metered(body, false, 8)])
      expect(usage).toMatchObject({ inputTokens: 50, outputTokens: 1000, hostedToolUse: true });
  });

  it("marks it past any number of object keys named tool_usage in the app's tool schemas after it", () => {
    // The API writes `tool_usage` before the `tools` it echoes: eight such keys hid the response's own.
    const properties = Object.fromEntries(
      Array.from({ length: 8 }, (_, index) => [
        `p${index}`,
        { type: "object", properties: { tool_usage: {} } },
      ]),
    );
    const tools = [{ type: "function", name: "f", parameters: { type: "object", properties } }];
    const { tools: _tools, usage, ...rest } = withToolUse([imageCall, imageCall, imageCall]);
    const body = JSON.stringify({ ...rest, tools, usage });
    expect(body.length).toBeGreaterThan(4 * 1024 * 1024);
    for (const reading of metered(body, false, 9))
      expect(reading).toMatchObject({ inputTokens: 50, outputTokens: 1000, hostedToolUse: true });
  });
  // The API writes `tool_usage` before the `tools` it echoes: 64 KiB of the app's tools fill the
  // kept tail of a completion over 1 MiB (its image), and the call was priced at its model tokens
  // alone, though the same answer buffered (under 4 MiB, read whole) has an unknown cost.
  it("marks the hosted tool use of a streamed answer whose echoed tools fill the kept tail, as buffered", () => {
    const tools = Array.from({ length: 300 }, (_, index) => ({
      type: "function",
      name: `f${index}`,
      description: "d".repeat(200),
      parameters: { type: "object", properties: {} },
    }));
    const { tools: _tools, usage, ...rest } = withToolUse([imageCall]);
    const answer = { ...rest, tools, usage };
    const started = { type: "response.image_generation_call.in_progress", item_id: "ig_1" };
    const stream = sse([
      ["response.created", { type: "response.created", response: response("in_progress", [], null) }],
      [started.type, started],
      ["response.completed", { type: "response.completed", response: answer }],
    ]);
    const unnamed = withoutEventLines(stream);
    for (const reading of [
      ...metered(JSON.stringify(answer), false, 10),
      ...metered(stream, true, 11),
      ...metered(unnamed, true, 12),
    ])
      expect(reading).toMatchObject({ inputTokens: 50, outputTokens: 1000, hostedToolUse: true });
    // No hosted tool ran: a tail without tool_usage says nothing.
    const quiet = sse([["response.completed", { type: "response.completed", response: answer }]]);
    for (const reading of metered(quiet, true, 13)) expect(reading).not.toHaveProperty("hostedToolUse");
  });

  // The same answer buffered over 4 MiB (three images) is read from its ends: the app's 64 KiB of
  // echoed tools fill the kept tail, and the call was priced at its model tokens alone.
  it("marks the hosted tool use of a JSON body over 4 MiB whose echoed tools fill the kept tail", () => {
    const tools = Array.from({ length: 300 }, (_, index) => ({
      type: "function",
      name: `f${index}`,
      description: "d".repeat(200),
      parameters: { type: "object", properties: {} },
    }));
    const { tools: _tools, usage, ...rest } = withToolUse([imageCall, imageCall, imageCall]);
    const body = JSON.stringify({ ...rest, tools, usage });
    expect(body.length).toBeGreaterThan(4 * 1024 * 1024);
    for (const reading of metered(body, false, 14))
      expect(reading).toMatchObject({ inputTokens: 50, outputTokens: 1000, hostedToolUse: true });
    // As the API writes it, pretty-printed.
    const pretty = JSON.stringify({ ...rest, tools, usage }, null, 2);
    for (const reading of metered(pretty, false, 15))
      expect(reading).toMatchObject({ inputTokens: 50, outputTokens: 1000, hostedToolUse: true });
    // No hosted tool ran: a tail without tool_usage says nothing.
    const text = {
      type: "message",
      id: "msg_1",
      content: [{ type: "output_text", text: "t".repeat(4_500_000) }],
    };
    const quiet = JSON.stringify({ ...rest, output: [text], tools, usage });
    for (const reading of metered(quiet, false, 16)) expect(reading).not.toHaveProperty("hostedToolUse");
  });
});

describe("usage meter, a background run's large answer to a poll", () => {
  // As the API orders them: the top-level fields first, `background` right after `status`.
  const run = (status: string, output: unknown[], usage: unknown) => {
    const { id, object, created_at: _created, status: _status, ...rest } = response(status, output, usage);
    return { id, object, created_at: 1_763_000_000, status, background: true, ...rest };
  };
  const tokens = { inputTokens: 50, outputTokens: 1000, cachedInputTokens: null, reasoningTokens: null };
  const fields = {
    id: "resp_1",
    object: "response",
    status: "completed",
    background: true,
    createdAt: 1_763_000_000,
  };
  const poll = (text: string, streaming: boolean, splits: number[] = []) =>
    meter("provider-a", text, streaming, splits, "poll");

  it("reads the run's fields from the first 4 KiB of a JSON body over 4 MiB", () => {
    const images = Array.from({ length: 3 }, () => imageCall);
    const body = JSON.stringify(run("completed", images, { input_tokens: 50, output_tokens: 1000 }));
    expect(body.length).toBeGreaterThan(4 * 1024 * 1024);
    // Its image generation calls' tool_usage is not in the kept tail: of unknown cost.
    const expected = { usage: { ...tokens, hostedToolUse: true }, model: "gpt-4.1", response: fields };
    expect(poll(body, false)).toEqual(expected);
    expect(poll(body, false, randomSplits(body.length, 3))).toEqual(expected);
  });

  it("reads the run's fields from the start of a cut completion event", () => {
    const stream = sse([
      ["response.in_progress", { type: "response.in_progress", response: run("in_progress", [], null) }],
      [
        "response.completed",
        {
          type: "response.completed",
          response: run("completed", [imageCall, message], { input_tokens: 50, output_tokens: 1000 }),
        },
      ],
    ]);
    const expected = { usage: tokens, model: "gpt-4.1", response: fields };
    expect(poll(stream, true)).toEqual(expected);
    expect(poll(stream, true, randomSplits(stream.length, 5))).toEqual(expected);
  });
});

describe("SSE event scanner, events over the cap", () => {
  const maxEventBytes = 2048;
  const headBytes = 4096;
  const tailBytes = 64 * 1024;

  it("passes whole an event whose data so far and the line being read are exactly the cap, and cuts one a byte over", () => {
    for (const [extra, whole] of [
      [0, true],
      [1, false],
    ] as const) {
      const seen: Array<{ data: string; cut: boolean }> = [];
      const scanner = new SseEventScanner(
        (_event, data, tail) => seen.push({ data, cut: tail !== undefined }),
        maxEventBytes,
      );
      // The first line's data, 1000 bytes, and the second line, all 6 + 1042 of its bytes, are the
      // cap: a line is counted whole, as it is when it arrives in pieces.
      scanner.push(Buffer.from(`data: ${"a".repeat(1000)}\ndata: ${"b".repeat(1042 + extra)}\n\n`));
      expect(seen).toHaveLength(1);
      expect(seen[0]?.cut).toBe(!whole);
    }
  });

  it("cuts an event, or passes it whole, whatever the chunks: a line counts with its field name, also a comment", () => {
    // Data lines whose values fit the cap but whose lines do not (`data: ` is 6 bytes more), and a
    // comment that takes the event over it: a line in one chunk counted its value alone, and no
    // comment; one that came in pieces counted all its bytes, so the same event was cut or not.
    for (const source of [
      `data: ${"a".repeat(maxEventBytes - 3)}\n\n`,
      `data: ${"a".repeat(1000)}\ndata: ${"b".repeat(maxEventBytes - 1003)}\n\n`,
      `data: ${"a".repeat(1000)}\n: ${"c".repeat(maxEventBytes - 1000)}\ndata: b\n\n`,
    ]) {
      const bytes = Buffer.from(source);
      const read = (splits: number[]) => {
        const seen: Array<{ data: string; cut: boolean }> = [];
        const scanner = new SseEventScanner(
          (_event, data, tail) => seen.push({ data, cut: tail !== undefined }),
          maxEventBytes,
        );
        let at = 0;
        for (const split of [...splits, bytes.length]) {
          scanner.push(bytes.subarray(at, split));
          at = split;
        }
        return seen;
      };
      const whole = read([]);
      expect(whole[0]?.cut, source.slice(0, 20)).toBe(true);
      for (let split = 1; split < bytes.length; split += 97)
        expect(read([split]), `split ${split}`).toEqual(whole);
    }
  });

  it("cuts an event of empty data lines that never ends, holding a bounded amount", () => {
    const seen: Array<{ data: string; tail?: Buffer }> = [];
    const scanner = new SseEventScanner(
      (_event, data, tail) => seen.push({ data, ...(tail ? { tail: Buffer.from(tail) } : {}) }),
      maxEventBytes,
    );
    const chunk = Buffer.from("data:\n".repeat(16 * 1024));
    for (let index = 0; index < 64; index++) scanner.push(chunk); // a million lines, one event
    // Before, each line took an entry of the held data (counted as 0 bytes), without end.
    const held = scanner as unknown as { moreData: string[] | null; dataBytes: number };
    expect(held.moreData?.length ?? 0).toBeLessThanOrEqual(maxEventBytes);
    scanner.push(Buffer.from("\n"));
    expect(seen).toHaveLength(1);
    expect(seen[0]?.data).toBe("\n".repeat(headBytes));
  });

  it("passes small events whole and the first and last bytes of large ones, however the bytes are split", () => {
    const random = seededBelow(11);
    const text = (bytes: number) => "é🙂 data: x\u2028".repeat(Math.ceil(bytes / 16)).slice(0, bytes);
    const lines = [
      () => `data: ${text(1 + random(200))}`,
      () => `data: ${text(1 + random(3000))}`,
      () => `data:${text(70_000 + random(60_000))}`,
      () => "data",
      () => `event: e${random(10)}`,
      () => `: ${text(random(5000))}`,
      () => "id: 1",
      () => "",
    ];
    const ends = ["\n", "\r", "\r\n"];
    for (let stream = 0; stream < 40; stream++) {
      let source = "";
      for (let line = 0; line < 16; line++)
        source += `${lines[random(lines.length)]?.()}${ends[random(ends.length)]}`;
      // Odd streams end inside their last line; two streams in four are read as at a clean end (the
      // last event dispatched, as openai's SDK does), the others as WHATWG reads them.
      if (stream % 2 === 1) source += lines[random(lines.length)]?.();
      const dispatchLast = stream % 4 >= 2;
      const bytes = Buffer.from(source);
      const seen: Array<{ event: string | undefined; data?: string; head?: string; tail?: Buffer }> = [];
      const scanner = new SseEventScanner(
        (event, data, cutTail) =>
          seen.push(
            cutTail === undefined ? { event, data } : { event, head: data, tail: Buffer.from(cutTail) },
          ),
        maxEventBytes,
      );
      let at = 0;
      for (const split of [...randomSplits(bytes.length, stream), bytes.length]) {
        scanner.push(bytes.subarray(at, split));
        at = split;
      }
      scanner.end(dispatchLast);
      const expected = referenceSseEvents(bytes.toString(), dispatchLast);
      expect(seen.length).toBe(expected.length);
      expected.forEach(({ event, data, rawBytes }, index) => {
        const got = seen[index];
        const dataBytes = Buffer.from(data);
        expect(got?.event).toBe(event);
        if (got?.data !== undefined) {
          // Whole: never an event whose data values alone are over the cap.
          expect(dataBytes.length - (data.split("\n").length - 1)).toBeLessThanOrEqual(maxEventBytes);
          expect(got.data).toBe(data);
        } else {
          // Cut: never an event whose lines all fit within the cap.
          expect(rawBytes).toBeGreaterThan(maxEventBytes);
          expect(got?.head).toBe(dataBytes.subarray(0, headBytes).toString());
          expect(got?.tail?.equals(dataBytes.subarray(Math.max(0, dataBytes.length - tailBytes)))).toBe(true);
        }
      });
    }
  });
});

describe("SSE event scanner, lines ended by CR alone", () => {
  // A line may end with CR alone (WHATWG). The search for the next LF went from each line to the
  // chunk's end: with none there, a 64 KiB read of CR-ended lines was read once per line (~40 ms of
  // the event loop for each read of blank lines in the provider's stream, 10 times a linear reading).
  it.each([
    ["CR", "\r"],
    ["LF", "\n"],
    ["CRLF", "\r\n"],
  ])("searches a 64 KiB read of lines ended by %s a bounded number of times per byte", (_name, end) => {
    const event = `data: 1${end}`;
    const chunk = Buffer.from(`${event}${end.repeat((64 * 1024 - event.length) / end.length)}`);
    // Each search's bytes read: from where it starts to what it finds, or to the chunk's end.
    let searched = 0;
    const indexOf = chunk.indexOf.bind(chunk);
    chunk.indexOf = ((value: number, from: number) => {
      const found = indexOf(value, from);
      searched += (found < 0 ? chunk.length : found) - from;
      return found;
    }) as typeof chunk.indexOf;
    let events = 0;
    const scanner = new SseEventScanner((_event, data) => {
      if (data === "1") events++;
    });
    scanner.push(chunk);
    expect(events).toBe(1);
    // Two searches (CR, LF) read each byte about once; the old one read the chunk once per line.
    expect(searched).toBeLessThanOrEqual(3 * chunk.length);
  });

  it("reads a CRLF the same with an empty chunk between its CR and its LF", () => {
    for (const parts of [
      ["data: x\r", "\ndata: y\n\n"],
      ["data: x\r", "", "\ndata: y\n\n"],
    ]) {
      const seen: string[] = [];
      const scanner = new SseEventScanner((_event, data) => seen.push(data));
      for (const part of parts) scanner.push(Buffer.from(part));
      expect(seen, JSON.stringify(parts)).toEqual(["x\ny"]);
    }
  });
});

describe("usage meter, an answer sent in tiny chunks", () => {
  // An upstream that sends each byte as an HTTP chunk of its own (undici hands over each chunk as
  // it is parsed): the meter must not hold one object per chunk, which costs ~100 bytes each.
  const heapGrowth = (run: () => void) => {
    const before = process.memoryUsage().heapUsed;
    run();
    return process.memoryUsage().heapUsed - before;
  };
  const tokens = { inputTokens: 7, outputTokens: 3, cachedInputTokens: null, reasoningTokens: null };

  it("keeps a JSON body pushed byte by byte in about its own size", () => {
    const body = Buffer.from(
      `{"model":"gpt-4.1","x":"${"y".repeat(1024 * 1024)}","usage":{"prompt_tokens":7,"completion_tokens":3}}`,
    );
    const usage = createUsageMeter("provider-a", { streaming: false });
    const grown = heapGrowth(() => {
      for (let at = 0; at < body.length; at++) usage.push(body.subarray(at, at + 1));
    });
    expect(usage.finish()).toEqual({ usage: tokens, model: "gpt-4.1" });
    expect(grown).toBeLessThan(40 * 1024 * 1024);
  });

  it("keeps an event's line pushed byte by byte in about its own size, within the cap and over it", () => {
    for (const size of [1000 * 1024, 1030 * 1024]) {
      const stream = Buffer.from(
        `data: {"model":"gpt-4.1","x":"${"y".repeat(size)}","usage":{"prompt_tokens":7,"completion_tokens":3}}\n\n`,
      );
      const usage = createUsageMeter("provider-a", { streaming: true });
      const grown = heapGrowth(() => {
        for (let at = 0; at < stream.length; at++) usage.push(stream.subarray(at, at + 1));
      });
      expect(usage.finish(), `${size}`).toEqual({ usage: tokens, model: "gpt-4.1" });
      expect(grown, `${size}`).toBeLessThan(40 * 1024 * 1024);
    }
  });
});
