import { createHash, createPrivateKey, type KeyObject, sign } from "node:crypto";

/**
 * The authentication token Apple's DeviceCheck server API expects: an ES256 JWT whose header is
 * `{"alg":"ES256","kid":<key id>}` and whose claims are `{"iss":<team id>,"iat":<seconds>}`,
 * signed with the DeviceCheck `.p8` key (PKCS#8 PEM, EC P-256). Apple rejects a token whose
 * `iat` is more than one hour old ("Accessing and Modifying Per-Device Data", DeviceCheck docs,
 * "Create the authentication token").
 */
export interface DeviceCheckCredentials {
  teamId: string;
  keyId: string;
  /** The `.p8` file's content. Never logged, never put in an error message. */
  privateKeyPem: string;
}

export type DeviceCheckKeyProblem = "missing-team-id" | "missing-key-id" | "invalid-private-key";

/**
 * The project's DeviceCheck credentials cannot sign a token: a misconfiguration, not a client
 * error. The message names the key id at most, never the key.
 */
export class DeviceCheckKeyError extends Error {
  readonly problem: DeviceCheckKeyProblem;

  constructor(problem: DeviceCheckKeyProblem, message: string) {
    super(message);
    this.name = "DeviceCheckKeyError";
    this.problem = problem;
  }
}

export function isDeviceCheckKeyError(error: unknown): error is DeviceCheckKeyError {
  return error instanceof DeviceCheckKeyError;
}

/** Apple accepts a token for 60 minutes; re-minting after 40 leaves room for clock skew. */
export const deviceCheckJwtMaxAgeMs = 40 * 60 * 1000;

function encodeSegment(value: object): string {
  return Buffer.from(JSON.stringify(value), "utf8").toString("base64url");
}

/** Parses the PEM as an EC P-256 private key, or throws DeviceCheckKeyError (without a cause: it may quote input). */
function parsePrivateKey(credentials: DeviceCheckCredentials): KeyObject {
  let key: KeyObject;
  try {
    key = createPrivateKey({ key: credentials.privateKeyPem, format: "pem" });
  } catch {
    throw new DeviceCheckKeyError(
      "invalid-private-key",
      `The DeviceCheck private key for key id ${credentials.keyId} is not a readable PEM private key.`,
    );
  }
  if (key.asymmetricKeyType !== "ec" || key.asymmetricKeyDetails?.namedCurve !== "prime256v1") {
    throw new DeviceCheckKeyError(
      "invalid-private-key",
      `The DeviceCheck private key for key id ${credentials.keyId} is not an EC P-256 key (Apple's .p8 format).`,
    );
  }
  return key;
}

function assertIdentifiers(credentials: DeviceCheckCredentials): void {
  if (credentials.teamId.trim() === "") {
    throw new DeviceCheckKeyError("missing-team-id", "The DeviceCheck team id is empty.");
  }
  if (credentials.keyId.trim() === "") {
    throw new DeviceCheckKeyError("missing-key-id", "The DeviceCheck key id is empty.");
  }
}

/**
 * Mints a DeviceCheck JWT issued at `issuedAtMs` (rounded down to whole seconds, as `iat` is a
 * NumericDate, RFC 7519 section 2). The signature is the raw 64-byte r||s form JWS requires
 * (RFC 7518 section 3.4), hence `dsaEncoding: "ieee-p1363"` instead of node's DER default.
 */
export function mintDeviceCheckJwt(credentials: DeviceCheckCredentials, issuedAtMs: number): string {
  assertIdentifiers(credentials);
  const key = parsePrivateKey(credentials);
  const header = encodeSegment({ alg: "ES256", kid: credentials.keyId });
  const claims = encodeSegment({ iss: credentials.teamId, iat: Math.floor(issuedAtMs / 1000) });
  const signingInput = `${header}.${claims}`;
  const signature = sign("sha256", Buffer.from(signingInput, "utf8"), { key, dsaEncoding: "ieee-p1363" });
  return `${signingInput}.${signature.toString("base64url")}`;
}

export interface DeviceCheckJwtCacheOptions {
  /** Milliseconds since the epoch; injected so tests can age tokens. */
  clock?: () => number;
}

export interface DeviceCheckJwtCache {
  /**
   * A token for these credentials, minted less than `deviceCheckJwtMaxAgeMs` ago. Throws
   * DeviceCheckKeyError.
   */
  get(credentials: DeviceCheckCredentials): string;
  /** Forgets the token of (teamId, keyId), e.g. after Apple answered 401, so the next call re-mints. */
  invalidate(teamId: string, keyId: string): void;
}

interface CachedJwt {
  token: string;
  mintedAt: number;
  /** SHA-256 of the PEM: a replaced key under the same key id re-mints at once. */
  keyFingerprint: string;
}

/** One token per (teamId, keyId), re-minted before Apple would consider it too old. */
export function createDeviceCheckJwtCache(options: DeviceCheckJwtCacheOptions = {}): DeviceCheckJwtCache {
  const clock = options.clock ?? Date.now;
  /** Bound on cached tokens (one per team id and key id). */
  const maxEntries = 1000;
  const entries = new Map<string, CachedJwt>();
  const cacheKey = (teamId: string, keyId: string) => `${teamId}\u0000${keyId}`;

  return {
    get(credentials) {
      const key = cacheKey(credentials.teamId, credentials.keyId);
      const keyFingerprint = createHash("sha256").update(credentials.privateKeyPem, "utf8").digest("hex");
      const now = clock();
      const entry = entries.get(key);
      // A clock that went backwards also re-mints: Apple refuses an iat in the future.
      const fresh = entry && entry.keyFingerprint === keyFingerprint && now >= entry.mintedAt;
      if (fresh && now - entry.mintedAt < deviceCheckJwtMaxAgeMs) return entry.token;
      const token = mintDeviceCheckJwt(credentials, now);
      entries.delete(key);
      if (entries.size >= maxEntries) {
        const oldest = entries.keys().next();
        if (!oldest.done) entries.delete(oldest.value);
      }
      entries.set(key, { token, mintedAt: now, keyFingerprint });
      return token;
    },
    invalidate(teamId, keyId) {
      entries.delete(cacheKey(teamId, keyId));
    },
  };
}
