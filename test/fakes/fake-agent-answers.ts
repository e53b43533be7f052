import type { ProgrammedResponse } from "./fake-upstream.js";
import { type FakeUsage, splitText } from "./fake-upstream-responses.js";

/**
 * Recorded-shape answers of the three providers that carry more than text: a tool call, and what a
 * reasoning model thought before it (OpenAI's reasoning summary, Anthropic's thinking block with its
 * signature, Gemini's thought parts), JSON or streamed, for `enqueueResponse`. Each reports `usage`
 * in its provider's own shape, reasoning included, as the fake's plain answers do.
 */
export interface AgentTurn {
  /** The model's thinking, as its summary (A), thinking block (B) or thought part (C). */
  thought?: string;
  /** A call of this tool with these arguments; else the answer is `text`. */
  call?: { name: string; input: Record<string, unknown> };
  text?: string;
}

const created = 1_763_000_000;
const callId = "call_fake_tool_1";
const signature = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxfakeSignature";
const sse = (data: unknown, event?: string) =>
  `${event === undefined ? "" : `event: ${event}\n`}data: ${JSON.stringify(data)}\n\n`;

/** Provider A's chat completions: `tool_calls` on the message (A chat models send no reasoning text). */
export function chatTurn(
  model: string,
  turn: AgentTurn,
  usage: FakeUsage,
  stream: boolean,
): ProgrammedResponse {
  const call = turn.call && {
    id: callId,
    type: "function",
    function: { name: turn.call.name, arguments: JSON.stringify(turn.call.input) },
  };
  const finish = call ? "tool_calls" : "stop";
  const base = { id: "chatcmpl-fake-agent", object: "chat.completion.chunk", created, model };
  const chatUsage = {
    prompt_tokens: usage.input,
    completion_tokens: usage.output,
    total_tokens: usage.input + usage.output,
    prompt_tokens_details: { cached_tokens: usage.cached, audio_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: usage.reasoning, audio_tokens: 0 },
  };
  if (!stream)
    return json({
      ...base,
      object: "chat.completion",
      choices: [
        {
          index: 0,
          message: {
            role: "assistant",
            content: turn.text ?? null,
            refusal: null,
            tool_calls: call && [call],
          },
          logprobs: null,
          finish_reason: finish,
        },
      ],
      usage: chatUsage,
    });
  const delta = (fields: object, finishReason: string | null = null) =>
    sse({
      ...base,
      choices: [{ index: 0, delta: fields, logprobs: null, finish_reason: finishReason }],
      usage: null,
    });
  const args = call ? splitText(call.function.arguments) : [];
  return events([
    delta(
      call
        ? {
            role: "assistant",
            content: null,
            tool_calls: [{ index: 0, ...call, function: { ...call.function, arguments: "" } }],
          }
        : { role: "assistant", content: "" },
    ),
    ...args.map((piece) => delta({ tool_calls: [{ index: 0, function: { arguments: piece } }] })),
    ...splitText(turn.text ?? "").map((piece) => delta({ content: piece })),
    delta({}, finish),
    sse({ ...base, choices: [], usage: chatUsage }),
    "data: [DONE]\n\n",
  ]);
}

