import { describe, expect, it } from "vitest";
import { costOfTokens } from "../usage/token-cost.js";
import { emptyUsage } from "../usage/token-usage.js";
import { costOfProxiedCall, imagePriceBeforeCall } from "./call-cost.js";
import { generatedImages } from "./generated-images.js";

const usage = { inputTokens: 1000, outputTokens: 500, cachedInputTokens: 0, reasoningTokens: 0 };
const images = (count: number, size: string | null = null, quality: string | null = null) => ({
  count,
  size,
  quality,
});

describe("costOfProxiedCall", () => {
  it("prices a model with token prices by its tokens, as before", () => {
    expect(costOfProxiedCall("provider-a", "gpt-4o-mini", usage)).toBe(
      costOfTokens("provider-a", "gpt-4o-mini", usage),
    );
    expect(costOfProxiedCall("provider-a", "gpt-4o-mini", usage, images(3, "1024x1024", "low"))).toBe(
      costOfTokens("provider-a", "gpt-4o-mini", usage),
    );
  });

  it("prices an image model's images by the catalogue's per-image prices", () => {
    expect(costOfProxiedCall("provider-a", "gpt-image-1", usage, images(2, "1024x1024", "low"))).toBe(0.022);
    expect(costOfProxiedCall("provider-a", "gpt-image-1", usage, images(1, "1536x1024", "high"))).toBe(0.25);
    expect(costOfProxiedCall("provider-a", "gpt-image-1-mini", usage, images(3, "1024x1536"))).toBe(0.054);
    expect(costOfProxiedCall("provider-c", "imagen-4.0-generate-001", emptyUsage(), images(4))).toBe(0.16);
    expect(costOfProxiedCall("provider-c", "imagen-4.0-fast-generate-001", emptyUsage(), images(1))).toBe(
      0.02,
    );
  });

  it("uses dall-e-3's default size and quality where neither the answer nor the request names one", () => {
    expect(costOfProxiedCall("provider-a", "dall-e-3", emptyUsage(), images(1))).toBe(0.04);
    expect(costOfProxiedCall("provider-a", "dall-e-3", emptyUsage(), images(1, null, "hd"))).toBe(0.08);
    expect(costOfProxiedCall("provider-a", "dall-e-3", emptyUsage(), images(1, "1536x1024"))).toBe(0.08);
  });

  it("prices dall-e-3's own landscape and portrait sizes as the table's (decision 0065)", () => {
    expect(costOfProxiedCall("provider-a", "dall-e-3", emptyUsage(), images(1, "1792x1024"))).toBe(0.08);
    expect(costOfProxiedCall("provider-a", "dall-e-3", emptyUsage(), images(1, "1024x1792", "hd"))).toBe(
      0.12,
    );
    expect(costOfProxiedCall("provider-a", "dall-e-3", emptyUsage(), images(1, "1792x1792"))).toBeNull();
  });

  it("leaves the cost unknown for what has no price, never 0", () => {
    expect(costOfProxiedCall("provider-a", "gpt-image-1", usage, images(1, "auto", "auto"))).toBeNull();
    expect(costOfProxiedCall("provider-a", "gpt-image-1", usage, images(1, "1024x1024"))).toBeNull();
    expect(
      costOfProxiedCall("provider-c", "imagen-4.0-ultra-generate-001", emptyUsage(), images(1)),
    ).toBeNull();
    expect(costOfProxiedCall("provider-a", "dall-e-2", emptyUsage(), images(1, "1024x1024"))).toBeNull();
    expect(costOfProxiedCall("provider-a", null, emptyUsage(), images(1, "1024x1024"))).toBeNull();
    // Not an image generation's answer (an error, say): an image model's tokens have no price.
    expect(costOfProxiedCall("provider-a", "gpt-image-1", usage, null)).toBeNull();
  });

  it("prices an answer with no images at 0", () => {
    expect(costOfProxiedCall("provider-c", "imagen-4.0-generate-001", emptyUsage(), images(0))).toBe(0);
  });
});

describe("generatedImages", () => {
  const requested = { count: 4, size: "1024x1536", quality: "low" };
  const reading = (images: number, complete: boolean, size: string | null = null) => ({
    images,
    complete,
    size,
    quality: null,
  });

  it("counts the answer's images and prefers the size and quality it names to the request's", async () => {
    expect(await generatedImages(reading(2, true, "1024x1024"), false, () => requested)).toEqual({
      count: 2,
      size: "1024x1024",
      quality: "low",
    });
  });

  it("counts at least the images asked for when the answer was cut", async () => {
    expect((await generatedImages(reading(1, false), true, () => requested)).count).toBe(4);
    expect((await generatedImages(reading(1, false), false, () => requested)).count).toBe(1);
  });

  it("waits for a request that is read asynchronously (a compressed body), and only then", async () => {
    const cut = generatedImages(reading(1, false), true, () => Promise.resolve(requested));
    expect(cut).toBeInstanceOf(Promise);
    expect(await cut).toEqual({ count: 4, size: "1024x1536", quality: "low" });
    const answer = { images: 2, complete: true, size: "1024x1024", quality: "high" };
    expect(generatedImages(answer, false, () => Promise.resolve(requested))).toEqual({
      count: 2,
      size: "1024x1024",
      quality: "high",
    });
  });

  it("reads the request only for what the answer does not say", () => {
    let reads = 0;
    const answer = { images: 1, complete: true, size: "1024x1024", quality: "high" };
    generatedImages(answer, false, () => {
      reads++;
      return requested;
    });
    expect(reads).toBe(0);
  });
});

describe("imagePriceBeforeCall", () => {
  const asked = (count: number, size: string | null = null, quality: string | null = null) => ({
    count,
    size,
    quality,
  });

  it("prices the images asked for at the table's price, as the answer would be priced", () => {
    expect(imagePriceBeforeCall("provider-a", "gpt-image-1", asked(20, "1536x1024", "high"))).toBe(5);
    expect(imagePriceBeforeCall("provider-a", "dall-e-3", asked(1))).toBe(0.04);
    expect(imagePriceBeforeCall("provider-c", "imagen-4.0-generate-001", asked(4))).toBe(0.16);
  });

  it("has none when the table gives none before the answer", () => {
    // No model read, a model not in the table, one priced by the token, `auto` or no quality.
    expect(imagePriceBeforeCall("provider-a", null, asked(1, "1024x1024", "low"))).toBeNull();
    expect(imagePriceBeforeCall("provider-a", "not-a-model", asked(1, "1024x1024", "low"))).toBeNull();
    expect(imagePriceBeforeCall("provider-a", "gpt-4o-mini", asked(1, "1024x1024", "low"))).toBeNull();
    expect(imagePriceBeforeCall("provider-a", "gpt-image-1", asked(1, "1024x1024", "auto"))).toBeNull();
    expect(imagePriceBeforeCall("provider-a", "gpt-image-1", asked(1, "1024x1024"))).toBeNull();
    expect(imagePriceBeforeCall("provider-c", "imagen-4.0-ultra-generate-001", asked(4))).toBeNull();
  });
});
