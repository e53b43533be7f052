import { type ProviderId, providerIds } from "../providers/provider-id.js";
import type { CacheLifetime } from "./token-usage.js";

/**
 * The one versioned catalogue of supported models and their list prices. It feeds the public model
 * lists and the cost engine. Token prices are USD per 1M tokens; an unknown price is null, never 0.
 * Image prices are USD per image, from SPEC.md's table, keyed by variant and size ("*" = any size);
 * the providers' image models after that table are priced by the token (TokenPricing's
 * `imageInput` and `imageOutput`), as their providers bill them.
 */
export const catalogueVersion = "2026-11-27";

export interface Capabilities {
  text: boolean;
  vision: boolean;
  pdf: boolean;
  structured: boolean;
  image: boolean;
  embeddings: boolean;
}

export interface TokenPricing {
  input: number | null;
  output: number | null;
  cachedInput: number | null;
  /**
   * Input written to the prompt cache, by how long the entry lives: provider B's five-minute and
   * one-hour entries; provider A's thirty-minute ones, on the models that bill writes (GPT-6).
   */
  cacheWrite?: Partial<Record<CacheLifetime, number>>;
  /** Provider B: USD per search its web search server tool runs, beside the tokens. */
  webSearch?: number;
  /**
   * Provider C: the prices of audio input, uncached and cached, which Google lists apart from text,
   * image and video input's. A model without them prices no call with audio input (its cost is
   * unknown).
   */
  audio?: { input: number; cachedInput: number };
  /**
   * The prices of a call whose input is over `above` tokens (its cached and cache-written input
   * included), which the provider bills in whole at these instead: Gemini 2.5 Pro's and 3.1 Pro's
   * prompts over 200k tokens, Claude Sonnet 4.5's with its 1M-token context window, Claude Haiku
   * 5.5's over 100k, GPT-5.4's over 272k.
   */
  longContext?: { above: number; pricing: TokenPricing };
  /**
   * Image models priced by the token: the price of input image tokens, where it is not the text
   * input's (provider A's GPT Image models: $8 against $5), and of generated image tokens, where it
   * is not the text output's (provider C's Gemini image models: $30 against $7.50). A model without
   * them prices image tokens as text.
   */
  imageInput?: number;
  imageOutput?: number;
}

export interface CatalogueModel {
  id: string;
  provider: ProviderId;
  displayName: string;
  created: number;
  capabilities: Capabilities;
  pricing: TokenPricing | null;
  /**
   * An alias entry (`…-latest`): the dated ids it resolves to, which a provider names as the model
   * that answered. They count as this model (its prices, its capabilities).
   */
  snapshots?: readonly string[];
  /** Image models: variant -> size -> USD per image. */
  imagePricing?: Record<string, Record<string, number | null>>;
  /**
   * Image models: the size and quality the provider uses when a request names none, where they
   * have a price (gpt-image models default to `auto`, which has none; their answers name the size
   * and quality they used).
   */
  imageDefaults?: { size?: string; quality?: string };
  /** Set from `deprecations` (below): the provider has announced the model's end. */
  deprecated?: Deprecation;
}

/**
 * A provider's notice that a model goes away: the day its calls stop working (a day past means
 * the provider has retired it and its calls fail) and the model it names instead, where it names
 * one. A deprecated model stays listed and priced while calls may still use it and usage rows name
 * it; no analysis default is ever one (the image defaults are SPEC.md's models, all shut down since:
 * docs/decisions/0013).
 */
export interface Deprecation {
  /** YYYY-MM-DD, as the provider's deprecations page gives it. */
  shutdown: string;
  replacement?: string;
}

type Purpose = "structured" | "vision" | "pdf" | "image";

