import type { ServerResponse } from "node:http";
import type { Duplex } from "node:stream";

/**
 * Sent in place of a chunk's size line (RFC 9112 §7.1) before a cut connection closes: it starts
 * with no hex digit, so no client reads it as a chunk, nor as the last one.
 */
const notAChunk = "!cut\r\n";

/**
 * How long a cut connection waits for that line to be written, at most, when it could not be
 * written at once: over TLS a write waits for the one before it (the answer's last chunk, written
 * a tick before), which takes no time; to a client that stopped reading, it is never written.
 */
export const cutLineWaitMs = 100;

/**
 * Cuts the connection `socket`, and with it the answer Node is writing on it, if any, unfinished.
 * A chunked answer without its last chunk is incomplete (RFC 9112 §8), but undici (Node 20's
 * fetch, and the SDKs over it) takes the close of an answer that said `Connection: close` for its
 * end, whatever its framing: such an answer (every one the shutdown's delay and drain send, and
 * every one to a client that asked to close) is sent a line that breaks its chunked framing first,
 * which every client fails on. That line is written after every chunk already written (each is
 * written whole) and leaves with them; the connection is destroyed once it is written, at once
 * but over TLS, and after `cutLineWaitMs` at the latest. Bytes a client that stopped reading has
 * not taken are lost with the connection, as they were.
 */
export function cutConnection(socket: Duplex): void {
  const answer = (socket as Duplex & { _httpMessage?: ServerResponse | null })._httpMessage;
  if (!answer || !closeLooksLikeEnd(answer) || !socket.writable) {
    socket.destroy();
    return;
  }
  socket.write(notAChunk, () => socket.destroy());
  // Node corks the socket for a write until the next tick: the line joins what it holds, and all
  // go out in one write now (a write of its own would wait for that one's, over TLS).
  while (socket.writableCorked > 0) socket.uncork();
  if (socket.writableLength === 0) {
    socket.destroy();
    return;
  }
  const timer = setTimeout(() => socket.destroy(), cutLineWaitMs);
  timer.unref();
  socket.once("close", () => clearTimeout(timer));
}

/** Cuts `response`'s answer, unfinished: its connection is cut (`cutConnection`). */
export function cutAnswer(response: ServerResponse): void {
  if (response.socket) cutConnection(response.socket);
  else response.destroy();
}

/**
 * Whether `answer` is a chunked one that said `Connection: close` (Node's `_last`), begun and not
 * ended: one whose close undici takes for its end.
 */
function closeLooksLikeEnd(answer: ServerResponse): boolean {
  const node = answer as ServerResponse & { chunkedEncoding?: boolean; _last?: boolean };
  return answer.headersSent && !answer.writableEnded && node.chunkedEncoding === true && node._last === true;
}
