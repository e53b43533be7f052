/**
 * Token counts of one provider call. `null` means the provider did not report that count,
 * which is different from zero.
 */
export interface TokenUsage {
  inputTokens: number | null;
  outputTokens: number | null;
  /** Input tokens served from the provider's prompt cache (a subset of inputTokens). */
  cachedInputTokens: number | null;
  /** Output tokens spent on reasoning (a subset of outputTokens). */
  reasoningTokens: number | null;
}

export const emptyUsage = (): TokenUsage => ({
  inputTokens: null,
  outputTokens: null,
  cachedInputTokens: null,
  reasoningTokens: null,
});
