import { chat, promptCachePrice } from "./catalogue-prices.js";
import type { CatalogueModel } from "./model-catalogue.js";

/** Provider B's (Anthropic-style) catalogued models, in the order the lists show them. */
export const providerBModels: CatalogueModel[] = [
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
];
