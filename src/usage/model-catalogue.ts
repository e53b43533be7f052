import { detachedString } from "../detached-string.js";
import { type ProviderId, providerIds } from "../providers/provider-id.js";
import { deprecations } from "./model-deprecations.js";
import { providerAModels } from "./provider-a-models.js";
import { providerBModels } from "./provider-b-models.js";
import { providerCModels } from "./provider-c-models.js";
import type { CacheLifetime } from "./token-usage.js";

/**
 * The one versioned catalogue of supported models and their list prices. It feeds the public model
 * lists and the cost engine. Token prices are USD per 1M tokens; an unknown price is null, never 0.
 * Image prices are USD per image, from SPEC.md's table, keyed by variant and size ("*" = any size);
 * the providers' image models after that table are priced by the token (TokenPricing's
 * `imageInput` and `imageOutput`), as their providers bill them. The entries, with the sources of
 * their prices, are in provider-a-models.ts, provider-b-models.ts and provider-c-models.ts (written
 * with catalogue-prices.ts), the providers' deprecation notices in model-deprecations.ts.
 */
export const catalogueVersion = "2026-11-29";

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
   * unknown). A cached price of null is unknown (a tier's: provider C's flex).
   */
  audio?: { input: number; cachedInput: number | null };
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
  /**
   * The prices of a call its answer says was served on another tier than the standard one
   * (TokenUsage.serviceTier), where the provider publishes them for the model: provider A's flex
   * (Batch API rates) and priority (Fast mode) prices, provider C's flex prices. Each holds its own
   * long-context prices, where published: a long prompt on a tier without them costs what is
   * unknown. A tier a model does not list prices nothing (an unknown cost), never at the standard
   * prices.
   */
  tiers?: { flex?: TokenPricing; priority?: TokenPricing };
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

const models: CatalogueModel[] = [...providerAModels, ...providerBModels, ...providerCModels];

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
  // No catalogued name is that long; a name that is (a request line's worth in provider C's path)
  // is looked up and not remembered.
  if (id.length > maxRememberedLength) return searchModel(provider, id);
  // Every priced call asks (the usage row's cost): answers are remembered per provider and name.
  // Names come from clients and providers, so the memo is bounded; the catalogue never changes. A
  // name is remembered as a copy: a view would keep the request line or body it was cut from.
  let known = foundModels.get(provider);
  if (known === undefined) {
    known = new Map();
    foundModels.set(provider, known);
  }
  let model = known.get(id);
  if (model === undefined) {
    model = searchModel(provider, id);
    if (known.size >= maxRemembered) known.clear();
    known.set(detachedString(id), model);
  }
  return model;
}

const foundModels = new Map<ProviderId, Map<string, CatalogueModel | null>>();
const maxRemembered = 1000;
/** The longest name the memo keeps: the longest model name a project or a usage row takes. */
const maxRememberedLength = 200;

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
  const models = modelsFor(provider);
  // An entry's own id or snapshot first: a snapshot the provider prices apart has an entry of its
  // own (`gpt-4o-2024-05-13`), which a version suffix must not give to the model it is a version of.
  for (const model of models) if (name === model.id || model.snapshots?.includes(name)) return model;
  for (const model of models)
    if (name.startsWith(model.id) && versionSuffix.test(name.slice(model.id.length))) return model;
  return null;
}

/**
 * The provider whose catalogue lists a model (as findModel finds it), or null for a model no
 * provider lists (a custom name, whose provider is whichever the project says).
 */
export function catalogueProviderOf(id: string | null | undefined): ProviderId | null {
  return providerIds.find((provider) => findModel(provider, id) !== null) ?? null;
}

/**
 * Why `id` cannot be `provider`'s image model: the catalogue lists it, but as another kind of model
 * (`listedBy` that provider) or as another provider's (`listedBy` that one). Null when it is one of
 * that provider's image models, or a model no catalogue lists (trusted: catalogues lag the
 * providers' new models).
 */
export function notAnImageModelOf(provider: ProviderId, id: string): { listedBy: ProviderId } | null {
  const own = findModel(provider, id);
  if (own?.capabilities.image) return null;
  const listedBy = own ? provider : catalogueProviderOf(id);
  return listedBy === null ? null : { listedBy };
}

/** The catalogue's notice that `provider` shut `model` down, when the day it gives is `today` or earlier. */
export function shutdownNotice(provider: ProviderId, model: string | null, today: Date): Deprecation | null {
  const notice = findModel(provider, model)?.deprecated;
  return notice && notice.shutdown <= today.toISOString().slice(0, 10) ? notice : null;
}

export function defaultModel(provider: ProviderId, purpose: Purpose): string | null {
  return defaults[provider][purpose];
}
