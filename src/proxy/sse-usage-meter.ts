import type { ResponsesCall } from "../providers/provider-adapter.js";
import type { ProviderId } from "../providers/provider-id.js";
import {
  objectField,
  type ProviderBCounts,
  providerBCounts,
  usageFromProviderA,
  usageFromProviderC,
  usageOfProviderB,
} from "../providers/usage-from-json.js";
import { emptyUsage, type TokenUsage } from "../usage/token-usage.js";
import { isFinishedBackgroundRun } from "./background-run.js";
import { withHostedToolUse } from "./hosted-tool-usage.js";
import { lastUsageObject, modelIn, modelPatterns, usageKeys } from "./json-body-usage.js";
import { type ResponseObjectFields, responseFieldsOfEvent } from "./response-object-fields.js";
import { serviceTierMember } from "./service-tier-member.js";
import { meteredEventScanner } from "./sse-event-scanner.js";
import { isStreamErrorEvent } from "./stream-error-event.js";
import type { MeterReading, SseEventTap, UsageMeter } from "./usage-meter.js";

export function sseMeter(
  provider: ProviderId,
  responses: ResponsesCall | null,
  tap?: SseEventTap,
): UsageMeter {
  let usage: TokenUsage | null = null;
  /** (Provider B) Its counts so far: a `message_delta` gives only the ones that changed. */
  let counts: ProviderBCounts | null = null;
  let model: string | null = null;
  /** (Responses API calls) The fields of the `response` in the event that carried `usage`. */
  let response: ResponseObjectFields | null = null;
  let lastGemini: string | null = null;
  let modelLookups = 0;
  let failed = false;
  /** (Responses API calls) An event of a hosted tool billed apart (isHostedToolEvent) was seen. */
  let hostedToolRan = false;
  const parse = (data: string): unknown => {
    try {
      return JSON.parse(data);
    } catch {
      return null;
    }
  };
  const onEvent = (event: string | undefined, data: string, cutTail?: Buffer) => {
    if (!failed) failed = isStreamErrorEvent(event, data);
    if (responses !== null && !hostedToolRan) hostedToolRan = isHostedToolEvent(event, data);
    if (cutTail !== undefined) {
      // An event over the scanner's cap: `data` is only its start.
      const seen = fromCutEvent(provider, event, data, cutTail, counts);
      if (seen !== null) {
        usage =
          responses !== null && provider === "provider-a"
            ? // The tools the response echoes after its tool_usage may fill the kept tail.
              withHostedToolUse(seen.usage, cutTail, 2, hostedToolRan)
            : seen.usage;
        counts = seen.counts ?? counts;
        model = counts?.servedBy ?? model ?? seen.model;
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
      // output. Either way it is the event's last usage object that is the chunk's or the
      // response's own (lastUsageObject), parsed alone: the rest of the event (a whole response,
      // for the Responses API) is never parsed. An output item's event carries no usage: a `usage`
      // in it is in a schema the item holds (an MCP server's tools).
      if (usageObjectStart.test(data) && !isOutputItemEvent(event, data)) {
        const bytes = Buffer.from(data);
        // The tier that served the call, in the same chunk (or the same event's response).
        const object = lastUsageObject(bytes, usageKeys["provider-a"], 2);
        const found = usageFromProviderA(object?.value, serviceTierMember(bytes, 1, object));
        if (found) {
          usage = found;
          if (responses !== null) {
            response = responseFieldsOfEvent(data);
            // The response's hosted tools' use, reported beside its usage (`tool_usage`), is billed apart.
            usage = withHostedToolUse(found, bytes, 2);
          }
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
      // A server-side fallback's answer is the fallback model's (message_start named the requested one).
      if (counts?.servedBy) model = counts.servedBy;
      // usageMetadata closes each chunk: searched from the end.
    } else if (data.lastIndexOf('"usageMetadata"') >= 0) lastGemini = data;
  };
  // (Each reading is a new object.)
  const scanner = meteredEventScanner(onEvent, () => usage, tap);
  return {
    push: (chunk) => scanner.push(chunk),
    end: () => scanner.end(readsUnterminatedLastEvent[provider]),
    finish() {
      if (provider === "provider-c" && lastGemini !== null) {
        const body = parse(lastGemini);
        usage = usageFromProviderC(objectField(body, "usageMetadata"));
        model = stringOr(objectField(body, "modelVersion"), model);
      }
      const reading: MeterReading =
        responses === null
          ? { usage: usage ?? emptyUsage(), model }
          : // A poll reports no tokens but a finished background run's.
            responses === "poll" && !isFinishedBackgroundRun(response)
            ? { usage: emptyUsage(), model: null, response }
            : { usage: usage ?? emptyUsage(), model, response };
      if (failed) reading.failed = true;
      return reading;
    },
  };
}

const usageObjectStart = /"usage"\s*:\s*\{/;

/**
 * (Provider A) Whether a Responses API event's type starts with `prefix`: by the event's name, or by
 * its data's `type` in a stream without event names (`{"type":"…`, as the API writes it compact).
 */
function isEventOfType(event: string | undefined, data: string, prefix: string): boolean {
  return event !== undefined
    ? event.startsWith(prefix)
    : data.startsWith(typePrefix) && data.startsWith(prefix, typePrefix.length);
}

const typePrefix = '{"type":"';

/** (Provider A) A Responses API event about one output item (`response.output_item.added`, `.done`). */
function isOutputItemEvent(event: string | undefined, data: string): boolean {
  return isEventOfType(event, data, outputItemEvent);
}

const outputItemEvent = "response.output_item.";

/**
 * (Provider A) A Responses API event of a hosted tool whose use `tool_usage` bills apart (image
 * generation, web search: `response.image_generation_call.completed`, …). Its completion event,
 * over the scanner's cap when it holds a generated image, may keep its `tool_usage` out of the
 * bytes read (withHostedToolUse).
 */
function isHostedToolEvent(event: string | undefined, data: string): boolean {
  return isEventOfType(event, data, imageGenerationEvent) || isEventOfType(event, data, webSearchEvent);
}

const imageGenerationEvent = "response.image_generation_call.";
const webSearchEvent = "response.web_search_call.";

/**
 * Whether the provider's official client reads a last event that the stream ends without its blank
 * line, at a clean end: `openai` does (its SSEDecoder flushes it: a Responses API stream's
 * `response.completed` and its usage reach the app); `@anthropic-ai/sdk` drops it, and
 * `@google/genai` throws "Incomplete JSON segment at the end" (the AI SDK's eventsource-parser drops
 * it for all three). The meter reads what that client gives its user; after a cut, no client reads it.
 */
const readsUnterminatedLastEvent: Record<ProviderId, boolean> = {
  "provider-a": true,
  "provider-b": false,
  "provider-c": false,
};

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
  const found = lastUsageObject(tail, usageKeys[provider], 2);
  switch (provider) {
    case "provider-a": {
      const usage = usageFromProviderA(found?.value, serviceTierMember(tail, 1, found));
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
