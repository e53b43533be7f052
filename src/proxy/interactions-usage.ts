import { keyIs, skipSpaces, valueEnd } from "../providers/json-bytes.js";
import { objectField, usageFromInteractions } from "../providers/usage-from-json.js";
import { emptyUsage, type TokenUsage } from "../usage/token-usage.js";
import type { ByteEnds } from "./byte-ends.js";
import { lastUsageObject } from "./json-body-usage.js";
import { meteredEventScanner } from "./sse-event-scanner.js";
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
 * before the outputs); failing that, the last `usage` object of its last 64 KiB is read.
 *
 * A stream (`stream: true`) names each event (`event: interaction.start` and so on, the same as
 * its `event_type`). Only the lifecycle events that carry the interaction can carry its usage:
 * `interaction.complete` (and `interaction.start`) in the API version the SDK reads,
 * `interaction.completed` (and `interaction.created`) in the step-based one. Only those are parsed,
 * and only when they hold a `"usage"` object; the content events are passed over by their name. A
 * stream without event names has each event that holds a `"usage"` object parsed. The last report
 * with a count wins, so a stream cut before the interaction completed records what it reported
 * until then (usually nothing: Google reports usage on completion).
 */
export function interactionsJsonUsage(ends: ByteEnds | null, whole: Buffer | null): MeterReading {
  let usage: TokenUsage | null = null;
  if (ends !== null) {
    usage =
      topLevelUsage(ends.head()) ??
      withCounts(usageFromInteractions(lastUsageObject(ends.tail(), usageKey)?.value));
  } else if (whole !== null) usage = topLevelUsage(whole);
  return { usage: usage ?? emptyUsage(), model: null };
}

export function interactionsSseMeter(tap?: SseEventTap): UsageMeter {
  let usage: TokenUsage | null = null;
  const onEvent = (event: string | undefined, data: string, cutTail?: Buffer) => {
    const seen = cutTail === undefined ? fromEvent(event, data) : fromCutEvent(event, data, cutTail);
    if (seen !== null) usage = seen;
  };
  const scanner = meteredEventScanner(onEvent, () => usage, tap);
  return {
    push: (chunk) => scanner.push(chunk),
    finish: () => ({ usage: usage ?? emptyUsage(), model: null }),
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

/** Whether an event may carry usage: a lifecycle event by its name; without a name, any. */
function mayCarryUsage(event: string | undefined): boolean {
  return event === undefined || interactionEvents.has(event);
}

function fromEvent(event: string | undefined, data: string): TokenUsage | null {
  if (!mayCarryUsage(event) || !usageObjectStart.test(data)) return null;
  let parsed: unknown;
  try {
    parsed = JSON.parse(data);
  } catch {
    return null;
  }
  return withCounts(usageFromInteractions(objectField(objectField(parsed, "interaction"), "usage")));
}

/**
 * An event over the scanner's cap (1 MiB; the completion event carries no outputs, so hardly ever):
 * its usage object from the start of its data (`head`), where the interaction's first members are,
 * else the last one of its end (`tail`).
 */
function fromCutEvent(event: string | undefined, head: string, tail: Buffer): TokenUsage | null {
  if (!mayCarryUsage(event)) return null;
  return (
    withCounts(usageFromInteractions(lastUsageObject(Buffer.from(head), usageKey)?.value)) ??
    withCounts(usageFromInteractions(lastUsageObject(tail, usageKey)?.value))
  );
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
  let at = skipSpaces(body, 0);
  if (body[at] !== 0x7b /* { */) return null;
  let found: { start: number; end: number } | null = null;
  at = skipSpaces(body, at + 1);
  try {
    while (body[at] === 0x22 /* " */) {
      const keyEnd = valueEnd(body, at);
      if (keyEnd < 0) break;
      const colon = skipSpaces(body, keyEnd);
      if (body[colon] !== 0x3a /* : */) break;
      const start = skipSpaces(body, colon + 1);
      const end = valueEnd(body, start);
      // A value cut short (a number may look whole at the cut; only an object is read).
      if (end <= start) break;
      if (body[start] === 0x7b && keyIs(body, at, keyEnd, "usage")) found = { start, end };
      at = skipSpaces(body, end);
      if (body[at] !== 0x2c /* , */) break;
      at = skipSpaces(body, at + 1);
    }
    return (
      found && withCounts(usageFromInteractions(JSON.parse(body.toString("utf8", found.start, found.end))))
    );
  } catch {
    return null;
  }
}
