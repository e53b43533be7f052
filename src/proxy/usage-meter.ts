import type { ResponsesCall } from "../providers/provider-adapter.js";
import type { ProviderId } from "../providers/provider-id.js";
import {
  objectField,
  type ProviderBCounts,
  providerBCounts,
  usageFromProviderA,
  usageFromProviderB,
  usageFromProviderC,
  usageOfProviderB,
} from "../providers/usage-from-json.js";
import { emptyUsage, type TokenUsage } from "../usage/token-usage.js";
import { isFinishedBackgroundRun } from "./background-run.js";
import { ByteEnds } from "./byte-ends.js";
import type { ImageListReading } from "./image-list-scanner.js";
import { lastMembers, quotedValueAfterKey, skipSpaces, valueEnd } from "./json-bytes.js";
import {
  type ResponseObjectFields,
  responseFieldsOfBody,
  responseFieldsOfEvent,
} from "./response-object-fields.js";
import { SseEventScanner } from "./sse-event-scanner.js";

/** What a meter saw of a response: its tokens and the model the provider says answered. */
export interface MeterReading {
  usage: TokenUsage;
  model: string | null;
  /**
   * Only when metering a Responses API call: the top-level fields of the response object the usage
   * came from (the body, or the `response` of the stream's event that carried the usage).
   */
  response?: ResponseObjectFields | null;
  /** Only when metering an image generation's answer: what its list of images holds. */
  images?: ImageListReading;
}

export interface UsageMeter {
  /** Every response chunk, in order, as it is forwarded. */
  push(chunk: Buffer): void;
  /** What was seen: at the end, or after a cut stream. Never throws. */
  finish(): MeterReading;
}

/**
 * Hears the events a streaming meter's scanner reads, and where each event ends in the chunk being
 * pushed (SseEventScanner's `onEventEnd`): for a caller that forwards the stream and must find
 * events in its bytes without scanning it a second time.
 */
export interface SseEventTap {
  /** Each dispatched event's data, after the meter read it; `usageRead`: the meter took usage from it (whole). */
  onEvent(data: string, usageRead: boolean): void;
  onEventEnd(at: number): void;
}

const maxJsonBytes = 4 * 1024 * 1024;
/** What is kept of a larger body: its start (where the model is read) and its end (the usage). */
const headBytes = 4096;
const tailBytes = 64 * 1024;

/**
 * Reads usage while a response streams through. JSON bodies are kept (up to 4 MiB) and read once
 * at the end (the usage object alone where it can be found, a Gemini JSON-array stream's last
 * one); of a larger body only copies of its first 4 KiB and last 64 KiB are kept, and the
 * usage object is read from that tail (all three providers put it at the end of the top-level
 * object). SSE streams are scanned event by event, and only events that can carry usage are
 * parsed (provider A: events with a `"usage":{` object, i.e. the last chat chunk and the Responses
 * API's completion events; provider B: `message_start` and `message_delta`; provider C: only the
 * last payload with `usageMetadata`, parsed at the end), so metering costs little more than the copy.
 * An event over the scanner's cap (1 MiB; a Responses API completion holding an image, say) is
 * read the same way from its first 4 KiB and last 64 KiB. A Responses API call (`responses`) also
 * reads the response object's top-level fields, from the body's first 4 KiB or from the usage
 * event's; other calls pay nothing for that.
 */
export function createUsageMeter(
  provider: ProviderId,
  options: {
    streaming: boolean;
    contentType: string;
    responses?: ResponsesCall | undefined;
    /** (Streaming only) Hears the scanned events too. */
    tap?: SseEventTap | undefined;
  },
): UsageMeter {
  const responses = options.responses ?? null;
  if (!options.streaming) return jsonMeter(provider, responses);
  return sseMeter(provider, responses, options.tap);
}

