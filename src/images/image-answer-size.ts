import type { ProviderId } from "../providers/provider-id.js";
import { type ImageRequest, largestCataloguedImagePixels } from "./image-request.js";

/**
 * The pixels of an image generated at no size Sluice can read from the request: what Imagen and the
 * Gemini image models generate at their default resolution (about a megapixel, whatever the aspect
 * ratio: 1024x1024, 1408x768), and the GPT Image models' `auto` most often (1024x1024; 1536x1024
 * is half as large again, counted at its real size once it comes: answerBytes).
 */
const defaultPixels = 1024 * 1024;

/**
 * What one image is reserved at in the body budget before its provider call (decision 0054): its
 * PNG in base64, as the provider answers it and the client's answer carries it, counted as 3 bytes
 * a pixel (an RGB image's pixels uncompressed, which a generated PNG does not exceed in practice:
 * 1.5 to 3 MiB at 1024x1024) times 4/3 for base64: 4 bytes a pixel, 4 MiB at 1024x1024. Sluice
 * asks for no other format than each provider's default, PNG, and the quality asked for changes
 * the detail, not the pixels: neither is looked at. The size is provider A's `size` when given;
 * provider C's models take none (an aspect ratio at about a megapixel), nor does a request without
 * it: defaultPixels. No image is counted larger than the largest a catalogued model makes
 * (largestCataloguedImagePixels, 3840x2160: 31.6 MiB): a catalogued model is refused a larger
 * size (422), and one the catalogue does not know (a new model, a self-hosted server's), sent any
 * size, is counted at its real size once its images come.
 */
export function estimatedImageBytes(provider: ProviderId, request: Pick<ImageRequest, "size">): number {
  const size = provider === "provider-a" ? request.size : undefined;
  if (!size) return defaultPixels * 4;
  const [width = 0, height = 0] = size.split("x").map(Number);
  return Math.min(width * height, largestCataloguedImagePixels) * 4;
}

/** The bytes a generation's images weigh as the provider answered them: their base64. */
export function answerBytes(images: ReadonlyArray<{ base64: string }>): number {
  let bytes = 0;
  for (const image of images) bytes += image.base64.length;
  return bytes;
}

/**
 * Where a generation counts the images it will hold (decision 0054): `reserve` before the provider
 * call, `images` of `bytesEach` (throws the 503 of a body that does not fit when they do not);
 * `settle` once the images have come, with what they really weigh (answerBytes), which replaces
 * the reservation, larger or smaller, until the call ends.
 */
export interface AnswerReservation {
  reserve(images: number, bytesEach: number): void;
  settle(bytes: number): void;
}
