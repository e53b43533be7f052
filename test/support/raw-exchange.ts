import { connect } from "node:net";

export interface RawReply {
  status: number;
  /** Header names in lower case; a repeated header's values joined with ", ". */
  headers: Record<string, string>;
  body: Buffer;
}

/**
 * Writes `bytes` (one whole request, framed as the caller chose) on a connection of its own and reads
 * the first response: its body framed by content-length or chunked coding, or read to the close.
 * Rejects with `hung` when no whole response arrived within `timeoutMs`.
 */
export function rawExchange(
  port: number,
  bytes: Buffer,
  options: { head?: boolean; timeoutMs: number },
): Promise<RawReply> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1");
    let received = Buffer.alloc(0);
    let settled = false;
    const finish = (error: Error | null, reply?: RawReply) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      if (error) reject(error);
      else resolve(reply as RawReply);
    };
    const timer = setTimeout(
      () => finish(new Error(`hung: no whole response within ${options.timeoutMs} ms`)),
      options.timeoutMs,
    );
    const tryParse = (closed: boolean) => {
      const reply = parseReply(received, options.head === true, closed);
      if (reply) finish(null, reply);
      else if (closed) finish(new Error(`closed without a whole response: ${received.toString("latin1")}`));
    };
    socket.on("data", (chunk: Buffer) => {
      received = Buffer.concat([received, chunk]);
      tryParse(false);
    });
    // A reset after the answer (the server closing on unread bytes) is no failure of the answer.
    socket.on("error", () => tryParse(true));
    socket.on("close", () => tryParse(true));
    socket.on("connect", () => socket.write(bytes));
  });
}

function parseReply(raw: Buffer, head: boolean, closed: boolean): RawReply | null {
  // Skips interim answers (100 Continue).
  let start = 0;
  for (;;) {
    const parsed = parseHead(raw, start);
    if (parsed === null) return null;
    const { status, headers, bodyAt } = parsed;
    if (status >= 100 && status < 200) {
      start = bodyAt;
      continue;
    }
    const rest = raw.subarray(bodyAt);
    if (head || status === 204 || status === 304) return { status, headers, body: Buffer.alloc(0) };
    if (headers["content-length"] !== undefined) {
      const length = Number(headers["content-length"]);
      return rest.length >= length ? { status, headers, body: rest.subarray(0, length) } : null;
    }
    if (/chunked/i.test(headers["transfer-encoding"] ?? "")) {
      const chunked = dechunk(rest);
      return chunked ? { status, headers, body: chunked.body } : null;
    }
    return closed ? { status, headers, body: rest } : null;
  }
}

/**
 * The answer head in `raw` from `start`: its status, its headers (names in lower case, a repeated
 * one's values joined with ", ") and the offset its body starts at; null until the head is whole.
 */
export function parseHead(
  raw: Buffer,
  start: number,
): { status: number; headers: Record<string, string>; bodyAt: number } | null {
  const end = raw.indexOf("\r\n\r\n", start);
  if (end < 0) return null;
  const [statusLine = "", ...lines] = raw.subarray(start, end).toString("latin1").split("\r\n");
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(":");
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    headers[name] = headers[name] === undefined ? value : `${headers[name]}, ${value}`;
  }
  return { status: Number(statusLine.split(" ")[1]), headers, bodyAt: end + 4 };
}

/**
 * Reads the chunked body at the start of `raw`: null until its last chunk has arrived (or when a
 * chunk's size is no hex number); else the body and `end`, the offset just past the line that ends
 * the message after the last chunk (the gateway writes no trailers), null while that line has not
 * arrived. A reader of one response takes the body; one reading the next response on the connection
 * starts it at `end`.
 */
export function dechunk(raw: Buffer): { body: Buffer; end: number | null } | null {
  const parts: Buffer[] = [];
  let at = 0;
  for (;;) {
    const lineEnd = raw.indexOf("\r\n", at);
    if (lineEnd < 0) return null;
    const size = Number.parseInt(raw.subarray(at, lineEnd).toString("latin1"), 16);
    if (Number.isNaN(size)) return null;
    if (size === 0) {
      const trailerEnd = raw.indexOf("\r\n", lineEnd + 2);
      return { body: Buffer.concat(parts), end: trailerEnd < 0 ? null : trailerEnd + 2 };
    }
    if (raw.length < lineEnd + 2 + size + 2) return null;
    parts.push(raw.subarray(lineEnd + 2, lineEnd + 2 + size));
    at = lineEnd + 2 + size + 2;
  }
}
