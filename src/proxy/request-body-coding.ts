import { GatewayError } from "../errors.js";
import { decodeContent, UndecodedContent } from "./content-coding.js";

/**
 * A request body as it reads without its `content-encoding` (decodeContent: last coding first, off
 * the event loop), at most `maxBytes` long once decoded. Refuses a coding it cannot undo (415), a
 * body that does not decode (400) and one that decodes beyond the cap (413).
 */
export async function decodeRequestBody(
  body: Buffer,
  contentEncoding: string,
  maxBytes: number,
): Promise<Buffer> {
  try {
    return await decodeContent(body, contentEncoding, maxBytes);
  } catch (error) {
    const reason = error instanceof UndecodedContent ? error.reason : "corrupt";
    if (reason === "unknown-coding")
      throw new GatewayError(
        "UNSUPPORTED_MEDIA_TYPE",
        "The request body's content-encoding cannot be read on this path; send it uncompressed, or as gzip, deflate or br",
        // RFC 9110 15.5.16: the codings the path reads, as the JSON endpoints' 415 names identity.
        { headers: { "accept-encoding": "gzip, deflate, br, identity" } },
      );
    if (reason === "too-large")
      throw new GatewayError("PAYLOAD_TOO_LARGE", `The decoded request body exceeds ${maxBytes} bytes`, {
        details: { maxBytes },
      });
    throw new GatewayError("BAD_REQUEST", "The request body does not decode as its content-encoding says", {
      cause: (error as { cause?: unknown }).cause ?? error,
    });
  }
}
