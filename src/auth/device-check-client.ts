import { randomUUID } from "node:crypto";
import { type Dispatcher, request } from "undici";
import { deadlineSignal } from "../net/deadline-signal.js";
import { retryAfterSeconds } from "../net/retry-after.js";
import {
  createDeviceCheckJwtCache,
  type DeviceCheckCredentials,
  isDeviceCheckKeyError,
} from "./device-check-jwt.js";

/**
 * A client for Apple's `POST /v1/validate_device_token` ("Accessing and Modifying Per-Device Data",
 * DeviceCheck docs). Apple answers 200 when the device token is valid and 400 ("Missing or
 * incorrectly formatted device token payload") when it is not; 401 means Apple could not verify
 * our JWT. Apple's plain-text reason is read too: one about the authorization token ("Missing or
 * badly formatted authorization token", seen with 400 and with 200) is our JWT's fault, one about
 * the time stamp or transaction id our request's, never the device token's. Only a 200 without a
 * body (or with `OK`, exactly, one line end at most after either) is a pass: a 200 with any other body, those reasons, a 400 holding an HTML
 * page or JSON (no reason of Apple's: a proxy's or a wrong host's), 401, 403, 429, 5xx, anything
 * else, timeouts and network errors are `unavailable` (the gateway answers 503 with Retry-After).
 */
export type DeviceCheckEnvironment = "production" | "development";

type DeviceCheckInvalidReason = "malformed-token" | "rejected-by-apple";

/**
 * `misconfigured`: the project's key cannot sign, or Apple refused our JWT (401, or a reason about
 * the authorization token) or our key (403); `apple-error`: any other non-200/400 answer, a reason about our
 * request's time stamp or transaction id, a 200 with a body no reason explains, a 200 or 400 holding
 * an HTML page or JSON, or an oversized body; `timeout`; `network`; `resting`:
 * Apple answered 429 for this key, and its Retry-After has not passed, so Apple is not asked;
 * `aborted`: the caller's signal ended the call (the gateway closing), or came aborted.
 */
type DeviceCheckUnavailableReason =
  | "misconfigured"
  | "apple-error"
  | "timeout"
  | "network"
  | "resting"
  | "aborted";

export type DeviceCheckVerdict =
  | { kind: "valid" }
  | { kind: "invalid"; reason: DeviceCheckInvalidReason }
  | { kind: "unavailable"; retryAfterSeconds: number; reason: DeviceCheckUnavailableReason; status?: number };

export interface DeviceCheckValidation extends DeviceCheckCredentials {
  environment: DeviceCheckEnvironment;
  /** The base64 token from `DCDevice.generateToken`, exactly as the client sent it. */
  deviceToken: string;
}

export interface DeviceCheckClient {
  /**
   * `signal`, aborted, aborts the call to Apple (the request on the wire, its answer's body too) and
   * answers `unavailable`, reason `aborted`, at once: the gateway's close ends so the calls still on
   * their way, whose callers the shutdown's deadline refused.
   */
  validate(input: DeviceCheckValidation, signal?: AbortSignal): Promise<DeviceCheckVerdict>;
}

export interface DeviceCheckClientOptions {
  /** Apple's hosts by default (config); a local fake in tests. A path prefix is kept. */
  productionUrl: string;
  developmentUrl: string;
  /** Deadline for the whole call: connect, headers and body. */
  timeoutMs: number;
  dispatcher?: Dispatcher;
  /** Milliseconds since the epoch: the body's `timestamp` and the JWT's `iat`. */
  clock?: () => number;
  /** The body's `transaction_id`; a UUID by default. */
  generateId?: () => string;
  /** Larger response bodies are not read; the call counts as failed. Default 16 KiB. */
  maxResponseBytes?: number;
}

/** Tokens are a few KiB of base64; anything this long is not one. */
const maxDeviceTokenLength = 8 * 1024;

const base64Pattern = /^[A-Za-z0-9+/]+={0,2}$/;

/**
 * True for a non-empty standard-alphabet base64 string (RFC 4648 section 4) under 8 KiB, padded
 * to a multiple of 4 or unpadded with a possible length. Checked before any call to Apple.
 */
export function isWellFormedDeviceToken(token: string): boolean {
  if (token.length === 0 || token.length >= maxDeviceTokenLength || !base64Pattern.test(token)) return false;
  return token.endsWith("=") ? token.length % 4 === 0 : token.length % 4 !== 1;
}