const chat = (vision: boolean, pdf: boolean): Capabilities => ({
  text: true,
  vision,
  pdf,
  structured: true,
  image: false,
  embeddings: false,
});
const embeddings: Capabilities = {
  text: false,
  vision: false,
  pdf: false,
  structured: false,
  image: false,
  embeddings: true,
};
const imageOnly: Capabilities = {
  text: false,
  vision: false,
  pdf: false,
  structured: false,
  image: true,
  embeddings: false,
};
const price = (input: number | null, output: number | null, cachedInput: number | null): TokenPricing => ({
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
const promptCachePrice = (input: number, output: number, cacheRead = round(input * 0.1)): TokenPricing => ({
  ...price(input, output, cacheRead),
  cacheWrite: { fiveMinutes: round(input * 1.25), oneHour: input * 2 },
  webSearch: 0.01,
});
const round = (usd: number) => Math.round(usd * 1e6) / 1e6;

/**
 * Provider A's GPT-6 prices follow from input, output and cached input: a cache write (kept 30
 * minutes) costs 1.25x the input price, and a prompt over 272k input tokens is billed in whole at
 * 2x the input and cache prices and 1.5x the output price.
 */
const gpt6Price = (input: number, output: number, cachedInput: number): TokenPricing => {
  const short = (scale: number, outputScale: number): TokenPricing => ({
    ...price(round(input * scale), round(output * outputScale), round(cachedInput * scale)),
    cacheWrite: { thirtyMinutes: round(input * 1.25 * scale) },
  });
  return { ...short(1, 1), longContext: { above: 272_000, pricing: short(2, 1.5) } };
};

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
const withAudio = (pricing: TokenPricing, input: number, cachedInput: number): TokenPricing => ({
  ...pricing,
  audio: { input, cachedInput },
});

const models: CatalogueModel[] = [
  // Provider A (OpenAI-style)
  {
    id: "gpt-4.1",
    provider: "provider-a",
    displayName: "GPT-4.1",
    created: 1744316542,
    capabilities: chat(true, true),
    pricing: price(2, 8, 0.5),
  },
  {
    id: "gpt-4.1-mini",
    provider: "provider-a",
    displayName: "GPT-4.1 mini",
    created: 1744318173,
    capabilities: chat(true, true),
    pricing: price(0.4, 1.6, 0.1),
  },
  {
    id: "gpt-4.1-nano",
    provider: "provider-a",
    displayName: "GPT-4.1 nano",
    created: 1744321707,
    capabilities: chat(true, true),
    pricing: price(0.1, 0.4, 0.025),
  },
  {
    id: "gpt-4o",
    provider: "provider-a",
    displayName: "GPT-4o",
    created: 1715367049,
    capabilities: chat(true, true),
    pricing: price(2.5, 10, 1.25),
  },
  {
    id: "gpt-4o-mini",
    provider: "provider-a",
    displayName: "GPT-4o mini",
    created: 1721172741,
    capabilities: chat(true, true),
    pricing: price(0.15, 0.6, 0.075),
  },
  {
    id: "gpt-5",
    provider: "provider-a",
    displayName: "GPT-5",
    created: 1754425777,
    capabilities: chat(true, true),
    pricing: price(1.25, 10, 0.125),
  },
  {
    id: "gpt-5-mini",
    provider: "provider-a",
    displayName: "GPT-5 mini",
    created: 1754425867,
    capabilities: chat(true, true),
    pricing: price(0.25, 2, 0.025),
  },
  {
    id: "o4-mini",
    provider: "provider-a",
    displayName: "o4-mini",
    created: 1744225351,
    capabilities: chat(true, true),
    pricing: price(1.1, 4.4, 0.275),
  },
  {
    id: "text-embedding-3-small",
    provider: "provider-a",
    displayName: "Text Embedding 3 Small",
    created: 1705948997,
    capabilities: embeddings,
    pricing: price(0.02, 0, null),
  },
  {
    id: "text-embedding-3-large",
    provider: "provider-a",
    displayName: "Text Embedding 3 Large",
    created: 1705953180,
    capabilities: embeddings,
    pricing: price(0.13, 0, null),
  },
  {
    id: "gpt-image-1",
    provider: "provider-a",
    displayName: "GPT Image 1",
    created: 1745517030,
    capabilities: imageOnly,
    pricing: null,
    imagePricing: {
      low: { "1024x1024": 0.011, "1024x1536": 0.016, "1536x1024": 0.016 },
      medium: { "1024x1024": 0.042, "1024x1536": 0.063, "1536x1024": 0.063 },
      high: { "1024x1024": 0.167, "1024x1536": 0.25, "1536x1024": 0.25 },
    },
  },
  {
    id: "dall-e-3",
    provider: "provider-a",
    displayName: "DALL·E 3",
    created: 1698785189,
    capabilities: imageOnly,
    pricing: null,
    imagePricing: {
      standard: { "1024x1024": 0.04, "1024x1536": 0.08, "1536x1024": 0.08 },
      hd: { "1024x1024": 0.08, "1024x1536": 0.12, "1536x1024": 0.12 },
    },
    imageDefaults: { size: "1024x1024", quality: "standard" },
  },
  {
    id: "gpt-image-1-mini",
    provider: "provider-a",
    displayName: "GPT Image 1 mini",
    created: 1759795200,
    capabilities: imageOnly,
    pricing: null,
    imagePricing: { default: { "1024x1024": 0.016, "1024x1536": 0.018, "1536x1024": 0.02 } },
  },
  // Provider A's GPT Image 2 models, which OpenAI names as the replacements of the three above (all
  // shut down or shutting down: see `deprecations`). They are billed by the token, not by a table
  // of sizes: text input $5 (cached $1.25), image input $8, image output $30 per 1M tokens, from
  // the GPT Image 2.6 Sunburst model page (developers.openai.com/api/docs/models/
  // gpt-image-2.6-sunburst). Flare and GPT Image 2 at the same prices as resellers' launch notes
  // give them (no first-party page for either was found); the images API's answers report the
  // tokens (`usage`, image input apart in `input_tokens_details`).
  {
    id: "gpt-image-2.6-sunburst",
    provider: "provider-a",
    displayName: "GPT Image 2.6 Sunburst",
    created: 1793750400,
    capabilities: imageOnly,
    pricing: { ...price(5, 30, 1.25), imageInput: 8 },
  },
  {
    id: "gpt-image-2.6-flare",
    provider: "provider-a",
    displayName: "GPT Image 2.6 Flare",
    created: 1793750400,
    capabilities: imageOnly,
    pricing: { ...price(5, 30, 1.25), imageInput: 8 },
  },
  {
    id: "gpt-image-2",
    provider: "provider-a",
    displayName: "GPT Image 2",
    created: 1776729600,
    capabilities: imageOnly,
    pricing: { ...price(5, 30, 1.25), imageInput: 8 },
  },
  // Provider A's GPT-5.4 and 5.2 models, from OpenAI's pricing page (developers.openai.com/api/docs/
  // pricing) and model pages (…/docs/models/<model>): text and images in (PDFs as files), structured
  // outputs. GPT-5.4 mini (2026-03-17): $0.75 in, $0.075 cached, $4.50 out; its 400k context takes
  // at most 272k input tokens, so it has no long-context price. GPT-5.6 and GPT-6 models are not
  // listed: OpenAI bills their cache writes above the input price (1.25x), which Sluice does not
  // meter yet, so their costs would come out too low.
  {
    id: "gpt-5.4-mini",
    provider: "provider-a",
    displayName: "GPT-5.4 mini",
    created: 1773705600,
    capabilities: chat(true, true),
    pricing: price(0.75, 4.5, 0.075),
  },
  // GPT-5.4 (2026-03-05): $2.50 in, $0.25 cached, $15 out; a prompt over 272k input tokens is billed
  // in whole at 2x the input and cached prices and 1.5x the output price.
  {
    id: "gpt-5.4",
    provider: "provider-a",
    displayName: "GPT-5.4",
    created: 1772668800,
    capabilities: chat(true, true),
    pricing: { ...price(2.5, 15, 0.25), longContext: { above: 272_000, pricing: price(5, 22.5, 0.5) } },
  },
  // The GPT-6 models bill writes to the prompt cache too, at 1.25x the input price (their model
  // pages, developers.openai.com/api/docs/models/<model>: "Cache writes"; entries kept 30 minutes,
  // the only retention the API's `prompt_cache_options.ttl` takes), and a prompt over 272k input
  // tokens in whole at 2x the input and cache prices and 1.5x the output price. GPT-6 Sol and Luna
  // (2026-09-22): $2 in, $0.20 cached, $2.50 writes, $10 out; $0.10, $0.01, $0.125, $0.50. GPT-6.1
  // Sol (2026-09-29): as GPT-6 Sol, cached $0.10. GPT-6 Luna is OpenAI's replacement for GPT-4.1
  // mini and GPT-4o mini.
  {
    id: "gpt-6-sol",
    provider: "provider-a",
    displayName: "GPT-6 Sol",
    created: 1790035200,
    capabilities: chat(true, true),
    pricing: gpt6Price(2, 10, 0.2),
  },
  {
    id: "gpt-6.1-sol",
    provider: "provider-a",
    displayName: "GPT-6.1 Sol",
    created: 1790640000,
    capabilities: chat(true, true),
    pricing: gpt6Price(2, 10, 0.1),
  },
  {
    id: "gpt-6-luna",
    provider: "provider-a",
    displayName: "GPT-6 Luna",
    created: 1790035200,
    capabilities: chat(true, true),
    pricing: gpt6Price(0.1, 0.5, 0.01),
  },
  // GPT-5.4 nano (2026-03-17): $0.20 in, $0.02 cached, $1.25 out.
  {
    id: "gpt-5.4-nano",
    provider: "provider-a",
    displayName: "GPT-5.4 nano",
    created: 1773705600,
    capabilities: chat(true, true),
    pricing: price(0.2, 1.25, 0.02),
  },
  // GPT-5.2 (2025-12-11): $1.75 in, $0.175 cached, $14 out.
  {
    id: "gpt-5.2",
    provider: "provider-a",
    displayName: "GPT-5.2",
    created: 1765411200,
    capabilities: chat(true, true),
    pricing: price(1.75, 14, 0.175),
  },
  // Provider B (Anthropic-style)
  {
    id: "claude-opus-4-1",
    provider: "provider-b",
    displayName: "Claude Opus 4.1",
    created: 1754352000,
    capabilities: chat(true, true),
    pricing: promptCachePrice(15, 75),
  },
  {
    id: "claude-sonnet-4-5",
    provider: "provider-b",
    displayName: "Claude Sonnet 4.5",
    created: 1759104000,
    capabilities: chat(true, true),
    pricing: {
      ...promptCachePrice(3, 15),
      longContext: { above: 200_000, pricing: promptCachePrice(6, 22.5) },
    },
  },
  {
    id: "claude-haiku-4-5",
    provider: "provider-b",
    displayName: "Claude Haiku 4.5",
    created: 1760572800,
    capabilities: chat(true, true),
    pricing: promptCachePrice(1, 5),
  },
  {
    id: "claude-3-5-haiku-latest",
    provider: "provider-b",
    displayName: "Claude Haiku 3.5",
    created: 1729555200,
    capabilities: chat(true, false),
    pricing: promptCachePrice(0.8, 4),
    snapshots: ["claude-3-5-haiku-20241022"],
  },
  // Provider B's current models, from Anthropic's pricing page
  // (platform.claude.com/docs/en/about-claude/pricing) and each model's overview page
  // (platform.claude.com/docs/en/models/<model>/overview); every one reads text, images and PDFs
  // and takes structured outputs, with its 1M-token context at the same prices throughout.
  // Sonnet 5.5 (2026-09-28): $2 in, $10 out; its cache reads cost $0.10 (0.05x) since 2026-10-07,
  // $0.20 before. Anthropic names it the replacement of Sonnet 4.5, which retires 2026-11-30.
  {
    id: "claude-sonnet-5-5",
    provider: "provider-b",
    displayName: "Claude Sonnet 5.5",
    created: 1790553600,
    capabilities: chat(true, true),
    pricing: promptCachePrice(2, 10, 0.1),
  },
  // Sonnet 5 (2026-06-30; legacy, not deprecated): $2 in, $10 out, the planned rise to $3/$15 cancelled.
  {
    id: "claude-sonnet-5",
    provider: "provider-b",
    displayName: "Claude Sonnet 5",
    created: 1782777600,
    capabilities: chat(true, true),
    pricing: promptCachePrice(2, 10),
  },
  {
    id: "claude-sonnet-4-6",
    provider: "provider-b",
    displayName: "Claude Sonnet 4.6",
    created: 1771286400,
    capabilities: chat(true, true),
    pricing: promptCachePrice(3, 15),
  },
  // Haiku 5.5 (2026-10-07): $0.10 in, $0.50 out for a prompt up to 100,000 tokens (cache reads and
  // writes included); $0.50 and $2.50 for the whole of a longer one.
  {
    id: "claude-haiku-5-5",
    provider: "provider-b",
    displayName: "Claude Haiku 5.5",
    created: 1791331200,
    capabilities: chat(true, true),
    pricing: {
      ...promptCachePrice(0.1, 0.5),
      longContext: { above: 100_000, pricing: promptCachePrice(0.5, 2.5) },
    },
  },
  // Opus 5.5 (2026-09-22): $4 in, $20 out; cache reads $0.20 (0.05x).
  {
    id: "claude-opus-5-5",
    provider: "provider-b",
    displayName: "Claude Opus 5.5",
    created: 1790035200,
    capabilities: chat(true, true),
    pricing: promptCachePrice(4, 20, 0.2),
  },
  // Opus 5 to 4.5: $5 in, $25 out.
  {
    id: "claude-opus-5",
    provider: "provider-b",
    displayName: "Claude Opus 5",
    created: 1784851200,
    capabilities: chat(true, true),
    pricing: promptCachePrice(5, 25),
  },
  {
    id: "claude-opus-4-8",
    provider: "provider-b",
    displayName: "Claude Opus 4.8",
    created: 1779926400,
    capabilities: chat(true, true),
    pricing: promptCachePrice(5, 25),
  },
  {
    id: "claude-opus-4-7",
    provider: "provider-b",
    displayName: "Claude Opus 4.7",
    created: 1776297600,
    capabilities: chat(true, true),
    pricing: promptCachePrice(5, 25),
  },
  {
    id: "claude-opus-4-6",
    provider: "provider-b",
    displayName: "Claude Opus 4.6",
    created: 1770249600,
    capabilities: chat(true, true),
    pricing: promptCachePrice(5, 25),
  },
  {
    id: "claude-opus-4-5",
    provider: "provider-b",
    displayName: "Claude Opus 4.5",
    created: 1763942400,
    capabilities: chat(true, true),
    pricing: promptCachePrice(5, 25),
  },
  // Fable 5.2 (2026-11-09): $8 in, $40 out, cache reads $0.20 (0.025x); Fable 5.1 $10, $50, $0.25 (0.025x); Fable 5 $10, $50, $1.
  {
    id: "claude-fable-5-2",
    provider: "provider-b",
    displayName: "Claude Fable 5.2",
    created: 1794182400,
    capabilities: chat(true, true),
    pricing: promptCachePrice(8, 40, 0.2),
  },
  {
    id: "claude-fable-5-1",
    provider: "provider-b",
    displayName: "Claude Fable 5.1",
    created: 1788220800,
    capabilities: chat(true, true),
    pricing: promptCachePrice(10, 50, 0.25),
  },
  {
    id: "claude-fable-5",
    provider: "provider-b",
    displayName: "Claude Fable 5",
    created: 1780963200,
    capabilities: chat(true, true),
    pricing: promptCachePrice(10, 50),
  },
  // Provider C (Gemini-style)
  {
    id: "gemini-2.5-pro",
    provider: "provider-c",
    displayName: "Gemini 2.5 Pro",
    created: 1750118400,
    capabilities: chat(true, true),
    pricing: {
      ...withAudio(price(1.25, 10, 0.31), 1.25, 0.31),
      longContext: { above: 200_000, pricing: withAudio(price(2.5, 15, 0.625), 2.5, 0.625) },
    },
  },
  {
    id: "gemini-2.5-flash",
    provider: "provider-c",
    displayName: "Gemini 2.5 Flash",
    created: 1750118400,
    capabilities: chat(true, true),
    pricing: withAudio(price(0.3, 2.5, 0.075), 1, 0.25),
  },
  {
    id: "gemini-2.5-flash-lite",
    provider: "provider-c",
    displayName: "Gemini 2.5 Flash-Lite",
    created: 1753142400,
    capabilities: chat(true, true),
    pricing: withAudio(price(0.1, 0.4, 0.025), 0.3, 0.125),
  },
  {
    id: "gemini-2.0-flash",
    provider: "provider-c",
    displayName: "Gemini 2.0 Flash",
    created: 1738713600,
    capabilities: chat(true, true),
    pricing: withAudio(price(0.1, 0.4, 0.025), 0.7, 0.175),
  },
  {
    id: "gemini-embedding-001",
    provider: "provider-c",
    displayName: "Gemini Embedding 001",
    created: 1752537600,
    capabilities: embeddings,
    pricing: price(0.15, 0, null),
  },
  {
    id: "imagen-4.0-generate-001",
    provider: "provider-c",
    displayName: "Imagen 4 (standard)",
    created: 1755561600,
    capabilities: imageOnly,
    pricing: null,
    imagePricing: { default: { "*": 0.04 } },
  },
  {
    id: "imagen-4.0-fast-generate-001",
    provider: "provider-c",
    displayName: "Imagen 4 Fast",
    created: 1755561600,
    capabilities: imageOnly,
    pricing: null,
    imagePricing: { default: { "*": 0.02 } },
  },
  // SPEC.md's price table has no row for ultra: its cost is unknown (null), never 0.
  {
    id: "imagen-4.0-ultra-generate-001",
    provider: "provider-c",
    displayName: "Imagen 4 Ultra",
    created: 1755561600,
    capabilities: imageOnly,
    pricing: null,
    imagePricing: { default: { "*": null } },
  },
  // Provider C's Gemini image models ("Nano Banana"), which Google names as the replacements of
  // Imagen 4 (shut down on 2026-08-17: see `deprecations`). They generate through generateContent
  // and are billed by the token: input (text and images) and text output at the model's prices,
  // generated images at $30 per 1M tokens (about 1,120 tokens, $0.034, a 1K image). Gemini Nano
  // Banana 2.1 (GA 2026-10-06): $1.50 in, $7.50 out; Gemini 3.1 Flash-Lite Image (GA 2026-06-30):
  // $0.25 in, $1.50 out; as LiteLLM's launch notes quote Google's pricing page. Gemini 3 Pro Image
  // (GA 2026-05-28): $120 per 1M image tokens ($0.134 a 1K or 2K image) from a copy of the pricing
  // page; its input and text output prices were not found, so its calls' cost is unknown (null).
  {
    id: "gemini-nano-banana-2.1",
    provider: "provider-c",
    displayName: "Gemini Nano Banana 2.1",
    created: 1791244800,
    capabilities: imageOnly,
    pricing: { ...price(1.5, 7.5, null), imageOutput: 30 },
  },
  {
    id: "gemini-3.1-flash-lite-image",
    provider: "provider-c",
    displayName: "Gemini 3.1 Flash-Lite Image",
    created: 1782777600,
    capabilities: imageOnly,
    pricing: { ...price(0.25, 1.5, null), imageOutput: 30 },
  },
  {
    id: "gemini-3-pro-image",
    provider: "provider-c",
    displayName: "Gemini 3 Pro Image",
    created: 1779926400,
    capabilities: imageOnly,
    pricing: { ...price(null, null, null), imageOutput: 120 },
  },
  // Provider C's current models, from Google's Gemini API pricing page
  // (ai.google.dev/gemini-api/docs/pricing, paid tier) and model pages
  // (ai.google.dev/gemini-api/docs/models/<model>): text, images, video, audio and PDF in, structured
  // outputs. Gemini 3.5 Flash-Lite (2026-07-21, stable) is Google's replacement for Gemini 2.5 Flash:
  // $0.30 in (audio too), $2.50 out; its cached input at $0.03 (a tenth) as APIYI's list-price table
  // gives it, the pricing page as transcribed leaving it out.
  {
    id: "gemini-3.5-flash-lite",
    provider: "provider-c",
    displayName: "Gemini 3.5 Flash-Lite",
    created: 1784592000,
    capabilities: chat(true, true),
    pricing: withAudio(price(0.3, 2.5, 0.03), 0.3, 0.03),
  },
  // Gemini 3.5 Flash (2026-05-19): $1.50 in, $9 out; no cached-input price found (unknown, null).
  {
    id: "gemini-3.5-flash",
    provider: "provider-c",
    displayName: "Gemini 3.5 Flash",
    created: 1779148800,
    capabilities: chat(true, true),
    pricing: price(1.5, 9, null),
  },
  // Gemini 3.1 Pro Preview (2026-02-19): $2 in, $12 out up to 200k prompt tokens, $4 and $18 over;
  // no cached-input price found.
  {
    id: "gemini-3.1-pro-preview",
    provider: "provider-c",
    displayName: "Gemini 3.1 Pro Preview",
    created: 1771459200,
    capabilities: chat(true, true),
    pricing: { ...price(2, 12, null), longContext: { above: 200_000, pricing: price(4, 18, null) } },
  },
];

/**
 * The providers' deprecation notices, by model, kept beside the entries rather than in them: a
 * notice changes on its own schedule, not with a model's prices.
 */
const deprecations: Record<ProviderId, Record<string, Deprecation>> = {
  // OpenAI's deprecations page (developers.openai.com/api/docs/deprecations). Its replacements are
  // given where its notices agree (GPT-6 Luna for the mini models); those of GPT-5 and GPT-5 mini
  // changed between the page's versions (GPT-5.6 Sol and Terra, then GPT-6.1 Sol and Terra).
  "provider-a": {
    "gpt-4.1": { shutdown: "2027-01-14" },
    "gpt-4.1-mini": { shutdown: "2027-01-14", replacement: "gpt-6-luna" },
    "gpt-4o": { shutdown: "2027-01-14" },
    "gpt-4o-mini": { shutdown: "2027-01-14", replacement: "gpt-6-luna" },
    "gpt-5": { shutdown: "2026-12-11" },
    "gpt-5-mini": { shutdown: "2026-12-11" },
    "gpt-5.4-nano": { shutdown: "2027-04-01" },
    "gpt-image-1-mini": { shutdown: "2026-12-01", replacement: "gpt-image-2.6-sunburst" },
    // Already shut down (the 2026-04-22 notice of legacy snapshots).
    "gpt-4.1-nano": { shutdown: "2026-10-23" },
    "o4-mini": { shutdown: "2026-10-23" },
    "gpt-image-1": { shutdown: "2026-10-23", replacement: "gpt-image-2.6-sunburst" },
    // DALL·E 3's model page: shut down on 2026-05-12, GPT Image models in its place.
    "dall-e-3": { shutdown: "2026-05-12", replacement: "gpt-image-2.6-sunburst" },
  },
  "provider-b": {
    // Anthropic's model deprecations page and the model's overview (platform.claude.com/docs/en/
    // models/sonnet-4-5/overview); the installed @anthropic-ai/sdk warns with the same date.
    "claude-sonnet-4-5": { shutdown: "2026-11-30", replacement: "claude-sonnet-5-5" },
    // @anthropic-ai/sdk 1.14 warns that Claude Opus 4.5 reaches end of life on 2027-01-22; no
    // replacement named there or found on the deprecations page as stored.
    "claude-opus-4-5": { shutdown: "2027-01-22" },
    // Retired on the Claude API: the pricing page lists Opus 4.1 "retired, except on Bedrock and
    // Google Cloud" (on 2026-08-05), and Haiku 3.5 retired on 2026-02-19 with Haiku 4.5 as its
    // replacement. Kept: usage rows of calls made before name them.
    "claude-opus-4-1": { shutdown: "2026-08-05" },
    "claude-3-5-haiku-latest": { shutdown: "2026-02-19", replacement: "claude-haiku-4-5" },
  },
  "provider-c": {
    // Google's Gemini API deprecations page (ai.google.dev/gemini-api/docs/deprecations, read
    // 2026-11-10): shut down on 2026-12-01, after which their calls are answered by the replacement
    // and billed at its prices. Gemini 2.5 Flash-Lite is not deprecated.
    "gemini-2.5-flash": { shutdown: "2026-12-01", replacement: "gemini-3.5-flash-lite" },
    "gemini-2.5-pro": { shutdown: "2026-12-01", replacement: "gemini-3.8-flash" },
    // The Gemini API changelog (2026-06-15): the three Imagen 4 models shut down on 2026-08-17, and
    // its Imagen page names the Gemini image models in their place (Firebase's migration guide maps
    // standard and fast to Nano Banana 2.1, ultra to Gemini 3 Pro Image).
    "imagen-4.0-generate-001": { shutdown: "2026-08-17", replacement: "gemini-nano-banana-2.1" },
    "imagen-4.0-fast-generate-001": { shutdown: "2026-08-17", replacement: "gemini-nano-banana-2.1" },
    "imagen-4.0-ultra-generate-001": { shutdown: "2026-08-17", replacement: "gemini-3-pro-image" },
  },
};

const defaults: Record<ProviderId, Record<Purpose, string | null>> = {
  "provider-a": {
    structured: "gpt-5.4-mini",
    vision: "gpt-5.4-mini",
    pdf: "gpt-5.4-mini",
    image: "gpt-image-1",
  },
  "provider-b": {
    structured: "claude-sonnet-5-5",
    vision: "claude-sonnet-5-5",
    pdf: "claude-sonnet-5-5",
    image: null,
  },
  "provider-c": {
    structured: "gemini-3.5-flash-lite",
    vision: "gemini-3.5-flash-lite",
    pdf: "gemini-3.5-flash-lite",
    image: "imagen-4.0-generate-001",
  },
};

const byProvider = new Map<ProviderId, CatalogueModel[]>();
for (const entry of models) {
  const deprecated = deprecations[entry.provider][entry.id];
  const model = deprecated ? { ...entry, deprecated } : entry;
  byProvider.set(model.provider, [...(byProvider.get(model.provider) ?? []), model]);
}

/** Every deprecation notice the catalogue holds, by provider and model id (for its tests). */
export function deprecationNotices(): Readonly<Record<ProviderId, Readonly<Record<string, Deprecation>>>> {
  return deprecations;
}

export function modelsFor(provider: ProviderId): readonly CatalogueModel[] {
  return byProvider.get(provider) ?? [];
}

/**
 * A pinned version of a catalogued model: a dated snapshot (`gpt-4o-mini-2024-07-18`,
 * `claude-sonnet-4-5-20250929`) or a numbered stable version (`gemini-2.0-flash-001`). Any other
 * suffix names another model (`gpt-5-nano`, `gemini-2.0-flash-lite`) with prices of its own.
 */
const versionSuffix = /^-(?:\d{4}-\d{2}-\d{2}|\d{8}|\d{3})$/;

/**
 * Finds a catalogued model by id, tolerating a `models/` prefix and version suffixes, or by a
 * snapshot an alias entry names; a model the catalogue does not list is null (its price unknown),
 * not the catalogued model its name starts with.
 */
export function findModel(provider: ProviderId, id: string | null | undefined): CatalogueModel | null {
  if (!id) return null;
  // Every priced call asks (the usage row's cost): answers are remembered per provider and name.
  // Names come from clients and providers, so the memo is bounded; the catalogue never changes.
  let known = foundModels.get(provider);
  if (known === undefined) {
    known = new Map();
    foundModels.set(provider, known);
  }
  let model = known.get(id);
  if (model === undefined) {
    model = searchModel(provider, id);
    if (known.size >= maxRemembered) known.clear();
    known.set(id, model);
  }
  return model;
}

const foundModels = new Map<ProviderId, Map<string, CatalogueModel | null>>();
const maxRemembered = 1000;

/**
 * A model name without provider C's `models/` resource prefix (`models/gemini-2.5-flash` is
 * `gemini-2.5-flash`): the id the catalogue lists and the AI SDK's models take, which add the
 * prefix themselves where the provider's URL needs it.
 */
export function bareModelId(id: string): string {
  return id.startsWith("models/") ? id.slice("models/".length) : id;
}

function searchModel(provider: ProviderId, id: string): CatalogueModel | null {
  const name = bareModelId(id);
  for (const model of modelsFor(provider)) {
    if (name === model.id || model.snapshots?.includes(name)) return model;
    if (name.startsWith(model.id) && versionSuffix.test(name.slice(model.id.length))) return model;
  }
  return null;
}

/**
 * The provider whose catalogue lists a model (as findModel finds it), or null for a model no
 * provider lists (a custom name, whose provider is whichever the project says).
 */
export function catalogueProviderOf(id: string | null | undefined): ProviderId | null {
  return providerIds.find((provider) => findModel(provider, id) !== null) ?? null;
}

export function defaultModel(provider: ProviderId, purpose: Purpose): string | null {
  return defaults[provider][purpose];
}