/** Provider A's Responses API: a `reasoning` item with its summary, then a `function_call` or a `message`. */
export function responsesTurn(
  model: string,
  turn: AgentTurn,
  usage: FakeUsage,
  stream: boolean,
): ProgrammedResponse {
  const items: Array<Record<string, unknown>> = [];
  if (turn.thought !== undefined)
    items.push({
      id: "rs_fake1",
      type: "reasoning",
      summary: [{ type: "summary_text", text: turn.thought }],
    });
  if (turn.call)
    items.push({
      id: "fc_fake1",
      type: "function_call",
      status: "completed",
      arguments: JSON.stringify(turn.call.input),
      call_id: callId,
      name: turn.call.name,
    });
  else
    items.push({
      id: "msg_fake1",
      type: "message",
      status: "completed",
      role: "assistant",
      content: [{ type: "output_text", text: turn.text ?? "", annotations: [] }],
    });
  const response = (status: string, output: unknown[], withUsage: boolean) => ({
    id: "resp_fake_agent",
    object: "response",
    created_at: created,
    status,
    error: null,
    incomplete_details: null,
    model,
    output,
    usage: withUsage
      ? {
          input_tokens: usage.input,
          input_tokens_details: { cached_tokens: usage.cached },
          output_tokens: usage.output,
          output_tokens_details: { reasoning_tokens: usage.reasoning },
          total_tokens: usage.input + usage.output,
        }
      : null,
  });
  if (!stream) return json(response("completed", items, true));
  const list: Array<[string, Record<string, unknown>]> = [
    ["response.created", { response: response("in_progress", [], false) }],
  ];
  for (const [index, item] of items.entries()) {
    const at = { item_id: item.id, output_index: index };
    if (item.type === "reasoning") {
      const thought = turn.thought ?? "";
      const part = { ...at, summary_index: 0 };
      list.push(
        ["response.output_item.added", { output_index: index, item: { ...item, summary: [] } }],
        ["response.reasoning_summary_part.added", { ...part, part: { type: "summary_text", text: "" } }],
        ...splitText(thought).map((delta): [string, Record<string, unknown>] => [
          "response.reasoning_summary_text.delta",
          { ...part, delta },
        ]),
        ["response.reasoning_summary_text.done", { ...part, text: thought }],
        ["response.reasoning_summary_part.done", { ...part, part: { type: "summary_text", text: thought } }],
      );
    } else if (item.type === "function_call") {
      const args = String(item.arguments);
      list.push(
        [
          "response.output_item.added",
          { output_index: index, item: { ...item, status: "in_progress", arguments: "" } },
        ],
        ...splitText(args).map((delta): [string, Record<string, unknown>] => [
          "response.function_call_arguments.delta",
          { ...at, delta },
        ]),
        ["response.function_call_arguments.done", { ...at, arguments: args }],
      );
    } else {
      const inText = { ...at, content_index: 0 };
      list.push(
        [
          "response.output_item.added",
          { output_index: index, item: { ...item, status: "in_progress", content: [] } },
        ],
        [
          "response.content_part.added",
          { ...inText, part: { type: "output_text", text: "", annotations: [] } },
        ],
        ...splitText(turn.text ?? "").map((delta): [string, Record<string, unknown>] => [
          "response.output_text.delta",
          { ...inText, delta, logprobs: [] },
        ]),
        ["response.output_text.done", { ...inText, text: turn.text ?? "", logprobs: [] }],
      );
    }
    list.push(["response.output_item.done", { output_index: index, item }]);
  }
  list.push(["response.completed", { response: response("completed", items, true) }]);
  return events(list.map(([type, fields], index) => sse({ type, sequence_number: index, ...fields }, type)));
}

/** Provider B's messages: a `thinking` block (with its signature), then `tool_use` or `text`. */
export function messagesTurn(
  model: string,
  turn: AgentTurn,
  usage: FakeUsage,
  stream: boolean,
): ProgrammedResponse {
  const blocks: Array<Record<string, unknown>> = [];
  if (turn.thought !== undefined) blocks.push({ type: "thinking", thinking: turn.thought, signature });
  if (turn.call)
    blocks.push({ type: "tool_use", id: "toolu_fake1", name: turn.call.name, input: turn.call.input });
  else blocks.push({ type: "text", text: turn.text ?? "" });
  const stopReason = turn.call ? "tool_use" : "end_turn";
  const counts = (output: number) => ({
    input_tokens: usage.input - usage.cached,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: usage.cached,
    output_tokens: output,
    ...(usage.thinking === undefined ? {} : { output_tokens_details: { thinking_tokens: usage.thinking } }),
  });
  const message = { id: "msg_fake_agent", type: "message", role: "assistant", model };
  if (!stream)
    return json({
      ...message,
      content: blocks,
      stop_reason: stopReason,
      stop_sequence: null,
      usage: counts(usage.output),
    });
  const list: string[] = [
    sse(
      { type: "message_start", message: { ...message, content: [], stop_reason: null, usage: counts(1) } },
      "message_start",
    ),
  ];
  for (const [index, block] of blocks.entries()) {
    const delta = (fields: object) =>
      sse({ type: "content_block_delta", index, delta: fields }, "content_block_delta");
    const start =
      block.type === "thinking"
        ? { type: "thinking", thinking: "", signature: "" }
        : block.type === "tool_use"
          ? { ...block, input: {} }
          : { type: "text", text: "" };
    list.push(sse({ type: "content_block_start", index, content_block: start }, "content_block_start"));
    if (block.type === "thinking") {
      list.push(
        ...splitText(String(block.thinking)).map((thinking) => delta({ type: "thinking_delta", thinking })),
      );
      list.push(delta({ type: "signature_delta", signature }));
    } else if (block.type === "tool_use")
      list.push(
        ...splitText(JSON.stringify(block.input)).map((partial_json) =>
          delta({ type: "input_json_delta", partial_json }),
        ),
      );
    else list.push(...splitText(String(block.text)).map((text) => delta({ type: "text_delta", text })));
    list.push(sse({ type: "content_block_stop", index }, "content_block_stop"));
  }
  list.push(
    sse(
      {
        type: "message_delta",
        delta: { stop_reason: stopReason, stop_sequence: null },
        usage: counts(usage.output),
      },
      "message_delta",
    ),
    sse({ type: "message_stop" }, "message_stop"),
  );
  return events(list);
}