/**
 * The token's bytes when it is well-formed by isWellFormedDeviceToken's rule, else null; in one
 * pass of Node's base64 decoder and two searches, not a regular expression over every character:
 * a token is a few KiB, read on every request that carries it (docs/decisions/0005, eighteenth look).
 * Node's decoder skips a character outside the alphabet (and reads a UTF-16 code unit by its low
 * byte), so a token holding one decodes shorter than its length says: one such character less is
 * a byte less at every length the rule allows. Three things it decodes are looked for apart: the
 * URL-safe `-` and `_`, and anything past ASCII. A unit test holds the two rules equal.
 */
export function decodedDeviceToken(token: string): Buffer | null {
  const length = token.length;
  if (length === 0 || length >= maxDeviceTokenLength) return null;
  const padding = token.endsWith("==") ? 2 : token.endsWith("=") ? 1 : 0;
  if (padding > 0 ? length % 4 !== 0 : length % 4 === 1) return null;
  if (Buffer.byteLength(token, "utf8") !== length || token.includes("-") || token.includes("_")) return null;
  const bytes = Buffer.from(token, "base64");
  return bytes.length === Math.floor(((length - padding) * 3) / 4) ? bytes : null;
}

function validateUrl(base: string): string {
  const url = new URL(base);
  if (url.protocol !== "https:" && url.protocol !== "http:") {
    throw new Error(`DeviceCheck base URL must be http(s): ${url.origin}`);
  }
  return `${base.replace(/\/+$/, "")}/v1/validate_device_token`;
}

/** The body as text when it has at most `limit` bytes; null (body destroyed) when there is more. */
async function readBounded(body: Dispatcher.ResponseData["body"], limit: number): Promise<string | null> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += (chunk as Buffer).length;
    if (size > limit) {
      body.destroy();
      return null;
    }
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString("utf8");
}

/**
 * Whose fault Apple's plain-text reason says a refusal is: `jwt` for our authorization token
 * ("Missing or badly formatted authorization token", "Unable to verify authorization token"),
 * `request` for our time stamp or transaction id, `device-token` for the device token's payload;
 * null when it names none of them.
 */
function blamed(reason: string): "jwt" | "request" | "device-token" | null {
  if (/authori[sz]ation token/i.test(reason)) return "jwt";
  if (/time ?stamp|transaction/i.test(reason)) return "request";
  if (/device token/i.test(reason)) return "device-token";
  return null;
}

