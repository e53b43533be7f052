import {
  closesObjects,
  eachMember,
  keyIs,
  type Span,
  skipSpaces,
  valueEnd,
} from "../providers/json-bytes.js";
import { objectField, usageFromInteractions } from "../providers/usage-from-json.js";
import { emptyUsage, type TokenUsage } from "../usage/token-usage.js";
import type { ByteEnds } from "./byte-ends.js";
import { lastUsageObject } from "./json-body-usage.js";
import { meteredEventScanner } from "./sse-event-scanner.js";
import { isStreamErrorEvent } from "./stream-error-event.js";
import type { MeterReading, SseEventTap, UsageMeter } from "./usage-meter.js";

/**
 * Usage of provider C's Interactions API (`POST interactions`, `client.interactions.create` in
 * `@google/genai`): the interaction reports it as `usage` with `total_*` counts, not as
 * `usageMetadata` (usageFromInteractions maps them). The model is not read from the answer: the
 * request names it (`model`, or an `agent`), and RequestFacts reads it from there.
 *
 * A JSON answer is the interaction itself, whose `usage` is a top-level member: it is found by
 * walking the top-level members (native searches jump over strings, base64 outputs included), so a
 * `usage` inside the outputs (a function call's arguments, say) or the echoed tools is never taken
 * for it, and a body cut short still gives a `usage` that arrived whole before the cut. Of a body
 * over the meter's cap, the walk reads its first 4 KiB (Google's documented answer has `usage`
 * before the outputs); failing that, its last 64 KiB give the `usage` that closes the interaction
 * (closingUsage), and else none is recorded.
 *
 * A stream (`stream: true`) names each event (`event: interaction.start` and so on, the same as
 * its `event_type`). Only the lifecycle events that carry the interaction can carry its usage:
 * `interaction.complete` (and `interaction.start`) in the content-based stream (`@google/genai`
 * 1.x and 2.x), `interaction.completed` (and `interaction.created`) in the step-based one (3.x),
 * where `step.stop` and `interaction.status_update` may also report the interaction's usage so
 * far, as their own `usage` (not `step_usage`, the step's alone). Only those are parsed, and only
 * when they hold a `"usage"` object; the content and `step.delta` events are passed over by their
 * name. A stream without event names has each event that holds a `"usage"` object parsed. The last
 * report with a count wins, so a stream cut before the interaction completed records what it
 * reported until then (nothing when Google reports usage only on completion).
 */
export function interactionsJsonUsage(ends: ByteEnds | null, whole: Buffer | null): MeterReading {
  let usage: TokenUsage | null = null;
  if (ends !== null) {
    usage = topLevelUsage(ends.head()) ?? closingUsage(ends.tail(), 1);
  } else if (whole !== null) usage = topLevelUsage(whole);
  return { usage: usage ?? emptyUsage(), model: null };
}

export function interactionsSseMeter(tap?: SseEventTap): UsageMeter {
  let usage: TokenUsage | null = null;
  let failed = false;
  const onEvent = (event: string | undefined, data: string, cutTail?: Buffer) => {
    if (!failed) failed = isStreamErrorEvent(event, data);
    const seen = cutTail === undefined ? fromEvent(event, data) : fromCutEvent(event, data, cutTail);
    if (seen !== null) usage = seen;
  };
  const scanner = meteredEventScanner(onEvent, () => usage, tap);
  return {
    push: (chunk) => scanner.push(chunk),
    // Provider C's: @google/genai's Interactions stream drops a last event left without its blank line.
    end: () => {},
    finish: () =>
      failed
        ? { usage: usage ?? emptyUsage(), model: null, failed }
        : { usage: usage ?? emptyUsage(), model: null },
  };
}

