import type { ProviderId } from "../../src/providers/provider-id.js";

/**
 * Usage shapes of each provider, from the answer's bytes (a JSON body, and the same answer
 * streamed) through the meter to the row's cost, each expected cost computed by hand from the
 * catalogue's prices (USD per 1M tokens, so tokens x price is micro-dollars).
 */
export interface UsageCostCase {
  name: string;
  provider: ProviderId;
  model: string;
  responses?: boolean;
  json?: unknown;
  sse?: string;
  /** Micro-dollars, by hand; null: unknown. */
  micro: number | null;
}

export const sse = (events: Array<[string | undefined, unknown]>) =>
  events.map(([name, data]) => `${name ? `event: ${name}\n` : ""}data: ${JSON.stringify(data)}\n\n`).join("");

const chatChunk = (model: string, extra: Record<string, unknown>) => ({
  id: "chatcmpl-1",
  object: "chat.completion.chunk",
  model,
  choices: [],
  ...extra,
});

function chatCase(
  name: string,
  model: string,
  usage: unknown,
  micro: number | null,
  tier?: string,
): UsageCostCase {
  const tierField = tier === undefined ? {} : { service_tier: tier };
  return {
    name,
    provider: "provider-a",
    model,
    json: {
      id: "chatcmpl-1",
      object: "chat.completion",
      model,
      choices: [{ index: 0, message: { role: "assistant", content: "hi" }, finish_reason: "stop" }],
      usage,
      ...tierField,
    },
    sse: `${sse([
      [
        undefined,
        chatChunk(model, { ...tierField, choices: [{ index: 0, delta: { content: "hi" } }], usage: null }),
      ],
      [undefined, chatChunk(model, { ...tierField, usage })],
    ])}data: [DONE]\n\n`,
    micro,
  };
}

function responsesCase(
  name: string,
  model: string,
  usage: unknown,
  micro: number | null,
  tier?: string,
): UsageCostCase {
  const response = {
    id: "resp_1",
    object: "response",
    status: "completed",
    model,
    output: [{ type: "message", role: "assistant", content: [{ type: "output_text", text: "hi" }] }],
    ...(tier === undefined ? {} : { service_tier: tier }),
    usage,
  };
  return {
    name,
    provider: "provider-a",
    model,
    responses: true,
    json: response,
    sse: sse([
      [
        "response.created",
        {
          type: "response.created",
          response: { ...response, status: "in_progress", output: [], usage: null },
        },
      ],
      ["response.output_text.delta", { type: "response.output_text.delta", delta: "hi" }],
      ["response.completed", { type: "response.completed", response }],
    ]),
    micro,
  };
}

/** Provider B: the JSON answer's usage, and a stream's message_start usage then message_delta's. */
function messagesCase(
  name: string,
  model: string,
  usage: Record<string, unknown>,
  start: Record<string, unknown>,
  delta: Record<string, unknown>,
  micro: number | null,
): UsageCostCase {
  return {
    name,
    provider: "provider-b",
    model,
    json: {
      id: "msg_1",
      type: "message",
      role: "assistant",
      model,
      content: [{ type: "text", text: "hi" }],
      stop_reason: "end_turn",
      usage,
    },
    sse: sse([
      [
        "message_start",
        {
          type: "message_start",
          message: { id: "msg_1", type: "message", role: "assistant", model, content: [], usage: start },
        },
      ],
      [
        "content_block_start",
        { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
      ],
      [
        "content_block_delta",
        { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "hi" } },
      ],
      ["content_block_stop", { type: "content_block_stop", index: 0 }],
      ["message_delta", { type: "message_delta", delta: { stop_reason: "end_turn" }, usage: delta }],
      ["message_stop", { type: "message_stop" }],
    ]),
    micro,
  };
}

