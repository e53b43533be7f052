import { randomBytes } from "node:crypto";
import { type FakeUsage, splitText } from "./fake-upstream-responses.js";

/**
 * Provider A's Responses API as the fake upstream serves it, with stored responses and background
 * mode: `POST responses` (`background`, `stream`), `GET responses/{id}` (also `?stream=true`, which
 * replays the run's events) and `POST responses/{id}/cancel`. A background run answers `queued`,
 * then `in_progress` to its first `pollsBeforeDone` polls, then `completed` with its usage.
 */
type FakeResponsesAnswer =
  | { kind: "json"; status: number; body: unknown }
  | { kind: "sse"; events: string[] };

interface Run {
  id: string;
  createdAt: number;
  model: string;
  background: boolean;
  status: "queued" | "in_progress" | "completed" | "cancelled";
  pollsLeft: number;
  text: string;
  usage: FakeUsage;
  tools: unknown[];
  /** The request's `instructions` and `metadata`, which the API echoes (before `model`, and last). */
  instructions: unknown;
  metadata: unknown;
}

export interface FakeResponsesApi {
  /** The answer to a Responses API request, or null when the path is not one of its. */
  handle(
    method: string,
    path: string,
    query: string,
    json: Record<string, unknown>,
    text: string,
    usage: FakeUsage,
  ): FakeResponsesAnswer | null;
  /** How many polls a background run answers `in_progress` before it completes (default 1). */
  setPollsBeforeDone(polls: number): void;
}

export function createFakeResponsesApi(): FakeResponsesApi {
  const runs = new Map<string, Run>();
  let pollsBeforeDone = 1;

  function create(json: Record<string, unknown>, text: string, usage: FakeUsage): FakeResponsesAnswer {
    const background = json.background === true;
    const run: Run = {
      id: `resp_${randomBytes(24).toString("hex")}`,
      createdAt: Math.floor(Date.now() / 1000),
      model: typeof json.model === "string" ? json.model : "unknown-model",
      background,
      status: background && json.stream !== true ? "queued" : "completed",
      pollsLeft: pollsBeforeDone,
      text,
      usage: { ...usage },
      tools: Array.isArray(json.tools) ? json.tools : [],
      instructions: typeof json.instructions === "string" ? json.instructions : null,
      metadata: json.metadata !== null && typeof json.metadata === "object" ? json.metadata : {},
    };
    runs.set(run.id, run);
    if (json.stream === true) return { kind: "sse", events: runEvents(run) };
    return { kind: "json", status: 200, body: responseObject(run) };
  }

  function retrieve(run: Run, query: string): FakeResponsesAnswer {
    const streamed = /(?:^|&)stream=true(?:&|$)/.test(query);
    if (run.status === "queued" || run.status === "in_progress") {
      if (run.pollsLeft > 0 && !streamed) {
        run.pollsLeft--;
        run.status = "in_progress";
      } else run.status = "completed";
    }
    if (streamed) return { kind: "sse", events: runEvents(run) };
    return { kind: "json", status: 200, body: responseObject(run) };
  }

  return {
    handle(method, path, query, json, text, usage) {
      if (method === "POST" && path === "/a/v1/responses") return create(json, text, usage);
      const one = /^\/a\/v1\/responses\/([^/]+)(\/cancel)?$/.exec(path);
      if (!one) return null;
      const run = runs.get(one[1] ?? "");
      if (!run) return notFound(one[1] ?? "");
      if (method === "GET" && !one[2]) return retrieve(run, query);
      if (method === "POST" && one[2]) {
        if (!run.background) return invalid("Only responses created with background=true can be cancelled.");
        if (run.status === "queued" || run.status === "in_progress") run.status = "cancelled";
        return { kind: "json", status: 200, body: responseObject(run) };
      }
      return null;
    },
    setPollsBeforeDone(polls) {
      pollsBeforeDone = polls;
    },
  };
}

