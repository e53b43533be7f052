import { describe, expect, it } from "vitest";
import { answerBytes, estimatedImageBytes } from "./image-answer-size.js";
import { largestCataloguedImagePixels } from "./image-request.js";

describe("estimatedImageBytes", () => {
  it("is 4 bytes a pixel of provider A's size: an RGB image's pixels in base64", () => {
    expect(estimatedImageBytes("provider-a", { size: "1024x1024" })).toBe(4 * 1024 * 1024);
    expect(estimatedImageBytes("provider-a", { size: "1536x1024" })).toBe(6 * 1024 * 1024);
    expect(estimatedImageBytes("provider-a", { size: "3840x2160" })).toBe(3840 * 2160 * 4);
  });

  it("counts no image larger than the largest a catalogued model makes: a model unknown to it takes any size", () => {
    expect(largestCataloguedImagePixels).toBe(3840 * 2160);
    // A size the catalogue's models are refused (422) past; a model it does not know is sent it.
    expect(estimatedImageBytes("provider-a", { size: "99999x99999" })).toBe(3840 * 2160 * 4);
    expect(estimatedImageBytes("provider-a", { size: "8192x8192" })).toBe(3840 * 2160 * 4);
    expect(estimatedImageBytes("provider-a", { size: "2880x2880" })).toBe(2880 * 2880 * 4);
  });

  it("takes a megapixel where no size is read: provider A without one, provider C's models", () => {
    expect(estimatedImageBytes("provider-a", {})).toBe(4 * 1024 * 1024);
    expect(estimatedImageBytes("provider-c", {})).toBe(4 * 1024 * 1024);
    // Provider C's models generate at an aspect ratio: a size sent there is not what comes.
    expect(estimatedImageBytes("provider-c", { size: "4096x4096" })).toBe(4 * 1024 * 1024);
  });
});

describe("answerBytes", () => {
  it("is the images' base64, as the provider answered them", () => {
    expect(answerBytes([])).toBe(0);
    expect(answerBytes([{ base64: "iVBORw==" }, { base64: "AAAA" }])).toBe(12);
  });
});
