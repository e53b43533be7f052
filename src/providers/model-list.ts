import {
  type CatalogueModel,
  catalogueVersion,
  modelsFor,
  type TokenPricing,
} from "../usage/model-catalogue.js";
import type { ProviderId } from "./provider-id.js";

/**
 * The public model lists, each in its provider's own list envelope so the official SDKs'
 * `models.list()` work through Sluice. Every entry adds `name`, `pricing` and `capabilities`.
 */
function pricingOf(model: CatalogueModel): Record<string, unknown> {
  if (model.imagePricing) return { unit: "image", currency: "USD", perImage: model.imagePricing };
  const pricing = model.pricing;
  const longContext = pricing?.longContext;
  return {
    unit: "1M tokens",
    currency: "USD",
    ...tokenPrices(pricing),
    ...(pricing?.webSearch !== undefined ? { webSearchPerRequest: pricing.webSearch } : {}),
    ...(longContext
      ? { longContext: { aboveInputTokens: longContext.above, ...tokenPrices(longContext.pricing) } }
      : {}),
  };
}

function tokenPrices(pricing: TokenPricing | null | undefined): Record<string, unknown> {
  return {
    input: pricing?.input ?? null,
    output: pricing?.output ?? null,
    cachedInput: pricing?.cachedInput ?? null,
    ...(pricing?.audio
      ? { audioInput: pricing.audio.input, cachedAudioInput: pricing.audio.cachedInput }
      : {}),
    ...(pricing?.cacheWrite ? { cacheWrite: pricing.cacheWrite } : {}),
    ...(pricing?.imageInput !== undefined ? { imageInput: pricing.imageInput } : {}),
    ...(pricing?.imageOutput !== undefined ? { imageOutput: pricing.imageOutput } : {}),
  };
}

const ownerOf: Record<ProviderId, string> = {
  "provider-a": "system",
  "provider-b": "provider-b",
  "provider-c": "provider-c",
};

function entry(provider: ProviderId, model: CatalogueModel): Record<string, unknown> {
  const extra = {
    name: model.displayName,
    pricing: pricingOf(model),
    capabilities: model.capabilities,
    catalogueVersion,
    ...(model.deprecated
      ? {
          deprecated: {
            shutdownDate: model.deprecated.shutdown,
            ...(model.deprecated.replacement ? { replacement: model.deprecated.replacement } : {}),
          },
        }
      : {}),
  };
  switch (provider) {
    case "provider-a":
      return { id: model.id, object: "model", created: model.created, owned_by: ownerOf[provider], ...extra };
    case "provider-b":
      return {
        id: model.id,
        type: "model",
        display_name: model.displayName,
        created_at: new Date(model.created * 1000).toISOString(),
        ...extra,
      };
    case "provider-c": {
      // Imagen generates through `predict`; the Gemini image models through generateContent.
      const methods = model.capabilities.embeddings
        ? ["embedContent"]
        : model.capabilities.image && model.id.startsWith("imagen-")
          ? ["predict"]
          : ["generateContent", "countTokens"];
      return {
        ...extra,
        name: `models/${model.id}`,
        displayName: model.displayName,
        supportedGenerationMethods: methods,
      };
    }
  }
}

/**
 * Where each provider's official SDK asks for its model list, relative to its base URL
 * `{sluice}/v1/provider-x/{projectId}`: the SDKs of B and C add their API version segment (as on
 * the proxy paths), and C's may address its v1 and v1alpha APIs as well as v1beta.
 */
export const sdkModelListPaths: Record<ProviderId, readonly string[]> = {
  "provider-a": ["models"],
  "provider-b": ["models", "v1/models"],
  "provider-c": ["models", "v1beta/models", "v1alpha/models", "v1/models"],
};

/**
 * Providers whose SDKs' one-model reads (B `models.retrieve`, C `models.get`) are answered from
 * the catalogue under their list paths (`…/models/{id}`). Provider A's are forwarded like any GET.
 */
export const sdkModelReadProviders: readonly ProviderId[] = ["provider-b", "provider-c"];

/** One model's entry as its provider's SDK reads it; null when the catalogue lists no such id. */
export function modelEntryBody(provider: ProviderId, id: string): Buffer | null {
  const model = modelsFor(provider).find((candidate) => candidate.id === id);
  return model ? Buffer.from(JSON.stringify(entry(provider, model))) : null;
}

interface ListedModels {
  ids: readonly string[];
  /** Each model's entry as JSON. */
  texts: readonly string[];
}

const listed = new Map<ProviderId, ListedModels>();

/**
 * The catalogue's models of `provider`, in the list's order, read once per provider: provider B's
 * newest first, as its API lists them (the SDK's first page holds the latest models; a stable sort,
 * so models released the same day keep the catalogue's order); the others in the catalogue's.
 */
function listedModels(provider: ProviderId): ListedModels {
  let models = listed.get(provider);
  if (!models) {
    const catalogue =
      provider === "provider-b"
        ? [...modelsFor(provider)].sort((left, right) => right.created - left.created)
        : modelsFor(provider);
    models = {
      ids: catalogue.map((model) => model.id),
      texts: catalogue.map((model) => JSON.stringify(entry(provider, model))),
    };
    listed.set(provider, models);
  }
  return models;
}

/** Each catalogue model's entry as JSON, in the list's order. */
export const modelEntryTexts = (provider: ProviderId): readonly string[] => listedModels(provider).texts;

/** The catalogue's model ids of `provider`, in the list's order. */
export const modelIds = (provider: ProviderId): readonly string[] => listedModels(provider).ids;