/** A response object in the API's field order: the top-level fields first, then output, tools, usage. */
function responseObject(run: Run) {
  const done = run.status === "completed" || run.status === "cancelled";
  return {
    id: run.id,
    object: "response",
    created_at: run.createdAt,
    status: run.status,
    background: run.background,
    error: null,
    incomplete_details: null,
    instructions: run.instructions,
    max_output_tokens: null,
    model: run.model,
    // Output items carry an `id` and a `status` of their own.
    output:
      run.status === "completed"
        ? [
            {
              id: messageId(run),
              type: "message",
              status: "completed",
              role: "assistant",
              content: [{ type: "output_text", text: run.text, annotations: [] }],
            },
          ]
        : [],
    parallel_tool_calls: true,
    previous_response_id: null,
    reasoning: { effort: null, summary: null },
    store: true,
    temperature: 1,
    text: { format: { type: "text" } },
    tool_choice: "auto",
    tools: run.tools,
    top_p: 1,
    truncation: "disabled",
    usage: done
      ? {
          input_tokens: run.usage.input,
          input_tokens_details: {
            cached_tokens: run.usage.cached,
            ...(run.usage.cacheWrite === undefined ? {} : { cache_write_tokens: run.usage.cacheWrite }),
          },
          output_tokens: run.usage.output,
          output_tokens_details: { reasoning_tokens: run.usage.reasoning },
          total_tokens: run.usage.input + run.usage.output,
        }
      : null,
    user: null,
    metadata: run.metadata,
  };
}

/**
 * The run's whole event stream, from `response.created` to its terminal event, with the events the
 * API sends around a message's text: its output item and content part are added, the text comes in
 * deltas, then each is done (in that order), before `response.completed`.
 */
function runEvents(run: Run): string[] {
  const final = run.status;
  const at = (status: Run["status"]) => responseObject({ ...run, status });
  const events: Array<[string, Record<string, unknown>]> = [
    ["response.created", { response: at(run.background ? "queued" : "in_progress") }],
    ["response.in_progress", { response: at("in_progress") }],
  ];
  if (final === "completed") {
    const message = { id: messageId(run), type: "message", role: "assistant" };
    const part = (text: string) => ({ type: "output_text", annotations: [], logprobs: [], text });
    const inText = { item_id: message.id, output_index: 0, content_index: 0 };
    events.push(
      [
        "response.output_item.added",
        { output_index: 0, item: { ...message, status: "in_progress", content: [] } },
      ],
      ["response.content_part.added", { ...inText, part: part("") }],
      ...splitText(run.text).map((delta): [string, Record<string, unknown>] => [
        "response.output_text.delta",
        { ...inText, delta, logprobs: [] },
      ]),
      ["response.output_text.done", { ...inText, text: run.text, logprobs: [] }],
      ["response.content_part.done", { ...inText, part: part(run.text) }],
      [
        "response.output_item.done",
        { output_index: 0, item: { ...message, status: "completed", content: [part(run.text)] } },
      ],
      ["response.completed", { response: at("completed") }],
    );
  } else if (final === "cancelled") events.push(["response.cancelled", { response: at("cancelled") }]);
  return events.map(
    ([type, fields], index) =>
      `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: index, ...fields })}\n\n`,
  );
}

/** The id of the run's message, the same in its response object and its events. */
function messageId(run: Run): string {
  return `msg_${run.id.slice(5, 21)}`;
}

function notFound(id: string): FakeResponsesAnswer {
  return {
    kind: "json",
    status: 404,
    body: {
      error: {
        message: `Response with id '${id}' not found.`,
        type: "invalid_request_error",
        param: null,
        code: null,
      },
    },
  };
}

function invalid(message: string): FakeResponsesAnswer {
  return {
    kind: "json",
    status: 400,
    body: { error: { message, type: "invalid_request_error", param: null, code: null } },
  };
}
