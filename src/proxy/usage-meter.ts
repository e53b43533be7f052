import type { ProviderId } from "../providers/provider-id.js";
import {
  objectField,
  usageFromProviderA,
  usageFromProviderB,
  usageFromProviderC,
} from "../providers/usage-from-json.js";
import { emptyUsage, type TokenUsage } from "../usage/token-usage.js";
import { SseEventScanner } from "./sse-event-scanner.js";

export interface UsageMeter {
  /** Every response chunk, in order, as it is forwarded. */
  push(chunk: Buffer): void;
  /** What was seen: at the end, or after a cut stream. Never throws. */
  finish(): { usage: TokenUsage; model: string | null };
}

const maxJsonBytes = 4 * 1024 * 1024;

/**
 * Reads usage while a response streams through. JSON bodies are kept (up to 4 MiB) and parsed once
 * at the end. SSE streams are scanned event by event, and only events that can carry usage are
 * parsed (provider A: chunks with a `"usage":{`, Responses API `response.*` completion events;
 * provider B: `message_start` and `message_delta`; provider C: only the last payload with
 * `usageMetadata`, parsed at the end), so metering costs little more than the copy.
 */
export function createUsageMeter(
  provider: ProviderId,
  options: { streaming: boolean; contentType: string },
): UsageMeter {
  if (!options.streaming) return jsonMeter(provider);
  return sseMeter(provider);
}

function jsonMeter(provider: ProviderId): UsageMeter {
  const chunks: Buffer[] = [];
  let size = 0;
  let overflow = false;
  return {
    push(chunk) {
      if (overflow) return;
      size += chunk.length;
      if (size > maxJsonBytes) {
        overflow = true;
        chunks.length = 0;
      } else chunks.push(chunk);
    },
    finish() {
      if (overflow || size === 0) return { usage: emptyUsage(), model: null };
      const body = Buffer.concat(chunks, size);
      const quick = fromUsageObject(provider, body);
      if (quick) return quick;
      const text = body.toString("utf8");
      try {
        return fromJsonBody(provider, JSON.parse(text));
      } catch {
        // A cut Gemini JSON-array stream: use the last complete usageMetadata object in it.
        return provider === "provider-c" ? fromCutGeminiArray(text) : { usage: emptyUsage(), model: null };
      }
    },
  };
}

const usageKeys: Record<ProviderId, string> = {
  "provider-a": '"usage"',
  "provider-b": '"usage"',
  "provider-c": '"usageMetadata"',
};
const modelPatterns: Record<ProviderId, RegExp> = {
  "provider-a": /"model"\s*:\s*"([^"\\]{1,200})"/,
  "provider-b": /"model"\s*:\s*"([^"\\]{1,200})"/,
  "provider-c": /"modelVersion"\s*:\s*"([^"\\]{1,200})"/,
};

/**
 * The cheap path for a JSON response: parse only its top-level usage object (the last one in the
 * body; inside string values a quote would be escaped, so `"usage"` cannot match there) and read
 * the model with a pattern. Null when the body does not look like that; the caller then parses
 * the whole body.
 */
function fromUsageObject(
  provider: ProviderId,
  body: Buffer,
): { usage: TokenUsage; model: string | null } | null {
  if (provider === "provider-c" && body[0] === 0x5b) return null;
  const text = body.toString("latin1");
  const at = text.lastIndexOf(usageKeys[provider]);
  if (at < 0) return null;
  const open = text.indexOf("{", at);
  if (open < 0 || !/^"\w+"\s*:\s*$/.test(text.slice(at, open))) return null;
  const close = matchingBrace(text, open);
  if (close < 0) return null;
  let value: unknown;
  try {
    value = JSON.parse(text.slice(open, close + 1));
  } catch {
    return null;
  }
  const usage =
    provider === "provider-a"
      ? usageFromProviderA(value)
      : provider === "provider-b"
        ? usageFromProviderB(value, null)
        : usageFromProviderC(value);
  if (!usage) return null;
  const model = modelPatterns[provider].exec(
    provider === "provider-c" ? text.slice(close) : text.slice(0, 4096),
  );
  return { usage, model: model?.[1] ?? null };
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
        usage: usageFromProviderB(objectField(body, "usage"), null) ?? emptyUsage(),
        model: model(objectField(body, "model")),
      };
    case "provider-c": {
      const last = Array.isArray(body)
        ? [...body].reverse().find((item) => objectField(item, "usageMetadata"))
        : body;
      return {
        usage: usageFromProviderC(objectField(last, "usageMetadata")) ?? emptyUsage(),
        model: model(objectField(last, "modelVersion")),
      };
    }
  }
}

