import type { ProviderId } from "../providers/provider-id.js";
import { findModel } from "../usage/model-catalogue.js";

export interface ImageCostInput {
  provider: ProviderId;
  model: string;
  /** Provider A: gpt-image-1 `low|medium|high`; dall-e-3 `standard|hd`. Absent: the model's default. */
  quality?: string | undefined;
  /** Absent: the model's default. */
  size?: string | undefined;
  /** Never decides the price (see imageCost). */
  aspectRatio?: string | undefined;
  n: number;
}

/**
 * Cost of one image generation from SPEC.md's price table, for /v1/image and the proxies alike:
 * known when the model, its variant and the size are known; otherwise null (unknown), never 0. A
 * size or quality not given is the model's default (the catalogue's `imageDefaults`), which the
 * provider generates at; a model whose default has no price (gpt-image's `auto`) stays unknown.
 * Only `size` names a size: provider A's API takes no aspect ratio (the AI SDK drops it with a
 * warning, and the model's default size is used), and provider C's prices do not depend on it.
 */
export function imageCost(input: ImageCostInput): { costUsd: number | null; unitPriceUsd: number | null } {
  const catalogued = findModel(input.provider, input.model);
  const table = catalogued?.imagePricing;
  if (!table) return { costUsd: null, unitPriceUsd: null };
  const size = input.size ?? catalogued.imageDefaults?.size;
  const variant = variantOf(input.model, table, input.quality ?? catalogued.imageDefaults?.quality);
  const prices = variant && Object.hasOwn(table, variant) ? table[variant] : undefined;
  if (!prices) return { costUsd: null, unitPriceUsd: null };
  // Own keys only: a size or quality from an answer or a request (`constructor`, `__proto__`) must
  // not find what every object inherits, which would price the call as NaN.
  const unit = Object.hasOwn(prices, "*")
    ? prices["*"]
    : size && Object.hasOwn(prices, size)
      ? prices[size]
      : undefined;
  if (typeof unit !== "number" || !Number.isFinite(unit)) return { costUsd: null, unitPriceUsd: null };
  return { costUsd: Math.round(unit * input.n * 1e9) / 1e9, unitPriceUsd: unit };
}

function variantOf(
  model: string,
  table: Record<string, unknown>,
  quality: string | undefined,
): string | null {
  if (Object.hasOwn(table, "default")) return "default";
  // dall-e-3's two qualities only: another (`auto`, "the best quality for the model", or a
  // gpt-image one a proxied call names) may run as hd, so it has no price.
  if (model.startsWith("dall-e-3")) return quality === "hd" || quality === "standard" ? quality : null;
  return quality && Object.hasOwn(table, quality) ? quality : null;
}
