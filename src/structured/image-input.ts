import { GatewayError } from "../errors.js";
import type { ProviderId } from "../providers/provider-id.js";
import { decodedLength, decodeStrictBase64 } from "./base64.js";
import { malformedImageHeader } from "./image-dimensions.js";

export interface ImageInput {
  bytes: Uint8Array;
  /** Sniffed from the bytes, whatever the data URL declared. */
  mediaType: string;
}

const dataUrl = /^data:(image\/[a-z0-9.+-]+);base64,/i;
const imageForm = "image must be base64 or a data URL of the form data:image/<type>;base64,<data>";

/**
 * /v1/vision input: raw base64 or `data:image/<type>;base64,<data>`. The bytes decide the media
 * type (PNG, JPEG, GIF, WebP, HEIC/HEIF); a declared type that disagrees is ignored, since the
 * bytes are what the provider will see. Not an image, malformed base64, or a PNG or GIF whose header
 * is missing (malformedImageHeader): 422. Over the cap: 413.
 */
export function parseImageInput(
  value: string,
  /** `provider`: the one whose readable types a refusal names (all Sluice can tell, without). */
  options: { maxBytes: number; provider?: ProviderId },
): ImageInput {
  let data = value;
  const match = dataUrl.exec(value);
  if (match) data = value.slice(match[0].length);
  else if (/^data:/i.test(value)) {
    throw new GatewayError("VALIDATION_ERROR", imageForm);
  } else if (/^https?:\/\//i.test(value)) {
    // An image URL (provider A's vision input takes one, /v1/pdf an https URL) is never valid
    // base64: say what is taken instead.
    throw new GatewayError("VALIDATION_ERROR", `${imageForm}: /v1/vision does not fetch image URLs`);
  }
  if (decodedLength(data) > options.maxBytes + 3) {
    throw new GatewayError("PAYLOAD_TOO_LARGE", `The image exceeds ${options.maxBytes} bytes`, {
      details: { maxBytes: options.maxBytes },
    });
  }
  const bytes = decodeStrictBase64(data);
  if (!bytes) throw new GatewayError("VALIDATION_ERROR", "image is not valid base64");
  if (bytes.length > options.maxBytes) {
    throw new GatewayError("PAYLOAD_TOO_LARGE", `The image exceeds ${options.maxBytes} bytes`, {
      details: { maxBytes: options.maxBytes },
    });
  }
  const mediaType = sniffImageType(bytes);
  if (!mediaType) {
    const types = options.provider ? readableImageTypes[options.provider] : sniffedTypes;
    const names = types.map(typeName);
    throw new GatewayError(
      "VALIDATION_ERROR",
      `image is not a ${names.slice(0, -1).join(", ")} or ${names.at(-1)} image`,
    );
  }
  const malformed = malformedImageHeader(bytes, mediaType);
  if (malformed) throw new GatewayError("VALIDATION_ERROR", `image is malformed: ${malformed}`);
  return { bytes, mediaType };
}

/** The image types each provider's vision input reads (their documentation, 2026-11). */
const readableImageTypes: Record<ProviderId, readonly string[]> = {
  "provider-a": ["image/png", "image/jpeg", "image/gif", "image/webp"],
  "provider-b": ["image/png", "image/jpeg", "image/gif", "image/webp"],
  "provider-c": ["image/png", "image/jpeg", "image/webp", "image/heic", "image/heif"],
};

/** The types sniffImageType tells apart. */
const sniffedTypes = ["image/png", "image/jpeg", "image/gif", "image/webp", "image/heic"];
const typeName = (type: string) => type.slice("image/".length).toUpperCase();

/** 422 for an image type the project's provider does not read, instead of the provider's 400 as a 502. */
export function requireReadableImage(provider: ProviderId, mediaType: string): void {
  const readable = readableImageTypes[provider];
  if (readable.includes(mediaType)) return;
  throw new GatewayError(
    "VALIDATION_ERROR",
    `${provider} does not read ${typeName(mediaType)} images; send ${readable.map(typeName).join(", ")}`,
    { details: { mediaType, accepted: readable } },
  );
}

const heifBrands = new Set(["heic", "heix", "hevc", "hevx", "heim", "heis", "mif1", "msf1"]);

export function sniffImageType(bytes: Uint8Array): string | null {
  const ascii = (start: number, end: number) => Buffer.from(bytes.subarray(start, end)).toString("latin1");
  if (
    bytes.length >= 8 &&
    bytes[0] === 0x89 &&
    ascii(1, 4) === "PNG" &&
    bytes[4] === 0x0d &&
    bytes[5] === 0x0a
  )
    return "image/png";
  if (bytes.length >= 3 && bytes[0] === 0xff && bytes[1] === 0xd8 && bytes[2] === 0xff) return "image/jpeg";
  if (bytes.length >= 6 && (ascii(0, 6) === "GIF87a" || ascii(0, 6) === "GIF89a")) return "image/gif";
  if (bytes.length >= 12 && ascii(0, 4) === "RIFF" && ascii(8, 12) === "WEBP") return "image/webp";
  if (bytes.length >= 12 && ascii(4, 8) === "ftyp") {
    const brand = ascii(8, 12);
    if (heifBrands.has(brand)) return brand.startsWith("he") ? "image/heic" : "image/heif";
  }
  return null;
}
