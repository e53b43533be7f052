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
 * before it was sent: it counts at least the images the request asked for. The request's body is
 * read only for what the answer does not say.
 */
export function generatedImages(
  answer: ImageListReading,
  cut: boolean,
  requested: () => RequestedImages,
): GeneratedImages {
  let request: RequestedImages | null = null;
  const asked = () => {
    request ??= requested();
    return request;
  };
  return {
    count: answer.complete || !cut ? answer.images : Math.max(answer.images, asked().count),
    size: answer.size ?? asked().size,
    quality: answer.quality ?? asked().quality,
  };
}