function jsonMeter(provider: ProviderId, responses: ResponsesCall | null): UsageMeter {
  let chunks: Buffer[] = [];
  let size = 0;
  let ends: ByteEnds | null = null;
  return {
    push(chunk) {
      if (ends !== null) {
        ends.push(chunk);
        return;
      }
      size += chunk.length;
      chunks.push(chunk);
      if (size > maxJsonBytes) {
        ends = keepEnds(chunks);
        chunks = [];
      }
    },
    finish() {
      const whole =
        ends !== null || size === 0
          ? null
          : chunks.length === 1
            ? (chunks[0] as Buffer)
            : Buffer.concat(chunks, size);
      if (responses === null) return fromJson(provider, ends, whole);
      const response = responseFieldsOfBody(ends?.head() ?? whole ?? Buffer.alloc(0));
      // A poll reports no tokens but a finished background run's: the rest is not read at all.
      if (responses === "poll" && !isFinishedBackgroundRun(response))
        return { usage: emptyUsage(), model: null, response };
      return { ...fromJson(provider, ends, whole), response };
    },
  };
}

/** What a JSON body says: `ends` of one over the cap, else the `whole` body (null when empty). */
function fromJson(provider: ProviderId, ends: ByteEnds | null, whole: Buffer | null): MeterReading {
  if (ends !== null) return fromBodyEnds(provider, ends.head(), ends.tail());
  if (whole === null) return { usage: emptyUsage(), model: null };
  const quick = fromUsageObject(provider, whole, whole);
  if (quick) return quick;
  // A Gemini JSON-array stream: its last usageMetadata holds the totals; the array is not parsed.
  if (provider === "provider-c" && isArray(whole)) return fromGeminiArray(whole);
  // Without the usage key anywhere a whole parse finds no usage either, and a large body (a
  // batch of Gemini embeddings, a file, audio) would stall the event loop for milliseconds.
  if (whole.lastIndexOf(usageKeys[provider]) < 0)
    return { usage: emptyUsage(), model: headModel(provider, whole, true) };
  try {
    return fromJsonBody(provider, JSON.parse(whole.toString("utf8")));
  } catch {
    return { usage: emptyUsage(), model: null };
  }
}

/**
 * A body over the cap: from here on only copies of its first and last bytes are kept, and the
 * chunks are let go. Every chunk passes the head until it is full; only the chunks that reach into
 * the last `tailBytes` need to pass the ring.
 */
function keepEnds(chunks: Buffer[]): ByteEnds {
  const ends = new ByteEnds(headBytes, tailBytes);
  let fromTail = chunks.length;
  for (let covered = 0; fromTail > 0 && covered < tailBytes; )
    covered += (chunks[--fromTail] as Buffer).length;
  for (let index = 0; index < fromTail; index++) ends.pushHead(chunks[index] as Buffer);
  for (let index = fromTail; index < chunks.length; index++) ends.push(chunks[index] as Buffer);
  return ends;
}

/** Usage from the ends of a body over the cap; nothing when the usage object is not whole in the tail. */
function fromBodyEnds(
  provider: ProviderId,
  head: Buffer,
  tail: Buffer,
): { usage: TokenUsage; model: string | null } {
  if (provider === "provider-c" && isArray(head)) return fromGeminiArray(tail);
  return fromUsageObject(provider, head, tail) ?? { usage: emptyUsage(), model: null };
}

const usageKeys: Record<ProviderId, Buffer> = {
  "provider-a": Buffer.from('"usage"'),
  "provider-b": Buffer.from('"usage"'),
  "provider-c": Buffer.from('"usageMetadata"'),
};
/** For event text (SSE): the key that names the model, and its value (1–200 bytes, no escapes). */
const modelPatterns: Record<ProviderId, RegExp> = {
  "provider-a": /"model"\s*:\s*"([^"\\]{1,200})"/,
  "provider-b": /"model"\s*:\s*"([^"\\]{1,200})"/,
  "provider-c": /"modelVersion"\s*:\s*"([^"\\]{1,200})"/,
};
/** The same keys for bodies, found on the bytes (quotedValueAfterKey: what the pattern would find). */
const modelKeys: Record<ProviderId, Buffer> = {
  "provider-a": Buffer.from('"model"'),
  "provider-b": Buffer.from('"model"'),
  "provider-c": Buffer.from('"modelVersion"'),
};

/** The model named in `body[from..limit)` (null when none), without decoding the text around it. */
function modelIn(provider: ProviderId, body: Buffer, from: number, limit: number): string | null {
  return quotedValueAfterKey(body, modelKeys[provider], from, limit);
}

