import type { RequestedImages } from "../providers/image-calls.js";
import type { ImageListReading } from "./image-list-scanner.js";

/** The images a proxied image generation produced, as its per-image price needs them. */
export interface GeneratedImages {
  count: number;
  /** The answer's size, else the request's; null when neither says (the model's default applies). */
  size: string | null;
  /** The answer's quality, else the request's; null when neither says. */
  quality: string | null;
}

/**
 * What was generated, from a successful answer: the images it lists, and the size and quality it
 * names (gpt-image models name the ones they used, also for `auto`), else those the request named.
 * An answer that was cut (the client left, the provider stopped) was generated, and billed, whole
 * before it was sent: it counts at least the images the request asked for. The request is read
 * only for what the answer does not say; a promise only when reading it is one (a compressed
 * request body, decoded for it).
 */
export function generatedImages(
  answer: ImageListReading,
  cut: boolean,
  requested: () => RequestedImages | Promise<RequestedImages>,
): GeneratedImages | Promise<GeneratedImages> {
  const counted = answer.complete || !cut;
  if (counted && answer.size !== null && answer.quality !== null)
    return { count: answer.images, size: answer.size, quality: answer.quality };
  const request = requested();
  return request instanceof Promise
    ? request.then((asked) => withRequest(answer, counted, asked))
    : withRequest(answer, counted, request);
}

function withRequest(answer: ImageListReading, counted: boolean, request: RequestedImages): GeneratedImages {
  return {
    count: counted ? answer.images : Math.max(answer.images, request.count),
    size: answer.size ?? request.size,
    quality: answer.quality ?? request.quality,
  };
}
