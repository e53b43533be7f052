import { type TokenUsage, tokenCount } from "../usage/token-usage.js";

/**
 * Token usage as each provider's wire format reports it, mapped onto TokenUsage. Missing counts
 * stay null. Provider A covers chat completions, embeddings and the Responses API.
 */
type Json = Record<string, unknown>;

const object = (value: unknown): Json | null =>
  typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Json) : null;
const count = tokenCount;

export function usageFromProviderA(usage: unknown): TokenUsage | null {
  const record = object(usage);
  if (!record) return null;
  if ("input_tokens" in record || "output_tokens" in record) {
    return {
      inputTokens: count(record.input_tokens),
      outputTokens: count(record.output_tokens),
      cachedInputTokens: count(object(record.input_tokens_details)?.cached_tokens),
      reasoningTokens: count(object(record.output_tokens_details)?.reasoning_tokens),
    };
  }
  const completion = count(record.completion_tokens);
  return {
    inputTokens: count(record.prompt_tokens),
    // Embeddings report no completion tokens: their output is zero, not unknown.
    outputTokens: completion ?? (count(record.prompt_tokens) !== null ? 0 : null),
    cachedInputTokens: count(object(record.prompt_tokens_details)?.cached_tokens),
    reasoningTokens: count(object(record.completion_tokens_details)?.reasoning_tokens),
  };
}

/** Provider B: input includes cache reads and writes; output from the latest report. */
export function usageFromProviderB(usage: unknown, previous: TokenUsage | null): TokenUsage | null {
  const record = object(usage);
  if (!record) return previous;
  const fresh = count(record.input_tokens);
  const cacheRead = count(record.cache_read_input_tokens);
  const cacheWrite = count(record.cache_creation_input_tokens);
  const input =
    fresh === null && cacheRead === null && cacheWrite === null
      ? null
      : (fresh ?? 0) + (cacheRead ?? 0) + (cacheWrite ?? 0);
  return {
    inputTokens: input ?? previous?.inputTokens ?? null,
    outputTokens: count(record.output_tokens) ?? previous?.outputTokens ?? null,
    cachedInputTokens: cacheRead ?? previous?.cachedInputTokens ?? null,
    reasoningTokens: null,
  };
}

/** Provider C: output counts candidates plus thoughts (both are billed as output). */
export function usageFromProviderC(usageMetadata: unknown): TokenUsage | null {
  const record = object(usageMetadata);
  if (!record) return null;
  const candidates = count(record.candidatesTokenCount);
  const thoughts = count(record.thoughtsTokenCount);
  return {
    inputTokens: count(record.promptTokenCount),
    outputTokens: candidates === null && thoughts === null ? null : (candidates ?? 0) + (thoughts ?? 0),
    cachedInputTokens: count(record.cachedContentTokenCount),
    reasoningTokens: thoughts,
  };
}

export function objectField(value: unknown, field: string): unknown {
  return object(value)?.[field];
}
