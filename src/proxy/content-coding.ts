/** The zlib formats behind the content codings Sluice undoes. */
export type ZlibFormat = "gzip" | "deflate" | "deflate-raw" | "br";

/**
 * The content codings (RFC 9110 section 8.4.1, lower-cased) Sluice can undo, each naming its zlib
 * format from the data's first bytes: HTTP's deflate is the zlib format (section 8.4.1.2), but some
 * senders use raw deflate; a zlib stream's first byte names method 8 in its low bits (RFC 1950), as
 * undici's fetch checks. A provider's compressed answer (read for its usage) and a client's
 * compressed request body (read for the stream usage option) are both undone by this table.
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
