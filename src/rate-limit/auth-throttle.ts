import { hash } from "node:crypto";
import type { Redis } from "ioredis";
import { mayBeKey } from "../admin/project-id.js";
import type { AuthThrottle } from "../auth/authenticate.js";
import { detachedString } from "../detached-string.js";
import { GatewayError } from "../errors.js";
import { addressBlock } from "../net/ip-address.js";
import { RedisBreaker } from "../redis/redis-breaker.js";
import { redisKeyPrefixes } from "../redis/redis-keys.js";
import { luaNotSluiceCount, RedisScript } from "../redis/redis-script.js";
import { MemoryWindows } from "./memory-windows.js";
import { rateLimitHeaders } from "./rate-limit-headers.js";

export interface AuthThrottleOptions {
  /** A client built by `createRedisClient`; without one, failures are counted per instance. */
  redis?: Redis | undefined;
  /** The client's shared health (see `RedisBreaker`); by default one of this throttle's own. */
  breaker?: RedisBreaker | undefined;
  failuresPerMinute: number;
  /** What every Redis key begins with; `sluice:auth` by default (see `redisKeyPrefixes`). */
  keyPrefix?: string;
  /**
   * Called with the Redis key of a count that held what Sluice never writes there (a key of another
   * type, a string that is no count), written by another program inside the key prefix: the failure
   * was counted there afresh, as the first of a new window. Redis is not taken for down.
   */
  onKeyRepaired?: (key: string) => void;
  /**
   * Whether a project id naming no project holds a configured secret (`configuredSecretHeld`): its
   * failures are counted under one key for all such ids, `project:[redacted]` (`unknownIdKey`). None
   * by default.
   */
  isSecret?: (projectId: string) => boolean;
}

const windowSeconds = 60;
/** Keys remembered locally (blocked, or with a recent failure here); the oldest go first. */
const maxRemembered = 100_000;
/** Unknown project ids are attacker-chosen: only this much of one becomes a key. */
const maxProjectIdLength = 128;

/** The 429 of a throttled caller: the throttle's own RateLimit fields (`name`) and Retry-After. */
export function throttled(
  throttle: AuthThrottle,
  retryAfter: number,
  name: string,
  message: string,
): GatewayError {
  const headers = rateLimitHeaders([
    {
      name,
      allowed: false,
      limit: throttle.policy.failuresPerWindow,
      remaining: 0,
      resetSeconds: retryAfter,
      windowSeconds: throttle.policy.windowSeconds,
    },
  ]);
  return new GatewayError("TOO_MANY_REQUESTS", message, { headers });
}

/**
 * Counts failed authentications per client address and project (see `keysToCount`): on a project
 * that exists per address and project; on a project id that does not exist per address and per
 * project id, so an enumeration spread over many addresses is slowed too. Once a key has reached
 * `failuresPerMinute` failures within its window, `retryAfter` returns the seconds left in it; for
 * the id's own key, `retryAfterMissing`, asked once the id is found to name no project.
 * IPv6 clients are counted per /64, the block one end site usually holds, so that rotating
 * addresses inside it does not reset the count.
 *
 * Attempts in flight are counted too (`begin`), per instance: an attempt whose outcome is not known
 * yet holds a slot on the key its failure would count against until it ended, and a new attempt is
 * refused (429, Retry-After 1) while the key's failures seen here and the attempts in flight reach
 * the limit. Without that, every request of a burst (concurrent, or pipelined on one connection)
 * passes `retryAfter` before the first failure is counted. With Redis the failures are the shared
 * count the last failure here read; the slots are this instance's.
 *
 * Counts are fixed windows opened by a key's first failure: in memory, or in Redis (one Lua script
 * per count) with in-memory counts beside them, so a lost Redis leaves per-instance counting, never
 * none. After a Redis failure the
 * `RedisBreaker` rests Redis, so a Redis that hangs does not make each count wait for a timeout.
 *
 * Cost on the success path, which calls `retryAfter` on every request: `retryAfter` reads only
 * local maps. It is a size check while no failure is remembered, a Map lookup otherwise. Keys
 * blocked by a failure recorded here are answered locally. With Redis, a key that failed on this
 * instance within its window (a "suspect") is also checked against the shared count, one Redis
 * round trip per request for that client until its window ends. Trade-off: a client that never
 * failed on this instance is not checked, so after the shared count reached the limit elsewhere,
 * each instance still lets one more failure through before blocking (at most one per instance and
 * window); every other request pays no Redis round trip.
 */
