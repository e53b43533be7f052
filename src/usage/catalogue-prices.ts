import type { Capabilities, TokenPricing } from "./model-catalogue.js";
import type { CacheLifetime } from "./token-usage.js";

/** The capability presets and price builders the catalogue's entries are written with. */
export const chat = (vision: boolean, pdf: boolean): Capabilities => ({
  text: true,
  vision,
  pdf,
  structured: true,
  image: false,
  embeddings: false,
});
export const embeddings: Capabilities = {
  text: false,
  vision: false,
  pdf: false,
  structured: false,
  image: false,
  embeddings: true,
};
export const imageOnly: Capabilities = {
  text: false,
  vision: false,
  pdf: false,
  structured: false,
  image: true,
  embeddings: false,
};
export const price = (
  input: number | null,
  output: number | null,
  cachedInput: number | null,
): TokenPricing => ({
  input,
  output,
  cachedInput,
});

/**
 * Provider B's prices follow from the input price: a cache read costs 0.1x, a cache write 1.25x
 * (five minutes) or 2x (one hour). Its web search tool costs $10 per 1,000 searches, whatever the
 * model (the tokens of the results it brings in are input, at the model's prices). A few models
 * read the cache for less (Sonnet 5.5 and Opus 5.5 0.05x, Fable 5.1 and 5.2 0.025x): their read
 * price is given.
 */
export const promptCachePrice = (
  input: number,
  output: number,
  cacheRead = round(input * 0.1),
): TokenPricing => ({
  ...price(input, output, cacheRead),
  cacheWrite: { fiveMinutes: round(input * 1.25), oneHour: input * 2 },
  webSearch: 0.01,
});
const round = (usd: number) => Math.round(usd * 1e6) / 1e6;

/**
 * Provider A's GPT-6 prices follow from input, output and cached input: a cache write (kept 30
 * minutes) costs 1.25x the input price, and a prompt over 272k input tokens is billed in whole at
 * 2x the input and cache prices and 1.5x the output price. On its tiers (the model pages: "Batch and
 * Flex cost 50% of Standard", "Fast mode costs twice the applicable rate") flex costs half of every
 * price and priority (Fast mode) twice, long-context prices included.
 */
export const gpt6Price = (input: number, output: number, cachedInput: number): TokenPricing => {
  const short = (scale: number, outputScale: number): TokenPricing => ({
    ...price(round(input * scale), round(output * outputScale), round(cachedInput * scale)),
    cacheWrite: { thirtyMinutes: round(input * 1.25 * scale) },
  });
  const standard = { ...short(1, 1), longContext: { above: 272_000, pricing: short(2, 1.5) } };
  return openAiTiers(standard, { flex: true, priority: scaledPrice(standard, 2) });
};

/**
 * Every token price of `pricing` (its long-context prices' too) times `scale`: a tier billed at a
 * multiple of the standard prices. A price that is unknown stays unknown.
 */
function scaledPrice(pricing: TokenPricing, scale: number): TokenPricing {
  const times = (usd: number) => round(usd * scale);
  const orNull = (usd: number | null) => (usd === null ? null : times(usd));
  const scaled: TokenPricing = price(
    orNull(pricing.input),
    orNull(pricing.output),
    orNull(pricing.cachedInput),
  );
  if (pricing.cacheWrite) {
    const writes: NonNullable<TokenPricing["cacheWrite"]> = {};
    for (const [lifetime, usd] of Object.entries(pricing.cacheWrite) as [CacheLifetime, number][])
      writes[lifetime] = times(usd);
    scaled.cacheWrite = writes;
  }
  if (pricing.audio)
    scaled.audio = { input: times(pricing.audio.input), cachedInput: orNull(pricing.audio.cachedInput) };
  if (pricing.imageInput !== undefined) scaled.imageInput = times(pricing.imageInput);
  if (pricing.imageOutput !== undefined) scaled.imageOutput = times(pricing.imageOutput);
  if (pricing.longContext)
    scaled.longContext = {
      above: pricing.longContext.above,
      pricing: scaledPrice(pricing.longContext.pricing, scale),
    };
  return scaled;
}

/**
 * Provider A's tiers of a model, beside its standard prices. Flex, on the models OpenAI offers it
 * for: "Tokens are priced at Batch API rates" (its flex processing guide), half of every standard
 * price, cached input included. Priority, where OpenAI's Priority processing page (renamed "Fast
 * mode for API Customers" on 2026-07-30, openai.com/api-fast-mode) lists the model: its input,
 * cached input and output prices, which exclude long context (so a long prompt on that tier has an
 * unknown cost).
 */
export const openAiTiers = (
  standard: TokenPricing,
  tiers: { flex: boolean; priority?: TokenPricing },
): TokenPricing => ({
  ...standard,
  tiers: {
    ...(tiers.flex ? { flex: scaledPrice(standard, 0.5) } : {}),
    ...(tiers.priority ? { priority: tiers.priority } : {}),
  },
});

/**
 * Provider C's prices, from Google's Gemini Developer API pricing page
 * (https://ai.google.dev/gemini-api/docs/pricing, paid tier, standard), which lists per model the
 * input price for "text / image / video" and for "audio", and the context caching (cached input)
 * prices likewise: gemini-2.5-flash $0.30 and $1.00, cached $0.075 and $0.25; gemini-2.5-flash-lite
 * $0.10 and $0.30, cached $0.025 and $0.125; gemini-2.0-flash $0.10 and $0.70, cached $0.025 and
 * $0.175; gemini-2.5-pro one price for every modality, $1.25 (over 200k, $2.50), cached $0.31
 * ($0.625). The cached prices are those of the page's version the text prices were taken from; it
 * now lists lower ones for the 2.5 models (Pro $0.125, Flash $0.03 and $0.10 audio, Flash-Lite $0.01
 * and $0.03 audio), which the catalogue will take for text and audio together, never one without
 * the other. Embedding models take text alone: no audio price.
 */
export const withAudio = (pricing: TokenPricing, input: number, cachedInput: number): TokenPricing => ({
  ...pricing,
  audio: { input, cachedInput },
});

/**
 * Provider C's flex tier beside a model's standard prices: Google's flex inference page gives it "a
 * 50% cost reduction compared to standard rates", half the input (audio too) and output prices,
 * long-context ones included. It publishes no flex price for cached input, so a flex call that read
 * the cache has an unknown cost. Its priority tier costs "75% to 100% more than standard", by model,
 * with no price per model: not listed, so unknown.
 */
export const withGeminiFlex = (pricing: TokenPricing): TokenPricing => ({
  ...pricing,
  tiers: { flex: uncached(scaledPrice(pricing, 0.5)) },
});

function uncached(pricing: TokenPricing): TokenPricing {
  const without: TokenPricing = { ...pricing, cachedInput: null };
  if (pricing.audio) without.audio = { ...pricing.audio, cachedInput: null };
  if (pricing.longContext)
    without.longContext = { ...pricing.longContext, pricing: uncached(pricing.longContext.pricing) };
  return without;
}
