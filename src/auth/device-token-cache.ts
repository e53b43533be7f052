import { hash } from "node:crypto";
import type { Redis } from "ioredis";
import { isKeyDataError, RedisBreaker } from "../redis/redis-breaker.js";
import { redisKeyPrefixes } from "../redis/redis-keys.js";
import {
  errorReason,
  luaNotSluiceCount,
  notSluiceCountReply,
  RedisScript,
  type ScriptPart,
} from "../redis/redis-script.js";
import { decodedDeviceToken } from "./device-check-client.js";

/**
 * What a project does with a device token Apple has verified.
 * - `budget`: the token is trusted for `ttlMs` and `maxRequests` requests, whichever ends first;
 *   after that it is refused until `ttlMs` has passed since Apple verified it (asking Apple again
 *   would defeat the budget, since Apple accepts one token for a while). Then it counts as fresh
 *   again. `ttlMs` is the caller's, counted from the verification at each use: an entry made under
 *   another policy (single-use, a longer TTL on another instance or before a restart) is never
 *   trusted for longer. `verifiedSince` (ms since the epoch; the project's creation or the last
 *   change of its Apple settings, whichever is later) is when the caller's trust begins: an entry
 *   Apple verified before it is asked of Apple again, so a project deleted and created again under
 *   its id (for another app, perhaps), or switched to another app, team or environment, never
 *   inherits the tokens verified for the old one. The entries keep their keys, for instances of
 *   earlier versions.
 * - `single-use`: Apple asks servers to treat a device token as single-use ("DeviceCheck",
 *   `DCDevice.generateToken` docs): accepted once, and any reuse within `retentionMs` is a replay.
 */
export type DeviceTokenPolicy =
  | { mode: "budget"; ttlMs: number; maxRequests: number; verifiedSince?: number }
  | { mode: "single-use"; retentionMs: number };

/**
 * `fresh`: never seen (or expired); ask Apple, then `remember` it if valid.
 * `cached-ok`: verified earlier and within budget; this request is counted. No Apple call.
 * `budget-exhausted` / `replayed`: refuse the request.
 */
type DeviceTokenCheck = "fresh" | "cached-ok" | "budget-exhausted" | "replayed";

/**
 * `accepted`: the request may proceed and counts as a use (the first, unless another request
 * verified the same token concurrently); otherwise refuse it, as for `check`.
 */
type DeviceTokenRemember = "accepted" | "budget-exhausted" | "replayed";

/**
 * Filled by `check` and `remember` with the stamp of the entry the use was counted on (its
 * verification time, or another mark of that one record): `release` gives a use back only to that
 * record, never to one that replaced it. Left unset when the record has no such stamp.
 */
export interface DeviceTokenReceipt {
  stamp?: string;
}

/**
 * The port: a shared record of verified device tokens, keyed by project and token digest (never the
 * token). Flow per request: `check`; on `fresh` ask Apple; when Apple says valid, `remember`, whose
 * answer decides (two instances may verify one token at once; exactly one is `accepted` in
 * single-use mode). Both calls count the request. A failing store rejects: the caller answers 503,
 * never a pass. A request that passed but was then refused (rate limits, spend cap) gives its use
 * back with `release`, so a token counts admitted requests only.
 */
export interface DeviceTokenLedger {
  check(
    projectId: string,
    digest: string,
    policy: DeviceTokenPolicy,
    receipt?: DeviceTokenReceipt,
  ): Promise<DeviceTokenCheck>;
  remember(
    projectId: string,
    digest: string,
    policy: DeviceTokenPolicy,
    receipt?: DeviceTokenReceipt,
  ): Promise<DeviceTokenRemember>;
  /**
   * Gives back one use counted by a `check` or `remember` that passed (`cached-ok`, `accepted`),
   * whose receipt is `stamp`: the count goes down by one, never below zero, and a single-use token
   * is unmarked. Nothing happens when the entry expired or was replaced (another stamp) since, so
   * a release never brings back a token. Call it at most once per passing use, and only for a
   * request that was not admitted.
   */
  release(projectId: string, digest: string, stamp: string): Promise<void>;
}

