import type { ImageListReading } from "./image-list-scanner.js";
import { SseEventScanner } from "./sse-event-scanner.js";

const completedType = "image_generation.completed";
const sizeField = /"size"\s*:\s*"([^"\\]{1,64})"/;
const qualityField = /"quality"\s*:\s*"([^"\\]{1,64})"/;

/**
 * Counts the images of provider A's streamed image generation (`images/generations` with
 * `"stream": true`): one per `image_generation.completed` event, whose size and quality are read
 * from the event (gpt-image models name the ones they used). An event holds its image whole in
 * base64, past the SSE scanner's cap: its type is read from the start kept, its size and quality
 * (after the image) from the end kept; base64 holds no quote, so neither can match inside it.
 * Partial images (`image_generation.partial_image`) are billed as extra output tokens the catalogue
 * has no price for: they are not counted.
 */
export class ImageStreamEvents {
  private images = 0;
  private size: string | null = null;
  private quality: string | null = null;
  private readonly scanner = new SseEventScanner((event, data, cutTail) => {
    const completed =
      event !== undefined ? event === completedType : data.slice(0, 200).includes(`"${completedType}"`);
    if (!completed) return;
    this.images++;
    const rest = cutTail === undefined ? data : `${data.slice(0, 4096)}\n${cutTail.toString("latin1")}`;
    this.size = sizeField.exec(rest)?.[1] ?? this.size;
    this.quality = qualityField.exec(rest)?.[1] ?? this.quality;
  });

  push(chunk: Buffer): void {
    this.scanner.push(chunk);
  }

  /**
   * The stream ended cleanly: a last `image_generation.completed` left without its blank line is
   * counted, as the openai SDK gives it to its user (see the usage meter's end).
   */
  end(): void {
    this.scanner.end(true);
  }

  /** Never complete: a stream the client cut counts at least the images the request asked for. */
  result(): ImageListReading {
    return { images: this.images, complete: false, size: this.size, quality: this.quality };
  }
}
