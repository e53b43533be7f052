import { createPublicKey, generateKeyPairSync, type KeyObject, verify } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { deviceTokenDigest } from "../../src/auth/device-token-cache.js";

/**
 * A real HTTP server imitating Apple's DeviceCheck `POST /v1/validate_device_token`. Like Apple it
 * verifies the ES256 JWT (signature with the key registered for `kid`, `iss` equal to that key's
 * team, `iat` within the last hour and not in the future) and answers 401 "Unable to verify
 * authorization token" otherwise; then 200 for a token registered as valid and 400 "Missing or
 * incorrectly formatted device token payload" for any other. Failures can be programmed.
 */
interface FakeAppleKey {
  teamId: string;
  publicKeyPem: string;
}

type FakeAppleFailure =
  | { kind: "status"; status: number; body?: string; retryAfter?: string }
  /** Accepts the request and never answers (until the fake closes). */
  | { kind: "hang" }
  /** Destroys the socket without an answer. */
  | { kind: "close" };

interface FakeAppleCall {
  label: string;
  method: string;
  path: string;
  jwtHeader: Record<string, unknown> | null;
  jwtClaims: Record<string, unknown> | null;
  /** `deviceTokenDigest` of the body's `device_token`; the token itself is not kept. */
  tokenDigest: string | null;
  transactionId: unknown;
  timestamp: unknown;
  /** The status answered; null for a hang or a closed socket. */
  status: number | null;
  /** The client closed the connection before the answer was sent (Sluice aborted its call). */
  aborted: boolean;
}

export interface FakeAppleOptions {
  /** Names this host in recorded calls, e.g. "production" or "development". */
  label?: string;
  publicKeys?: Map<string, FakeAppleKey>;
  validTokens?: Iterable<string>;
  /** Milliseconds since the epoch, for the `iat` check. */
  clock?: () => number;
}

export interface FakeApple {
  /** Base URL, e.g. http://127.0.0.1:54321 (no trailing slash). */
  url: string;
  label: string;
  calls: FakeAppleCall[];
  registerKey(keyId: string, key: FakeAppleKey): void;
  registerValidToken(token: string): void;
  /** Makes a registered token unknown again (a test measuring what Sluice keeps of tokens). */
  forgetValidToken(token: string): void;
  /** The next `times` requests (default: all until `fail(null)`) fail this way, after recording. */
  fail(failure: FakeAppleFailure | null, times?: number): void;
  /** Each request is recorded at once and answered `ms` later (0, the default: at once). */
  delay(ms: number): void;
  close(): Promise<void>;
}

/** A fresh EC P-256 key pair: the private key as Apple ships it (.p8, PKCS#8 PEM). */
export function generateAppleKeyPair(): { privateKeyPem: string; publicKeyPem: string } {
  const { privateKey, publicKey } = generateKeyPairSync("ec", { namedCurve: "prime256v1" });
  return {
    privateKeyPem: privateKey.export({ type: "pkcs8", format: "pem" }).toString(),
    publicKeyPem: publicKey.export({ type: "spki", format: "pem" }).toString(),
  };
}

const maxBodyBytes = 64 * 1024;
const unverifiedJwt = "Unable to verify authorization token";
const badTokenPayload = "Missing or incorrectly formatted device token payload";

function decodeSegment(segment: string | undefined): Record<string, unknown> | null {
  if (!segment) return null;
  try {
    const value: unknown = JSON.parse(Buffer.from(segment, "base64url").toString("utf8"));
    return typeof value === "object" && value !== null && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : null;
  } catch {
    return null;
  }
}

interface ParsedJwt {
  header: Record<string, unknown> | null;
  claims: Record<string, unknown> | null;
  signingInput: string;
  signature: Buffer;
}

function parseJwt(authorization: string | undefined): ParsedJwt | null {
  const match = /^Bearer ([^.\s]+)\.([^.\s]+)\.([^.\s]+)$/.exec(authorization ?? "");
  if (!match) return null;
  const [, header, claims, signature] = match as unknown as [string, string, string, string];
  return {
    header: decodeSegment(header),
    claims: decodeSegment(claims),
    signingInput: `${header}.${claims}`,
    signature: Buffer.from(signature, "base64url"),
  };
}

function jwtVerifies(
  jwt: ParsedJwt | null,
  keys: Map<string, { teamId: string; key: KeyObject }>,
  nowMs: number,
) {
  if (!jwt?.header || !jwt.claims || jwt.header.alg !== "ES256" || typeof jwt.header.kid !== "string")
    return false;
  const registered = keys.get(jwt.header.kid);
  if (!registered || jwt.claims.iss !== registered.teamId) return false;
  const iat = jwt.claims.iat;
  const now = Math.floor(nowMs / 1000);
  if (typeof iat !== "number" || !Number.isInteger(iat) || iat > now || now - iat > 3600) return false;
  return verify(
    "sha256",
    Buffer.from(jwt.signingInput, "utf8"),
    { key: registered.key, dsaEncoding: "ieee-p1363" },
    jwt.signature,
  );
}