/**
 * The model the body names: found in its first bytes, where providers A and B put it. A `whole`
 * body that holds more before it (a Responses API answer's long `instructions`, say) has its
 * top-level members walked, so the model is the one a stream of the same answer reports; the walk
 * reads every byte of nested values in JavaScript, so a body beyond `walkBytes` (a batch of float
 * embeddings, whose `model` follows its `data`) is read from its last bytes instead.
 */
function headModel(provider: ProviderId, body: Buffer, whole: boolean): string | null {
  const head = modelIn(provider, body, 0, headBytes);
  if (head !== null) return head;
  if (!whole || provider === "provider-c" || body.length <= headBytes) return null;
  return body.length <= walkBytes
    ? topLevelModel(body)
    : modelIn(provider, body, body.length - headBytes, body.length);
}

const walkBytes = 256 * 1024;

function topLevelModel(body: Buffer): string | null {
  try {
    const [model] = lastMembers(body, skipSpaces(body, 0), "model");
    if (model === null || body[model.start] !== 0x22 /* " */) return null;
    const value: unknown = JSON.parse(body.toString("utf8", model.start, model.end));
    return typeof value === "string" && value.length <= 200 ? value : null;
  } catch {
    return null;
  }
}

/**
 * The cheap path for a JSON response: parse only its top-level usage object (the last one in the
 * body; inside string values a quote would be escaped, so `"usage"` cannot match there) and read
 * the model with a pattern, working on the bytes rather than a string of the whole body. Null when
 * the body does not look like that; the caller then parses the whole body. `head` is the body's
 * start and `body` the body, or of a body over the cap its last bytes (where the key cannot match
 * inside a string either, wherever they start).
 */
function fromUsageObject(
  provider: ProviderId,
  head: Buffer,
  body: Buffer,
): { usage: TokenUsage; model: string | null } | null {
  if (provider === "provider-c" && isArray(head)) return null;
  const found = lastUsageObject(body, usageKeys[provider]);
  if (!found) return null;
  const usage =
    provider === "provider-a"
      ? usageFromProviderA(found.value)
      : provider === "provider-b"
        ? usageFromProviderB(found.value)
        : usageFromProviderC(found.value);
  if (!usage) return null;
  const model =
    provider === "provider-c"
      ? modelIn(provider, body, found.end, body.length)
      : headModel(provider, head, head === body);
  return { usage, model };
}

/**
 * The last `<key>: {…}` object in `body`, parsed alone (the body around it may be large; inside
 * string values a quote is escaped, so the key cannot match there). Null when there is none or it
 * does not parse.
 */
function lastUsageObject(body: Buffer, key: Buffer): { value: unknown; end: number } | null {
  let at = body.lastIndexOf(key);
  // A later key of that name whose value is no object (a Responses API `metadata` entry named
  // "usage", which comes after the usage) is passed over; a cut or broken object is not.
  while (at > 0 && !opensObject(body, at + key.length)) at = body.lastIndexOf(key, at - 1);
  return at < 0 ? null : objectAfterKey(body, at, key.length);
}

/** Whether `: {` (with any spaces) follows at `from`. */
function opensObject(body: Buffer, from: number): boolean {
  const colon = skipSpaces(body, from);
  return body[colon] === 0x3a /* : */ && body[skipSpaces(body, colon + 1)] === 0x7b /* { */;
}

/** The `{…}` object that follows the key at `at` (`<key> : {…}`), parsed; null when cut or not one. */
function objectAfterKey(body: Buffer, at: number, keyLength: number): { value: unknown; end: number } | null {
  const open = objectOpenAfterKey(body, at, keyLength);
  if (open < 0) return null;
  const end = valueEnd(body, open);
  return end < 0 ? null : parsedObject(body, open, end);
}

/** The offset of the `{` that follows the key at `at` (`<key> : {`); -1 when no object follows. */
function objectOpenAfterKey(body: Buffer, at: number, keyLength: number): number {
  let open = skipSpaces(body, at + keyLength);
  if (body[open] !== 0x3a /* : */) return -1;
  open = skipSpaces(body, open + 1);
  return body[open] === 0x7b /* { */ ? open : -1;
}

