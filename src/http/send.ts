import { type IncomingMessage, type ServerResponse, STATUS_CODES } from "node:http";
import type { Duplex } from "node:stream";
import { renderError } from "../errors.js";
import { cutAnswer } from "./cut-answer.js";
import { originForm } from "./origin-form.js";

export function sendJson(
  response: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  const payload = Buffer.from(JSON.stringify(body));
  sendBytes(response, status, payload, "application/json; charset=utf-8", headers);
}

export function sendBytes(
  response: ServerResponse,
  status: number,
  payload: Buffer,
  contentType: string,
  headers: Record<string, string> = {},
): void {
  if (response.headersSent) {
    cutAnswer(response);
    return;
  }
  setHeaders(response, headers);
  response.setHeader("content-type", contentType);
  response.setHeader("content-length", payload.length);
  response.statusCode = status;
  closeIfBodyUnread(response);
  response.end(payload);
}

/**
 * An answer sent before its request's body was read to the end (a refusal: 401, 404, 413, …). Node
 * reads and discards the rest of the body to reach the next request on the connection, however much
 * was declared (gigabytes for a refused call, until the request timeout). A small rest (up to
 * `lingerBytes` declared) is left to it: the connection stays usable. A larger or chunked one is
 * read for at most `lingerMs` or `lingerBytes` after the answer went out, then the connection is
 * closed. Not at once, with `Connection: close`: closing a socket with unread bytes sends a reset,
 * which over a network can overtake the answer, so the client would never see its 401 or 413 (the
 * lingering close of RFC 9112 §9.6). A request without a body is complete only once its handler
 * returns, so it is told apart by its headers.
 */
export function closeIfBodyUnread(response: ServerResponse): void {
  const request = response.req;
  if (request.complete) return;
  // An answer that closes its connection (`Connection: close`, HTTP/1.0, a drain) is followed by
  // Node's `destroySoon`: the socket destroyed once the answer is written, the body's rest unread.
  closeLingeringly(request.socket);
  const { headers } = request;
  const declared = Number(headers["content-length"] ?? 0);
  if (headers["transfer-encoding"] === undefined && declared <= lingerBytes) return;
  response.once("finish", () => lingerOnUnreadBody(request));
}

const lingerMs = 2000;
const lingerBytes = 1024 * 1024;

/**
 * Lets Node read (and discard) the rest of the body for a while, then closes the connection, the
 * lingering way. The bytes are counted on the socket: Node drops a body whose answer is sent
 * (`_dump`) without emitting it, so the request's own `data` never comes.
 */
function lingerOnUnreadBody(request: IncomingMessage): void {
  if (request.complete) return;
  const socket = request.socket;
  let read = 0;
  // Every listener is taken off once the body ended: the connection serves further requests, and a
  // listener left on its socket per refused request would pile up for as long as it stays open.
  const stop = () => {
    clearTimeout(timer);
    socket.off("data", onData);
    request.off("end", stop);
    socket.off("close", stop);
  };
  const close = () => {
    stop();
    lingeringClose(socket);
  };
  const onData = (chunk: Buffer) => {
    read += chunk.length;
    if (read > lingerBytes) close();
  };
  const timer = setTimeout(close, lingerMs);
  socket.on("data", onData);
  readAgain(socket);
  request.once("end", stop);
  socket.once("close", stop);
}

/**
 * Restarts the reading of a socket that a `data` listener just took back from Node's parser (here
 * and in `lingeringClose`). The parser reads the socket's handle itself and stops it once the
 * request's unread body filled its buffer (16 KiB), to restart it on the socket's `resume`. Taking
 * the socket back (`unconsume`) drops that `resume` listener, and the socket's stream still counts
 * itself as reading, so it never asks again: nothing more would be read, neither the lingering bytes
 * nor the client's close, and the connection would be held to its deadlines (2 s, or 4 s after a
 * lingering read), then reset on its unread bytes.
 */
function readAgain(socket: Duplex): void {
  const handle = (socket as Duplex & { _handle?: { reading: boolean; readStart(): number } | null })._handle;
  if (!handle || handle.reading) return;
  handle.reading = true;
  handle.readStart();
}

export function setHeaders(response: ServerResponse, headers: Record<string, string>): void {
  for (const name in headers) response.setHeader(name, headers[name] as string);
}

/**
 * Renders any thrown value as the error envelope; a response already under way is cut instead.
 * Every error answer of Sluice's own goes through here, on any route, whether the router found one
 * or not, but those written straight to the connection (`sendRawError`): on provider B's paths the
 * id is also sent as `request-id` (`providerBIdHeader`).
 */
