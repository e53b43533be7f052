import type { IncomingHttpHeaders } from "node:http";

/** The bytes of the fake's one stored file: every byte value, none of them text, so a changed byte shows. */
export const fakeFileBytes = Buffer.from(Array.from({ length: 1000 }, (_, index) => (index * 7 + 3) % 256));

/** The stored file's strong validator, as provider A's file content answers carry one. */
export const fakeFileEtag = '"file-content-v1"';

/** The stored file's `last-modified`, which an `if-range` may give as its validator instead (RFC 9110 13.1.5). */
export const fakeFileLastModified = "Tue, 01 Jul 2025 10:00:00 GMT";

export interface FileContentAnswer {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
}

/**
 * Provider A's file content (`GET files/{id}/content`) as a server that honours byte ranges
 * answers it (RFC 9110 section 14): one range (`bytes=a-b`, `bytes=a-`, `bytes=-n`) is a 206 with
 * its `content-range`; one that starts past the end is a 416 whose `content-range` gives the size; a
 * range that does not parse, several ranges, or an `if-range` that is neither the current ETag nor
 * the exact `last-modified` date get the whole file (200), as a server may always answer. `representation` is what is served, compressed
 * when `coding` names a coding (a server that compresses whatever the request accepts): a range
 * then counts the compressed bytes, as RFC 9110 14.1.2 has it.
 */
export function fileContentAnswer(
  headers: IncomingHttpHeaders,
  representation: Buffer,
  coding: string | null,
): FileContentAnswer {
  const size = representation.length;
  const common: Record<string, string> = {
    "content-type": "application/octet-stream",
    "accept-ranges": "bytes",
    etag: fakeFileEtag,
    "last-modified": fakeFileLastModified,
    ...(coding === null ? {} : { "content-encoding": coding }),
  };
  const whole = { status: 200, headers: common, body: representation };
  const range = headers.range;
  if (range === undefined) return whole;
  const ifRange = headers["if-range"];
  // An entity-tag, or an HTTP-date that exactly matches the last-modified (RFC 9110 13.1.5).
  if (ifRange !== undefined && ifRange !== fakeFileEtag && ifRange !== fakeFileLastModified) return whole;
  const match = /^bytes=(\d*)-(\d*)$/.exec(range.trim());
  if (!match || (match[1] === "" && match[2] === "")) return whole;
  let first: number;
  let last: number;
  if (match[1] === "") {
    const suffix = Number(match[2]);
    if (suffix === 0) return unsatisfiable(size);
    first = Math.max(0, size - suffix);
    last = size - 1;
  } else {
    first = Number(match[1]);
    last = match[2] === "" ? size - 1 : Math.min(Number(match[2]), size - 1);
    if (last < first && match[2] !== "") return whole;
    if (first >= size) return unsatisfiable(size);
  }
  return {
    status: 206,
    headers: { ...common, "content-range": `bytes ${first}-${last}/${size}` },
    body: representation.subarray(first, last + 1),
  };
}

/** A range that starts past the end: 416, saying how long the file is, with provider A's error body. */
function unsatisfiable(size: number): FileContentAnswer {
  return {
    status: 416,
    headers: { "content-type": "application/json", "content-range": `bytes */${size}` },
    body: Buffer.from(
      JSON.stringify({
        error: {
          message: "Requested range not satisfiable",
          type: "invalid_request_error",
          param: null,
          code: "range_not_satisfiable",
        },
      }),
    ),
  };
}
