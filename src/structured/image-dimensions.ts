export interface ImageDimensions {
  width: number;
  height: number;
}

/**
 * An image's size in pixels, read from its header alone (no decoding): PNG's IHDR, GIF's logical
 * screen, WebP's VP8/VP8L/VP8X header, JPEG's first start-of-frame segment. Null when the header
 * does not say (HEIC/HEIF, truncated or unusual bytes): the provider then judges.
 */
export function imageDimensions(bytes: Uint8Array, mediaType: string): ImageDimensions | null {
  const buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (mediaType === "image/png") return pngDimensions(buffer);
  if (mediaType === "image/gif")
    return buffer.length >= 10 ? { width: buffer.readUInt16LE(6), height: buffer.readUInt16LE(8) } : null;
  if (mediaType === "image/webp") return webpDimensions(buffer);
  if (mediaType === "image/jpeg") return jpegDimensions(buffer);
  return null;
}

/**
 * Why an image of a type whose header every file has is malformed, or null: a PNG must begin with
 * its IHDR chunk and state a width and height of at least 1 (ISO/IEC 15948 §5.6, §11.2.2), a GIF
 * with its logical screen descriptor (GIF89a §18), a WebP with a VP8, VP8L or VP8X chunk and its
 * header (the WebP container specification: the first chunk is one of the three), and a JPEG must
 * reach its start of scan, where its pixels begin (ITU T.81 B.2.1: the frame's segments come
 * before its first scan). Such bytes are no image whatever the signature says, and no provider
 * reads them: refused before a call that would be billed (422). What may still be read is left to
 * the provider: a scan cut short (decoders show what arrived), stray bytes between a JPEG's
 * segments (decoders skip them), HEIC's boxes.
 */
export function malformedImageHeader(bytes: Uint8Array, mediaType: string): string | null {
  const buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (mediaType === "image/png") {
    const size = pngDimensions(buffer);
    if (!size) return "a PNG without its header: the IHDR chunk must follow the signature";
    if (size.width === 0 || size.height === 0) return `a PNG of ${size.width}x${size.height} pixels`;
  }
  // The descriptor is 7 bytes after the 6 of the signature: width, height, flags, background, aspect.
  if (mediaType === "image/gif" && buffer.length < 13)
    return "a GIF cut short: its logical screen descriptor is missing";
  if (mediaType === "image/webp" && !webpDimensions(buffer))
    return "a WebP without its header: its first chunk must be VP8, VP8L or VP8X, with the frame's size";
  if (mediaType === "image/jpeg" && jpegEndsBeforeScan(buffer))
    return "a JPEG that ends before its image data: no start of scan follows its segments";
  return null;
}

/**
 * Whether a JPEG's segments, walked from its start of image, end (the bytes run out, or an end of
 * image comes) before a start of scan. False as soon as the walk meets what it cannot read (a byte
 * that is no marker, a segment length under 2): the provider judges those.
 */
function jpegEndsBeforeScan(buffer: Buffer): boolean {
  const stop = walkJpeg(buffer, (marker) => marker === 0xda || marker === 0xd9);
  if (stop === "unreadable") return false;
  return stop === "ran-out" || stop.marker === 0xd9;
}

/**
 * Walks a JPEG's marker segments from its start of image (ITU T.81 B.1.1), stepping over fill bytes
 * and the standalone markers (TEM, RSTn), to the first marker `stopAt` takes: that marker and its
 * offset; "ran-out" when the bytes end first (within a segment's marker and length included);
 * "unreadable" at a byte that is no marker or a segment length under 2.
 */
function walkJpeg(
  buffer: Buffer,
  stopAt: (marker: number) => boolean,
): { marker: number; offset: number } | "ran-out" | "unreadable" {
  let offset = 2;
  while (offset < buffer.length) {
    if (buffer[offset] !== 0xff) return "unreadable";
    const marker = buffer[offset + 1];
    if (marker === undefined) return "ran-out";
    if (marker === 0xff) {
      offset++; // fill byte
      continue;
    }
    if (stopAt(marker)) return { marker, offset };
    if (marker === 0x01 || (marker >= 0xd0 && marker <= 0xd7)) {
      offset += 2;
      continue;
    }
    if (offset + 4 > buffer.length) return "ran-out";
    const length = buffer.readUInt16BE(offset + 2);
    if (length < 2) return "unreadable";
    offset += 2 + length;
  }
  return "ran-out";
}

function pngDimensions(buffer: Buffer): ImageDimensions | null {
  if (buffer.length < 24 || buffer.toString("latin1", 12, 16) !== "IHDR") return null;
  return { width: buffer.readUInt32BE(16), height: buffer.readUInt32BE(20) };
}

/** WebP container (RIFF): the first chunk is VP8 (lossy), VP8L (lossless) or VP8X (extended). */
function webpDimensions(buffer: Buffer): ImageDimensions | null {
  const chunk = buffer.toString("latin1", 12, 16);
  // VP8L's header is 5 bytes after the chunk's 8 (a whole 1x1 lossless image may be 28 bytes);
  // VP8's frame tag and size, and VP8X's flags and canvas size, are 10.
  if (buffer.length < (chunk === "VP8L" ? 25 : 30)) return null;
  if (chunk === "VP8 ") {
    // Frame tag (3 bytes), start code 9d 01 2a, then 14-bit width and height.
    if (buffer[23] !== 0x9d || buffer[24] !== 0x01 || buffer[25] !== 0x2a) return null;
    return { width: buffer.readUInt16LE(26) & 0x3fff, height: buffer.readUInt16LE(28) & 0x3fff };
  }
  if (chunk === "VP8L") {
    if (buffer[20] !== 0x2f) return null;
    const bits = buffer.readUInt32LE(21);
    return { width: (bits & 0x3fff) + 1, height: ((bits >>> 14) & 0x3fff) + 1 };
  }
  if (chunk === "VP8X") return { width: buffer.readUIntLE(24, 3) + 1, height: buffer.readUIntLE(27, 3) + 1 };
  return null;
}

/** JPEG: walk the marker segments to the first SOFn (C0–CF but DHT C4, JPG C8, DAC CC). */
function jpegDimensions(buffer: Buffer): ImageDimensions | null {
  const isFrame = (marker: number) =>
    marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc;
  // An end of image or a start of scan before any frame: no frame.
  const stop = walkJpeg(buffer, (marker) => isFrame(marker) || marker === 0xd9 || marker === 0xda);
  // The frame header's height and width, 5 and 7 bytes after its marker.
  if (typeof stop === "string" || !isFrame(stop.marker) || stop.offset + 9 >= buffer.length) return null;
  return { width: buffer.readUInt16BE(stop.offset + 7), height: buffer.readUInt16BE(stop.offset + 5) };
}
