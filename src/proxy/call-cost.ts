import { imageCost } from "../images/image-cost.js";
import type { RequestedImages } from "../providers/image-calls.js";
import type { ProviderId } from "../providers/provider-id.js";
import { findModel } from "../usage/model-catalogue.js";
import { costOfTokens } from "../usage/token-cost.js";
import type { TokenUsage } from "../usage/token-usage.js";
import type { GeneratedImages } from "./generated-images.js";

/**
 * The cost of one proxied call. A model with token prices is priced by its tokens. An image model
 * priced per image (the catalogue's `imagePricing`) is priced by the images its answer holds, with
 * imageCost, the rule /v1/image prices by: at the model's default size and quality where neither
 * the answer nor the request names one (dall-e-3: 1024x1024, standard); a size or quality without
 * a price (`auto`) leaves the cost unknown (null), never 0.
 */
export function costOfProxiedCall(
  provider: ProviderId,
  model: string | null,
  usage: TokenUsage,
  images: GeneratedImages | null = null,
): number | null {
  const price = images === null ? undefined : perImagePrice(provider, model, images);
  return price === undefined ? costOfTokens(provider, model, usage) : price;
}

/**
 * The price of a proxied image generation as the pricing table gives it before the call runs, from
 * what its request asked for (`ImageCall.requested`: n, else the provider's default count; its size
 * and quality) and the model it names: the rule `costOfProxiedCall` prices the answer by, with the
 * request's size and quality. Null when the table gives none before the answer: no model read, a
 * model not in the table, one priced by the token, or a size or quality without a price (gpt-image's
 * `auto`, or none named where the model has no default).
 */
export function imagePriceBeforeCall(
  provider: ProviderId,
  model: string | null,
  requested: RequestedImages,
): number | null {
  return perImagePrice(provider, model, requested) ?? null;
}

/**
 * `images` of `model` at the pricing table's price per image (imageCost, the rule /v1/image prices
 * by; null for a size or quality without a price); undefined when the model is not priced per image
 * (the catalogue's `imagePricing`, and no token prices) or none is named.
 */
function perImagePrice(
  provider: ProviderId,
  model: string | null,
  images: GeneratedImages | RequestedImages,
): number | null | undefined {
  const catalogued = model === null ? undefined : findModel(provider, model);
  if (model === null || !catalogued?.imagePricing || catalogued.pricing !== null) return undefined;
  return imageCost({
    provider,
    model,
    quality: images.quality ?? undefined,
    size: images.size ?? undefined,
    n: images.count,
  }).costUsd;
}
