import { chat, embeddings, imageOnly, price, withAudio, withGeminiFlex } from "./catalogue-prices.js";
import type { CatalogueModel } from "./model-catalogue.js";

/**
 * Provider C's (Gemini-style) catalogued models, in the order the lists show them. The text models
 * price the flex tier (withGeminiFlex); no model prices the priority tier, which Google bills per
 * model without a published price.
 */
export const providerCModels: CatalogueModel[] = [
  {
    id: "gemini-2.5-pro",
    provider: "provider-c",
    displayName: "Gemini 2.5 Pro",
    created: 1750118400,
    capabilities: chat(true, true),
    pricing: withGeminiFlex({
      ...withAudio(price(1.25, 10, 0.31), 1.25, 0.31),
      longContext: { above: 200_000, pricing: withAudio(price(2.5, 15, 0.625), 2.5, 0.625) },
    }),
  },
  {
    id: "gemini-2.5-flash",
    provider: "provider-c",
    displayName: "Gemini 2.5 Flash",
    created: 1750118400,
    capabilities: chat(true, true),
    pricing: withGeminiFlex(withAudio(price(0.3, 2.5, 0.075), 1, 0.25)),
  },
  {
    id: "gemini-2.5-flash-lite",
    provider: "provider-c",
    displayName: "Gemini 2.5 Flash-Lite",
    created: 1753142400,
    capabilities: chat(true, true),
    pricing: withGeminiFlex(withAudio(price(0.1, 0.4, 0.025), 0.3, 0.125)),
  },
  {
    id: "gemini-2.0-flash",
    provider: "provider-c",
    displayName: "Gemini 2.0 Flash",
    created: 1738713600,
    capabilities: chat(true, true),
    pricing: withGeminiFlex(withAudio(price(0.1, 0.4, 0.025), 0.7, 0.175)),
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
    pricing: withGeminiFlex(withAudio(price(0.3, 2.5, 0.03), 0.3, 0.03)),
  },
  // Gemini 3.5 Flash (2026-05-19): $1.50 in, $9 out; no cached-input price found (unknown, null).
  {
    id: "gemini-3.5-flash",
    provider: "provider-c",
    displayName: "Gemini 3.5 Flash",
    created: 1779148800,
    capabilities: chat(true, true),
    pricing: withGeminiFlex(price(1.5, 9, null)),
  },
  // Gemini 3.1 Pro Preview (2026-02-19): $2 in, $12 out up to 200k prompt tokens, $4 and $18 over;
  // no cached-input price found.
  {
    id: "gemini-3.1-pro-preview",
    provider: "provider-c",
    displayName: "Gemini 3.1 Pro Preview",
    created: 1771459200,
    capabilities: chat(true, true),
    pricing: withGeminiFlex({
      ...price(2, 12, null),
      longContext: { above: 200_000, pricing: price(4, 18, null) },
    }),
  },
];
