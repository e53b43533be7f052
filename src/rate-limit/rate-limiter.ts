import type { Redis } from "ioredis";
import { RateLimiterMemory, RateLimiterRedis, RateLimiterRes } from "rate-limiter-flexible";
import { RedisBreaker } from "../redis/redis-breaker.js";
import { MemoryWindows } from "./memory-windows.js";

export interface RateLimitDecision {
  allowed: boolean;
  limit: number;
  remaining: number;
  /** Whole seconds until the window resets, 1..windowSeconds. */
  resetSeconds: number;
  /** Which limit, e.g. "project". */
  name: string;
  windowSeconds: number;
}

export interface RateLimiter {
  /**
   * Consumes one request from `key` under a limit of `limit` per `windowSeconds` (60 by default).
   * Never throws: a refusal is a decision, and a failing store falls back to per-instance counts.
   * In memory the decision is returned at once; a Redis decision is a promise.
   */
  consume(
    name: string,
    key: string,
    limit: number,
    windowSeconds?: number,
  ): RateLimitDecision | Promise<RateLimitDecision>;
  /**
   * Gives back the request an allowed `consume` of the same (name, key, limit, window) counted,
   * when another limit refused that request; nothing once the window ended. Never throws and is
   * not awaited: on Redis the count is corrected in the background.
   */
  refund(name: string, key: string, limit: number, windowSeconds?: number): void;
  /** "memory" or "redis"; `degraded()` says whether Redis is currently replaced by the per-instance fallback. */
  readonly backend: "memory" | "redis";
  degraded(): boolean;
  /** Forgets the limiters; the Redis client belongs to the caller and stays open. */
  close(): Promise<void>;
}

export interface RateLimiterOptions {
  /** A client built by `createRedisClient` (../redis/redis-client.ts), so that a lost Redis fails fast. */
  redis?: Redis | undefined;
  keyPrefix?: string;
  /** Called with true when Redis starts failing and limits run per instance, false when it answers again. */
  onFallback?: (on: boolean) => void;
  onDecision?: (name: string, allowed: boolean) => void;
  /** The client's shared health (see `RedisBreaker`); by default one of this limiter's own. */
  breaker?: RedisBreaker | undefined;
  /**
   * Without `breaker`: after Redis failed, how long decisions stay on this instance before one
   * request asks Redis again (ms, default 2000); a reconnect ends it at once.
   */
  redisRestMs?: number;
}

/** One Redis limit configuration and its per-instance memory twin. */
interface Policy {
  store: RateLimiterRedis;
  local: RateLimiterMemory;
}

type Outcome = { allowed: boolean; result: RateLimiterRes };

/**
 * Distinct (name, limit, window) Redis limiters kept at once; the least recently used goes first
 * (its counts stay in Redis). Far above the number of limit configurations a deployment has
 * (projects x limit kinds).
 */
const maxPolicies = 10_000;

/**
 * Fixed-window rate limits: in memory by default (`MemoryWindows`, decided synchronously), in
 * Redis through rate-limiter-flexible when a client is given, so a limit holds across instances.
 * In both, a count is kept per (name, window, key) and the limit is applied when deciding, so a
 * project whose limit changes keeps its count. Only admitted requests count: a refused request is
 * not counted (in memory) or given back at once (on Redis), and `refund` gives back what the other
 * limits of a refused request counted. On Redis, limits differ per project, so one
 * limiter is kept per (name, limit, window), created lazily.
 *
 * Redis mode: each limiter has an in-memory insurance limiter of the same size, so when Redis
 * fails a limit becomes a per-instance limit, never unlimited. Pass a client built by
 * `createRedisClient` (no offline queue, no command retry or replay, short connect and command
 * timeouts): a lost Redis then costs one immediate rejection, not a request waiting for a
 * reconnect.
 *
 * Fallback detection: every call hands the library a fresh options object, which the library
 * passes on unchanged to the insurance limiter when Redis fails; the insurance limiter records it,
 * so each decision knows whether Redis or the fallback made it. `onFallback(true)` fires on the
 * first fallback decision, `onFallback(false)` on the next decision Redis makes itself.
 *
 * A Redis that hangs instead of closing the connection makes each command wait for the client's
 * command timeout (500 ms) before the fallback decides. So after a failure the `RedisBreaker` rests
 * Redis: decisions stay on this instance, then one request probes Redis again.
 */
