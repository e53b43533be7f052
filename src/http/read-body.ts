import { isUtf8 } from "node:buffer";
import type { IncomingMessage, ServerResponse } from "node:http";
import { offRefusal, onRefusal, refusalOf } from "../deadline-refusal.js";
import { GatewayError } from "../errors.js";
import { byteOrderMarkLength } from "../providers/json-bytes.js";
import { appliedCodings } from "../proxy/content-coding.js";
import { type BodyShare, bodyBudgetFull } from "./body-budget.js";
import { exceededJsonShape, type JsonShapeLimits } from "./json-shape.js";

/** Requests sent with `Expect: 100-continue` whose 100 is not sent yet, and where to send it. */
const awaitingContinue = new WeakMap<IncomingMessage, ServerResponse>();

/**
 * Registers a request that waits for `100 Continue` before sending its body (the server's
 * `checkContinue`): the 100 goes out only when a route reads the body, i.e. after the request was
 * authenticated, admitted and found within the size cap. A refused request is answered before
 * the client uploads anything.
 */
export function continueWhenRead(request: IncomingMessage, response: ServerResponse): void {
  awaitingContinue.set(request, response);
}

export interface ReadBodyOptions {
  /** The call's share of the body budget (every route but the admin API's). */
  share?: BodyShare | undefined;
  /** The request's response: the shutdown's deadline refusing its call ends the read. */
  response?: ServerResponse | undefined;
}

/**
 * Reads a request body into one Buffer, refusing it (413) as soon as it exceeds `maxBytes`,
 * whether announced by content-length or discovered while reading. With a `share` of the body
 * budget, its bytes are counted in it as they arrive, and a body that does not fit is refused
 * (503), before any of it is read (and before a `100 Continue`) when its content-length says so;
 * the caller gives the share back when the call ends. With the `response`, a body still arriving
 * when the shutdown's deadline refuses the call (`refuseAtDeadline`) fails the read with the
 * refusal, which the route answers (503, the envelope) before the drain closes the connection:
 * before, the route went on waiting for the rest, and the connection was cut without an answer.
 */
export function readBody(
  request: IncomingMessage,
  maxBytes: number,
  { share, response }: ReadBodyOptions = {},
): Promise<Buffer> {
  const refused = response === undefined ? undefined : refusalOf(response);
  if (refused !== undefined) return Promise.reject(refused);
  const announced = Number(request.headers["content-length"] ?? Number.NaN);
  if (announced > maxBytes) return Promise.reject(tooLarge(maxBytes));
  if (share !== undefined && announced > 0 && !share.fits(announced)) return Promise.reject(bodyBudgetFull());
  // A client that left before the body was read (while the call was being admitted, say) took
  // it along: no `end` or `error` would ever come, and the call would wait forever.
  if (request.destroyed) return Promise.reject(unreadable(new Error("the client went away")));
  const waiting = awaitingContinue.get(request);
  if (waiting !== undefined) {
    awaitingContinue.delete(request);
    waiting.writeContinue();
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > maxBytes || (share !== undefined && !share.take(chunk.length))) {
        // The rest is read and dropped (and the connection closed after the answer, send.ts).
        stop();
        request.resume();
        reject(size > maxBytes ? tooLarge(maxBytes) : bodyBudgetFull());
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => {
      stop();
      resolve(chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, size));
    };
    // A client that leaves mid-body makes the request emit `error` ("aborted").
    const onError = (error: Error) => {
      stop();
      reject(unreadable(error));
    };
    // The rest is left unread: the refusal's answer closes the connection the lingering way (send.ts).
    const onRefused = (refusal: GatewayError) => {
      stop();
      reject(refusal);
    };
    // The request lives as long as its answer (a stream's, minutes): a listener left on it would
    // keep this promise, and with it the body, alive that long. (Without an `error` listener, an
    // IncomingMessage does not emit the error.)
    const stop = () => {
      request.off("data", onData);
      request.off("end", onEnd);
      request.off("error", onError);
      if (response !== undefined) offRefusal(response, onRefused);
    };
    request.on("data", onData);
    request.on("end", onEnd);
    request.on("error", onError);
    if (response !== undefined) onRefusal(response, onRefused);
  });
}

function unreadable(cause: unknown): GatewayError {
  return new GatewayError("BAD_REQUEST", "The request body could not be read", { cause });
}

function tooLarge(maxBytes: number): GatewayError {
  return new GatewayError("PAYLOAD_TOO_LARGE", `The request body exceeds ${maxBytes} bytes`, {
    details: { maxBytes },
  });
}

/**
 * 415 unless the request declares a JSON content type: `application/json`, or an `application/`
 * type with the `+json` structured suffix (RFC 6839), such as `application/vnd.api+json`; any
 * letter case, parameters after a `;`.
 */
