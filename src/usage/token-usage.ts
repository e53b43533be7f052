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
   * Input tokens written to the provider's prompt cache (a subset of inputTokens, not of the cached
   * ones), billed above the input price, by how long the entry lives: provider B's
   * (`cache_creation_input_tokens`), and provider A's on the models that bill writes
   * (`cache_write_tokens`). Only when there were any.
   */
  cacheWriteTokens?: CacheWriteTokens;
  /**
   * Provider B: searches its web search server tool ran (`server_tool_use.web_search_requests`),
   * billed per search beside the tokens their results brought in. Only when there were any.
   */
  webSearches?: number;
  /**
   * Provider B (beta): the call's sampling steps, when its `usage.iterations` lists steps billed
   * apart from the answer's own: the answer's (the top-level counts, with the web searches) and each
   * compaction's (the same model) and advisor's (another model, `otherModel`). Each is priced on its
   * own, against its own long-context threshold, and the call costs their sum. The counts above stay
   * the row's: the answer's plus the compactions', without the advisors' (another model's tokens).
   * Only when there were such steps.
   */
  samplings?: readonly Sampling[];
  /**
   * Provider B: the call ran in fast mode (`usage.speed: "fast"`), which Anthropic bills at a
   * multiple of the model's standard prices, one per model, that the catalogue does not list. Only
   * when it did.
   */
  fastMode?: true;
  /**
   * Provider A's Responses API: its hosted tools ran at a cost of their own, which its answer
   * reports apart from the model's tokens (`tool_usage`: the image generation tool's tokens, billed
   * at the image model's prices; the web search tool's billable searches, billed per search) and
   * the catalogue does not price. Only when they did.
   */
  hostedToolUse?: true;
  /**
   * Provider B: the call's inference ran only in the US (`usage.inference_geo: "us"`, on Claude
   * Opus 4.6 and later models), which Anthropic bills at 1.1x every token price. Only when it did.
   */
  usOnlyInference?: true;
  /**
   * The service tier the provider's answer says served the call, when not its standard one
   * (serviceTierOf): provider A's `service_tier`, B's `usage.service_tier`, C's
   * `usageMetadata.serviceTier`. The catalogue prices `flex` and `priority` per model, where the
   * provider publishes those prices; `other` (a tier no price is published for, or a name not
   * known) has an unknown cost. Only when the answer names such a tier.
   */
  serviceTier?: ServiceTier;
  /**
   * Provider C: the input tokens that are audio (its cached part included), which Google bills at
   * prices of their own on some models. Only when there were any.
   */
  audioInputTokens?: number;
  /**
   * Provider C: the audio part of the cached input, when the provider breaks the cached input down
   * by modality (`cacheTokensDetails`, `cached_tokens_by_modality`). Only when there were any.
   */
  cachedAudioInputTokens?: number;
  /**
   * Provider A's image models: the input tokens that are images (`input_tokens_details.image_tokens`
   * of its images API), which its GPT Image models bill above text input. Only when there were any.
   */
  imageInputTokens?: number;
  /**
   * The output tokens that are generated images (provider A's `output_tokens_details.image_tokens`,
   * provider C's `candidatesTokensDetails` of modality IMAGE), which provider C's image models bill
   * above text output. Only when there were any.
   */
  imageOutputTokens?: number;
}

/**
 * A tier other than the standard one that served a call: `flex` (provider A's and C's discounted
 * tier), `priority` (A's Priority processing, renamed Fast mode, and C's and B's priority tiers), or
 * `other`, any other tier (A's `scale`, `ultrafast`, an `auto` that names none, B's `batch`, a name
 * not known), which no catalogue entry prices.
 */
export type ServiceTier = "flex" | "priority" | "other";

/** One sampling step of a call (TokenUsage.samplings). */
export interface Sampling {
  usage: TokenUsage;
  /** The model that sampled, when another than the call's (an advisor); null when it names none. */
  otherModel?: string | null;
}

/**
 * Input tokens written to a provider's prompt cache, by how long the entry is kept, which decides
 * their price: provider B's five-minute and one-hour entries, provider A's thirty-minute ones.
 */
type CacheWriteTokens = Partial<Record<CacheLifetime, number>>;
export type CacheLifetime = "fiveMinutes" | "thirtyMinutes" | "oneHour";
export const cacheLifetimes: readonly CacheLifetime[] = ["fiveMinutes", "thirtyMinutes", "oneHour"];

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

/** Two counts added; unknown when either is. */
export function sumOrUnknown(a: number | null, b: number | null): number | null {
  return a === null || b === null ? null : a + b;
}

/** Whether a call reported no tokens at all: no count, nothing billed beside them. */
export function reportsNoTokens(usage: TokenUsage): boolean {
  if (usage.inputTokens !== null || usage.outputTokens !== null) return false;
  for (const value of Object.values(usage)) if (value !== null && value !== undefined) return false;
  return true;
}