/** A body that is markup (an HTML page) or JSON, never one of Apple's plain-text reasons. */
const notAppleText = /^\s*[<{[]/;

/**
 * The bodies of Apple's 200 for a valid token: none, or its status text `OK` (the docs' table names
 * it so, read as the body too), each with one line end at most. Nothing else: not `ok` or `Ok`, which
 * a health check or a stub answers any request with, nor either in a run of white space. Looked up
 * whole, so a 16 KiB body costs one hash, never a pattern's backtracking.
 */
const appleOkBodies = new Set(["", "\n", "\r\n", "OK", "OK\n", "OK\r\n"]);

function isAppleOk(text: string): boolean {
  return appleOkBodies.has(text);
}

function isTimeout(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const code = (error as { code?: unknown }).code;
  return (
    error.name === "TimeoutError" ||
    error.name === "AbortError" ||
    code === "UND_ERR_HEADERS_TIMEOUT" ||
    code === "UND_ERR_BODY_TIMEOUT" ||
    code === "UND_ERR_CONNECT_TIMEOUT"
  );
}

export function createDeviceCheckClient(options: DeviceCheckClientOptions): DeviceCheckClient {
  const clock = options.clock ?? Date.now;
  const generateId = options.generateId ?? randomUUID;
  const jwtCache = createDeviceCheckJwtCache({ clock });
  /** Retry-After when Apple gives none (or one that is neither seconds nor an HTTP date). */
  const fallbackRetryAfter = 5;
  const maxResponseBytes = options.maxResponseBytes ?? 16 * 1024;
  const endpoints = {
    production: validateUrl(options.productionUrl),
    development: validateUrl(options.developmentUrl),
  } as const;

  /**
   * When each DeviceCheck key (environment, team and key id) may call Apple again after Apple
   * answered it 429: asking again before its Retry-After would only prolong Apple's throttling of
   * the key, for every user of the app. A few keys per gateway; bounded all the same. With the
   * length of the rest: the end is a moment on the wall clock, which a host may step back (NTP, a VM
   * resumed), and a rest is never longer than Apple asked, however far it went back.
   */
  const restingUntil = new Map<string, { until: number; ms: number }>();
  const keyOf = (input: DeviceCheckValidation) => `${input.environment} ${input.teamId} ${input.keyId}`;

  const unavailable = (
    reason: DeviceCheckUnavailableReason,
    status?: number,
    retryAfterSeconds = fallbackRetryAfter,
  ): DeviceCheckVerdict =>
    status === undefined
      ? { kind: "unavailable", reason, retryAfterSeconds }
      : { kind: "unavailable", reason, retryAfterSeconds, status };

  async function call(
    input: DeviceCheckValidation,
    jwt: string,
    signal: AbortSignal | undefined,
  ): Promise<DeviceCheckVerdict> {
    // Not AbortSignal.any([AbortSignal.timeout(ms), signal]): on Node 20 it adds each call's signal
    // to the gateway's `closing` (which lives as long as the process) for good, and a garbage
    // collection can take the timeout's timer, the call then running past its deadline
    // (deadline-signal.ts). This one's tie to `signal` ends with the call.
    const deadline = deadlineSignal(options.timeoutMs, signal);
    try {
      return await answered(input, jwt, deadline.signal);
    } finally {
      deadline.clear();
    }
  }

  async function answered(
    input: DeviceCheckValidation,
    jwt: string,
    signal: AbortSignal,
  ): Promise<DeviceCheckVerdict> {
    const response = await request(endpoints[input.environment], {
      method: "POST",
      headers: { authorization: `Bearer ${jwt}`, "content-type": "application/json" },
      body: JSON.stringify({
        device_token: input.deviceToken,
        transaction_id: generateId(),
        timestamp: clock(),
      }),
      dispatcher: options.dispatcher,
      headersTimeout: options.timeoutMs,
      bodyTimeout: options.timeoutMs,
      signal,
    });
    const status = response.statusCode;
    const text = await readBounded(response.body, maxResponseBytes);
    if (text === null) return unavailable("apple-error", status);
    // Apple's reasons are plain text: a page or JSON is some other server's (a proxy's, or a wrong
    // SLUICE_DEVICECHECK_*_URL's), whatever words it holds, and blames no one Apple would.
    const foreign = notAppleText.test(text);
    const fault = (status === 200 || status === 400) && !foreign ? blamed(text) : null;
    if (status === 401 || status === 403 || fault === "jwt") {
      // Our JWT was refused (401, or a reason about it) or our key may not use DeviceCheck (403): a
      // wrong key, team or key id, the operator's to fix, not the device token's. Re-mint next time
      // in case it had aged.
      jwtCache.invalidate(input.teamId, input.keyId);
      return unavailable("misconfigured", status);
    }
    if (fault === "request") return unavailable("apple-error", status);
    if (fault === "device-token") return { kind: "invalid", reason: "rejected-by-apple" };
    // Apple's 200 for a valid token has no body (its docs' table names it "OK", read as the body
    // too). One with any other (an HTML page from a captive portal or a wrong host, JSON, a reason
    // not known here) is no answer of Apple's: never a pass.
    if (status === 200) return isAppleOk(text) ? { kind: "valid" } : unavailable("apple-error", status);
    // A 400 holding a page or JSON is no refusal of the token by Apple: read as one, every device
    // of the app would be refused (401) with nothing to tell the operator; a 503 is logged and counted.
    if (status === 400)
      return foreign ? unavailable("apple-error", status) : { kind: "invalid", reason: "rejected-by-apple" };
    const retryAfter = retryAfterSeconds(response.headers["retry-after"], clock()) ?? fallbackRetryAfter;
    if (status === 429) {
      if (restingUntil.size >= 1000) restingUntil.clear();
      restingUntil.set(keyOf(input), { until: clock() + retryAfter * 1000, ms: retryAfter * 1000 });
    }
    return unavailable("apple-error", status, retryAfter);
  }

  return {
    async validate(input, signal) {
      if (!isWellFormedDeviceToken(input.deviceToken)) return { kind: "invalid", reason: "malformed-token" };
      if (signal?.aborted) return unavailable("aborted");
      const rest = restingUntil.get(keyOf(input));
      if (rest !== undefined) {
        const now = clock();
        if (rest.until - now > rest.ms) rest.until = now + rest.ms;
        const left = rest.until - now;
        if (left > 0) return unavailable("resting", undefined, Math.ceil(left / 1000));
        restingUntil.delete(keyOf(input));
      }
      let jwt: string;
      try {
        jwt = jwtCache.get(input);
      } catch (error) {
        if (isDeviceCheckKeyError(error)) return unavailable("misconfigured");
        throw error;
      }
      try {
        return await call(input, jwt, signal);
      } catch (error) {
        if (signal?.aborted) return unavailable("aborted");
        return unavailable(isTimeout(error) ? "timeout" : "network");
      }
    },
  };
}