export function sendError(response: ServerResponse, error: unknown, requestId: string): number {
  const { status, body, headers } = renderError(error, requestId);
  const sent: Record<string, string> = {
    ...headers,
    "x-request-id": requestId,
    ...providerBIdHeader(response.req.url ?? "/", requestId),
  };
  sendJson(response, status, body, sent);
  return status;
}

/**
 * `request-id` for an error answer of Sluice's own to a request for `target` on provider B's paths
 * (null elsewhere): the one header the Anthropic SDK reads an id from (its errors' `requestID`), so
 * an app can quote Sluice's id from the SDK's error. Provider B's own answers, passed through, keep
 * the provider's (docs/proxy.md, "Headers").
 */
export function providerBIdHeader(target: string, requestId: string): Record<string, string> | null {
  return originForm(target).startsWith(providerBPaths) ? { "request-id": requestId } : null;
}

/** Provider B's proxy paths (`/v1/provider-b/{projectId}/…`). */
const providerBPaths = "/v1/provider-b/";

/**
 * The error envelope written straight to a connection, for what Node hands over without a
 * ServerResponse (a request it could not parse, CONNECT); the connection closes once it is sent.
 * `extra` headers (CORS) must be valid header values: they are written as given.
 */
export function sendRawError(
  socket: Duplex,
  error: unknown,
  requestId: string,
  extra: Record<string, string> | null = null,
): number {
  const { status, answer } = rawErrorAnswer(error, requestId, extra);
  socket.write(answer);
  lingeringClose(socket);
  return status;
}

/**
 * How long, and how many bytes, a connection closed after an early answer is still read. 4 MiB: a
 * client's kernel may have that much of its body in flight when the answer goes out (Linux tunes a
 * socket's send buffer up to 4 MiB), and a client that writes its whole body before reading has
 * all of it queued. 2 s: many round trips on any network, for a client to read its answer and
 * stop; a connection slot (SLUICE_MAX_CONNECTIONS) is held no longer than that.
 */
const closingLingerMs = 2000;
const closingLingerBytes = 4 * 1024 * 1024;
const lingering = new WeakSet<Duplex>();

/**
 * Closes a connection after an answer written before the request was read to its end (the
 * lingering close of RFC 9112 §9.6): the sending side is closed at once, after the answer, and
 * what the client still sends is read and dropped until it closes its side too, for at most
 * `limits` (`closingLingerMs` and `closingLingerBytes` unless given), then the connection is
 * destroyed. Destroyed at once, with bytes unread or still arriving, it would send a reset, on
 * which the client's kernel may drop the answer before the client read it: the client would see
 * ECONNRESET, not its 400 or 413.
 * A drain cuts a lingering connection like any other (it has no answer in progress).
 */
export function lingeringClose(
  socket: Duplex,
  limits: { ms: number; bytes: number } = { ms: closingLingerMs, bytes: closingLingerBytes },
): void {
  if (socket.destroyed || lingering.has(socket)) return;
  lingering.add(socket);
  // Node's own close after an answer that says `close` would destroy the socket once it is written.
  closeLingeringly(socket);
  socket.end();
  let read = 0;
  const close = () => {
    clearTimeout(timer);
    socket.destroy();
  };
  const timer = setTimeout(close, limits.ms);
  timer.unref();
  socket.on("data", (chunk: Buffer) => {
    read += chunk.length;
    if (read > limits.bytes) close();
  });
  socket.once("end", close);
  socket.once("error", close);
  socket.once("close", () => clearTimeout(timer));
  // Read even when nothing else does (Node's parser stopped on a request it could not parse, or on
  // a body left unread: an answer that closes its connection comes here through `destroySoon`).
  readAgain(socket);
  socket.resume();
}

/** Makes Node's close of `socket` after an answer (`destroySoon`) a lingering one. */
function closeLingeringly(socket: Duplex): void {
  (socket as Duplex & { destroySoon?: () => void }).destroySoon = () => lingeringClose(socket);
}

/** The error envelope as a whole HTTP/1.1 answer (head and body) that closes its connection. */
export function rawErrorAnswer(
  error: unknown,
  requestId: string,
  extra: Record<string, string> | null = null,
): { status: number; answer: string } {
  const { status, body, headers } = renderError(error, requestId);
  const payload = JSON.stringify(body);
  // Date, as Node writes on every other answer (RFC 9110 §6.6.1: a server with a clock sends it).
  let head = `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ""}\r\ndate: ${new Date().toUTCString()}\r\n`;
  for (const name in headers) head += `${name}: ${headers[name]}\r\n`;
  for (const name in extra) head += `${name}: ${extra[name]}\r\n`;
  head += `x-request-id: ${requestId}\r\ncontent-type: application/json; charset=utf-8\r\n`;
  head += `content-length: ${Buffer.byteLength(payload)}\r\nconnection: close\r\n\r\n`;
  return { status, answer: head + payload };
}