/**
 * Hex SHA-256 of the token's decoded bytes, so spellings of one token that decode alike (with or
 * without padding, non-zero trailing bits) share one entry and cannot dodge single-use; null for a
 * token that is not well-formed base64 (`isWellFormedDeviceToken`), told by the one decode
 * (`decodedDeviceToken`) that also gives the bytes.
 */
export function deviceTokenDigest(token: string): string | null {
  const bytes = decodedDeviceToken(token);
  return bytes === null ? null : hash("sha256", bytes, "hex");
}

function lifetimeMs(policy: DeviceTokenPolicy): number {
  return policy.mode === "budget" ? policy.ttlMs : policy.retentionMs;
}

/**
 * Maps a use count (1 = first use) of a remembered token to a verdict; `ok` names the pass. A
 * single-use token passes only as use 1: an entry `remember` makes starts at 1, so a later use is
 * at least 2, unless a release gave the one use back (count 0) because its request was refused.
 */
function budgetVerdict<Ok extends "cached-ok" | "accepted">(
  count: number,
  policy: DeviceTokenPolicy,
  ok: Ok,
): Ok | "budget-exhausted" | "replayed" {
  if (policy.mode === "single-use") return count <= 1 ? ok : "replayed";
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

/** The in-process ledger, whose answers need no wait. */
export interface MemoryDeviceTokenLedger extends DeviceTokenLedger {
  /**
   * `check` without a promise, for a token it passes: counts the use and returns `cached-ok` when
   * `check` would; otherwise counts nothing and returns null (ask `check`, which decides and counts).
   */
  passNow(
    projectId: string,
    digest: string,
    policy: DeviceTokenPolicy,
    receipt?: DeviceTokenReceipt,
  ): "cached-ok" | null;
}

/** The in-process ledger: one instance only; entries expire by the injected clock. */
export function createMemoryDeviceTokenLedger(
  options: MemoryDeviceTokenLedgerOptions = {},
): MemoryDeviceTokenLedger {
  const clock = options.clock ?? Date.now;
  const maxEntries = options.maxEntries ?? 100_000;
  const entries = new Map<string, { count: number; verifiedAt: number; expiresAt: number; stamp: string }>();
  /** Each record's own stamp (see `DeviceTokenReceipt`); a reset record gets a new one. */
  let records = 0;

  function live(key: string, now: number) {
    const entry = entries.get(key);
    if (entry && entry.expiresAt <= now) {
      entries.delete(key);
      return undefined;
    }
    return entry;
  }

  return {
    async check(projectId, digest, policy, receipt) {
      const now = clock();
      const entry = live(`${projectId}:${digest}`, now);
      if (!entry || outlived(entry.verifiedAt, now, policy)) return "fresh";
      entry.count += 1;
      if (receipt) receipt.stamp = entry.stamp;
      return budgetVerdict(entry.count, policy, "cached-ok");
    },
    passNow(projectId, digest, policy, receipt) {
      const now = clock();
      const entry = live(`${projectId}:${digest}`, now);
      if (!entry || outlived(entry.verifiedAt, now, policy)) return null;
      if (budgetVerdict(entry.count + 1, policy, "cached-ok") !== "cached-ok") return null;
      entry.count += 1;
      if (receipt) receipt.stamp = entry.stamp;
      return "cached-ok";
    },
    async remember(projectId, digest, policy, receipt) {
      const key = `${projectId}:${digest}`;
      const now = clock();
      const entry = live(key, now);
      const verifiedAt = verifiedUnder(now, policy);
      if (!entry) {
        if (entries.size >= maxEntries) {
          const oldest = entries.keys().next();
          if (!oldest.done) entries.delete(oldest.value);
        }
        const stamp = String(++records);
        entries.set(key, { count: 1, verifiedAt, expiresAt: now + lifetimeMs(policy), stamp });
        if (receipt) receipt.stamp = stamp;
        return "accepted";
      }
      if (outlived(entry.verifiedAt, now, policy)) {
        // Verified anew: the budget starts again; the entry keeps the longer of its lifetimes, so
        // a single-use entry still refuses a replay if the project switches back.
        entry.count = 1;
        entry.verifiedAt = verifiedAt;
        entry.expiresAt = Math.max(entry.expiresAt, now + lifetimeMs(policy));
        entry.stamp = String(++records);
        if (receipt) receipt.stamp = entry.stamp;
        return "accepted";
      }
      entry.count += 1;
      if (receipt) receipt.stamp = entry.stamp;
      return budgetVerdict(entry.count, policy, "accepted");
    },
    async release(projectId, digest, stamp) {
      const entry = live(`${projectId}:${digest}`, clock());
      if (entry && entry.stamp === stamp && entry.count > 0) entry.count -= 1;
    },
  };
}

/**
 * True when a budget-mode caller must not trust an entry Apple verified at `verifiedAt` any more:
 * its own TTL has passed since then, or the entry predates its `verifiedSince`. A single-use
 * caller refuses any entry, however old.
 */
function outlived(verifiedAt: number, now: number, policy: DeviceTokenPolicy): boolean {
  return policy.mode === "budget" && (now - verifiedAt >= policy.ttlMs || verifiedAt < sinceOf(policy));
}

/** A budget caller's `verifiedSince`, 0 when it has none (and for single-use callers). */
function sinceOf(policy: DeviceTokenPolicy): number {
  return policy.mode === "budget" ? (policy.verifiedSince ?? 0) : 0;
}

/**
 * The verification time `remember` records for a token Apple verified at `now` for a caller with
 * `policy`: never before the caller's `verifiedSince`, since Apple verified it under the settings
 * that time stands for. That time is on the clock of whichever instance (or CLI) wrote the project,
 * which may be ahead of the ledger's: recorded as `now`, the token would predate it and be asked of
 * Apple again, its budget starting over, at every request until the ledger's clock caught up. The
 * entry still expires `lifetimeMs` after `now`, so a token is never trusted longer than its TTL.
 */
function verifiedUnder(now: number, policy: DeviceTokenPolicy): number {
  return Math.max(now, sinceOf(policy));
}

/**
 * Lua, for the ledger's scripts: a key of the entry (KEYS[1] and KEYS[2]; a part of another user's
 * may follow them) without an expiry, which Sluice never writes but a restore or another program's
 * PERSIST may, is given the entry's lifetime (`lifetime`, ms) from now, whatever it holds, as a
 * count without expiry gets its window's: a single-use mark (or a key another program wrote in
 * another type) then refuses its token for that long, never for good.
 */
const luaExpireForever = (lifetime: string) => `for i = 1, 2 do
  if redis.call("PTTL", KEYS[i]) == -1 then redis.call("PEXPIRE", KEYS[i], ${lifetime}) end
end`;

/**
 * Lua: refuses (`notSluiceCountReply`, a key's data error) a use count `value` that Sluice never
 * writes (`luaNotSluiceCount`), leaving it as it is: INCR would take "-5" and count it as a first
 * use, and refuses most of the others with an error of its own.
 */
const luaRefuseNoCount = `if ${luaNotSluiceCount} then return redis.error_reply("${notSluiceCountReply}") end`;

/**
 * Lua: `verifiedAt`, the verification time `value` (KEYS[2] read) holds, when it is ms as the
 * ledger writes them (`luaNotSluiceCount`); otherwise nil or false, an unknown time ("inf" would
 * trust an entry for good).
 */
const luaVerifiedAt = `local verifiedAt = not (${luaNotSluiceCount}) and tonumber(value)`;

/**
 * Lua, checkScript's start: replies {0, false} when the entry is not there or not trusted, refuses a
 * use count Sluice never writes, and leaves the count in `value` and the entry's stamp in `stamp`.
 */
const luaTrustedEntry = `
if redis.call("EXISTS", KEYS[1]) == 0 then return {0, false} end
${luaExpireForever("ARGV[3]")}
local stamp = redis.call("GET", KEYS[2])
local ttl = tonumber(ARGV[1])
if ttl >= 0 then
  local value = stamp
  ${luaVerifiedAt}
  local time = redis.call("TIME")
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  if not verifiedAt or now - verifiedAt >= ttl or verifiedAt < tonumber(ARGV[2]) then return {0, false} end
end
local value = redis.call("GET", KEYS[1])
${luaRefuseNoCount}`;

/**
 * KEYS[1] is the entry (the use count), KEYS[2] when Apple verified it (ms on Redis's clock);
 * ARGV[1] the caller's TTL in budget mode, -1 in single-use mode; ARGV[2] its `verifiedSince` (0:
 * none); ARGV[3] the entry's lifetime, given to a key of it that has no expiry. Counts a use of an
 * existing entry and returns the count (a use count Sluice never writes is refused and left as it
 * is); 0 when there is none, or a budget caller's TTL has passed
 * since the verification, or the verification predates ARGV[2] (or its time is unknown: an entry
 * written before it was kept, or a time that is no ms), so nothing is created without a TTL and an
 * old entry is asked of Apple again.
 */
const checkScript = new RedisScript(`${luaTrustedEntry}
return {redis.call("INCR", KEYS[1]), stamp}`);

/**
 * checkScript with the part of another user (`ScriptPart`: the request's rate limits, a capped
 * project's place too) over the keys after KEYS[2] and the ARGV after ARGV[4], ARGV[4] being the
 * uses the caller's policy allows (1 in single-use mode). A use that this lookup would not pass (none,
 * not trusted, or over the uses allowed) replies as checkScript does, the part not run. One it
 * would pass runs the part, and counts the use only if the part admits the call: {uses with this
 * one, the stamp, the part's `admitted`, ...the part's reply}.
 */
const checkWithScripts = new WeakMap<ScriptPart<unknown>["lua"], RedisScript>();
function checkWithScript(lua: ScriptPart<unknown>["lua"]): RedisScript {
  let script = checkWithScripts.get(lua);
  if (script === undefined) {
    script = new RedisScript(`${luaTrustedEntry}
local uses = tonumber(value) + 1
if uses > tonumber(ARGV[4]) then return {redis.call("INCR", KEYS[1]), stamp} end
local function part()
${lua(2, 4)}
return admitted, reply
end
local admitted, reply = part()
if admitted == 1 then redis.call("INCR", KEYS[1]) end
local out = {uses, stamp, admitted}
for _, each in ipairs(reply) do out[#out + 1] = each end
return out`);
    checkWithScripts.set(lua, script);
  }
  return script;
}

/**
 * Lua, the start of rememberScript and of rememberWithScript, on their KEYS and ARGV[1..3]: gives a
 * key of the entry without expiry the lifetime, and leaves Redis's time in `now`, the verification
 * time to write in `verified` (see `verifiedUnder`) and, in `keep`, the lifetime to write the entry
 * with as use 1: ARGV[1] for a new entry, the longer of its lifetimes for one a budget caller may no
 * longer trust; false for an entry it trusts, whose use count is then in `value` (a count Sluice
 * never writes refused).
 */
const luaRememberedEntry = `
local time = redis.call("TIME")
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local lifetime = tonumber(ARGV[1])
local since = tonumber(ARGV[3])
local verified = math.max(now, since)
local keep = false
local value
if redis.call("EXISTS", KEYS[1]) == 0 then keep = lifetime else
  ${luaExpireForever("lifetime")}
  local ttl = tonumber(ARGV[2])
  if ttl >= 0 then
    local value = redis.call("GET", KEYS[2])
    ${luaVerifiedAt}
    if not verifiedAt or now - verifiedAt >= ttl or verifiedAt < since then
      keep = math.max(redis.call("PTTL", KEYS[1]), lifetime)
    end
  end
  if not keep then
    value = redis.call("GET", KEYS[1])
    ${luaRefuseNoCount}
  end
end`;

/**
 * KEYS as for `checkScript`, ARGV[2] and ARGV[3] as its ARGV[1] and ARGV[2]; ARGV[1] the entry's
 * lifetime. The verification time written is Redis's time, or ARGV[3] when that is later (see
 * `verifiedUnder`). Creates the entry with its lifetime as use 1. An entry a budget caller may no longer
 * trust starts again as use 1 and keeps the longer of its lifetimes; any other existing entry
 * counts one more use. A key of the entry without expiry gets the lifetime; a use count Sluice
 * never writes is refused and left as it is.
 */
const rememberScript = new RedisScript(`${luaRememberedEntry}
if keep then
  redis.call("SET", KEYS[1], 1, "PX", keep)
  redis.call("SET", KEYS[2], verified, "PX", keep)
  return {1, tostring(verified)}
end
return {redis.call("INCR", KEYS[1]), redis.call("GET", KEYS[2])}`);

/**
 * rememberScript with the part of another user (`ScriptPart`, as for `checkWithScript`) over the keys
 * after KEYS[2] and the ARGV after ARGV[4], ARGV[4] being the uses the caller's policy allows (1 in
 * single-use mode). A use rememberScript would refuse (over the uses allowed) is counted and replied
 * as rememberScript does, the part not run. Else the part runs, and the entry is written as
 * rememberScript writes it (made, or started again, as use 1; one more use) but with this use counted
 * only if the part admits the call: a call it refuses leaves a new or restarted entry at 0 uses,
 * what rememberScript and then releaseScript left. Replies {uses with this one, the stamp, the
 * part's `admitted`, ...the part's reply}.
 */
const rememberWithScripts = new WeakMap<ScriptPart<unknown>["lua"], RedisScript>();
function rememberWithScript(lua: ScriptPart<unknown>["lua"]): RedisScript {
  let script = rememberWithScripts.get(lua);
  if (script === undefined) {
    script = new RedisScript(`${luaRememberedEntry}
local uses = 1
if not keep then
  uses = tonumber(value) + 1
  if uses > tonumber(ARGV[4]) then return {redis.call("INCR", KEYS[1]), redis.call("GET", KEYS[2])} end
end
local function part()
${lua(2, 4)}
return admitted, reply
end
local admitted, reply = part()
local stamp
if keep then
  redis.call("SET", KEYS[1], admitted == 1 and 1 or 0, "PX", keep)
  redis.call("SET", KEYS[2], verified, "PX", keep)
  stamp = tostring(verified)
else
  if admitted == 1 then redis.call("INCR", KEYS[1]) end
  stamp = redis.call("GET", KEYS[2])
end
local out = {uses, stamp, admitted}
for _, each in ipairs(reply) do out[#out + 1] = each end
return out`);
    rememberWithScripts.set(lua, script);
  }
  return script;
}

/**
 * KEYS as for `checkScript`; ARGV[1] the verification time a use's script returned (its stamp).
 * Gives that use back: one less, never below zero, and only while the entry is the one the use
 * was counted on (it still exists, with that verification time), so an expired or replaced entry is
 * never brought back, nor one without a verification time. Keeps the lifetimes. A use count Sluice
 * never writes is refused and left as it is.
 */
const releaseScript = new RedisScript(`
if redis.call("GET", KEYS[2]) ~= ARGV[1] then return 0 end
local value = redis.call("GET", KEYS[1])
${luaRefuseNoCount}
local count = tonumber(value)
if not count or count <= 0 then return 0 end
redis.call("DECR", KEYS[1])
return 1`);

export interface RedisDeviceTokenLedgerOptions {
  redis: Redis;
  /** The client's shared health (see `RedisBreaker`); by default one of this ledger's own. */
  breaker?: RedisBreaker | undefined;
  /** What every key begins with; `sluice:device-token:` by default (see `redisKeyPrefixes`). */
  keyPrefix?: string | undefined;
}

/** The rejection of a ledger call made while Redis rests after a failure: no command was sent. */
export class RedisRestingError extends Error {
  constructor() {
    super("Redis failed lately; the device token ledger was not asked");
    this.name = "RedisRestingError";
  }
}

/**
 * The rejection of a ledger call whose entry (`key`, or its `…:verified`) holds what Sluice never
 * writes there: a key of another type, or a use count that is none Sluice writes ("-5", "1e3": see
 * `luaNotSluiceCount`), written by another program inside the key prefix. Redis answered, so it does
 * not rest; the entry is left as it is (it may be a single-use token's mark) but for an expiry it
 * lacked, and the caller answers for this token alone as when Redis is down. The message is Redis's
 * reply alone, never the command's arguments.
 */
export class RedisKeyDataError extends Error {
  constructor(
    /** The entry's key in Redis: project id and token digest, never the token. */
    readonly key: string,
    /** Redis's reply (`WRONGTYPE …`, `notSluiceCountReply`), without the script's digest. */
    readonly reply: string,
  ) {
    super(`the device token ledger entry ${key} in Redis holds what Sluice did not write: ${reply}`);
    this.name = "RedisKeyDataError";
  }
}

/** The ledger in Redis, whose lookup can decide another user's part in its script. */
export interface RedisDeviceTokenLedger extends DeviceTokenLedger {
  /**
   * `check`, with `part` (the request's rate limits, a capped project's place too) decided in the
   * same script, one round trip, only when the lookup passes the token (`cached-ok`): then `part`'s
   * `decide` is called with its reply, and the use is counted (and `receipt` filled) only if the
   * part admitted the call; a call it refuses leaves the token's count as it was, seen so by every
   * instance. Any other answer runs no part and counts as `check` does. Rejects as `check` does,
   * the part not decided (its `failed` called when the script was sent).
   */
  checkWith(
    projectId: string,
    digest: string,
    policy: DeviceTokenPolicy,
    receipt: DeviceTokenReceipt | undefined,
    part: ScriptPart<unknown>,
  ): Promise<DeviceTokenCheck>;
  /**
   * `remember`, with `part` decided in the same script, one round trip, only when the token is
   * `accepted`: then `part`'s `decide` is called with its reply, and the use is counted (and
   * `receipt` filled) only if the part admitted the call; a call it refuses leaves the entry as
   * `remember` and then `release` would have (Apple's verification recorded, no use counted). Any
   * other answer runs no part and counts as `remember` does. Rejects as `remember` does, the part
   * not decided (its `failed` called when the script was sent).
   */
  rememberWith(
    projectId: string,
    digest: string,
    policy: DeviceTokenPolicy,
    receipt: DeviceTokenReceipt | undefined,
    part: ScriptPart<unknown>,
  ): Promise<DeviceTokenRemember>;
}

/**
 * The shared ledger for several instances. Each entry is one integer key (the use count) with a
 * PEXPIRE lifetime on Redis's clock, beside a key `…:verified` holding when Apple verified it (ms
 * on Redis's clock, same lifetime); the use count keeps the layout of earlier versions, so an
 * instance not yet updated still shares it. Every read-modify-write is one Lua script, so it is
 * atomic across instances. While the breaker rests Redis after a failure, calls reject at once
 * with `RedisRestingError` instead of waiting for a Redis that hangs. An entry another program wrote
 * in another type, or with a use count Sluice never writes, rejects its calls with
 * `RedisKeyDataError`, and rests nothing. A key of an entry found without expiry (a restore, a
 * PERSIST) is given the entry's lifetime, so no entry refuses its token for good.
 */
export function createRedisDeviceTokenLedger(options: RedisDeviceTokenLedgerOptions): RedisDeviceTokenLedger {
  const { redis } = options;
  const breaker = options.breaker ?? new RedisBreaker(redis);
  const prefix = options.keyPrefix ?? redisKeyPrefixes().deviceTokens;
  const resting = () => Promise.reject(new RedisRestingError());
  const keysOf = (projectId: string, digest: string) => {
    const key = `${prefix}${projectId}:${digest}`;
    return [key, `${key}:verified`];
  };
  /**
   * Runs a ledger script behind the breaker; a key's data error (which the breaker took as an
   * answer) becomes a `RedisKeyDataError` naming the entry.
   */
  const run = <T>(keys: string[], call: () => Promise<T>): Promise<T> =>
    breaker.run(call, resting).catch((error: unknown) => {
      if (!isKeyDataError(error)) throw error;
      // Redis's reply up to the script's name: the reason, without the script's digest.
      const reply = errorReason((error as Error).message);
      throw new RedisKeyDataError(keys[0] as string, reply);
    });
  /** Runs a counting script: the use count (0: none) and the entry's stamp, written to `receipt`. */
  const count = (
    script: RedisScript,
    projectId: string,
    digest: string,
    args: number[],
    receipt: DeviceTokenReceipt | undefined,
  ) => {
    const keys = keysOf(projectId, digest);
    return run(keys, async () => {
      const [uses, stamp] = (await script.run(redis, keys, args)) as [number, string | null];
      if (receipt && typeof stamp === "string") receipt.stamp = stamp;
      return Number(uses);
    });
  };
  /** How long an entry is kept in Redis, whole ms, at least 1 (an expiry Redis takes). */
  const storedMs = (policy: DeviceTokenPolicy) => Math.max(1, Math.ceil(lifetimeMs(policy)));
  /** The uses of an entry the caller passes (`budgetVerdict`): a single-use token's first alone. */
  const usesAllowed = (policy: DeviceTokenPolicy) => (policy.mode === "budget" ? policy.maxRequests : 1);
  /** The TTL a budget caller trusts an entry for, counted from its verification; -1: single-use. */
  const trustMs = (policy: DeviceTokenPolicy) => (policy.mode === "budget" ? Math.max(0, policy.ttlMs) : -1);
  /** The lookup's ARGV[1..3] (`luaTrustedEntry`), the same for `check` and `checkWith`. */
  const lookupArgs = (policy: DeviceTokenPolicy) => [trustMs(policy), sinceOf(policy), storedMs(policy)];
  /** What a lookup's use count answers: none there (0), or within the policy's uses or not. */
  const lookedUp = (uses: number, policy: DeviceTokenPolicy): DeviceTokenCheck =>
    uses === 0 ? "fresh" : budgetVerdict(uses, policy, "cached-ok");
  /** rememberScript's ARGV[1..3], the same for `remember` and `rememberWith`. */
  const rememberArgs = (policy: DeviceTokenPolicy) => [storedMs(policy), trustMs(policy), sinceOf(policy)];
  /** What a remembering script's use count answers: a first use, or within the policy's uses or not. */
  const remembered = (uses: number, policy: DeviceTokenPolicy): DeviceTokenRemember =>
    uses === 1 ? "accepted" : budgetVerdict(uses, policy, "accepted");
  /**
   * Runs a counting script with `part` (`checkWithScript`, `rememberWithScript`, given the part's
   * Lua): the use count, the part decided when the script ran it, and the entry's stamp written to
   * `receipt` only when the use was counted (the part admitted the call, or was not run).
   */
  const countWith = async (
    scriptOf: (lua: ScriptPart<unknown>["lua"]) => RedisScript,
    projectId: string,
    digest: string,
    args: number[],
    receipt: DeviceTokenReceipt | undefined,
    part: ScriptPart<unknown>,
  ) => {
    const keys = [...keysOf(projectId, digest), ...part.keys];
    const reply = await run(keys, async () => {
      try {
        return (await scriptOf(part.lua).run(redis, keys, [...args, ...part.args])) as unknown[];
      } catch (error) {
        part.failed?.();
        throw error;
      }
    });
    const stamp = reply[1];
    // Past the stamp: the part's `admitted`, then its reply. Without them the part was not run.
    const counted = reply.length < 3 || reply[2] === 1;
    if (reply.length >= 3) part.decide(reply.slice(3) as number[]);
    if (counted && receipt && typeof stamp === "string") receipt.stamp = stamp;
    return Number(reply[0]);
  };

  return {
    async check(projectId, digest, policy, receipt) {
      return lookedUp(await count(checkScript, projectId, digest, lookupArgs(policy), receipt), policy);
    },
    async checkWith(projectId, digest, policy, receipt, part) {
      const args = [...lookupArgs(policy), usesAllowed(policy)];
      return lookedUp(await countWith(checkWithScript, projectId, digest, args, receipt, part), policy);
    },
    async remember(projectId, digest, policy, receipt) {
      return remembered(
        await count(rememberScript, projectId, digest, rememberArgs(policy), receipt),
        policy,
      );
    },
    async rememberWith(projectId, digest, policy, receipt, part) {
      const args = [...rememberArgs(policy), usesAllowed(policy)];
      return remembered(await countWith(rememberWithScript, projectId, digest, args, receipt, part), policy);
    },
    async release(projectId, digest, stamp) {
      const keys = keysOf(projectId, digest);
      await run(keys, async () => {
        await releaseScript.run(redis, keys, [stamp]);
      });
    },
  };
}