const usageKey = Buffer.from('"usage"');
const usageObjectStart = /"usage"\s*:\s*\{/;

/** The lifecycle events whose `interaction` may carry its usage, in both versions of the stream. */
const interactionEvents = new Set([
  "interaction.start",
  "interaction.complete",
  "interaction.created",
  "interaction.completed",
]);

/** The step-based stream's events that report the usage so far as their own top-level `usage`. */
const runningUsageEvents = new Set(["step.stop", "interaction.status_update"]);

/** Whether an event may carry usage: a lifecycle event by its name; without a name, any. */
function mayCarryUsage(event: string | undefined): boolean {
  return event === undefined || interactionEvents.has(event) || runningUsageEvents.has(event);
}

function fromEvent(event: string | undefined, data: string): TokenUsage | null {
  if (!mayCarryUsage(event) || !usageObjectStart.test(data)) return null;
  let parsed: unknown;
  try {
    parsed = JSON.parse(data);
  } catch {
    return null;
  }
  // Without a name, the event's `event_type` says which it is.
  const type = event ?? objectField(parsed, "event_type");
  const reported =
    typeof type === "string" && runningUsageEvents.has(type)
      ? objectField(parsed, "usage")
      : objectField(objectField(parsed, "interaction"), "usage");
  return withCounts(usageFromInteractions(reported));
}

/**
 * An event over the scanner's cap (1 MiB; the completion event carries no outputs, so hardly ever):
 * the `usage` member of its `interaction`, found by walking the members of both from the start of
 * its data (`head`), else the one that closes the interaction at its end (`tail`), else none. A
 * `usage` inside the outputs (model output: a function call's arguments) is neither.
 */
function fromCutEvent(event: string | undefined, head: string, tail: Buffer): TokenUsage | null {
  // (A step.stop or status update that large is not read: they carry no output.)
  if (event !== undefined && !interactionEvents.has(event)) return null;
  return interactionUsage(Buffer.from(head)) ?? closingUsage(tail, 2);
}

/** The reading, when it has an input or output count; a `usage` without one is no report. */
function withCounts(usage: TokenUsage | null): TokenUsage | null {
  return usage !== null && (usage.inputTokens !== null || usage.outputTokens !== null) ? usage : null;
}

/**
 * The usage of the top-level `usage` member of the JSON object `body` (the last one whole, as far
 * as the body goes: a body cut short, or the first bytes of a large one, is walked up to the cut).
 * Null when there is none, or the text is not a JSON object's.
 */
function topLevelUsage(body: Buffer): TokenUsage | null {
  const open = skipSpaces(body, 0);
  return body[open] === 0x7b /* { */ ? usageMember(body, open) : null;
}

/** The usage of the `usage` member of the `interaction` member of the event object `data` (its first bytes, say). */
function interactionUsage(data: Buffer): TokenUsage | null {
  const open = skipSpaces(data, 0);
  if (data[open] !== 0x7b /* { */) return null;
  let interaction = -1;
  try {
    eachMember(data, open, (keyStart, keyEnd, start) => {
      if (data[start] !== 0x7b || !keyIs(data, keyStart, keyEnd, "interaction")) return false;
      interaction = start;
      return true;
    });
  } catch {
    return null;
  }
  return interaction < 0 ? null : usageMember(data, interaction);
}

/** The usage of the last `usage` object member, whole, of the object that opens at `open`. */
function usageMember(body: Buffer, open: number): TokenUsage | null {
  // Assigned in the walk's callback: typed so that it is not narrowed to its initial null.
  let found = null as Span | null;
  try {
    eachMember(body, open, (keyStart, keyEnd, start) => {
      if (body[start] !== 0x7b || !keyIs(body, keyStart, keyEnd, "usage")) return false;
      const end = valueEnd(body, start);
      // An object cut short ends the walk (a number may look whole at the cut; only an object is read).
      if (end < 0) return true;
      found = { start, end };
      return false;
    });
    return (
      found && withCounts(usageFromInteractions(JSON.parse(body.toString("utf8", found.start, found.end))))
    );
  } catch {
    return null;
  }
}

/**
 * The usage of the last `usage` object in `tail` (the last bytes of a body or event too large to
 * keep, which may start anywhere) when what follows it shows it to be a member of the interaction
 * itself, `depth` objects from the top of the text (1: the interaction a JSON answer is; 2: the one
 * an event's data carries): only whole members, and the closing braces of those objects, up to the
 * end. A `usage` deeper inside (in the outputs: a function call's arguments, which the model writes)
 * is followed by the closing brackets of the values it is in, and is not read; nor is any then.
 */
function closingUsage(tail: Buffer, depth: 1 | 2): TokenUsage | null {
  const found = lastUsageObject(tail, usageKey, depth);
  if (found === null || !closesObjects(tail, found.end + 1, depth)) return null;
  return withCounts(usageFromInteractions(found.value));
}
