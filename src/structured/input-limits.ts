import { GatewayError } from "../errors.js";
import type { ProviderId } from "../providers/provider-id.js";
import { imageDimensions } from "./image-dimensions.js";
import type { ImageInput } from "./image-input.js";
import { pdfPageCount } from "./pdf-page-count.js";

/**
 * What each provider refuses in one image on every call, so Sluice answers it before any call
 * (never the provider's 400 as a 502). Only limits a provider enforces with an error are here:
 * provider A (20 MB an image, 50 MB a request) and C (inline data up to its request limit) scale
 * a large image down and are above `SLUICE_MAX_IMAGE_BYTES`' default; see docs/structured.md.
 */
interface ImageLimits {
  /** Decoded bytes. */
  maxBytes?: number;
  /** The longer side, in pixels. */
  maxSide?: number;
  /** How the provider states its byte limit, for the message. */
  statedAs?: string;
}

const imageLimits: Record<ProviderId, ImageLimits> = {
  "provider-a": {},
  // Anthropic: "image exceeds 5 MB maximum", counted on the base64 text (5 MiB of it: 3,932,160
  // bytes decoded), and "At least one of the image dimensions exceed max allowed size: 8000 pixels"
  // (2000 with more than 20 images; Sluice sends one).
  "provider-b": { maxBytes: ((5 * 1024 * 1024) / 4) * 3, maxSide: 8000, statedAs: "5 MB in base64" },
  "provider-c": {},
};

/** 413 for an image over the provider's byte limit, 422 for one over its side limit. */
export function requireImageWithinLimits(provider: ProviderId, image: ImageInput): void {
  const limits = imageLimits[provider];
  if (limits.maxBytes !== undefined && image.bytes.length > limits.maxBytes) {
    throw new GatewayError(
      "PAYLOAD_TOO_LARGE",
      `${provider} takes an image of at most ${limits.maxBytes} bytes (${limits.statedAs}); this one has ${image.bytes.length}`,
      { details: { maxBytes: limits.maxBytes } },
    );
  }
  if (limits.maxSide === undefined) return;
  const size = imageDimensions(image.bytes, image.mediaType);
  if (size && Math.max(size.width, size.height) > limits.maxSide) {
    throw new GatewayError(
      "VALIDATION_ERROR",
      `${provider} takes an image of at most ${limits.maxSide} pixels a side; this one is ${size.width}x${size.height}`,
      { details: { ...size, maxSide: limits.maxSide } },
    );
  }
}

interface PdfLimits {
  /** Pages the provider reads in one request on any of its models. */
  maxPages?: number;
}

const pdfLimits: Record<ProviderId, PdfLimits> = {
  "provider-a": {},
  // Anthropic: "A maximum of 100 PDF pages may be provided" on a model with a 200k-token context
  // window, 600 on the others. Its docs also ask for "Standard PDF (no passwords/encryption)", but no
  // refusal of one is on record, and a PDF encrypted for its permissions alone opens without a
  // password: an encrypted PDF is left to the provider, not refused on a guess.
  "provider-b": { maxPages: 600 },
  "provider-c": {},
};

/**
 * 400 for a PDF of no pages (nothing to analyse, and a billed call), 422 for one the provider
 * refuses on every call: more pages than it reads. What the PDF's uncompressed structure does not
 * say (a page tree in an object stream) is left to the provider.
 */
export function requirePdfWithinLimits(provider: ProviderId, bytes: Uint8Array): void {
  const pages = pdfPageCount(bytes);
  if (pages === 0) throw new GatewayError("BAD_REQUEST", "The PDF has no pages: nothing to analyse");
  const limits = pdfLimits[provider];
  if (limits.maxPages !== undefined && pages !== null && pages > limits.maxPages) {
    // A count past 2^53 (a client's `/Count 999…`) is no exact number: said so, not as `Infinity`.
    const exact = Number.isSafeInteger(pages);
    const has = exact ? ` has ${pages} pages` : `'s page tree claims more than ${Number.MAX_SAFE_INTEGER}`;
    throw new GatewayError(
      "VALIDATION_ERROR",
      `${provider} reads at most ${limits.maxPages} PDF pages in a call; this one${has}`,
      { details: { pages: exact ? pages : null, maxPages: limits.maxPages } },
    );
  }
}