/** Provider C: the JSON answer's usageMetadata, and a stream of chunks with cumulative ones. */
function geminiCase(
  name: string,
  model: string,
  steps: Record<string, unknown>[],
  micro: number | null,
): UsageCostCase {
  const last = steps[steps.length - 1];
  const chunk = (usageMetadata: unknown, text: string) => ({
    candidates: [{ content: { role: "model", parts: [{ text }] }, index: 0 }],
    usageMetadata,
    modelVersion: model,
  });
  return {
    name,
    provider: "provider-c",
    model,
    json: chunk(last, "hi"),
    sse: sse(steps.map((usage, at) => [undefined, chunk(usage, `part ${at}`)])),
    micro,
  };
}

export const usageCostCases: UsageCostCase[] = [
  // Provider A, chat completions: the prompt includes its cached tokens, the completion its reasoning.
  // gpt-4o: $2.50 in, $1.25 cached, $10 out. 1000 x 2.5 + 200 x 1.25 + 300 x 10.
  chatCase(
    "A chat, cached part of the prompt",
    "gpt-4o",
    {
      prompt_tokens: 1200,
      completion_tokens: 300,
      total_tokens: 1500,
      prompt_tokens_details: { cached_tokens: 200, audio_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0 },
    },
    2500 + 250 + 3000,
  ),
  // gpt-5 flex: half of $1.25, $0.125, $10. 2000 x 0.625 + 8000 x 0.0625 + 2000 x 5 (reasoning inside).
  chatCase(
    "A chat, flex tier, reasoning inside the completion",
    "gpt-5-2025-08-07",
    {
      prompt_tokens: 10_000,
      completion_tokens: 2000,
      prompt_tokens_details: { cached_tokens: 8000 },
      completion_tokens_details: { reasoning_tokens: 1500 },
    },
    1250 + 500 + 10_000,
    "flex",
  ),
  // gpt-4.1 default tier: standard $2, $8. 1000 x 2 + 100 x 8.
  chatCase(
    "A chat, default tier at standard prices",
    "gpt-4.1",
    { prompt_tokens: 1000, completion_tokens: 100 },
    2000 + 800,
    "default",
  ),
  // gpt-4.1 priority: $3.50, $0.875, $14. 500 x 3.5 + 500 x 0.875 + 100 x 14.
  chatCase(
    "A chat, priority tier",
    "gpt-4.1",
    { prompt_tokens: 1000, completion_tokens: 100, prompt_tokens_details: { cached_tokens: 500 } },
    1750 + 437.5 + 1400,
    "priority",
  ),
  // gpt-4.1 has no flex price: unknown.
  chatCase(
    "A chat, flex on a model without flex",
    "gpt-4.1",
    { prompt_tokens: 1000, completion_tokens: 100 },
    null,
    "flex",
  ),
  // A scale tier: no price.
  chatCase("A chat, scale tier", "gpt-4o", { prompt_tokens: 1000, completion_tokens: 100 }, null, "scale"),
  // gpt-4o-mini: one token each, $0.15 and $0.60: 0.75 micro-dollars.
  chatCase(
    "A chat, one token each",
    "gpt-4o-mini",
    { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
    0.75,
  ),
  // gpt-6-luna: a write of 3000 at $0.125, 2000 cached at $0.01, 5000 fresh at $0.10, 500 out at $0.50.
  chatCase(
    "A chat, GPT-6 cache writes",
    "gpt-6-luna",
    {
      prompt_tokens: 10_000,
      completion_tokens: 500,
      prompt_tokens_details: { cached_tokens: 2000, cache_write_tokens: 3000 },
    },
    500 + 20 + 375 + 250,
  ),
  // Tiny costs: GPT-6 Luna on flex ($0.05 in, $0.005 cached, $0.25 out), 2 + 1 cached + 1 out.
  chatCase(
    "A chat, a few tokens on flex",
    "gpt-6-luna",
    { prompt_tokens: 3, completion_tokens: 1, prompt_tokens_details: { cached_tokens: 1 } },
    0.1 + 0.005 + 0.25,
    "flex",
  ),
  // Responses API: input_tokens_details / output_tokens_details. gpt-5.4 priority $5, $0.50, $30.
  responsesCase(
    "A responses, priority tier",
    "gpt-5.4",
    {
      input_tokens: 1000,
      input_tokens_details: { cached_tokens: 400 },
      output_tokens: 100,
      output_tokens_details: { reasoning_tokens: 60 },
      total_tokens: 1100,
    },
    600 * 5 + 400 * 0.5 + 100 * 30,
    "priority",
  ),
  // gpt-6-sol: $2 in, $0.20 cached, $2.50 writes, $10 out.
  responsesCase(
    "A responses, GPT-6 cache writes",
    "gpt-6-sol",
    {
      input_tokens: 10_000,
      input_tokens_details: { cached_tokens: 2000, cache_write_tokens: 3000 },
      output_tokens: 500,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: 10_500,
    },
    10_000 + 400 + 7500 + 5000,
  ),
  // gpt-6-luna over 272k: the whole call at 2x in ($0.20), 1.5x out ($0.75).
  responsesCase(
    "A responses, one token over 272k",
    "gpt-6-luna",
    {
      input_tokens: 272_001,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens: 10,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: 272_011,
    },
    272_001 * 0.2 + 10 * 0.75,
  ),
  responsesCase(
    "A responses, at 272k exactly",
    "gpt-6-luna",
    {
      input_tokens: 272_000,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens: 10,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: 272_010,
    },
    272_000 * 0.1 + 10 * 0.5,
  ),
  // gpt-5 flex on Responses: $0.625, $0.0625, $5.
  responsesCase(
    "A responses, flex tier",
    "gpt-5",
    {
      input_tokens: 2000,
      input_tokens_details: { cached_tokens: 1000 },
      output_tokens: 300,
      output_tokens_details: { reasoning_tokens: 200 },
      total_tokens: 2300,
    },
    625 + 62.5 + 1500,
    "flex",
  ),

  // Provider B: input_tokens excludes the cache reads and writes. Sonnet 4.5: $3, $0.30 read,
  // $3.75 5m write, $6 1h write, $15 out.
  messagesCase(
    "B, cache reads and 5m and 1h writes",
    "claude-sonnet-4-5",
    {
      input_tokens: 100,
      cache_read_input_tokens: 1000,
      cache_creation_input_tokens: 2000,
      cache_creation: { ephemeral_5m_input_tokens: 500, ephemeral_1h_input_tokens: 1500 },
      output_tokens: 300,
    },
    {
      input_tokens: 100,
      cache_read_input_tokens: 1000,
      cache_creation_input_tokens: 2000,
      cache_creation: { ephemeral_5m_input_tokens: 500, ephemeral_1h_input_tokens: 1500 },
      output_tokens: 1,
    },
    { output_tokens: 300 },
    300 + 300 + 1875 + 9000 + 4500,
  ),
  // Over 200k counting the cache reads: the whole call at $6, $0.60, $22.50.
  messagesCase(
    "B, one token over 200k with the cache",
    "claude-sonnet-4-5",
    {
      input_tokens: 50_000,
      cache_read_input_tokens: 150_001,
      cache_creation_input_tokens: 0,
      output_tokens: 1000,
    },
    {
      input_tokens: 50_000,
      cache_read_input_tokens: 150_001,
      cache_creation_input_tokens: 0,
      output_tokens: 1,
    },
    { output_tokens: 1000 },
    300_000 + 90_000.6 + 22_500,
  ),
  messagesCase(
    "B, at 200k exactly",
    "claude-sonnet-4-5",
    {
      input_tokens: 50_000,
      cache_read_input_tokens: 150_000,
      cache_creation_input_tokens: 0,
      output_tokens: 1000,
    },
    {
      input_tokens: 50_000,
      cache_read_input_tokens: 150_000,
      cache_creation_input_tokens: 0,
      output_tokens: 1,
    },
    { output_tokens: 1000 },
    150_000 + 45_000 + 15_000,
  ),
  // Web searches at $0.01 each; the new message_delta repeats every count (cumulative), the input
  // grown by the search results. Haiku 4.5: $1 in, $5 out.
  messagesCase(
    "B, web searches, message_delta with cumulative input",
    "claude-haiku-4-5",
    {
      input_tokens: 3000,
      cache_read_input_tokens: 0,
      cache_creation_input_tokens: 0,
      output_tokens: 100,
      server_tool_use: { web_search_requests: 3 },
    },
    { input_tokens: 1000, cache_read_input_tokens: 0, cache_creation_input_tokens: 0, output_tokens: 1 },
    {
      input_tokens: 3000,
      cache_read_input_tokens: 0,
      cache_creation_input_tokens: 0,
      output_tokens: 100,
      server_tool_use: { web_search_requests: 3 },
    },
    3000 + 500 + 30_000,
  ),
  // Thinking is part of output_tokens. Opus 4.1: $15, $75.
  messagesCase(
    "B, thinking inside the output",
    "claude-opus-4-1",
    { input_tokens: 200, output_tokens: 1000, output_tokens_details: { thinking_tokens: 800 } },
    { input_tokens: 200, output_tokens: 1 },
    { output_tokens: 1000, output_tokens_details: { thinking_tokens: 800 } },
    3000 + 75_000,
  ),
  // The 1h writes only in message_start; message_delta repeats the total without the breakdown.
  messagesCase(
    "B, 1h breakdown only in message_start",
    "claude-haiku-4-5",
    {
      input_tokens: 10,
      cache_read_input_tokens: 0,
      cache_creation_input_tokens: 1000,
      cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 1000 },
      output_tokens: 20,
    },
    {
      input_tokens: 10,
      cache_read_input_tokens: 0,
      cache_creation_input_tokens: 1000,
      cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 1000 },
      output_tokens: 1,
    },
    { input_tokens: 10, cache_read_input_tokens: 0, cache_creation_input_tokens: 1000, output_tokens: 20 },
    10 + 2000 + 100,
  ),
  // Haiku 5.5: $0.10 in up to 100k (the cache included), $0.50 over; out $0.50 and $2.50.
  messagesCase(
    "B, Haiku 5.5 over 100k by its cache writes",
    "claude-haiku-5-5",
    { input_tokens: 1, cache_read_input_tokens: 0, cache_creation_input_tokens: 100_000, output_tokens: 10 },
    { input_tokens: 1, cache_read_input_tokens: 0, cache_creation_input_tokens: 100_000, output_tokens: 1 },
    { output_tokens: 10 },
    1 * 0.5 + 100_000 * 0.625 + 10 * 2.5,
  ),
  // US-only inference: 1.1x every token price, not the searches'. Opus 4.6: $5 in, $25 out.
  messagesCase(
    "B, US-only inference with web searches",
    "claude-opus-4-6",
    {
      input_tokens: 1000,
      output_tokens: 100,
      server_tool_use: { web_search_requests: 2 },
      inference_geo: "us",
    },
    { input_tokens: 1000, output_tokens: 1, inference_geo: "us" },
    { input_tokens: 1000, output_tokens: 100, server_tool_use: { web_search_requests: 2 } },
    (5000 + 2500) * 1.1 + 20_000,
  ),
  // A compaction iteration (beta) is a sampling of its own, added to the answer's. Haiku 4.5.
  messagesCase(
    "B, a compaction iteration beside the answer",
    "claude-haiku-4-5",
    {
      input_tokens: 1000,
      output_tokens: 100,
      iterations: [
        { type: "compaction", input_tokens: 5000, output_tokens: 300 },
        { type: "message", input_tokens: 1000, output_tokens: 100 },
      ],
    },
    { input_tokens: 1000, output_tokens: 1 },
    {
      input_tokens: 1000,
      output_tokens: 100,
      iterations: [
        { type: "compaction", input_tokens: 5000, output_tokens: 300 },
        { type: "message", input_tokens: 1000, output_tokens: 100 },
      ],
    },
    1000 + 500 + 5000 + 1500,
  ),
  // No catalogued model prices the priority tier: unknown.
  messagesCase(
    "B, priority tier",
    "claude-haiku-4-5",
    { input_tokens: 10, output_tokens: 20, service_tier: "priority" },
    { input_tokens: 10, output_tokens: 1, service_tier: "priority" },
    { output_tokens: 20 },
    null,
  ),

  // Provider C: promptTokenCount includes the cached tokens; thoughts are beside the candidates.
  // 2.5 Flash: $0.30, $0.075 cached, $2.50 out.
  geminiCase(
    "C, cached prompt, thoughts beside candidates",
    "gemini-2.5-flash",
    [
      { promptTokenCount: 1000, cachedContentTokenCount: 400, totalTokenCount: 1000 },
      {
        promptTokenCount: 1000,
        cachedContentTokenCount: 400,
        candidatesTokenCount: 50,
        thoughtsTokenCount: 300,
        totalTokenCount: 1350,
      },
      {
        promptTokenCount: 1000,
        cachedContentTokenCount: 400,
        candidatesTokenCount: 200,
        thoughtsTokenCount: 300,
        totalTokenCount: 1500,
      },
    ],
    180 + 30 + 1250,
  ),
  // Tool-use prompt tokens are input.
  geminiCase(
    "C, tool-use prompt tokens",
    "gemini-2.5-flash",
    [
      { promptTokenCount: 1000, totalTokenCount: 1000 },
      {
        promptTokenCount: 1000,
        toolUsePromptTokenCount: 500,
        candidatesTokenCount: 100,
        totalTokenCount: 1600,
      },
    ],
    1500 * 0.3 + 100 * 2.5,
  ),
  // 2.5 Pro over 200k: the whole call at $2.50, $15.
  geminiCase(
    "C, one token over 200k",
    "gemini-2.5-pro",
    [{ promptTokenCount: 200_001, candidatesTokenCount: 100, totalTokenCount: 200_101 }],
    200_001 * 2.5 + 1500,
  ),
  geminiCase(
    "C, at 200k exactly",
    "gemini-2.5-pro",
    [{ promptTokenCount: 200_000, candidatesTokenCount: 100, totalTokenCount: 200_100 }],
    200_000 * 1.25 + 1000,
  ),
  // Flex: half, $0.15 and $1.25.
  geminiCase(
    "C, flex tier",
    "gemini-2.5-flash",
    [{ promptTokenCount: 1000, candidatesTokenCount: 100, totalTokenCount: 1100, serviceTier: "flex" }],
    150 + 125,
  ),
  geminiCase(
    "C, flex tier with a cache read (no published price)",
    "gemini-2.5-flash",
    [
      {
        promptTokenCount: 1000,
        cachedContentTokenCount: 10,
        candidatesTokenCount: 100,
        totalTokenCount: 1100,
        serviceTier: "flex",
      },
    ],
    null,
  ),
  // Audio prompt: 2.5 Flash $1 audio, $0.25 cached audio.
  geminiCase(
    "C, audio in the prompt",
    "gemini-2.5-flash",
    [
      {
        promptTokenCount: 1000,
        candidatesTokenCount: 10,
        totalTokenCount: 1010,
        promptTokensDetails: [
          { modality: "TEXT", tokenCount: 400 },
          { modality: "AUDIO", tokenCount: 600 },
        ],
      },
    ],
    400 * 0.3 + 600 * 1 + 10 * 2.5,
  ),
  // No candidates (blocked): output 0, prompt billed.
  geminiCase(
    "C, no candidates",
    "gemini-2.0-flash",
    [{ promptTokenCount: 1000, totalTokenCount: 1000 }],
    100,
  ),
  // A Gemini image model: generated image tokens at $30, the rest of the candidates at $7.50, the
  // prompt at $1.50 (Nano Banana 2.1).
  geminiCase(
    "C, generated image tokens",
    "gemini-nano-banana-2.1",
    [
      {
        promptTokenCount: 100,
        candidatesTokenCount: 1290,
        totalTokenCount: 1390,
        candidatesTokensDetails: [
          { modality: "TEXT", tokenCount: 170 },
          { modality: "IMAGE", tokenCount: 1120 },
        ],
      },
    ],
    150 + 1120 * 30 + 170 * 7.5,
  ),
];

/** A cost in micro-dollars as the row records it: USD, rounded to the billionth. */
export const usdOf = (micro: number | null) => (micro === null ? null : Math.round(micro * 1000) / 1e9);
