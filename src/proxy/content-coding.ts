import { promisify } from "node:util";
import { brotliDecompress, gunzip, inflate, inflateRaw } from "node:zlib";

/** The zlib formats behind the content codings Sluice undoes. */
export type ZlibFormat = "gzip" | "deflate" | "deflate-raw" | "br";

/**
 * The content codings (RFC 9110 section 8.4.1, lower-cased) Sluice can undo, each naming its zlib
 * format from the data's first bytes: HTTP's deflate is the zlib format (section 8.4.1.2), but some
 * senders use raw deflate; a zlib stream's first byte names method 8 in its low bits (RFC 1950), as
 * undici's fetch checks. A provider's compressed answer (read for its usage, or decoded to mask the
 * key in an error) and a client's compressed request body (read for the stream usage option) are
 * all undone by this table.
 */
export const contentCodings: ReadonlyMap<string, (first: Buffer) => ZlibFormat> = new Map<
  string,
  (first: Buffer) => ZlibFormat
>([
  ["gzip", () => "gzip"],
  ["x-gzip", () => "gzip"], // section 8.4.1.3
  ["br", () => "br"],
  ["deflate", (first: Buffer) => (((first[0] ?? 0) & 0x0f) === 0x08 ? "deflate" : "deflate-raw")],
]);

/**
 * The codings a `content-encoding` header says were applied, in order (RFC 9110 section 8.4), as
 * written: empty entries and `identity` (in any case) left out. Repeated headers arrive joined with
 * `, `, which reads as one list.
 */
export function appliedCodings(contentEncoding: string): string[] {
  return contentEncoding
    .split(",")
    .map((coding) => coding.trim())
    .filter((coding) => coding !== "" && coding.toLowerCase() !== "identity");
}

type Decode = (body: Buffer, options: { maxOutputLength: number }) => Promise<Buffer>;

/** zlib's one-shot asynchronous decoders: the work runs on libuv's thread pool, never on the event loop. */
const wholeDecoders: Record<ZlibFormat, Decode> = {
  gzip: promisify(gunzip),
  deflate: promisify(inflate),
  "deflate-raw": promisify(inflateRaw),
  br: promisify(brotliDecompress) as Decode,
};

/** Why `decodeContent` gave up: a coding it cannot undo, a step past the cap, or bytes that do not decode. */
export class UndecodedContent extends Error {
  constructor(
    readonly reason: "unknown-coding" | "too-large" | "corrupt",
    options?: { cause?: unknown },
  ) {
    super(`The body does not decode as its content-encoding says (${reason})`, options);
  }
}

/**
 * A whole body as it reads without its `content-encoding`: a list is undone last coding first
 * (RFC 9110 section 8.4), off the event loop, each step at most `maxBytes` long. Rejects with an
 * `UndecodedContent` that says why it could not. The one loop over the codings for a client's
 * compressed request body (decodeRequestBody) and a provider's compressed error (CompressedKeyMask).
 */
export async function decodeContent(
  body: Buffer,
  contentEncoding: string,
  maxBytes: number,
): Promise<Buffer> {
  let decoded = body;
  for (const coding of appliedCodings(contentEncoding).reverse()) {
    const format = contentCodings.get(coding.toLowerCase());
    if (format === undefined) throw new UndecodedContent("unknown-coding");
    try {
      decoded = await wholeDecoders[format(decoded)](decoded, { maxOutputLength: maxBytes });
    } catch (error) {
      throw new UndecodedContent(
        (error as { code?: string }).code === "ERR_BUFFER_TOO_LARGE" ? "too-large" : "corrupt",
        { cause: error },
      );
    }
  }
  return decoded;
}
