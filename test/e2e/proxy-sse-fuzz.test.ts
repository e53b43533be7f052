import type { IncomingMessage, ServerResponse } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ProviderId } from "../../src/providers/provider-id.js";
import type { FakeUsage } from "../fakes/fake-upstream-responses.js";
import { providerA, providerB, providerC } from "../fakes/fake-upstream-responses.js";
import { type LocalServer, startLocalServer } from "../support/local-server.js";
import { seededDraws } from "../support/seeded-random.js";
import {
  createTestProject,
  projectUsageRows,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

/**
 * Sluice's pass-through under a seeded fuzz of the wire forms a provider may legally send: each
 * case's recorded-shape stream (provider A's chat completions, with the usage chunk the client asked
 * for or the one Sluice asked for itself, and its Responses API; provider B's Messages; provider
 * C's SSE and its JSON-array stream) is sent once as recorded, in one chunk (the canonical stream),
 * and once varied as the SSE spec (WHATWG event stream interpretation) or JSON allows: chunk
 * boundaries anywhere (inside `data:`, inside a UTF-8 character, between a CR and its LF, inside a
 * leading byte order mark), CRLF, CR and LF line ends mixed, `data:`/`event:` with and without the
 * space, comment lines and comment-only blocks, `id:` and `retry:` fields, an event's field lines
 * in either order, its data split over several `data:` lines (at JSON whitespace, compact or
 * pretty), extra blank lines, a byte order mark, long events (past the usage filter's 64 KiB hold
 * and the scanner's 1 MiB cap), and for provider C's JSON array, pretty or compact elements with
 * any whitespace between them. Checked for each: the client gets exactly the provider's bytes (but
 * for the usage chunk Sluice asked for, which it drops as a whole event: every line from the blank
 * line before it to its own, a comment, `id:` or `retry:` among them); the varied stream's usage
 * row has the same tokens, cost and model as the canonical one's, and those are the provider's;
 * and every request has exactly one row.
 *
 * `SLUICE_SSE_FUZZ_SEED=<seed>` replays a run; every failure names its case's own seed, and
 * `SLUICE_SSE_FUZZ_CASE=<case seed>` runs that case alone (whatever the run's seed). Breaking the
 * scanner's CRLF split across chunks, its byte order mark, or the usage filter's line-end handling
 * each fails this test (checked when it was written).
 */

const seed = Number(process.env.SLUICE_SSE_FUZZ_SEED ?? 20_261_202);
const onlyCase = process.env.SLUICE_SSE_FUZZ_CASE;
const caseCount = 360;
const concurrency = 8;

type Shape = "a-chat" | "a-chat-injected" | "a-responses" | "b-messages" | "c-sse" | "c-array";
const shapes: Shape[] = ["a-chat", "a-chat-injected", "a-responses", "b-messages", "c-sse", "c-array"];

type Random = ReturnType<typeof seededDraws>;

/** One event as the provider means it: its name, its data, and whether it is provider A's usage chunk. */
interface Event {
  name?: string;
  data: string;
  usageChunk?: boolean;
}

/** The bytes of a stream, and the same bytes without provider A's usage chunk (its whole block). */
interface Rendered {
  bytes: Buffer;
  withoutUsageChunk: Buffer;
}

interface Case {
  index: number;
  caseSeed: number;
  shape: Shape;
  usage: FakeUsage;
  canonical: Rendered;
  varied: Rendered;
  chunks: Buffer[];
  /** The varied answer's content type (the canonical one's: the provider's). */
  contentType: string;
  /** What the variation did, for a failure message. */
  notes: string[];
}

function providerOf(shape: Shape): ProviderId {
  return shape.startsWith("a-") ? "provider-a" : shape.startsWith("b-") ? "provider-b" : "provider-c";
}

const models: Record<Shape, string> = {
  "a-chat": "gpt-4o-mini-2024-07-18",
  "a-chat-injected": "gpt-4o-mini-2024-07-18",
  "a-responses": "gpt-4o-mini-2024-07-18",
  "b-messages": "claude-haiku-4-5-20251001",
  "c-sse": "gemini-2.5-flash",
  "c-array": "gemini-2.5-flash",
};

const textPieces = [
  "Hello",
  " wörld",
  " — ",
  "世界",
  " 🎉",
  "✓",
  " naïve café",
  "\u2028",
  ' "quoted" ',
  "\\n",
  "ok",
];

function randomText(random: Random): string {
  // Now and then four characters or fewer: one text delta, and provider C's one chunk, usage and all.
  if (random.chance(0.2)) return random.pick(["ok", "世界", "🎉", "é"]);
  let text = "";
  for (let count = random.int(1, 12); count > 0; count--) text += random.pick(textPieces);
  return text;
}

/** A long text of `bytes` UTF-8 bytes or so, with multi-byte characters throughout. */
function longText(random: Random, bytes: number): string {
  const unit = `${random.pick(textPieces)}é世🎉abcdefghij`;
  return unit.repeat(Math.ceil(bytes / Buffer.byteLength(unit)));
}

/** The events of recorded-shape strings (`event: …\ndata: …\n\n`). */
function parseRecorded(events: string[]): Event[] {
  return events.map((block) => {
    const event: Event = { data: "" };
    for (const line of block.split("\n")) {
      if (line.startsWith("event: ")) event.name = line.slice(7);
      else if (line.startsWith("data: ")) event.data = line.slice(6);
    }
    return event;
  });
}

/** A Responses API stream as the API sends it: named events, the usage in `response.completed`. */
function responsesEvents(model: string, text: string, usage: FakeUsage, extra: string | null): Event[] {
  const response = (status: string, output: unknown[], withUsage: boolean) => ({
    id: "resp_fuzz",
    object: "response",
    created_at: 1_763_000_000,
    status,
    error: null,
    incomplete_details: null,
    instructions: null,
    model,
    output,
    parallel_tool_calls: true,
    previous_response_id: null,
    reasoning: { effort: null, summary: null },
    service_tier: "default",
    store: false,
    temperature: 1,
    text: { format: { type: "text" } },
    tool_choice: "auto",
    tools: [],
    top_p: 1,
    truncation: "disabled",
    usage: withUsage
      ? {
          input_tokens: usage.input,
          input_tokens_details: { cached_tokens: usage.cached },
          output_tokens: usage.output,
          output_tokens_details: { reasoning_tokens: usage.reasoning },
          total_tokens: usage.input + usage.output,
        }
      : null,
    user: null,
    metadata: {},
  });
  const whole = `${text}${extra ?? ""}`;
  const message = (status: string, content: unknown[]) => ({
    id: "msg_fuzz",
    type: "message",
    status,
    role: "assistant",
    content,
  });
  const part = (value: string) => ({ type: "output_text", annotations: [], logprobs: [], text: value });
  const inText = { item_id: "msg_fuzz", output_index: 0, content_index: 0 };
  const deltas = [text, ...(extra === null ? [] : [extra])];
  const list: Array<[string, Record<string, unknown>]> = [
    ["response.created", { response: response("in_progress", [], false) }],
    ["response.in_progress", { response: response("in_progress", [], false) }],
    ["response.output_item.added", { output_index: 0, item: message("in_progress", []) }],
    ["response.content_part.added", { ...inText, part: part("") }],
    ...deltas.map((delta): [string, Record<string, unknown>] => [
      "response.output_text.delta",
      { ...inText, delta, logprobs: [] },
    ]),
    ["response.output_text.done", { ...inText, text: whole, logprobs: [] }],
    ["response.content_part.done", { ...inText, part: part(whole) }],
    ["response.output_item.done", { output_index: 0, item: message("completed", [part(whole)]) }],
    ["response.completed", { response: response("completed", [message("completed", [part(whole)])], true) }],
  ];
  return list.map(([type, fields], index) => ({
    name: type,
    data: JSON.stringify({ type, sequence_number: index, ...fields }),
  }));
}

/**
 * The case's events as the provider means them. `long`: the size of one long event's text, or 0:
 * provider A's and B's as an extra text delta, the Responses API's in its deltas and so in
 * `response.completed` (the usage event), provider C's in its last chunk (its usage chunk too).
 */
function eventsOf(shape: Shape, usage: FakeUsage, text: string, long: string | null): Event[] {
  const model = models[shape];
  switch (shape) {
    case "a-chat":
    case "a-chat-injected": {
      const events = parseRecorded(providerA.chunks(model, text, usage, true));
      for (const event of events) if (event.data.includes('"choices":[],')) event.usageChunk = true;
      if (long !== null) {
        const delta = JSON.parse(events[1]?.data as string) as { choices: Array<{ delta: unknown }> };
        (delta.choices[0] as { delta: unknown }).delta = { content: long };
        events.splice(2, 0, { data: JSON.stringify(delta) });
      }
      return events;
    }
    case "a-responses":
      return responsesEvents(model, text, usage, long);
    case "b-messages": {
      const events = parseRecorded(providerB.events(model, text, usage));
      if (long !== null) {
        const at = events.findIndex((event) => event.name === "content_block_delta");
        events.splice(at, 0, {
          name: "content_block_delta",
          data: JSON.stringify({
            type: "content_block_delta",
            index: 0,
            delta: { type: "text_delta", text: long },
          }),
        });
      }
      return events;
    }
    case "c-sse":
    case "c-array": {
      const chunks = providerC.chunks(model, text, usage) as Array<{
        candidates: Array<{ content: { parts: Array<{ text: string }> } }>;
      }>;
      const last = chunks.at(-1);
      if (long !== null && last) (last.candidates[0]?.content.parts[0] as { text: string }).text += long;
      return chunks.map((chunk) => ({ data: JSON.stringify(chunk) }));
    }
  }
}

/** The stream as the provider records it: `data: …` and a blank line, LF (provider C: CRLF); C's array as the fake sends it. */
function renderCanonical(shape: Shape, events: Event[]): Rendered {
  if (shape === "c-array") {
    const bytes = Buffer.from(`[${events.map((event) => event.data).join(",\r\n")}]`);
    return { bytes, withoutUsageChunk: bytes };
  }
  const end = shape === "c-sse" ? "\r\n" : "\n";
  const block = (event: Event) =>
    `${event.name === undefined ? "" : `event: ${event.name}${end}`}data: ${event.data}${end}${end}`;
  const bytes = Buffer.from(events.map(block).join(""));
  const withoutUsageChunk = Buffer.from(
    events
      .filter((event) => !event.usageChunk)
      .map(block)
      .join(""),
  );
  return { bytes, withoutUsageChunk };
}

/** Where a compact JSON text may be split into lines: after a comma outside any string. */
function structuralCommas(json: string): number[] {
  const found: number[] = [];
  let inString = false;
  for (let at = 0; at < json.length; at++) {
    const char = json[at];
    if (inString) {
      if (char === "\\") at++;
      else if (char === '"') inString = false;
    } else if (char === '"') inString = true;
    else if (char === ",") found.push(at + 1);
  }
  return found;
}

/** The data values an event's data is sent as: one, or several that join (with LF) to the same JSON. */
function dataLines(random: Random, data: string, notes: Set<string>): string[] {
  if (data === "[DONE]") return [data];
  const roll = random.next();
  if (roll < 0.12) {
    // Pretty: the same JSON value, one member a line (a different text, the same value).
    notes.add("pretty multi-line data");
    return JSON.stringify(JSON.parse(data), null, random.pick([1, 2, "\t"])).split("\n");
  }
  if (roll < 0.3) {
    const commas = structuralCommas(data);
    if (commas.length === 0) return [data];
    notes.add("data split at commas");
    const cuts = [...new Set(Array.from({ length: random.int(1, 4) }, () => random.pick(commas)))].sort(
      (a, b) => a - b,
    );
    const lines: string[] = [];
    let from = 0;
    for (const cut of cuts) {
      lines.push(data.slice(from, cut));
      from = cut;
    }
    lines.push(data.slice(from));
    return lines;
  }
  return [data];
}

/**
 * The events as a provider may legally send them (see the file's comment): the bytes, and the same
 * bytes without the block of provider A's usage chunk (from the end of the blank line before it
 * to the end of its own), which is what Sluice forwards when it asked for that chunk itself.
 */
function renderVaried(random: Random, shape: Shape, events: Event[], notes: Set<string>): Rendered {
  if (shape === "c-array") {
    const pretty = random.chance(0.5);
    const separators = [",", ",\r\n", "\n,\r\n", " ,\n", "\r\n,\r\n", ",\t"];
    let text = random.pick(["[", "[\n", "[\r\n", " ["]);
    events.forEach((event, index) => {
      if (index > 0) text += random.pick(separators);
      text += pretty ? JSON.stringify(JSON.parse(event.data), null, random.pick([1, 2])) : event.data;
    });
    text += random.pick(["]", "\n]", "\r\n]", "]\n", "]\r\n"]);
    notes.add(pretty ? "pretty array" : "compact array");
    const bytes = Buffer.from(text);
    return { bytes, withoutUsageChunk: bytes };
  }
  const style = random.pick(["lf", "crlf", "cr", "mixed"] as const);
  notes.add(`line ends ${style}`);
  let previousCarriageReturn = false;
  /** A line end; a blank line after a lone CR must not start with an LF (it would join that CR). */
  const lineEnd = (blank: boolean): string => {
    let end: string;
    if (style === "lf") end = "\n";
    else if (style === "crlf") end = "\r\n";
    else if (style === "cr") end = "\r";
    else end = random.pick(["\n", "\r\n", "\r"]);
    if (blank && previousCarriageReturn && end === "\n") end = random.pick(["\r", "\r\n"]);
    previousCarriageReturn = end === "\r";
    return end;
  };
  const line = (text: string) => `${text}${lineEnd(false)}`;
  const field = (name: string, value: string) => {
    // Without the space only where the value does not start with one (it would be taken as the space).
    const space = value.startsWith(" ") || random.chance(0.6) ? " " : "";
    if (space === "") notes.add(`${name}: without the space`);
    return line(`${name}:${space}${value}`);
  };
  const comment = () => {
    notes.add("comments");
    return line(random.pick([": ping", ":", ":keep-alive", ": OPENROUTER PROCESSING", ":: é🎉"]));
  };
  const blocks: Array<{ text: string; usageChunk: boolean }> = [];
  if (random.chance(0.05)) {
    // Padding that a server sends first to get buffering proxies to pass the stream on.
    notes.add("padding comment");
    blocks.push({
      text: `${line(`:${" ".repeat(random.int(2048, 8192))}`)}${lineEnd(true)}`,
      usageChunk: false,
    });
  }
  for (const event of events) {
    if (random.chance(0.01)) {
      // A comment line past the scanner's cap, in a block of its own: no event.
      notes.add("a comment past 1 MiB");
      blocks.push({ text: `${line(`:${"x".repeat(1_100_000)}`)}${lineEnd(true)}`, usageChunk: false });
    }
    if (random.chance(0.06)) {
      notes.add("comment-only block");
      blocks.push({ text: `${comment()}${lineEnd(true)}`, usageChunk: false });
    }
    if (random.chance(0.04)) {
      notes.add("extra blank line");
      blocks.push({ text: lineEnd(true), usageChunk: false });
    }
    if (random.chance(0.03)) {
      // A name with no data dispatches nothing, and names no later event.
      notes.add("event-only block");
      const name = random.pick(["message_delta", "message_start", "response.completed", "error"]);
      blocks.push({ text: `${field("event", name)}${lineEnd(true)}`, usageChunk: false });
    }
    const values = dataLines(random, event.data, notes);
    const nameLast = event.name !== undefined && random.chance(0.15);
    if (nameLast) notes.add("event: after data:");
    let text = "";
    if (random.chance(0.08)) text += comment();
    if (random.chance(0.06)) {
      notes.add("id:");
      text += field("id", String(random.int(0, 999)));
    }
    if (random.chance(0.04)) {
      notes.add("retry:");
      text += field("retry", String(random.int(100, 10_000)));
    }
    if (random.chance(0.03)) {
      notes.add("unknown field");
      text += field(random.pick(["foo", "Data", "data ", "datum"]), "{}");
    }
    if (event.name !== undefined && !nameLast) text += field("event", event.name);
    values.forEach((value, index) => {
      text += field("data", value);
      if (index < values.length - 1 && random.chance(0.05)) text += comment();
      // A bare `data` line is an empty data value: one more LF in the data, JSON whitespace.
      if (index < values.length - 1 && random.chance(0.05)) {
        notes.add("bare data line");
        text += line("data");
      }
    });
    if (nameLast) text += field("event", event.name as string);
    if (random.chance(0.04)) text += comment();
    blocks.push({ text: `${text}${lineEnd(true)}`, usageChunk: event.usageChunk === true });
  }
  const bom = random.chance(0.12) ? "\uFEFF" : "";
  if (bom) notes.add("byte order mark");
  return {
    bytes: Buffer.from(bom + blocks.map((block) => block.text).join("")),
    withoutUsageChunk: Buffer.from(
      bom +
        blocks
          .filter((block) => !block.usageChunk)
          .map((block) => block.text)
          .join(""),
    ),
  };
}

/** The bytes cut into chunks: at random places, and at the awkward ones. */
function chunksOf(random: Random, bytes: Buffer, notes: Set<string>): Buffer[] {
  if (bytes.length < 6000 && random.chance(0.04)) {
    notes.add("every byte a chunk");
    return Array.from({ length: bytes.length }, (_, at) => bytes.subarray(at, at + 1));
  }
  const cuts = new Set<number>();
  for (let count = random.int(0, 40); count > 0; count--) cuts.add(random.int(1, bytes.length - 1));
  const near = (needle: string, offsets: number[], label: string, p: number) => {
    const pattern = Buffer.from(needle);
    for (let at = bytes.indexOf(pattern); at >= 0; at = bytes.indexOf(pattern, at + 1))
      if (random.chance(p)) {
        cuts.add(at + random.pick(offsets));
        notes.add(label);
      }
  };
  near("data:", [1, 2, 3, 4, 5], "cut inside data:", 0.2);
  near("\r\n", [1], "cut between CR and LF", 0.4);
  near("\uFEFF", [1, 2], "cut inside the byte order mark", 0.8);
  near("event:", [3], "cut inside event:", 0.1);
  // Inside a multi-byte character: before one of its continuation bytes (a few, in a long stream).
  const inside: number[] = [];
  for (let at = 0; at < bytes.length; at++) if (((bytes[at] as number) & 0xc0) === 0x80) inside.push(at);
  for (let count = Math.min(inside.length, random.int(0, 12)); count > 0; count--) {
    cuts.add(random.pick(inside));
    notes.add("cut inside a UTF-8 character");
  }
  const sorted = [...cuts].filter((cut) => cut > 0 && cut < bytes.length).sort((a, b) => a - b);
  const chunks: Buffer[] = [];
  let from = 0;
  for (const cut of [...sorted, bytes.length]) {
    if (cut > from) chunks.push(bytes.subarray(from, cut));
    from = cut;
  }
  return chunks;
}

function planCase(index: number, caseSeed: number): Case {
  const random = seededDraws(caseSeed);
  const shape = random.pick(shapes);
  const input = random.int(1, 200_000);
  const output = random.int(1, 20_000);
  const usage: FakeUsage = {
    input,
    output,
    cached: random.int(0, input),
    reasoning: shape.startsWith("b-") ? 0 : random.int(0, output),
  };
  const notes = new Set<string>();
  const roll = random.next();
  const longBytes =
    shape === "c-array" && roll < 0.03
      ? 4_300_000 // a JSON answer past the 4 MiB the meter keeps whole: read from its ends
      : roll < 0.025
        ? 1_100_000 // an event past the scanner's 1 MiB cap: read from its ends
        : roll < 0.06
          ? random.int(70_000, 300_000) // past the usage filter's 64 KiB hold
          : 0;
  if (longBytes > 0) notes.add(`a long event (${longBytes} bytes)`);
  const events = eventsOf(
    shape,
    usage,
    randomText(random),
    longBytes > 0 ? longText(random, longBytes) : null,
  );
  const canonical = renderCanonical(shape, events);
  const varied = renderVaried(random, shape, events, notes);
  const chunks = chunksOf(random, varied.bytes, notes);
  notes.add(`${chunks.length} chunks`);
  const contentType = random.pick(
    shape === "c-array"
      ? ["application/json; charset=UTF-8", "application/json", "application/json;charset=utf-8"]
      : [
          "text/event-stream",
          "text/event-stream; charset=utf-8",
          "text/event-stream;charset=UTF-8",
          "Text/Event-Stream",
        ],
  );
  notes.add(contentType);
  return { index, caseSeed, shape, usage, canonical, varied, chunks, contentType, notes: [...notes] };
}

/** What the fake answers each case's two calls with, found by the `case <n> <form>` in the request. */
const answers = new Map<string, { contentType: string; chunks: Buffer[] }>();
/** The request bodies the fake received, by the same key. */
const received = new Map<string, string>();

async function answer(request: IncomingMessage, response: ServerResponse) {
  const parts: Buffer[] = [];
  for await (const part of request) parts.push(part as Buffer);
  const body = Buffer.concat(parts).toString("utf8");
  const key = /case \d+ (?:canonical|varied)/.exec(body)?.[0] ?? "";
  received.set(key, body);
  const planned = answers.get(key);
  if (planned === undefined) {
    response.writeHead(404, { "content-type": "application/json" }).end("{}");
    return;
  }
  response.writeHead(200, { "content-type": planned.contentType });
  // Each write is one chunk of the chunked body: undici hands Sluice each one apart.
  for (const chunk of planned.chunks) {
    if (!response.write(chunk)) await new Promise((resolve) => response.once("drain", resolve));
  }
  response.end();
}

describe("pass-through streams under a seeded fuzz of legal wire forms", () => {
  let upstream: LocalServer;
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    upstream = await startLocalServer((request, response) => {
      answer(request, response).catch(() => response.destroy());
    });
    sluice = await startTestGateway({
      providerABaseUrl: `${upstream.url}/a/v1`,
      providerBBaseUrl: `${upstream.url}/b/v1`,
      providerCBaseUrl: `${upstream.url}/c/v1beta`,
      rateLimitProjectPerMinute: 1_000_000,
      rateLimitIpPerMinute: 1_000_000,
    });
    project = await createTestProject(sluice.gateway);
  });

  afterAll(async () => {
    await sluice?.close();
    await upstream?.close();
  });

  /** Makes `kase`'s call for `form`; what the client got and the request id. */
  async function call(kase: Case, form: "canonical" | "varied") {
    const provider = providerOf(kase.shape);
    const base = `${sluice.url}/v1/${provider}/${project.projectId}`;
    const said = `case ${kase.index} ${form}`;
    const messages = [{ role: "user", content: said }];
    let url: string;
    let body: unknown;
    switch (kase.shape) {
      case "a-chat":
        url = `${base}/chat/completions`;
        body = { model: "gpt-4o-mini", messages, stream: true, stream_options: { include_usage: true } };
        break;
      case "a-chat-injected":
        url = `${base}/chat/completions`;
        body = { model: "gpt-4o-mini", messages, stream: true };
        break;
      case "a-responses":
        url = `${base}/responses`;
        body = { model: "gpt-4o-mini", input: said, stream: true, store: false };
        break;
      case "b-messages":
        url = `${base}/v1/messages`;
        body = { model: "claude-haiku-4-5", max_tokens: 64, messages, stream: true };
        break;
      default:
        url = `${base}/v1beta/models/gemini-2.5-flash:streamGenerateContent${kase.shape === "c-sse" ? "?alt=sse" : ""}`;
        body = { contents: [{ role: "user", parts: [{ text: said }] }] };
    }
    const response = await fetch(url, {
      method: "POST",
      headers: { authorization: `Bearer ${project.bearer(provider)}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    const bytes = Buffer.from(await response.arrayBuffer());
    return { status: response.status, bytes, requestId: response.headers.get("x-request-id") };
  }

  it(`sends the provider's bytes and meters them as the canonical stream, one row a call (seed ${seed})`, async () => {
    const seeds = seededDraws(seed);
    const cases =
      onlyCase === undefined
        ? Array.from({ length: caseCount }, (_, index) => planCase(index, Math.floor(seeds.next() * 2 ** 32)))
        : [planCase(0, Number(onlyCase))];
    for (const kase of cases) {
      const contentType = kase.shape === "c-array" ? "application/json; charset=UTF-8" : "text/event-stream";
      answers.set(`case ${kase.index} canonical`, { contentType, chunks: [kase.canonical.bytes] });
      answers.set(`case ${kase.index} varied`, { contentType: kase.contentType, chunks: kase.chunks });
    }
    const failures: string[] = [];
    const requestIds: Array<{ kase: Case; canonical: string | null; varied: string | null }> = [];
    let next = 0;
    const worker = async () => {
      for (let kase = cases[next++]; kase !== undefined; kase = cases[next++]) {
        const fail = (what: string) =>
          failures.push(
            `case ${kase.index} (${kase.shape}; SLUICE_SSE_FUZZ_CASE=${kase.caseSeed}; ${kase.notes.join(", ")}): ${what}`,
          );
        const canonical = await call(kase, "canonical");
        const varied = await call(kase, "varied");
        requestIds.push({ kase, canonical: canonical.requestId, varied: varied.requestId });
        const injected = kase.shape === "a-chat-injected";
        for (const [form, seen, sent] of [
          ["canonical", canonical, kase.canonical],
          ["varied", varied, kase.varied],
        ] as const) {
          if (seen.status !== 200) {
            fail(`${form}: status ${seen.status}`);
            continue;
          }
          const expected = injected ? sent.withoutUsageChunk : sent.bytes;
          if (!seen.bytes.equals(expected)) {
            let at = 0;
            while (at < expected.length && seen.bytes[at] === expected[at]) at++;
            fail(
              `${form}: the client got ${seen.bytes.length} bytes, not the ${expected.length} expected; first difference at ${at}: got ${JSON.stringify(seen.bytes.subarray(Math.max(0, at - 40), at + 40).toString("latin1"))}, expected ${JSON.stringify(expected.subarray(Math.max(0, at - 40), at + 40).toString("latin1"))}`,
            );
          }
          if (injected && !/"include_usage":true/.test(received.get(`case ${kase.index} ${form}`) ?? ""))
            fail(`${form}: Sluice did not ask for the usage chunk`);
        }
      }
    };
    await Promise.all(Array.from({ length: concurrency }, worker));

    // Exactly one row a call, and the varied call's row metered as the canonical one's.
    const expectedRows = cases.length * 2;
    let rows = await projectUsageRows(sluice, project);
    for (let waited = 0; rows.length < expectedRows && waited < 5000; waited += 50) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      rows = await projectUsageRows(sluice, project);
    }
    const byId = new Map<string, typeof rows>();
    for (const row of rows) byId.set(row.request_id, [...(byId.get(row.request_id) ?? []), row]);
    if (rows.length !== expectedRows) failures.push(`${rows.length} rows for ${expectedRows} calls`);
    const metered = [
      "input_tokens",
      "output_tokens",
      "cached_tokens",
      "reasoning_tokens",
      "cost_usd",
      "model",
    ] as const;
    for (const { kase, canonical, varied } of requestIds) {
      const fail = (what: string) =>
        failures.push(
          `case ${kase.index} (${kase.shape}; SLUICE_SSE_FUZZ_CASE=${kase.caseSeed}; ${kase.notes.join(", ")}): ${what}`,
        );
      const canonicalRows = byId.get(canonical ?? "") ?? [];
      const variedRows = byId.get(varied ?? "") ?? [];
      if (canonicalRows.length !== 1 || variedRows.length !== 1) {
        fail(`${canonicalRows.length} canonical rows, ${variedRows.length} varied rows`);
        continue;
      }
      const [was, is] = [canonicalRows[0], variedRows[0]] as [(typeof rows)[0], (typeof rows)[0]];
      const { usage } = kase;
      if (was.input_tokens !== usage.input || was.output_tokens !== usage.output || was.cost_usd === null)
        fail(
          `the canonical row is not the provider's usage: ${JSON.stringify(was)} for ${JSON.stringify(usage)}`,
        );
      for (const column of metered)
        if (is[column] !== was[column])
          fail(`${column}: varied ${JSON.stringify(is[column])}, canonical ${JSON.stringify(was[column])}`);
      if (is.outcome !== "ok" || is.status !== 200 || is.streamed !== 1)
        fail(`varied row ${is.status} ${is.outcome} streamed ${is.streamed}`);
    }
    expect(
      failures,
      `seed ${seed}: ${failures.length} problems\n${failures.slice(0, 20).join("\n")}`,
    ).toEqual([]);
  }, 90_000);
});
