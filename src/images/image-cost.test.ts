import { describe, expect, it } from "vitest";
import { imageCost } from "./image-cost.js";

describe("image cost, SPEC.md's table row by row", () => {
  const sizes = ["1024x1024", "1024x1536", "1536x1024"] as const;
  const rows: Array<[string, string | undefined, [number, number, number]]> = [
    ["gpt-image-1", "low", [0.011, 0.016, 0.016]],
    ["gpt-image-1", "medium", [0.042, 0.063, 0.063]],
    ["gpt-image-1", "high", [0.167, 0.25, 0.25]],
    ["dall-e-3", "standard", [0.04, 0.08, 0.08]],
    ["dall-e-3", "hd", [0.08, 0.12, 0.12]],
    ["gpt-image-1-mini", undefined, [0.016, 0.018, 0.02]],
  ];
  for (const [model, quality, prices] of rows) {
    for (const [index, size] of sizes.entries()) {
      it(`prices ${model} ${quality ?? "n/a"} ${size} at ${prices[index]}`, () => {
        expect(imageCost({ provider: "provider-a", model, quality, size, n: 1 })).toEqual({
          costUsd: prices[index],
          unitPriceUsd: prices[index],
        });
      });
    }
  }

  it("prices provider C standard and fast at any size, times n", () => {
    expect(imageCost({ provider: "provider-c", model: "imagen-4.0-generate-001", n: 3 }).costUsd).toBe(0.12);
    expect(
      imageCost({ provider: "provider-c", model: "imagen-4.0-fast-generate-001", aspectRatio: "16:9", n: 2 })
        .costUsd,
    ).toBe(0.04);
  });

  it("prices a size or quality not given at the model's default, which the provider generates at", () => {
    expect(imageCost({ provider: "provider-a", model: "dall-e-3", n: 1 })).toEqual({
      costUsd: 0.04,
      unitPriceUsd: 0.04,
    });
    expect(imageCost({ provider: "provider-a", model: "dall-e-3", quality: "hd", n: 2 }).costUsd).toBe(0.16);
    expect(imageCost({ provider: "provider-a", model: "dall-e-3", size: "1536x1024", n: 1 }).costUsd).toBe(
      0.08,
    );
    // gpt-image models default to `auto`, which has no price.
    expect(
      imageCost({ provider: "provider-a", model: "gpt-image-1", quality: "low", n: 1 }).costUsd,
    ).toBeNull();
  });

  it("leaves dall-e-3 at a quality other than standard or hd unknown, as gpt-image's `auto` is", () => {
    // Provider A's images API takes `auto` for every model (the best quality for it) and a proxied
    // call may name any quality: priced as standard, one that ran as hd cost twice its price.
    for (const quality of ["auto", "high", "HD", "Standard", " hd"])
      expect(imageCost({ provider: "provider-a", model: "dall-e-3", quality, n: 1 })).toEqual({
        costUsd: null,
        unitPriceUsd: null,
      });
    expect(imageCost({ provider: "provider-a", model: "dall-e-3", quality: "standard", n: 1 }).costUsd).toBe(
      0.04,
    );
  });

  it("does not price provider A by an aspect ratio, which its API never receives", () => {
    expect(
      imageCost({ provider: "provider-a", model: "gpt-image-1", quality: "low", aspectRatio: "3:2", n: 1 })
        .costUsd,
    ).toBeNull();
    // The model's default size, not the ratio's (2:3 would be 1024x1536, 0.08).
    expect(imageCost({ provider: "provider-a", model: "dall-e-3", aspectRatio: "2:3", n: 1 }).costUsd).toBe(
      0.04,
    );
  });

  it.each([
    [{ provider: "provider-c" as const, model: "imagen-4.0-ultra-generate-001", n: 1 }],
    [{ provider: "provider-a" as const, model: "gpt-image-1", quality: "auto", size: "1024x1024", n: 1 }],
    [{ provider: "provider-a" as const, model: "gpt-image-1", quality: "low", n: 1 }],
    [{ provider: "provider-a" as const, model: "gpt-image-1", quality: "low", size: "512x512", n: 1 }],
    [{ provider: "provider-a" as const, model: "unknown-model", size: "1024x1024", n: 1 }],
    // Names every object inherits, from an answer or a request: never a price (NaN would switch the
    // spend cap off, as a NaN sum is never over it).
    [{ provider: "provider-a" as const, model: "dall-e-3", size: "constructor", n: 1 }],
    [{ provider: "provider-a" as const, model: "dall-e-3", size: "__proto__", n: 1 }],
    [{ provider: "provider-a" as const, model: "gpt-image-1", quality: "toString", size: "1024x1024", n: 1 }],
    [
      {
        provider: "provider-a" as const,
        model: "gpt-image-1",
        quality: "constructor",
        size: "1024x1024",
        n: 1,
      },
    ],
  ])("is unknown (null, never 0) for %j", (input) => {
    expect(imageCost(input)).toEqual({ costUsd: null, unitPriceUsd: null });
  });
});