/** The object in `body[open..end)`, parsed (`end` of the result is its closing brace); null when it does not parse. */
function parsedObject(body: Buffer, open: number, end: number): { value: unknown; end: number } | null {
  try {
    return { value: JSON.parse(body.toString("utf8", open, end)), end: end - 1 };
  } catch {
    return null;
  }
}

/** Whether the JSON text starts an array (after any whitespace). */
function isArray(body: Buffer): boolean {
  return body[skipSpaces(body, 0)] === 0x5b /* [ */;
}

function fromJsonBody(provider: ProviderId, body: unknown): { usage: TokenUsage; model: string | null } {
  const model = (value: unknown) => (typeof value === "string" ? value : null);
  switch (provider) {
    case "provider-a": {
      const usage = usageFromProviderA(objectField(body, "usage"));
      return { usage: usage ?? emptyUsage(), model: model(objectField(body, "model")) };
    }
    case "provider-b":
      return {
        usage: usageFromProviderB(objectField(body, "usage")) ?? emptyUsage(),
        model: model(objectField(body, "model")),
      };
    case "provider-c":
      return {
        usage: usageFromProviderC(objectField(body, "usageMetadata")) ?? emptyUsage(),
        model: model(objectField(body, "modelVersion")),
      };
  }
}

/**
 * Usage from a Gemini JSON-array stream (`[{…},{…}]`), whole or cut, or from the last bytes of one:
 * the last usageMetadata object that is complete (a cut may go through the last one).
 *
 * The keys are tried from the last, and the work stays linear in the body: an object found cut
 * (it opens at `cutFrom` and never closes) is inside every earlier object that reaches it, so an
 * earlier object is read only up to there, and is cut too when it has not closed by then. A cut
 * body with many nested keys (a function call's arguments) is thus walked once, not once per key.
 * An object that closes but does not parse (never so in a well-formed answer) is given up after
 * `maxUnparsedObjects` of them, each of which may have been read to the end.
 */
function fromGeminiArray(body: Buffer): { usage: TokenUsage; model: string | null } {
  const key = usageKeys["provider-c"];
  let cutFrom = body.length;
  let unparsed = 0;
  for (
    let at = body.lastIndexOf(key);
    at >= 0 && unparsed < maxUnparsedObjects;
    at = at === 0 ? -1 : body.lastIndexOf(key, at - 1)
  ) {
    const open = objectOpenAfterKey(body, at, key.length);
    if (open < 0) continue;
    const end = valueEnd(body, open, cutFrom);
    if (end < 0) {
      cutFrom = Math.min(cutFrom, open);
      continue;
    }
    const found = parsedObject(body, open, end);
    const usage = found && usageFromProviderC(found.value);
    if (found && usage) {
      // Each element names the model after its usage object; else the first element that names it.
      const model =
        modelIn("provider-c", body, found.end, found.end + 2000) ?? modelIn("provider-c", body, 0, at + 2000);
      return { usage, model };
    }
    unparsed++;
  }
  return { usage: emptyUsage(), model: null };
}

const maxUnparsedObjects = 8;