export function createRateLimiter(options: RateLimiterOptions = {}): RateLimiter {
  const redis = options.redis;
  if (!redis) return memoryRateLimiter(options);
  const client: Redis = redis;
  const prefix = options.keyPrefix ?? "sluice:rl";
  const policies = new Map<string, Policy>();
  const insured = new WeakSet<object>();
  let degraded = false;
  const breaker = options.breaker ?? new RedisBreaker(client, options.redisRestMs);

  function setDegraded(on: boolean): void {
    if (on === degraded) return;
    degraded = on;
    options.onFallback?.(on);
  }

  function policyFor(name: string, limit: number, windowSeconds: number): Policy {
    const id = `${name}:${limit}:${windowSeconds}`;
    const found = policies.get(id);
    if (found) {
      policies.delete(id);
      policies.set(id, found);
      return found;
    }
    if (policies.size >= maxPolicies) policies.delete(policies.keys().next().value as string);
    const created = redisPolicy(client, insured, `${prefix}:${name}:${windowSeconds}`, limit, windowSeconds);
    policies.set(id, created);
    return created;
  }

  /** Judges by Redis, noting whether Redis or its insurance answered. */
  async function fromStore(policy: Policy, key: string): Promise<Outcome> {
    const pass = breaker.enter();
    if (pass === "rest") {
      // Resting after a failure this limiter, or another user of the client, saw.
      setDegraded(true);
      return attempt(policy.local, key);
    }
    const call = {};
    let answered: boolean | undefined;
    try {
      const outcome = await attempt(policy.store, key, call);
      answered = !insured.has(call);
      setDegraded(!answered);
      return outcome;
    } catch (error) {
      answered = false;
      throw error;
    } finally {
      breaker.leave(pass, answered);
    }
  }

  /**
   * Gives back one request counted under `policy`: in Redis (only while the window's key exists, so
   * a window that just ended is not opened below zero), or on this instance while Redis rests or fails.
   */
  function giveBack(policy: Policy, key: string): void {
    const pass = breaker.enter();
    if (pass === "rest") return void giveBackHere(policy, key);
    client.eval(refundScript, 1, policy.store.getKey(key)).then(
      () => breaker.leave(pass, true),
      () => {
        breaker.leave(pass, false);
        void giveBackHere(policy, key);
      },
    );
  }

  async function decide(policy: Policy, key: string, windowSeconds: number): Promise<Outcome> {
    try {
      return await fromStore(policy, key);
    } catch {
      // Not a refusal: both stores failed. Judge on this instance alone, never unlimited.
      setDegraded(true);
      try {
        return await attempt(policy.local, key);
      } catch {
        // Unreachable with the normalised inputs; refusing is the only answer that is never unlimited.
        return { allowed: false, result: new RateLimiterRes(0, windowSeconds * 1000) };
      }
    }
  }

  return {
    backend: "redis",
    degraded: () => degraded,
    async consume(name, key, limit, windowSeconds = 60) {
      const quota = wholeNumber(limit, 0, 0);
      const window = wholeNumber(windowSeconds, 1, 60);
      const policy = policyFor(name, quota, window);
      const { allowed, result } = await decide(policy, key, window);
      // Counted although refused: given back.
      if (!allowed && result.consumedPoints > 0) giveBack(policy, key);
      const decision = toDecision(name, quota, window, allowed, result.remainingPoints, result.msBeforeNext);
      options.onDecision?.(name, decision.allowed);
      return decision;
    },
    refund(name, key, limit, windowSeconds = 60) {
      giveBack(policyFor(name, wholeNumber(limit, 0, 0), wholeNumber(windowSeconds, 1, 60)), key);
    },
    async close() {
      policies.clear();
    },
  };
}

/**
 * The in-memory backend: one counter per (name, window, key), decided without a promise. Counting
 * drops ended windows as it goes; a minute timer (unref'd) drops the rest, so the keys of a burst
 * (a scan from many addresses) are not held once traffic stops.
 */