export function createAuthThrottle(options: AuthThrottleOptions): AuthThrottle & {
  /** Keys held here (blocked, suspect, failing, or with attempts in flight): memory stays bounded. */
  remembered(): number;
  /** Stops the sweeps (on close): a gateway closed in a process that goes on leaves no timer. */
  stop(): void;
} {
  const limit = Math.max(1, Math.floor(options.failuresPerMinute));
  const isSecret = options.isSecret ?? (() => false);
  const counter = failureCounter(options);
  const windowMs = windowSeconds * 1000;
  const blocked = new ExpiringKeys(maxRemembered, windowMs);
  const suspects = options.redis ? new ExpiringKeys(maxRemembered, windowMs) : undefined;
  /** Keys that failed here within their window, with the count the window held after the last. */
  const failing = new ExpiringKeys(maxRemembered, windowMs);
  /** Attempts admitted by `begin` and not yet ended, per key: bounded by the requests open at once. */
  const inFlight = new Map<string, number>();
  // Expired keys go when met, or all at once when the last one expired; this drops those a burst
  // from many addresses left while failures go on elsewhere (a key per address, up to the bound).
  const sweep = setInterval(() => {
    const now = Date.now();
    for (const keys of [blocked, suspects, failing]) keys?.dropExpired(now);
  }, windowSeconds * 1000).unref();

  function block(key: string, msLeft: number): number {
    blocked.add(key, Date.now() + msLeft);
    return Math.max(1, Math.ceil(msLeft / 1000));
  }

  async function count(cutKey: string): Promise<void> {
    // Held for a window, up to `maxRemembered` keys: a copy, not a view of the request's line or
    // header the project id was cut from (see detachedString).
    const key = detachedString(cutKey);
    const result = await counter.consume(key);
    failing.add(key, Date.now() + result.msLeft, result.count);
    if (result.count >= limit) block(key, result.msLeft);
    else suspects?.add(key, Date.now() + result.msLeft);
  }

  /** The shared count for a key that failed here; an unreadable count leaves the local answer. */
  async function sharedWait(key: string): Promise<number> {
    const result = await counter.get(key).catch(() => null);
    return result && result.count >= limit ? block(detachedString(key), result.msLeft) : 0;
  }

  /** The longest wait any of `keys` imposes. Answered at once unless a suspect's shared count must be read. */
  function waitFor(keys: () => string[]): number | Promise<number> {
    if (blocked.size === 0 && (suspects?.size ?? 0) === 0) return 0;
    const now = Date.now();
    if (blocked.empty(now) && (suspects?.empty(now) ?? true)) return 0;
    const checked = keys();
    const wait = Math.max(...checked.map((key) => blocked.secondsLeft(key, now)));
    if (wait > 0 || !suspects) return wait;
    const suspected = checked.filter((key) => suspects.secondsLeft(key, now) > 0);
    if (suspected.length === 0) return 0;
    return (async () => {
      let shared = 0;
      for (const key of suspected) shared = Math.max(shared, await sharedWait(key));
      return shared;
    })();
  }

  return {
    policy: { failuresPerWindow: limit, windowSeconds },
    retryAfter: (clientIp, projectId) => waitFor(() => keysToCheck(clientIp, projectId)),
    retryAfterMissing: (projectId) => waitFor(() => [unknownIdKey(projectId, isSecret)]),
    begin(clientIp, projectId) {
      const key = attemptKey(clientIp, projectId);
      const held = inFlight.get(key) ?? 0;
      // Attempts still undecided count as failures to come: a burst is refused here, not checked.
      if (held + failing.count(key, Date.now()) >= limit) return 1;
      inFlight.set(key, held + 1);
      let open = true;
      return () => {
        if (!open) return;
        open = false;
        const left = (inFlight.get(key) ?? 1) - 1;
        if (left > 0) inFlight.set(key, left);
        else inFlight.delete(key);
      };
    },
    async recordFailure(clientIp, projectId, projectExists) {
      await Promise.all(keysToCount(clientIp, projectId, projectExists, isSecret).map(count));
    },
    remembered: () => blocked.size + (suspects?.size ?? 0) + failing.size + inFlight.size,
    stop() {
      clearInterval(sweep);
      counter.stop();
    },
  };
}

/** What a key's window holds: failures counted (over the limit included) and the time left. */
interface FailureCount {
  count: number;
  msLeft: number;
}

/** Failure counts: in memory, or in Redis behind the breaker with the memory counts as its fallback. */
interface FailureCounter {
  /** Counts one failure and says what the window holds now. */
  consume(key: string): Promise<FailureCount>;
  get(key: string): Promise<FailureCount | null>;
  /** Stops the sweep of ended windows. */
  stop(): void;
}