function fromCutGeminiArray(text: string): { usage: TokenUsage; model: string | null } {
  let at = text.lastIndexOf('"usageMetadata"');
  while (at >= 0) {
    const open = text.indexOf("{", at);
    const close = open < 0 ? -1 : matchingBrace(text, open);
    if (close > 0) {
      try {
        const usage = usageFromProviderC(JSON.parse(text.slice(open, close + 1)));
        const version = /"modelVersion"\s*:\s*"([^"]+)"/.exec(text.slice(0, at + 2000));
        if (usage) return { usage, model: version?.[1] ?? null };
      } catch {
        // fall through to an earlier occurrence
      }
    }
    at = text.lastIndexOf('"usageMetadata"', at - 1);
  }
  return { usage: emptyUsage(), model: null };
}

function matchingBrace(text: string, open: number): number {
  let depth = 0;
  let inString = false;
  for (let index = open; index < text.length; index++) {
    const char = text[index];
    if (inString) {
      if (char === "\\") index++;
      else if (char === '"') inString = false;
    } else if (char === '"') inString = true;
    else if (char === "{") depth++;
    else if (char === "}" && --depth === 0) return index;
  }
  return -1;
}

function sseMeter(provider: ProviderId): UsageMeter {
  let usage: TokenUsage | null = null;
  let model: string | null = null;
  let lastGemini: string | null = null;
  let modelLookups = 0;
  const parse = (data: string): unknown => {
    try {
      return JSON.parse(data);
    } catch {
      return null;
    }
  };
  const onEvent = (event: string | undefined, data: string) => {
    if (provider === "provider-a") {
      if (model === null && modelLookups < 3 && data.startsWith("{")) {
        modelLookups++;
        const first = parse(data);
        model = stringOr(
          objectField(first, "model"),
          stringOr(objectField(objectField(first, "response"), "model"), null),
        );
      }
      if (
        event?.startsWith("response.") ||
        data.includes('"response.completed"') ||
        data.includes('"response.incomplete"')
      ) {
        const response = objectField(parse(data), "response");
        const found = usageFromProviderA(objectField(response, "usage"));
        if (found) usage = found;
        model = stringOr(objectField(response, "model"), model);
      } else if (data.includes('"usage":{') || data.includes('"usage": {')) {
        const found = usageFromProviderA(objectField(parse(data), "usage"));
        if (found) usage = found;
      }
    } else if (provider === "provider-b") {
      if (event === "message_start" || data.includes('"message_start"')) {
        const message = objectField(parse(data), "message");
        usage = usageFromProviderB(objectField(message, "usage"), usage);
        model = stringOr(objectField(message, "model"), model);
      } else if (event === "message_delta" || data.includes('"message_delta"')) {
        usage = usageFromProviderB(objectField(parse(data), "usage"), usage);
      }
    } else if (data.includes('"usageMetadata"')) lastGemini = data;
  };
  const scanner = new SseEventScanner(onEvent);
  return {
    push: (chunk) => scanner.push(chunk),
    finish() {
      if (provider === "provider-c" && lastGemini !== null) {
        const body = parse(lastGemini);
        usage = usageFromProviderC(objectField(body, "usageMetadata"));
        model = stringOr(objectField(body, "modelVersion"), model);
      }
      return { usage: usage ?? emptyUsage(), model };
    },
  };
}

function stringOr(value: unknown, fallback: string | null): string | null {
  return typeof value === "string" ? value : fallback;
}
