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
  /**
   * Provider B: input tokens written to its prompt cache (a subset of inputTokens, not of the
   * cached ones), billed above the input price, by how long the entry lives. Only when there were any.
   */
  cacheWriteTokens?: CacheWriteTokens;
  /**
   * Provider B: searches its web search server tool ran (`server_tool_use.web_search_requests`),
   * billed per search beside the tokens their results brought in. Only when there were any.
   */
  webSearches?: number;
  /**
   * Provider B (beta): tokens another model spent for this call (an advisor's sub-inference), billed
   * at that model's prices and not counted in this call's: its cost is unknown. Only when there were any.
   */
  otherModelTokens?: number;
  /**
   * Provider C: the input tokens that are audio, which Google bills at other prices than text on
   * some models and the catalogue has no prices for: the cost is unknown. Only when there were any.
   */
  audioInputTokens?: number;
}

export interface CacheWriteTokens {
  fiveMinutes: number;
  oneHour: number;
}

export const emptyUsage = (): TokenUsage => ({
  inputTokens: null,
  outputTokens: null,
  cachedInputTokens: null,
  reasoningTokens: null,
});

/**
 * A token count as a provider reported it, or null: a count is a whole number of tokens, and
 * anything else (negative, fractional, beyond 2^53, not a number) is not one. It would skew the
 * cost and the spend cap, or be refused by the usage table (and the row lost).
 */
export const tokenCount = (value: unknown): number | null =>
  typeof value === "number" && Number.isSafeInteger(value) && value >= 0 ? value : null;