function failureCounter(options: AuthThrottleOptions): FailureCounter {
  const keyPrefix = options.keyPrefix ?? redisKeyPrefixes().authFailures;
  const windowMs = windowSeconds * 1000;
  // Bounded like the blocked keys: the keys hold project ids the client chooses.
  const local = new MemoryWindows(Date.now, maxRemembered);
  // Ended windows are dropped two per count; this drops those a burst of made-up project ids left
  // once counting stops (the keys are the client's to choose).
  const sweep = setInterval(() => local.dropEnded(), windowMs).unref();
  const stop = () => clearInterval(sweep);
  const countHere = async (key: string): Promise<FailureCount> => {
    const now = Date.now();
    const window = local.add(key, windowMs, now);
    return { count: window.count, msLeft: window.endsAt - now };
  };
  const redis = options.redis;
  if (!redis) {
    return {
      stop,
      consume: countHere,
      get: async (key) => {
        const now = Date.now();
        const window = local.find(key, now);
        return window ? { count: window.count, msLeft: window.endsAt - now } : null;
      },
    };
  }
  const client: Redis = redis;
  const breaker = options.breaker ?? new RedisBreaker(client);
  // Keys as rate-limiter-flexible, which kept these counts before, named them: instances of both
  // versions share the counts during a rolling update.
  const shared = async (script: RedisScript, key: string) => {
    const redisKey = `${keyPrefix}:${key}`;
    const reply = (await script.run(client, [redisKey], [windowMs])) as [number, number, number?];
    if (reply[2] === 1) options.onKeyRepaired?.(redisKey);
    return failureCount(reply);
  };
  return {
    stop,
    consume: (key) =>
      breaker
        .run(
          () => shared(countScript, key),
          () => countHere(key),
        )
        .catch(() => countHere(key)),
    get: (key) =>
      breaker.run(
        () => shared(readScript, key),
        () => null,
      ),
  };
}

/**
 * Counts a failure; the window opens with the key's first. Replies the count, the ms left, and 1
 * when it repaired the key: one of another type, or a string that is not a count (digits), is not
 * one Sluice wrote and is deleted and counted afresh; a count without expiry (a restore, a manual
 * SET) gets the window's. Only the read is guarded (a GET fails for a key's type alone): the INCR's
 * failures (OOM, READONLY) are Redis's and fail the script.
 */
const countScript = new RedisScript(`
local repaired = 0
local value = redis.pcall("GET", KEYS[1])
if ${luaNotSluiceCount} then
  redis.call("DEL", KEYS[1])
  repaired = 1
end
local count = redis.call("INCR", KEYS[1])
local ttl = redis.call("PTTL", KEYS[1])
if ttl < 0 or ttl > tonumber(ARGV[1]) then
  ttl = tonumber(ARGV[1])
  redis.call("PEXPIRE", KEYS[1], ttl)
end
return {count, ttl, repaired}`);

/**
 * Reads a count and its ms left. A count without expiry gets the window's, so it never blocks for
 * good; what is no count (another type, or any string the count script would not count on, such as
 * "1e3", " 7" or "-5", though Lua's tonumber reads it) reads as none and is left as it is: the next
 * count repairs it.
 */
const readScript = new RedisScript(`
local value = redis.pcall("GET", KEYS[1])
if ${luaNotSluiceCount} then value = false end
local count = tonumber(value)
local ttl = redis.call("PTTL", KEYS[1])
if count and (ttl == -1 or ttl > tonumber(ARGV[1])) then
  ttl = tonumber(ARGV[1])
  redis.call("PEXPIRE", KEYS[1], ttl)
end
return {count or 0, ttl}`);

function failureCount([count, msLeft]: [number, number, number?]): FailureCount {
  return { count, msLeft: Math.max(0, msLeft) };
}

/**
 * What a failure counts against. On a project that exists: the address for that project only, so
 * one broken client behind an address many users share (a carrier's NAT, which mobile apps sit
 * behind) does not lock that address out of every other project. On a project id that does not
 * exist: the address as a whole, and the id, so enumerating ids is slowed from one address and from
 * many. Without a project (the admin API): the address.
 */
function keysToCount(
  clientIp: string,
  projectId: string | undefined,
  projectExists: boolean,
  isSecret: (projectId: string) => boolean,
): string[] {
  const address = `ip:${addressBlock(clientIp)}`;
  if (projectId === undefined) return [address];
  const project = projectId.slice(0, maxProjectIdLength);
  return projectExists ? [`${address}:project:${project}`] : [address, unknownIdKey(projectId, isSecret)];
}

/**
 * The key of an id's failures while it names no project, whatever the address; an id that may be a
 * key typed in its place (`mayBeKey`) by its SHA-256 digest (`project:#…`), so the key is not kept
 * (in Redis, whose append-only file is on disk). An id that holds a configured secret (`isSecret`)
 * by none: one key for them all, `project:[redacted]`, as the digest of an admin token chosen by hand
 * could be matched against guesses; only a caller who knows a secret can count there.
 */
