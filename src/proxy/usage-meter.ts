import type { ResponsesCall } from "../providers/provider-adapter.js";
import type { ProviderId } from "../providers/provider-id.js";
import { emptyUsage, type TokenUsage } from "../usage/token-usage.js";
import { isFinishedBackgroundRun } from "./background-run.js";
import type { ByteEnds } from "./byte-ends.js";
import { compactParts } from "./compact-parts.js";
import { HostedToolWatch, withHostedToolUse } from "./hosted-tool-usage.js";
import type { ImageListReading } from "./image-list-scanner.js";
import { interactionsJsonUsage, interactionsSseMeter } from "./interactions-usage.js";
import { fromJson, keepEnds } from "./json-body-usage.js";
import { type ResponseObjectFields, responseFieldsOfBody } from "./response-object-fields.js";
import { sseMeter } from "./sse-usage-meter.js";

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
  /** Set when a stream carried the provider's error event (isStreamErrorEvent): the call failed. */
  failed?: boolean;
}

export interface UsageMeter {
  /** Every response chunk, in order, as it is forwarded. */
  push(chunk: Buffer): void;
  /**
   * The answer ended cleanly (never called after a cut): an event stream's last event left without
   * its blank line is read where the provider's official client reads it (provider A's). Before finish.
   */
  end(): void;
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
/** A JSON answer kept whole up to this size counts in no budget (as a proxied body of 64 KiB or less is kept). */
const uncountedJsonBytes = 64 * 1024;

/**
 * Where a JSON meter counts the bytes over 64 KiB it keeps whole: the call's room in the body budget
 * (SLUICE_MAX_BUFFERED_BODY_BYTES). A no (the budget is full) is no refusal: the meter reads the
 * answer from its ends instead, as one over 4 MiB.
 */
export interface MeterRoom {
  /** Whether `bytes` more may be kept; if so they are counted until the call ends or `giveRoom`. */
  takeRoom(bytes: number): boolean;
  /** The meter let go of `bytes` it had counted. */
  giveRoom(bytes: number): void;
}

/**
 * The meter of an answer that can carry no usage (answerCarriesNoUsage): it keeps and reads none of
 * its bytes, and reports no tokens and no model (the row names the request's). One object for all.
 */
export const noUsageMeter: UsageMeter = {
  push() {},
  end() {},
  finish: () => ({ usage: emptyUsage(), model: null }),
};

const jsonType = "application/json";
const semicolon = 0x3b;

/** Top-level media types whose every format is binary, none of them JSON. */
const binaryTopLevelTypes = new Set(["audio", "image", "video", "font", "model"]);

/**
 * Media types of formats that are not one JSON document: a file's bytes, and JSON Lines (a batch's
 * input or output, one JSON value a line, whose tokens are not the call's).
 */
const notJsonTypes = new Set([
  "application/octet-stream",
  "application/pdf",
  "application/zip",
  "application/jsonl",
  "application/x-jsonl",
  "application/jsonlines",
  "application/x-jsonlines",
  "application/ndjson",
  "application/x-ndjson",
]);

/**
 * Whether an answer that is no event stream can carry no usage, by its Content-Type: one that names
 * a binary format (speech's `audio/mpeg`, an image's bytes, `application/octet-stream`) or JSON Lines.
 * Its bytes are then not kept for the meter (up to 4 MiB each) only to find no usage in them. Any
 * other type is read as JSON, as before: `application/json`, but also `text/plain`, a type Sluice
 * does not know, or none at all, which a compatible server may send its JSON with. Case-insensitive,
 * parameters (`; charset=utf-8`) aside.
 */
export function answerCarriesNoUsage(contentType: string): boolean {
  // The providers' own JSON answers, as they spell them, decided without a copy.
  if (
    contentType.startsWith(jsonType) &&
    (contentType.length === jsonType.length || contentType.charCodeAt(jsonType.length) === semicolon)
  )
    return false;
  const end = contentType.indexOf(";");
  const type = (end === -1 ? contentType : contentType.slice(0, end)).trim().toLowerCase();
  const slash = type.indexOf("/");
  return slash > 0 && (binaryTopLevelTypes.has(type.slice(0, slash)) || notJsonTypes.has(type));
}

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
 * event's; other calls pay nothing for that. Provider C's Interactions API (`interactions`) reports
 * usage in its own shape, read by its own reader (interactions-usage.ts), chosen here once per call.
 */
export function createUsageMeter(
  provider: ProviderId,
  options: {
    streaming: boolean;
    responses?: ResponsesCall | undefined;
    /** Provider C's Interactions API call (`interactions`): its usage is the interaction's `usage`. */
    interactions?: boolean | undefined;
    /** (Streaming only) Hears the scanned events too. */
    tap?: SseEventTap | undefined;
    /** (JSON only) Where the bytes kept whole over 64 KiB are counted; none: they count nowhere. */
    room?: MeterRoom | undefined;
  },
): UsageMeter {
  const responses = options.responses ?? null;
  const interactions = options.interactions === true;
  if (!options.streaming) return jsonMeter(provider, responses, interactions, options.room ?? null);
  if (interactions) return interactionsSseMeter(options.tap);
  return sseMeter(provider, responses, options.tap);
}

function jsonMeter(
  provider: ProviderId,
  responses: ResponsesCall | null,
  interactions: boolean,
  room: MeterRoom | null,
): UsageMeter {
  let chunks: Buffer[] = [];
  let size = 0;
  /** The bytes kept whole that `room` counts. */
  let counted = 0;
  let ends: ByteEnds | null = null;
  /** Read from its ends for want of room, not for its size: a cut one cannot show its usage is its own. */
  let roomless = false;
  /** The provider ended the answer cleanly: a JSON-array stream is whole, not cut. */
  let ended = false;
  /** (Responses API calls) A body read from its ends: a hosted tool's output item passed (HostedToolWatch). */
  let hostedTools: HostedToolWatch | null = null;
  return {
    end() {
      ended = true;
    },
    push(chunk) {
      if (ends !== null) {
        ends.push(chunk);
        hostedTools?.push(chunk);
        return;
      }
      size += chunk.length;
      chunks.push(chunk);
      compactParts(chunks, chunk);
      // A small answer (the common one) pays this comparison alone.
      if (size <= uncountedJsonBytes) return;
      if (size <= maxJsonBytes) {
        if (room === null || room.takeRoom(size - counted)) {
          counted = room === null ? 0 : size;
          return;
        }
        roomless = true;
      }
      room?.giveRoom(counted);
      counted = 0;
      ends = keepEnds(chunks);
      if (responses !== null) {
        hostedTools = new HostedToolWatch();
        for (const kept of chunks) hostedTools.push(kept);
      }
      chunks = [];
    },
    finish() {
      // Cut short and read from its ends for want of room: unlike a body kept whole, whose members
      // are walked, the ends cannot show that a usage object in them is the body's own and not one
      // the model wrote in a tool call's input (docs/proxy.md, Usage). None is taken.
      if (roomless && !ended && !interactions) {
        const reading: MeterReading = { usage: emptyUsage(), model: null };
        if (responses !== null) reading.response = responseFieldsOfBody((ends as ByteEnds).head());
        return reading;
      }
      const whole =
        ends !== null || size === 0
          ? null
          : chunks.length === 1
            ? (chunks[0] as Buffer)
            : Buffer.concat(chunks, size);
      if (interactions) return interactionsJsonUsage(ends, whole);
      if (responses === null) return fromJson(provider, ends, whole, ended);
      const response = responseFieldsOfBody(ends?.head() ?? whole ?? Buffer.alloc(0));
      // A poll reports no tokens but a finished background run's: the rest is not read at all.
      if (responses === "poll" && !isFinishedBackgroundRun(response))
        return { usage: emptyUsage(), model: null, response };
      const reading = fromJson(provider, ends, whole, ended);
      // Its hosted tools' use, reported beside the usage (`tool_usage`), is billed apart.
      // A body read from its ends: the tools it echoes after its `tool_usage` may fill the kept tail.
      const usage = withHostedToolUse(reading.usage, ends?.tail() ?? whole, 1, hostedTools?.seen === true);
      return { ...reading, usage, response };
    },
  };
}