export function requireJsonContentType(request: IncomingMessage): void {
  const type = request.headers["content-type"];
  if (!type || !/^application\/(?:[\w.+-]*\+)?json\s*(?:;|$)/i.test(type)) {
    throw new GatewayError(
      "UNSUPPORTED_MEDIA_TYPE",
      "Content-Type must be application/json or an application/…+json type (such as application/vnd.api+json)",
    );
  }
}

/** The WHATWG Encoding Standard's labels of UTF-8 (`utf8` is what some clients send). */
const utf8Labels = new Set([
  "utf-8",
  "utf8",
  "unicode-1-1-utf-8",
  "unicode11utf8",
  "unicode20utf8",
  "x-unicode20utf8",
]);

/**
 * For the JSON bodies Sluice parses itself (admin API, structured and image endpoints): a JSON
 * content type whose `charset`, if it names one, is UTF-8, as JSON between systems must be (RFC
 * 8259 §8.1), and no content coding; 415 otherwise. The proxies check the type only: they forward
 * the bytes as sent.
 */
export function requireUncompressedUtf8Json(request: IncomingMessage): void {
  requireJsonContentType(request);
  requireNoContentCoding(request);
  const type = request.headers["content-type"] as string;
  if (!type.includes(";")) return;
  for (const [, quoted, token] of type.matchAll(/;\s*charset\s*=\s*(?:"([^"]*)"|([^;\s]*))/gi)) {
    const charset = quoted ?? token ?? "";
    if (!utf8Labels.has(charset.toLowerCase())) {
      throw new GatewayError(
        "UNSUPPORTED_MEDIA_TYPE",
        `The charset ${JSON.stringify(charset.slice(0, 40))} is not supported: JSON bodies must be UTF-8`,
      );
    }
  }
}

/**
 * 415 for a body sent with a content coding other than `identity` (RFC 9110 §8.4), naming it, with
 * `Accept-Encoding: identity` as §15.5.16 recommends. These bodies are small JSON that nothing gains
 * from compressing, and undoing a coding would be one more way past the size cap (a gzip bomb): a
 * coding is refused rather than read as the bytes it is not (a gzip body was 400 "not valid UTF-8",
 * a plain one labelled `br` was read as plain). Repeated headers reach here joined with `, `.
 */
function requireNoContentCoding(request: IncomingMessage): void {
  const header = request.headers["content-encoding"];
  const [coding] = header === undefined ? [] : appliedCodings(header);
  if (coding !== undefined)
    throw new GatewayError(
      "UNSUPPORTED_MEDIA_TYPE",
      `The content-encoding ${JSON.stringify(coding.slice(0, 40))} is not supported: send the JSON body uncompressed`,
      { headers: { "accept-encoding": "identity" } },
    );
}

/** Bounds on a body's structure, and what the endpoint takes, for the refusal's message. */
export interface JsonBodyBounds {
  limits: JsonShapeLimits;
  /** E.g. `/v1/text takes one JSON object such as {"text": "…"}`. */
  takes: string;
}

/**
 * Parses a JSON object body; anything else is 400. The bytes must be UTF-8 (RFC 8259 §8.1): a
 * lenient decode would turn invalid bytes into U+FFFD and store or send text the client never
 * wrote. A leading byte order mark is skipped, as RFC 8259 allows a parser to (and as Fastify's
 * JSON parser does); before, it made the body invalid JSON. With `bounds`, a body nested deeper or
 * holding more values than they allow is 400 before it is parsed (exceededJsonShape).
 */
export function parseJsonObject(body: Buffer, bounds?: JsonBodyBounds): Record<string, unknown> {
  if (!isUtf8(body)) throw new GatewayError("BAD_REQUEST", "The body is not valid UTF-8");
  if (bounds) requireShape(body, bounds);
  let value: unknown;
  try {
    value = JSON.parse(body.toString("utf8", byteOrderMarkLength(body)));
  } catch {
    throw new GatewayError("BAD_REQUEST", "The request body is not valid JSON");
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new GatewayError("BAD_REQUEST", "The request body must be a JSON object");
  }
  return value as Record<string, unknown>;
}

function requireShape(body: Buffer, { limits, takes }: JsonBodyBounds): void {
  const exceeded = exceededJsonShape(body, limits);
  if (exceeded === null) return;
  const what =
    exceeded === "depth"
      ? `nests objects and arrays more than ${limits.maxDepth} deep`
      : `holds more than ${limits.maxValues} object members and array elements`;
  throw new GatewayError("BAD_REQUEST", `The request body ${what}: ${takes}`, {
    details: { maxDepth: limits.maxDepth, maxValues: limits.maxValues },
  });
}