function unknownIdKey(projectId: string, isSecret: (projectId: string) => boolean): string {
  if (isSecret(projectId)) return "project:[redacted]";
  return mayBeKey(projectId)
    ? `project:#${hash("sha256", projectId, "base64url")}`
    : `project:${projectId.slice(0, maxProjectIdLength)}`;
}

/**
 * The key an attempt in flight holds its slot on: the one its failure counts against once the
 * project is known to exist (address and project), the address while that is not known (or for the
 * admin API).
 */
function attemptKey(clientIp: string, projectId: string | undefined): string {
  const address = `ip:${addressBlock(clientIp)}`;
  return projectId === undefined ? address : `${address}:project:${projectId.slice(0, maxProjectIdLength)}`;
}

/**
 * Every key `keysToCount` may have blocked for this caller, but the id's own (`unknownIdKey`): that
 * one refuses only callers of an id found to name no project (`retryAfterMissing`), so failures
 * counted before a project was created under the id (or on an instance that had not seen it yet)
 * never refuse the project's callers.
 */
function keysToCheck(clientIp: string, projectId: string | undefined): string[] {
  const address = `ip:${addressBlock(clientIp)}`;
  if (projectId === undefined) return [address];
  return [address, `${address}:project:${projectId.slice(0, maxProjectIdLength)}`];
}

/**
 * Keys with an expiry, bounded: expired keys are dropped when met, the oldest when full, all at
 * once when the last one has expired, so that after an attack (or, with Redis, any failure) the
 * success path is a size check again instead of a lookup per request for good, and by the caller's
 * sweep (`dropExpired`).
 *
 * The expiries are moments on the wall clock (`Date.now`), which a host may step back (NTP, a VM
 * resumed): with `longestMs`, an expiry found further ahead than that is brought back to
 * `longestMs` from then, so a key is held (a client blocked) for at most a window, as its
 * Retry-After says, never for as long as the clock went back.
 */
export class ExpiringKeys {
  private readonly until = new Map<string, { expiresAt: number; count: number }>();
  /** The latest expiry of any key held: once it has passed, every key has. */
  private latest = 0;

  constructor(
    private readonly max: number,
    private readonly longestMs = Number.POSITIVE_INFINITY,
  ) {}

  get size(): number {
    return this.until.size;
  }

  /** True when no key is live at `now`; forgets every key once the last one expired. */
  empty(now: number): boolean {
    if (this.latest - now > this.longestMs) this.shorten(now);
    if (this.until.size > 0 && now >= this.latest) this.until.clear();
    return this.until.size === 0;
  }

  /** Holds `key` until `expiresAt`, with a number that goes with it (`count`). */
  add(key: string, expiresAt: number, count = 0): void {
    this.until.delete(key);
    if (this.until.size >= this.max) this.evict(Date.now());
    this.until.set(key, { expiresAt, count });
    if (expiresAt > this.latest) this.latest = expiresAt;
  }

  /** Drops every key expired at `now`. */
  dropExpired(now: number): void {
    if (this.latest - now > this.longestMs) this.shorten(now);
    for (const [key, entry] of this.until) if (entry.expiresAt <= now) this.until.delete(key);
  }

  /** Whole seconds until `key` expires; 0 when it is unknown or expired. */
  secondsLeft(key: string, now: number): number {
    const entry = this.live(key, now);
    return entry ? Math.ceil((entry.expiresAt - now) / 1000) : 0;
  }

  /** The number `key` was last added with; 0 when it is unknown or expired. */
  count(key: string, now: number): number {
    return this.live(key, now)?.count ?? 0;
  }

  private live(key: string, now: number): { expiresAt: number; count: number } | undefined {
    const entry = this.until.get(key);
    if (entry === undefined) return undefined;
    if (entry.expiresAt - now > this.longestMs) this.shorten(now);
    if (entry.expiresAt <= now) {
      this.until.delete(key);
      return undefined;
    }
    return entry;
  }

  /** The clock went back: every expiry further than `longestMs` ahead of `now` is brought back to it. */
  private shorten(now: number): void {
    const longest = now + this.longestMs;
    let latest = 0;
    for (const entry of this.until.values()) {
      if (entry.expiresAt > longest) entry.expiresAt = longest;
      if (entry.expiresAt > latest) latest = entry.expiresAt;
    }
    this.latest = latest;
  }

  private evict(now: number): void {
    for (const [key, entry] of this.until) {
      if (entry.expiresAt > now && this.until.size < this.max) return;
      this.until.delete(key);
    }
  }
}