function sseMeter(provider: ProviderId, responses: ResponsesCall | null, tap?: SseEventTap): UsageMeter {
  let usage: TokenUsage | null = null;
  /** (Provider B) Its counts so far: a `message_delta` gives only the ones that changed. */
  let counts: ProviderBCounts | null = null;
  let model: string | null = null;
  /** (Responses API calls) The fields of the `response` in the event that carried `usage`. */
  let response: ResponseObjectFields | null = null;
  let lastGemini: string | null = null;
  let modelLookups = 0;
  const parse = (data: string): unknown => {
    try {
      return JSON.parse(data);
    } catch {
      return null;
    }
  };
  const onEvent = (event: string | undefined, data: string, cutTail?: Buffer) => {
    if (cutTail !== undefined) {
      // An event over the scanner's cap: `data` is only its start.
      const seen = fromCutEvent(provider, event, data, cutTail, counts);
      if (seen !== null) {
        usage = seen.usage;
        counts = seen.counts ?? counts;
        model ??= seen.model;
        lastGemini = null; // (provider C: this event came after any kept before)
        if (responses !== null) response = responseFieldsOfEvent(data);
      }
      return;
    }
    if (provider === "provider-a") {
      if (model === null && modelLookups < 3) {
        // The first "model" in a chunk (or in response.created's response) names it.
        modelLookups++;
        model = modelPatterns["provider-a"].exec(data)?.[1] ?? null;
      }
      // Chat chunks carry `"usage":{…}` at the top level (null until the last one); the Responses
      // API's response.completed and response.incomplete carry it in `response`, after the
      // output. Either way it is the event's last usage object, parsed alone: the rest of the
      // event (a whole response, for the Responses API) is never parsed.
      if (usageObjectStart.test(data)) {
        const found = usageFromProviderA(lastUsageObject(Buffer.from(data), usageKeys["provider-a"])?.value);
        if (found) {
          usage = found;
          if (responses !== null) response = responseFieldsOfEvent(data);
        }
        if (model === null) model = modelPatterns["provider-a"].exec(data)?.[1] ?? null;
      }
    } else if (provider === "provider-b") {
      // Provider B names every event; without event lines, the type inside the data decides.
      if (event !== undefined ? event === "message_start" : data.includes('"message_start"')) {
        const message = objectField(parse(data), "message");
        counts = providerBCounts(objectField(message, "usage"), counts);
        usage = counts && usageOfProviderB(counts);
        model = stringOr(objectField(message, "model"), model);
      } else if (event !== undefined ? event === "message_delta" : data.includes('"message_delta"')) {
        counts = providerBCounts(objectField(parse(data), "usage"), counts);
        usage = counts && usageOfProviderB(counts);
      }
      // usageMetadata closes each chunk: searched from the end.
    } else if (data.lastIndexOf('"usageMetadata"') >= 0) lastGemini = data;
  };
  const scanner =
    tap === undefined
      ? new SseEventScanner(onEvent)
      : new SseEventScanner(
          (event, data, cutTail) => {
            const before = usage;
            onEvent(event, data, cutTail);
            // (Each reading is a new object.)
            tap.onEvent(data, cutTail === undefined && usage !== before);
          },
          undefined,
          (at) => tap.onEventEnd(at),
        );
  return {
    push: (chunk) => scanner.push(chunk),
    finish() {
      if (provider === "provider-c" && lastGemini !== null) {
        const body = parse(lastGemini);
        usage = usageFromProviderC(objectField(body, "usageMetadata"));
        model = stringOr(objectField(body, "modelVersion"), model);
      }
      if (responses === null) return { usage: usage ?? emptyUsage(), model };
      // A poll reports no tokens but a finished background run's.
      if (responses === "poll" && !isFinishedBackgroundRun(response))
        return { usage: emptyUsage(), model: null, response };
      return { usage: usage ?? emptyUsage(), model, response };
    },
  };
}

const usageObjectStart = /"usage"\s*:\s*\{/;

/**
 * An SSE event over the scanner's cap, read as its whole would be: the name and the start of its
 * data (`head`) decide whether it can carry usage and name the model; the usage object, the event's
 * last, is read from its end (`tail`). Null when it carries no usage, or the usage object is not
 * whole in the tail.
 */
function fromCutEvent(
  provider: ProviderId,
  event: string | undefined,
  head: string,
  tail: Buffer,
  previous: ProviderBCounts | null,
): { usage: TokenUsage; model: string | null; counts?: ProviderBCounts } | null {
  const found = lastUsageObject(tail, usageKeys[provider]);
  switch (provider) {
    case "provider-a": {
      const usage = usageFromProviderA(found?.value);
      return usage && { usage, model: modelPatterns[provider].exec(head)?.[1] ?? null };
    }
    case "provider-b": {
      const start = event !== undefined ? event === "message_start" : head.includes('"message_start"');
      const delta = event !== undefined ? event === "message_delta" : head.includes('"message_delta"');
      const counts = start || delta ? providerBCounts(found?.value, previous) : null;
      if (counts === null) return null;
      const model = start ? (modelPatterns[provider].exec(head)?.[1] ?? null) : null;
      return { usage: usageOfProviderB(counts), model, counts };
    }
    case "provider-c": {
      const usage = found && usageFromProviderC(found.value);
      if (!found || !usage) return null;
      return { usage, model: modelIn(provider, tail, found.end, tail.length) };
    }
  }
}

function stringOr(value: unknown, fallback: string | null): string | null {
  return typeof value === "string" ? value : fallback;
}