/** Provider C's generateContent: `thought: true` parts, then a `functionCall` or text (SSE chunks when streamed). */
export function geminiTurn(
  model: string,
  turn: AgentTurn,
  usage: FakeUsage,
  stream: boolean,
): ProgrammedResponse {
  const parts: Array<Record<string, unknown>> = [];
  if (turn.thought !== undefined) parts.push({ text: turn.thought, thought: true });
  if (turn.call)
    parts.push({
      functionCall: { name: turn.call.name, args: turn.call.input },
      thoughtSignature: signature,
    });
  else parts.push({ text: turn.text ?? "" });
  const usageMetadata = {
    promptTokenCount: usage.input,
    candidatesTokenCount: usage.output - usage.reasoning,
    totalTokenCount: usage.input + usage.output,
    cachedContentTokenCount: usage.cached,
    thoughtsTokenCount: usage.reasoning,
  };
  const chunk = (chunkParts: unknown[], last: boolean) => ({
    candidates: [
      { content: { parts: chunkParts, role: "model" }, ...(last ? { finishReason: "STOP" } : {}), index: 0 },
    ],
    usageMetadata: last ? usageMetadata : { promptTokenCount: usage.input, totalTokenCount: usage.input },
    modelVersion: model,
    responseId: "fake-agent-response",
  });
  if (!stream) return json(chunk(parts, true));
  return events(
    parts.map((part, index) => `data: ${JSON.stringify(chunk([part], index === parts.length - 1))}\r\n\r\n`),
  );
}

function json(body: unknown): ProgrammedResponse {
  return { status: 200, body };
}

function events(parts: string[]): ProgrammedResponse {
  return { status: 200, headers: { "content-type": "text/event-stream" }, parts };
}

/**
 * Provider B's server-side fallback (beta `fallbacks`): the requested model refused before any
 * output and the API ran the request again on `served`, in one answer. The answer's `model` is the
 * model that served it; a stream's `message_start`, sent before the refusal, names the requested
 * one. The hop is a `fallback` content block, and `usage.iterations` lists each attempt: the refused
 * `message` (no output, not billed) and the `fallback_message` on the model that answered, whose
 * counts are the top-level ones.
 */
export function messagesFallbackTurn(
  requested: string,
  served: string,
  text: string,
  usage: FakeUsage,
  stream: boolean,
): ProgrammedResponse {
  const counts = (output: number) => ({
    input_tokens: usage.input - usage.cached,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: usage.cached,
    output_tokens: output,
  });
  const finalUsage = {
    ...counts(usage.output),
    iterations: [
      { type: "message", model: requested, ...counts(0) },
      { type: "fallback_message", model: served, ...counts(usage.output) },
    ],
  };
  const hop = { type: "fallback", from: { model: requested }, to: { model: served } };
  const message = { id: "msg_fake_fallback", type: "message", role: "assistant" };
  if (!stream)
    return json({
      ...message,
      model: served,
      content: [hop, { type: "text", text }],
      stop_reason: "end_turn",
      stop_sequence: null,
      usage: finalUsage,
    });
  const block = (index: number, start: object, deltas: object[]) => [
    sse({ type: "content_block_start", index, content_block: start }, "content_block_start"),
    ...deltas.map((delta) => sse({ type: "content_block_delta", index, delta }, "content_block_delta")),
    sse({ type: "content_block_stop", index }, "content_block_stop"),
  ];
  return events([
    sse(
      {
        type: "message_start",
        message: { ...message, model: requested, content: [], stop_reason: null, usage: counts(1) },
      },
      "message_start",
    ),
    ...block(0, hop, []),
    ...block(
      1,
      { type: "text", text: "" },
      splitText(text).map((piece) => ({ type: "text_delta", text: piece })),
    ),
    sse(
      { type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: finalUsage },
      "message_delta",
    ),
    sse({ type: "message_stop" }, "message_stop"),
  ]);
}
