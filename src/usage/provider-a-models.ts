import { chat, embeddings, gpt6Price, imageOnly, openAiTiers, price } from "./catalogue-prices.js";
import type { CatalogueModel } from "./model-catalogue.js";

/**
 * Provider A's (OpenAI-style) catalogued models, in the order the lists show them. Their tiers
 * (openAiTiers): flex on the GPT-5, o4-mini and later models, which OpenAI offers it for (not the
 * GPT-4.1 and GPT-4o models); priority at the prices of OpenAI's Priority processing (Fast mode)
 * page for the models it lists, every one here but GPT-5.4 nano; the GPT-6 models' from their
 * model pages (gpt6Price).
 */
export const providerAModels: CatalogueModel[] = [
  {
    id: "gpt-4.1",
    provider: "provider-a",
    displayName: "GPT-4.1",
    created: 1744316542,
    capabilities: chat(true, true),
    pricing: openAiTiers(price(2, 8, 0.5), { flex: false, priority: price(3.5, 14, 0.875) }),
  },
  {
    id: "gpt-4.1-mini",
    provider: "provider-a",
    displayName: "GPT-4.1 mini",
    created: 1744318173,
    capabilities: chat(true, true),
    pricing: openAiTiers(price(0.4, 1.6, 0.1), { flex: false, priority: price(0.7, 2.8, 0.175) }),
  },
  {
    id: "gpt-4.1-nano",
    provider: "provider-a",
    displayName: "GPT-4.1 nano",
    created: 1744321707,
    capabilities: chat(true, true),
    pricing: openAiTiers(price(0.1, 0.4, 0.025), { flex: false, priority: price(0.2, 0.8, 0.05) }),
  },
  {
    id: "gpt-4o",
    provider: "provider-a",
    displayName: "GPT-4o",
    created: 1715367049,
    capabilities: chat(true, true),
    pricing: openAiTiers(price(2.5, 10, 1.25), { flex: false, priority: price(4.25, 17, 2.125) }),
  },
  // GPT-4o's first snapshot, which OpenAI's pricing page lists apart from gpt-4o at its launch
  // prices: $5 in, $15 out, no cached price. Its own entry, so it is not priced as the gpt-4o it is
  // a version of (findModel takes an entry's own id before another's version suffix).
  {
    id: "gpt-4o-2024-05-13",
    provider: "provider-a",
    displayName: "GPT-4o (2024-05-13)",
    created: 1715367049,
    capabilities: chat(true, true),
    pricing: openAiTiers(price(5, 15, null), { flex: false, priority: price(8.75, 26.25, null) }),
  },
  {
    id: "gpt-4o-mini",
    provider: "provider-a",
    displayName: "GPT-4o mini",
    created: 1721172741,
    capabilities: chat(true, true),
    pricing: openAiTiers(price(0.15, 0.6, 0.075), { flex: false, priority: price(0.25, 1, 0.125) }),
  },
  {
    id: "gpt-5",
    provider: "provider-a",
    displayName: "GPT-5",
    created: 1754425777,
    capabilities: chat(true, true),
    pricing: openAiTiers(price(1.25, 10, 0.125), { flex: true, priority: price(2.5, 20, 0.25) }),
  },
  {
    id: "gpt-5-mini",
    provider: "provider-a",
    displayName: "GPT-5 mini",
    created: 1754425867,
    capabilities: chat(true, true),
    pricing: openAiTiers(price(0.25, 2, 0.025), { flex: true, priority: price(0.45, 3.6, 0.045) }),
  },
  {
    id: "o4-mini",
    provider: "provider-a",
    displayName: "o4-mini",
    created: 1744225351,
    capabilities: chat(true, true),
    pricing: openAiTiers(price(1.1, 4.4, 0.275), { flex: true, priority: price(2, 8, 0.5) }),
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
    // SPEC's table prices model 2's 1024x1536 and 1536x1024, sizes dall-e-3 refuses; their prices
    // are provider A's own for its portrait and landscape sizes, 1024x1792 and 1792x1024, which a
    // call names (decision 0065).
    imagePricing: {
      standard: {
        "1024x1024": 0.04,
        "1024x1536": 0.08,
        "1536x1024": 0.08,
        "1024x1792": 0.08,
        "1792x1024": 0.08,
      },
      hd: { "1024x1024": 0.08, "1024x1536": 0.12, "1536x1024": 0.12, "1024x1792": 0.12, "1792x1024": 0.12 },
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
  // at most 272k input tokens, so it has no long-context price. The GPT-6 models (below) bill their
  // cache writes above the input price (1.25x), which the usage parsers read apart.
  {
    id: "gpt-5.4-mini",
    provider: "provider-a",
    displayName: "GPT-5.4 mini",
    created: 1773705600,
    capabilities: chat(true, true),
    pricing: openAiTiers(price(0.75, 4.5, 0.075), { flex: true, priority: price(1.5, 9, 0.15) }),
  },
  // GPT-5.4 (2026-03-05): $2.50 in, $0.25 cached, $15 out; a prompt over 272k input tokens is billed
  // in whole at 2x the input and cached prices and 1.5x the output price.
  {
    id: "gpt-5.4",
    provider: "provider-a",
    displayName: "GPT-5.4",
    created: 1772668800,
    capabilities: chat(true, true),
    pricing: openAiTiers(
      { ...price(2.5, 15, 0.25), longContext: { above: 272_000, pricing: price(5, 22.5, 0.5) } },
      { flex: true, priority: price(5, 30, 0.5) },
    ),
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
    pricing: openAiTiers(price(0.2, 1.25, 0.02), { flex: true }),
  },
  // GPT-5.2 (2025-12-11): $1.75 in, $0.175 cached, $14 out.
  {
    id: "gpt-5.2",
    provider: "provider-a",
    displayName: "GPT-5.2",
    created: 1765411200,
    capabilities: chat(true, true),
    pricing: openAiTiers(price(1.75, 14, 0.175), { flex: true, priority: price(3.5, 28, 0.35) }),
  },
];
