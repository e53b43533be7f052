import { createHash } from "node:crypto";
import type { Redis } from "ioredis";
import { RedisBreaker } from "../redis/redis-breaker.js";
import { RedisScript } from "../redis/redis-script.js";

/**
 * What a project does with a device token Apple has verified.
 * - `budget`: the token is trusted for `ttlMs` and `maxRequests` requests, whichever ends first;
 *   after that it is refused until its entry expires (asking Apple again would defeat the budget,
 *   since Apple accepts one token for a while). Then it counts as fresh again.
 * - `single-use`: Apple asks servers to treat a device token as single-use ("DeviceCheck",
 *   `DCDevice.generateToken` docs): accepted once, and any reuse within `retentionMs` is a replay.
 */
export type DeviceTokenPolicy =
  | { mode: "budget"; ttlMs: number; maxRequests: number }
  | { mode: "single-use"; retentionMs: number };

/**
 * `fresh`: never seen (or expired); ask Apple, then `remember` it if valid.
 * `cached-ok`: verified earlier and within budget; this request is counted. No Apple call.
 * `budget-exhausted` / `replayed`: refuse the request.
 */
export type DeviceTokenCheck = "fresh" | "cached-ok" | "budget-exhausted" | "replayed";

/**
 * `accepted`: the request may proceed and counts as a use (the first, unless another request
 * verified the same token concurrently); otherwise refuse it, as for `check`.
 */
export type DeviceTokenRemember = "accepted" | "budget-exhausted" | "replayed";

/**
 * The port: a shared record of verified device tokens, keyed by project and token digest (never the
 * token). Flow per request: `check`; on `fresh` ask Apple; when Apple says valid, `remember`, whose
 * answer decides (two instances may verify one token at once; exactly one is `accepted` in
 * single-use mode). Both calls count the request. A failing store rejects: the caller answers 503,
 * never a pass.
 */
export interface DeviceTokenLedger {
  check(projectId: string, digest: string, policy: DeviceTokenPolicy): Promise<DeviceTokenCheck>;
  remember(projectId: string, digest: string, policy: DeviceTokenPolicy): Promise<DeviceTokenRemember>;
}

/**
 * Hex SHA-256 of the token's decoded bytes, so spellings of one token that decode alike (with or
 * without padding, non-zero trailing bits) share one entry and cannot dodge single-use. Validate
 * the token as base64 first (see `isWellFormedDeviceToken`).
 */
export function deviceTokenDigest(token: string): string {
  return createHash("sha256").update(Buffer.from(token, "base64")).digest("hex");
}

function lifetimeMs(policy: DeviceTokenPolicy): number {
  return policy.mode === "budget" ? policy.ttlMs : policy.retentionMs;
}

/** Maps a use count (1 = first use) of a remembered token to a verdict; `ok` names the pass. */
function budgetVerdict<Ok extends "cached-ok" | "accepted">(
  count: number,
  policy: DeviceTokenPolicy,
  ok: Ok,
): Ok | "budget-exhausted" | "replayed" {
  if (policy.mode === "single-use") return "replayed";
  return count <= policy.maxRequests ? ok : "budget-exhausted";
}

export interface MemoryDeviceTokenLedgerOptions {
  /** Milliseconds since the epoch. */
  clock?: () => number;
  /**
   * Bound on remembered tokens. When full the oldest entry goes first, which can let that token be
   * used again: use the Redis ledger where single-use must hold under heavy load. Default 100,000.
   */
  maxEntries?: number;
}

/** The in-process ledger: one instance only; entries expire by the injected clock. */
export function createMemoryDeviceTokenLedger(
  options: MemoryDeviceTokenLedgerOptions = {},
): DeviceTokenLedger {
  const clock = options.clock ?? Date.now;
  const maxEntries = options.maxEntries ?? 100_000;
  const entries = new Map<string, { count: number; expiresAt: number }>();

  function live(key: string) {
    const entry = entries.get(key);
    if (entry && entry.expiresAt <= clock()) {
      entries.delete(key);
      return undefined;
    }
    return entry;
  }

  function insert(key: string, policy: DeviceTokenPolicy): void {
    if (entries.size >= maxEntries) {
      const oldest = entries.keys().next();
      if (!oldest.done) entries.delete(oldest.value);
    }
    entries.set(key, { count: 1, expiresAt: clock() + lifetimeMs(policy) });
  }

  return {
    async check(projectId, digest, policy) {
      const entry = live(`${projectId}:${digest}`);
      if (!entry) return "fresh";
      entry.count += 1;
      return budgetVerdict(entry.count, policy, "cached-ok");
    },
    async remember(projectId, digest, policy) {
      const key = `${projectId}:${digest}`;
      const entry = live(key);
      if (!entry) {
        insert(key, policy);
        return "accepted";
      }
      entry.count += 1;
      return budgetVerdict(entry.count, policy, "accepted");
    },
  };
}

/** Counts a use of an existing entry; 0 when there is none (so nothing is created without a TTL). */
const checkScript = new RedisScript(`
if redis.call("EXISTS", KEYS[1]) == 0 then return 0 end
return redis.call("INCR", KEYS[1])`);

/** Creates the entry with its TTL as use 1, or counts one more use of an existing entry. */
const rememberScript = new RedisScript(`
if redis.call("SET", KEYS[1], 1, "NX", "PX", ARGV[1]) then return 1 end
local count = redis.call("INCR", KEYS[1])
if redis.call("PTTL", KEYS[1]) < 0 then redis.call("PEXPIRE", KEYS[1], ARGV[1]) end
return count`);

export interface RedisDeviceTokenLedgerOptions {
  redis: Redis;
  /** The client's shared health (see `RedisBreaker`); by default one of this ledger's own. */
  breaker?: RedisBreaker | undefined;
  /** Namespace of every key; default `sluice:device-token:`. */
  keyPrefix?: string;
}

/** The rejection of a ledger call made while Redis rests after a failure: no command was sent. */
export class RedisRestingError extends Error {
  constructor() {
    super("Redis failed lately; the device token ledger was not asked");
    this.name = "RedisRestingError";
  }
}

/**
 * The shared ledger for several instances. Each entry is one integer key (the use count) with a
 * PEXPIRE lifetime on Redis's clock; every read-modify-write is one Lua script or one SET NX, so it
 * is atomic across instances. While the breaker rests Redis after a failure, calls reject at once
 * with `RedisRestingError` instead of waiting for a Redis that hangs.
 */
export function createRedisDeviceTokenLedger(options: RedisDeviceTokenLedgerOptions): DeviceTokenLedger {
  const { redis } = options;
  const breaker = options.breaker ?? new RedisBreaker(redis);
  const prefix = options.keyPrefix ?? "sluice:device-token:";
  const resting = () => Promise.reject(new RedisRestingError());
  const count = (script: RedisScript, projectId: string, digest: string, args: number[]) =>
    breaker.run(
      async () => Number(await script.run(redis, [`${prefix}${projectId}:${digest}`], args)),
      resting,
    );

  return {
    async check(projectId, digest, policy) {
      const uses = await count(checkScript, projectId, digest, []);
      return uses === 0 ? "fresh" : budgetVerdict(uses, policy, "cached-ok");
    },
    async remember(projectId, digest, policy) {
      const ttl = Math.max(1, Math.ceil(lifetimeMs(policy)));
      const uses = await count(rememberScript, projectId, digest, [ttl]);
      return uses === 1 ? "accepted" : budgetVerdict(uses, policy, "accepted");
    },
  };
}
