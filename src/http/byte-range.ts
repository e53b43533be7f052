import type { IncomingHttpHeaders } from "node:http";

/** The bytes `first` through `last` (inclusive) of a file. */
export interface ByteRange {
  first: number;
  last: number;
}

/**
 * The one byte range a GET asks for of a file of `size` bytes (RFC 9110 §14.1.2, §14.2), clamped to
 * its end: null to answer the whole file (no Range, a Range this reads as none: another unit,
 * several ranges, a spec that does not parse or whose last byte comes before its first; or an
 * If-Range that does not name `etag` by strong comparison, a date included), or, for a 416, why
 * none of the file can be sent: "past-end" (a range that starts at or past the end, a suffix of a
 * file of 0 bytes) or "empty-suffix" (a suffix of 0 bytes, `bytes=-0`). Several ranges would be
 * answered as multipart/byteranges, which a server need not do: they get the whole file.
 */
export function requestedRange(
  headers: IncomingHttpHeaders,
  size: number,
  etag: string,
): ByteRange | "past-end" | "empty-suffix" | null {
  const range = headers.range;
  if (range === undefined) return null;
  const ifRange = headers["if-range"];
  // A date is a weak validator for a file written within its second: only the tag is trusted.
  if (ifRange !== undefined && (typeof ifRange !== "string" || ifRange.trim() !== etag)) return null;
  const spec = /^bytes=[ \t]*(\d*)-(\d*)[ \t]*$/i.exec(range);
  if (!spec) return null;
  const [, firstText = "", lastText = ""] = spec;
  if (firstText === "") {
    // A suffix: the last N bytes, all of them when the file is shorter.
    if (lastText === "") return null;
    const length = Number(lastText);
    if (length === 0) return "empty-suffix";
    if (size === 0) return "past-end";
    return { first: Math.max(0, size - length), last: size - 1 };
  }
  const first = Number(firstText);
  const last = lastText === "" ? Number.POSITIVE_INFINITY : Number(lastText);
  if (last < first) return null;
  if (first >= size) return "past-end";
  return { first, last: Math.min(last, size - 1) };
}