function readBody(request: IncomingMessage): Promise<Buffer | null> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    request.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size <= maxBodyBytes) chunks.push(chunk);
    });
    request.on("end", () => resolve(size <= maxBodyBytes ? Buffer.concat(chunks) : null));
    request.on("error", reject);
  });
}

function parseBody(raw: Buffer | null): Record<string, unknown> | null {
  if (!raw) return null;
  try {
    const value: unknown = JSON.parse(raw.toString("utf8"));
    return typeof value === "object" && value !== null && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : null;
  } catch {
    return null;
  }
}

/** The body Apple wants: a device token, a transaction id, and a timestamp in milliseconds. */
function bodyProblem(body: Record<string, unknown> | null): string | null {
  if (!body || typeof body.device_token !== "string" || body.device_token === "") return badTokenPayload;
  if (typeof body.transaction_id !== "string" || body.transaction_id === "")
    return "Missing or incorrectly formatted transaction id";
  const timestamp = body.timestamp;
  // Seconds instead of milliseconds is a classic mistake: 1e12 ms is September 2001.
  if (typeof timestamp !== "number" || !Number.isInteger(timestamp) || timestamp < 1e12)
    return "Missing or incorrectly formatted timestamp";
  return null;
}

function answer(
  response: ServerResponse,
  status: number,
  text = "",
  headers: Record<string, string> = {},
): number {
  response.writeHead(status, { "content-type": "text/plain; charset=utf-8", ...headers });
  response.end(text);
  return status;
}

export async function startFakeApple(options: FakeAppleOptions = {}): Promise<FakeApple> {
  const label = options.label ?? "production";
  const clock = options.clock ?? Date.now;
  const keys = new Map<string, { teamId: string; key: KeyObject }>();
  const validTokens = new Set(options.validTokens ?? []);
  const calls: FakeAppleCall[] = [];
  let failure: FakeAppleFailure | null = null;
  let failuresLeft = 0;
  let delayMs = 0;
  let closed = false;
  /** The sockets the fake destroyed itself (a programmed `close`). */
  const hungUp = new WeakSet<object>();

  const registerKey = (keyId: string, key: FakeAppleKey) =>
    keys.set(keyId, { teamId: key.teamId, key: createPublicKey(key.publicKeyPem) });
  for (const [keyId, key] of options.publicKeys ?? []) registerKey(keyId, key);

  function takeFailure(): FakeAppleFailure | null {
    if (!failure || failuresLeft <= 0) return null;
    failuresLeft -= 1;
    return failure;
  }

  async function handle(request: IncomingMessage, response: ServerResponse): Promise<number | null> {
    const jwt = parseJwt(request.headers.authorization);
    const body = parseBody(await readBody(request));
    const token = typeof body?.device_token === "string" ? body.device_token : null;
    const call: FakeAppleCall = {
      label,
      method: request.method ?? "",
      path: request.url ?? "",
      jwtHeader: jwt?.header ?? null,
      jwtClaims: jwt?.claims ?? null,
      tokenDigest: token === null ? null : deviceTokenDigest(token),
      transactionId: body?.transaction_id,
      timestamp: body?.timestamp,
      status: null,
      aborted: false,
    };
    calls.push(call);
    // Closed unanswered, but not by the fake itself (a programmed `close`, or the fake's own close).
    response.on("close", () => {
      if (!response.writableFinished && !closed && !hungUp.has(request.socket)) call.aborted = true;
    });
    if (delayMs > 0) await new Promise((resolve) => setTimeout(resolve, delayMs));
    call.status = respond(request, response, jwt, body, token);
    return call.status;
  }

  function respond(
    request: IncomingMessage,
    response: ServerResponse,
    jwt: ParsedJwt | null,
    body: Record<string, unknown> | null,
    token: string | null,
  ): number | null {
    const programmed = takeFailure();
    if (programmed?.kind === "hang") return null;
    if (programmed?.kind === "close") {
      hungUp.add(request.socket);
      request.socket.destroy();
      return null;
    }
    if (programmed) {
      const headers: Record<string, string> = programmed.retryAfter
        ? { "retry-after": programmed.retryAfter }
        : {};
      return answer(response, programmed.status, programmed.body ?? "Internal error", headers);
    }
    if (request.method !== "POST" || request.url !== "/v1/validate_device_token")
      return answer(response, 404, "Not found");
    if (!jwtVerifies(jwt, keys, clock())) return answer(response, 401, unverifiedJwt);
    const problem = bodyProblem(body);
    if (problem) return answer(response, 400, problem);
    return token !== null && validTokens.has(token)
      ? answer(response, 200)
      : answer(response, 400, badTokenPayload);
  }

  const server = createServer((request, response) => {
    handle(request, response).catch(() => request.socket.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    label,
    calls,
    registerKey,
    registerValidToken: (token) => void validTokens.add(token),
    forgetValidToken: (token) => void validTokens.delete(token),
    fail(next, times = Number.POSITIVE_INFINITY) {
      failure = next;
      failuresLeft = next ? times : 0;
    },
    delay(ms) {
      delayMs = ms;
    },
    close() {
      closed = true;
      return new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}
