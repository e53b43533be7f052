import type { ProviderId } from "../providers/provider-id.js";
import { findModel, type TokenPricing } from "./model-catalogue.js";
import { cacheLifetimes, type Sampling, type TokenUsage } from "./token-usage.js";

/**
 * The cost of one call in USD from the catalogue's per-1M-token prices. Cached input tokens are
 * billed at the cached price, input written to a prompt cache (providers B and A) at its
 * cache-write price for the entry's lifetime, and the rest of the input at the input price; reasoning tokens are already part of the
 * output. Provider C's audio input is priced at the model's audio prices, uncached and cached, and
 * the rest of the input at its text prices. Provider B's web searches add their per-search price. A
 * call whose input is over a model's long-context threshold is priced at its long-context prices. A
 * model priced by the token for images bills input image tokens and generated image tokens at its
 * image prices, where it has them, and the rest at its text prices. A
 * call made of several samplings (provider B's compaction and advisor iterations) costs the sum of
 * theirs, each priced on its own, at the prices of the model that sampled. Null when the model, a
 * needed price or a needed count is unknown (an input count, an output count at an output price,
 * the audio price of a model with audio input): an unknown cost is never reported as 0 nor as the
 * price of the counts that are known. Provider B's calls whose inference ran only in the US cost
 * 1.1x every token price (not the searches'); its fast-mode calls, billed at a multiple per model
 * that the catalogue does not list, cost what is unknown (null), never the standard price. A call
 * its answer says was served on another tier than the standard one (TokenUsage.serviceTier) is
 * priced at the model's prices for that tier (TokenPricing.tiers), and is unknown (null) where the
 * catalogue lists none. Provider A's calls whose hosted tools ran (TokenUsage.hostedToolUse), billed
 * apart from the model's tokens, cost what is unknown (null). Computed in micro-dollars to avoid
 * float noise.
 */
export function costOfTokens(provider: ProviderId, model: string | null, usage: TokenUsage): number | null {
  const microDollars =
    usage.samplings === undefined
      ? microDollarsOf(provider, model, usage)
      : microDollarsOfSamplings(provider, model, usage.samplings);
  return microDollars === null ? null : Math.round(microDollars * 1000) / 1e9;
}

/**
 * Anthropic's data residency pricing: inference kept in the US (`inference_geo: "us"`) costs 1.1x
 * every token price (platform.claude.com/docs/en/manage-claude/data-residency; the pricing page's
 * "Data residency pricing").
 */
const usOnlyInferenceScale = 1.1;

/**
 * The samplings' costs summed: each at its model's prices (the call's, or an advisor's), with the
 * premiums it reports (each sampling carries its call's: usageOfProviderB, addUsage); null when one
 * is unknown.
 */
function microDollarsOfSamplings(
  provider: ProviderId,
  model: string | null,
  samplings: readonly Sampling[],
): number | null {
  let sum = 0;
  for (const sampling of samplings) {
    const cost = microDollarsOf(
      provider,
      sampling.otherModel === undefined ? model : sampling.otherModel,
      sampling.usage,
    );
    if (cost === null) return null;
    sum += cost;
  }
  return sum;
}

