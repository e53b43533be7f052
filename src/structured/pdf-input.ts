import { GatewayError } from "../errors.js";
import { decodedLength, decodeStrictBase64 } from "./base64.js";

export type PdfInput = { kind: "data"; bytes: Uint8Array } | { kind: "url"; url: URL };

const dataPrefix = "data:application/pdf;base64,";
/** The prefix in any letter case: the scheme, media type and `base64` are (RFC 2397, RFC 2045). */
const dataUrl = /^data:application\/pdf;base64,/i;
const pdfMagic = Buffer.from("%PDF-");

/**
 * /v1/pdf input: `data:application/pdf;base64,<data>`, in any letter case (checked for the `%PDF-`
 * magic), or
 * an absolute URL without credentials (the fetcher then allows https only). Anything else is 400 BAD_REQUEST; over the cap, 413.
 */
export function parsePdfInput(value: string, options: { maxBytes: number }): PdfInput {
  if (dataUrl.test(value)) {
    const data = value.slice(dataPrefix.length);
    if (decodedLength(data) > options.maxBytes + 3) throw tooLarge(options.maxBytes);
    const bytes = decodeStrictBase64(data);
    if (!bytes) throw new GatewayError("BAD_REQUEST", "pdf data is not valid base64");
    if (bytes.length > options.maxBytes) throw tooLarge(options.maxBytes);
    if (!isPdf(bytes))
      throw new GatewayError("BAD_REQUEST", "pdf data is not a PDF (it does not start with %PDF-)");
    return { kind: "data", bytes };
  }
  if (/^data:/i.test(value))
    throw new GatewayError("BAD_REQUEST", `pdf must start with ${dataPrefix} or be an https URL`);
  if (value.length > 2048) throw new GatewayError("BAD_REQUEST", "pdf URL is longer than 2048 characters");
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new GatewayError(
      "BAD_REQUEST",
      `pdf must be a data URL starting with ${dataPrefix} or an https URL`,
    );
  }
  // Which schemes may be fetched is the fetcher's rule, checked on every hop: https only, in every
  // environment (the fetcher's own tests allow http to reach a local server).
  if (url.protocol !== "https:" && url.protocol !== "http:")
    throw new GatewayError("BAD_REQUEST", "the PDF URL must use https");
  if (url.username || url.password)
    throw new GatewayError("BAD_REQUEST", "pdf URL must not contain credentials");
  return { kind: "url", url };
}

export function isPdf(bytes: Uint8Array): boolean {
  return bytes.length >= pdfMagic.length && Buffer.from(bytes.subarray(0, pdfMagic.length)).equals(pdfMagic);
}

function tooLarge(maxBytes: number): GatewayError {
  return new GatewayError("PAYLOAD_TOO_LARGE", `The PDF exceeds ${maxBytes} bytes`, {
    details: { maxBytes },
  });
}