function memoryRateLimiter(options: RateLimiterOptions): RateLimiter {
  const windows = new MemoryWindows();
  const sweeper = setInterval(() => windows.dropEnded(), 60_000);
  sweeper.unref();
  return {
    backend: "memory",
    degraded: () => false,
    consume(name, key, limit, windowSeconds = 60) {
      const quota = wholeNumber(limit, 0, 0);
      const window = wholeNumber(windowSeconds, 1, 60);
      const { count, msLeft } = windows.count(`${name}:${window}:${key}`, window * 1000, quota);
      const decision = toDecision(name, quota, window, count <= quota, quota - count, msLeft);
      options.onDecision?.(name, decision.allowed);
      return decision;
    },
    refund(name, key, _limit, windowSeconds = 60) {
      windows.uncount(`${name}:${wholeNumber(windowSeconds, 1, 60)}:${key}`);
    },
    async close() {
      clearInterval(sweeper);
      windows.clear();
    },
  };
}

/**
 * The Redis key leaves the limit out, so a project whose limit changes keeps its count, and
 * instances that briefly disagree about a limit still share one counter.
 */
function redisPolicy(
  client: Redis,
  insured: WeakSet<object>,
  keyPrefix: string,
  points: number,
  duration: number,
): Policy {
  const local = new InsuranceLimiter({ points, duration, keyPrefix }, insured);
  const store = new RateLimiterRedis({
    storeClient: client,
    points,
    duration,
    keyPrefix,
    // Not connected: go to the insurance limiter at once instead of sending a command.
    rejectIfRedisNotReady: true,
    // No in-memory block of keys over their limit: a count given back (a request another limit
    // refused) would not lift it, and one client's burst over its IP limit would lock its project
    // out on this instance until the window ended. Every decision asks Redis.
    insuranceLimiter: local,
  });
  return { store, local };
}

/** Decrements a window's count in Redis while its key exists (and holds a count to give back). */
const refundScript = `local count = tonumber(redis.call('get', KEYS[1]))
if count and count > 0 then return redis.call('decr', KEYS[1]) end
return 0`;

/** Gives back one request the per-instance fallback counted, if its window there is still open; never rejects. */
async function giveBackHere(policy: Policy, key: string): Promise<void> {
  try {
    const counted = await policy.local.get(key);
    if (counted && counted.consumedPoints > 0) await policy.local.reward(key, 1);
  } catch {
    // A memory limiter does not fail; nothing else is worth doing for one request's count.
  }
}

/** The per-instance fallback: an ordinary memory limiter that records which calls reached it. */
class InsuranceLimiter extends RateLimiterMemory {
  constructor(
    options: ConstructorParameters<typeof RateLimiterMemory>[0],
    private readonly calls: WeakSet<object>,
  ) {
    super(options);
  }

  override consume(
    key: string | number,
    pointsToConsume?: number,
    options?: { [key: string]: unknown },
  ): Promise<RateLimiterRes> {
    if (options) this.calls.add(options);
    return super.consume(key, pointsToConsume, options);
  }
}

/** rate-limiter-flexible rejects with a RateLimiterRes when limited: that is a decision, not an error. */
async function attempt(
  limiter: RateLimiterMemory | RateLimiterRedis,
  key: string,
  call: object = {},
): Promise<Outcome> {
  try {
    return { allowed: true, result: await limiter.consume(key, 1, call) };
  } catch (error) {
    if (error instanceof RateLimiterRes) return { allowed: false, result: error };
    throw error;
  }
}

function toDecision(
  name: string,
  limit: number,
  windowSeconds: number,
  allowed: boolean,
  remaining: number,
  msLeft: number,
): RateLimitDecision {
  const reset = Math.ceil(msLeft / 1000);
  return {
    allowed,
    limit,
    remaining: allowed ? Math.max(0, Math.min(limit, remaining)) : 0,
    resetSeconds: Math.min(windowSeconds, Math.max(1, Number.isFinite(reset) ? reset : windowSeconds)),
    name,
    windowSeconds,
  };
}

/** Limits and windows are whole numbers (the headers carry integers); nonsense becomes `fallback`. */
function wholeNumber(value: number, min: number, fallback: number): number {
  return Number.isFinite(value) ? Math.max(min, Math.floor(value)) : fallback;
}