/** One sampling's cost in micro-dollars (USD per 1M tokens times tokens), at the premium it reports. */
function microDollarsOf(provider: ProviderId, model: string | null, usage: TokenUsage): number | null {
  // Billed at prices the catalogue does not list: unknown, never the standard price, nor the
  // price of the model's tokens alone.
  if (usage.fastMode || usage.hostedToolUse) return null;
  const tokenScale = usage.usOnlyInference ? usOnlyInferenceScale : 1;
  const standard = findModel(provider, model)?.pricing;
  const listed = standard && tierPricing(standard, usage);
  if (!listed) return null;
  const long = listed.longContext;
  // A long prompt is billed in whole at the long-context prices.
  const pricing =
    long !== undefined && usage.inputTokens !== null && usage.inputTokens > long.above
      ? long.pricing
      : listed;
  // A count that is not known prices nothing: it is unknown, not 0 (an output count only matters
  // at a non-zero output price: embeddings' is 0). The usage parsers give 0 for a count a
  // provider leaves out when it is zero. Cached, cache-write and reasoning counts are parts of these.
  if (usage.inputTokens === null) return null;
  if (usage.outputTokens === null && pricing.output !== 0) return null;
  let microDollars = 0;
  const input = usage.inputTokens;
  const cached = Math.min(usage.cachedInputTokens ?? 0, input);
  const writes = usage.cacheWriteTokens;
  let written = 0;
  if (writes) {
    for (const lifetime of cacheLifetimes) {
      const tokens = writes[lifetime] ?? 0;
      if (tokens === 0) continue;
      // A model without a price for this lifetime's writes: unknown, not guessed.
      const price = pricing.cacheWrite?.[lifetime];
      if (price === undefined) return null;
      written += tokens;
      microDollars += tokens * price;
    }
    // Counts that do not add up: unknown.
    if (written > input - cached) return null;
  }
  let fresh = input - cached - written;
  let cachedText = cached;
  const images = usage.imageInputTokens ?? 0;
  if (images > 0 && pricing.imageInput !== undefined) {
    // Uncached input images at their own price; the counts give no cached part of them.
    if (images > fresh) return null;
    microDollars += images * pricing.imageInput;
    fresh -= images;
  }
  if (usage.audioInputTokens) {
    const audio = audioSplit(usage, usage.audioInputTokens, fresh, cached);
    if (audio === null || pricing.audio === undefined) return null;
    const cachedAudioPrice = pricing.audio.cachedInput;
    if (audio.cached > 0 && cachedAudioPrice === null) return null;
    microDollars += audio.fresh * pricing.audio.input + audio.cached * (cachedAudioPrice ?? 0);
    fresh -= audio.fresh;
    cachedText -= audio.cached;
  }
  if (input > 0) {
    if (pricing.input === null) return null;
    if (cachedText > 0 && pricing.cachedInput === null) return null;
    microDollars += fresh * pricing.input + cachedText * (pricing.cachedInput ?? 0);
  }
  let output = usage.outputTokens ?? 0;
  const generatedImages = usage.imageOutputTokens ?? 0;
  if (generatedImages > 0 && pricing.imageOutput !== undefined) {
    if (generatedImages > output) return null;
    microDollars += generatedImages * pricing.imageOutput;
    output -= generatedImages;
  }
  if (output > 0) {
    if (pricing.output === null) return null;
    microDollars += output * pricing.output;
  }
  microDollars *= tokenScale;
  // Billed per search beside the tokens: a model without that price leaves the whole cost unknown.
  const searches = usage.webSearches ?? 0;
  if (searches > 0) {
    if (pricing.webSearch === undefined) return null;
    microDollars += searches * pricing.webSearch * 1e6;
  }
  return microDollars;
}

/**
 * The prices of the tier the call was served on: the standard ones, or the model's for its tier;
 * null when the model lists none for it, or none for a prompt over the standard long-context
 * threshold (the tier's published prices exclude long context: GPT-5.4's priority prices).
 */
function tierPricing(standard: TokenPricing, usage: TokenUsage): TokenPricing | null {
  const tier = usage.serviceTier;
  if (tier === undefined) return standard;
  if (tier === "other") return null;
  const priced = standard.tiers?.[tier];
  if (priced === undefined) return null;
  const long = standard.longContext;
  if (
    long !== undefined &&
    priced.longContext === undefined &&
    usage.inputTokens !== null &&
    usage.inputTokens > long.above
  )
    return null;
  return priced;
}

/**
 * How much of the audio input was cached and how much not, given `fresh` input tokens neither
 * cached nor written to a cache and `cached` ones. The cached part's own breakdown
 * (`cachedAudioInputTokens`) says, held to what the counts allow; without it, the cached tokens are
 * taken as text first, and only those the text cannot account for as audio: the dearest split,
 * since cached audio costs less than fresh audio more than cached text does than fresh text (on
 * every model that prices audio apart). Null when the counts do not add up.
 */
function audioSplit(
  usage: TokenUsage,
  audio: number,
  fresh: number,
  cached: number,
): { fresh: number; cached: number } | null {
  if (audio > fresh + cached) return null;
  const least = Math.max(0, audio - fresh);
  const most = Math.min(audio, cached);
  const cachedAudio = Math.min(Math.max(usage.cachedAudioInputTokens ?? 0, least), most);
  return { fresh: audio - cachedAudio, cached: cachedAudio };
}
