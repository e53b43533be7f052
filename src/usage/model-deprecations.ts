import type { ProviderId } from "../providers/provider-id.js";
import type { Deprecation } from "./model-catalogue.js";

/**
 * The providers' deprecation notices, by model, kept beside the entries rather than in them: a
 * notice changes on its own schedule, not with a model's prices.
 */
export const deprecations: Record<ProviderId, Record<string, Deprecation>> = {
  // OpenAI's deprecations page (developers.openai.com/api/docs/deprecations). Its replacements are
  // given where its notices agree (GPT-6 Luna for the mini models); those of GPT-5 and GPT-5 mini
  // changed between the page's versions (GPT-5.6 Sol and Terra, then GPT-6.1 Sol and Terra).
  "provider-a": {
    "gpt-4.1": { shutdown: "2027-01-14" },
    "gpt-4.1-mini": { shutdown: "2027-01-14", replacement: "gpt-6-luna" },
    "gpt-4o": { shutdown: "2027-01-14" },
    // A snapshot of gpt-4o with an entry of its own (its prices): gpt-4o's notice, as before it had one.
    "gpt-4o-2024-05-13": { shutdown: "2027-01-14" },
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
