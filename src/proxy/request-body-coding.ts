import { promisify } from "node:util";
import { brotliDecompress, gunzip, inflate, inflateRaw } from "node:zlib";
import { GatewayError } from "../errors.js";
import { appliedCodings, contentCodings, type ZlibFormat } from "./content-coding.js";

type Decode = (body: Buffer, options: { maxOutputLength: number }) => Promise<Buffer>;

const wholeDecoders: Record<ZlibFormat, Decode> = {
  gzip: promisify(gunzip),
  deflate: promisify(inflate),
  "deflate-raw": promisify(inflateRaw),
  br: promisify(brotliDecompress) as Decode,
};

/**
 * A request body as it reads without its `content-encoding` (a list is undone last coding first,
 * RFC 9110 section 8.4), off the event loop and at most `maxBytes` long once decoded. Refuses a
 * coding it cannot undo (415), a body that does not decode (400) and one that decodes beyond the
 * cap (413).
 */
export async function decodeRequestBody(
  body: Buffer,
  contentEncoding: string,
  maxBytes: number,
): Promise<Buffer> {
  let decoded = body;
  for (const coding of appliedCodings(contentEncoding).reverse()) {
    const format = contentCodings.get(coding.toLowerCase());
    if (format === undefined)
      throw new GatewayError(
        "UNSUPPORTED_MEDIA_TYPE",
        "The request body's content-encoding cannot be read on this path; send it uncompressed, or as gzip, deflate or br",
      );
    try {
      decoded = await wholeDecoders[format(decoded)](decoded, { maxOutputLength: maxBytes });
    } catch (error) {
      if ((error as { code?: string }).code === "ERR_BUFFER_TOO_LARGE")
        throw new GatewayError("PAYLOAD_TOO_LARGE", `The decoded request body exceeds ${maxBytes} bytes`, {
          details: { maxBytes },
        });
      throw new GatewayError("BAD_REQUEST", "The request body does not decode as its content-encoding says", {
        cause: error,
      });
    }
  }
  return decoded;
}
