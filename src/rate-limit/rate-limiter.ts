import type { Redis } from "ioredis";
import { RedisBreaker } from "../redis/redis-breaker.js";
import { redisKeyPrefixes } from "../redis/redis-keys.js";
import { failureReason, luaNotSluiceCount, RedisScript, type ScriptPart } from "../redis/redis-script.js";
import { MemoryWindows } from "./memory-windows.js";

export interface RateLimitDecision {
  /** Whether this limit had room for the request (the request is admitted only if every limit had). */
  allowed: boolean;
  limit: number;
  /** Requests this limit still admits in its window (0 when it refused). */
  remaining: number;
  /** Whole seconds until the window resets, 1..windowSeconds. */
  resetSeconds: number;
  /** Which limit, e.g. "project". */
  name: string;
  windowSeconds: number;
}

/** One limit a request is held to. */
export interface LimitRequest {
  /** Which limit, e.g. "project": each limit of a request has a name of its own. */
  name: string;
  /** Whose count, e.g. a project id. */
  key: string;
  /** Requests allowed per window; 0 refuses every request. */
  limit: number;
  /** 60 by default. */
  windowSeconds?: number;
}

export interface RateLimiter {
  /**
   * Decides one request under all of its limits together: it is admitted only if every limit has
   * room, and then counted in every window; a request any limit refuses is counted in none, so it
   * never shows in another limit's count, not even for a moment. Returns one decision per limit,
   * in the order given. Never throws: a refusal is a decision, and a failing store falls back to
   * per-instance counts. In memory the decisions are returned at once; on Redis they are a
   * promise (one script, one round trip).
   */
  consumeAll(requests: readonly LimitRequest[]): RateLimitDecision[] | Promise<RateLimitDecision[]>;
  /**
   * On Redis: the limits of `requests` as the part of another script (`LimitsInScript`), decided
   * and counted there as `consumeAll` would, in the same round trip as what that script decides
   * first (a capped project's place among its calls in flight, a device token's ledger lookup).
   * None in memory. A script that fails, or does not come to the limits, decides nothing:
   * `consumeAll` then decides as usual (after a failure the shared breaker rests Redis).
   */
  inScript?(requests: readonly LimitRequest[]): LimitsInScript;
  /** "memory" or "redis"; `degraded()` says whether Redis is currently replaced by the per-instance fallback. */
  readonly backend: "memory" | "redis";
  degraded(): boolean;
  /** Stops the memory sweeper; the Redis client belongs to the caller and stays open. */
  close(): Promise<void>;
}

/**
 * A request's limits in another Lua script (a `ScriptPart`): `luaConsumeLimits(keyOffset,
 * argOffset)` run over KEYS after its first `keyOffset` and ARGV after its first `argOffset`, given
 * `keys` and `args`; the script's reply from the limits' part on goes to `decide`, which reports them
 * (decisions, repaired keys, Redis answering) as `consumeAll` does.
 */
export interface LimitsInScript extends ScriptPart<RateLimitDecision[]> {
  args: number[];
}

export interface RateLimiterOptions {
  /** A client built by `createRedisClient` (../redis/redis-client.ts), so that a lost Redis fails fast. */
  redis?: Redis | undefined;
  /** What every Redis key begins with; `sluice:rl` by default (see `redisKeyPrefixes`). */
  keyPrefix?: string;
  /**
   * Called with true when Redis starts failing and limits run per instance, false when it takes
   * writes again (the breaker's write probe succeeded, `RedisBreaker`), in both cases without
   * waiting for a decision: a failure any user of the breaker saw (the authentication throttle, the
   * device token ledger) rests Redis for the limits too, and is reported at once. With true, `error`
   * is what that call failed with (a reply error, such as OOM or READONLY, when Redis answered);
   * none when the limits found Redis resting without having heard of the failure. Called with true
   * again, the limits still per instance, for a failure (a call's, or the breaker's write probe's
   * reply) whose reason differs from the last one reported: Redis full, then refusing Sluice's keys
   * after a stricter ACL. A key's data error (`isKeyDataError`) is no failure of Redis.
   */
  onFallback?: (on: boolean, error?: Error) => void;
  /**
   * Called with the Redis key of a window that held what Sluice never writes there (a key of another
   * type, a string that is no count), written by another program inside the key prefix: the script
   * replaced it with a fresh count (the request is counted there as in a new window). Once per
   * repair, so once per key another program wrote. Redis is not taken for down.
   */
  onKeyRepaired?: (key: string) => void;
  /** Called once per limit of every request, with that limit's own decision. */
  onDecision?: (name: string, allowed: boolean) => void;
  /** The client's shared health (see `RedisBreaker`); by default one of this limiter's own. */
  breaker?: RedisBreaker | undefined;
  /**
   * Without `breaker`: after Redis failed, how often the breaker's write probe asks Redis whether it
   * takes writes again (ms, default 2000); a reconnect sends one at once. Decisions stay here until then.
   */
  redisRestMs?: number;
}

/**
 * Fixed-window rate limits, all the limits of a request decided together: in memory by default
 * (`MemoryWindows`, decided synchronously), in Redis when a client is given, so a limit holds
 * across instances. A window opens at a key's first counted request. In both, a count is kept per
 * (name, window, key) and the limit is applied when deciding, so a project whose limit changes
 * keeps its count. Only admitted requests count: the limits are checked first and counted only if
 * all of them have room, in memory within one synchronous call, on Redis within one Lua script
 * (atomic on the server), so no other request, on this instance or another, sees a count that a
 * refused request added and must give back.
 *
 * Redis mode: when Redis fails, the limits are decided by this instance's memory limiter instead,
 * so a limit becomes a per-instance limit, never unlimited. Pass a client built by
 * `createRedisClient` (no offline queue, no command retry or replay, short connect and command
 * timeouts): a lost Redis then costs one immediate rejection, not a request waiting for a
 * reconnect. `onFallback(true)` fires as soon as any user of the breaker sees Redis fail (or on the
 * first decision made here), `onFallback(false)` as soon as Redis takes writes again (the breaker's
 * write probe succeeded), not when a call that writes nothing (a refusal) had an answer. A key another
 * program wrote inside the prefix (another type, a string that is no count) is no outage: the
 * script replaces it with a fresh count and `onKeyRepaired` names it.
 *
 * A Redis that hangs instead of closing the connection makes each command wait for the client's
 * command timeout (SLUICE_REDIS_COMMAND_TIMEOUT_MS) before the fallback decides. So after a failure the `RedisBreaker` rests
 * Redis: decisions stay on this instance until the breaker's write probe succeeds.
 */
export function createRateLimiter(options: RateLimiterOptions = {}): RateLimiter {
  const here = memoryRateLimiter(options);
  return options.redis ? redisRateLimiter(options.redis, here, options) : here;
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
    consumeAll(requests) {
      const now = windows.clock();
      // First every limit is checked, then, if all have room, each is counted.
      const keys: string[] = [];
      let admitted = true;
      for (const request of requests) {
        const key = windowKey(request);
        keys.push(key);
        if ((windows.find(key, now)?.count ?? 0) >= limitOf(request)) admitted = false;
      }
      const decisions: RateLimitDecision[] = [];
      for (let index = 0; index < requests.length; index++) {
        const request = requests[index] as LimitRequest;
        const key = keys[index] as string;
        const windowMs = windowOf(request) * 1000;
        const window = admitted ? windows.add(key, windowMs, now) : windows.find(key, now);
        const decision = toDecision(
          request,
          admitted,
          window?.count ?? 0,
          window ? window.endsAt - now : windowMs,
        );
        options.onDecision?.(decision.name, decision.allowed);
        decisions.push(decision);
      }
      return decisions;
    },
    async close() {
      clearInterval(sweeper);
      windows.clear();
    },
  };
}

/**
 * The Redis backend: one Lua script decides and counts all the limits of a request. The Redis key
 * of a window leaves the limit out, so a project whose limit changes keeps its count, and
 * instances that briefly disagree about a limit still share one counter. `here` decides while
 * Redis fails or rests.
 */
function redisRateLimiter(client: Redis, here: RateLimiter, options: RateLimiterOptions): RateLimiter {
  const prefix = options.keyPrefix ?? redisKeyPrefixes().rateLimits;
  const breaker = options.breaker ?? new RedisBreaker(client, options.redisRestMs);
  let degraded = false;
  /** What the last failure reported failed with (`failureReason`), while degraded. */
  let failure: string | undefined;

  function setDegraded(on: boolean, error?: Error): void {
    // Already per instance: reported again only for a failure of another kind than the last one
    // (OOM, then NOPERM after a stricter ACL), so the log can name the new reason.
    if (on === degraded && !(on && error && failureReason(error) !== failure)) return;
    degraded = on;
    failure = on && error ? failureReason(error) : undefined;
    options.onFallback?.(on, error);
  }
  // Redis takes writes again (the breaker's probe): the next decision is Redis's.
  breaker.onRecovered(() => setDegraded(false));
  // Another user (the throttle, the ledger) saw Redis fail: it rests, so decisions are made here.
  breaker.onFailed((error) => setDegraded(true, error));

  const redisKeys = (requests: readonly LimitRequest[]) =>
    requests.map((request) => `${prefix}:${windowKey(request)}`);
  /** consumeScript's ARGV (`luaConsumeLimits`): each limit, then its window in ms. */
  function redisArgs(requests: readonly LimitRequest[]): number[] {
    const args: number[] = [];
    for (const request of requests) args.push(limitOf(request), windowOf(request) * 1000);
    return args;
  }

  /**
   * Decisions Redis made, each counted; the fallback ends with them unless Redis rests: a decision
   * heard after another call's failure (sent before it) may have written nothing, as a refusal
   * writes nothing, and a Redis that refuses writes answers it all the same. The breaker's probe
   * ends the rest (`onRecovered`).
   */
  function reported(decisions: RateLimitDecision[]): RateLimitDecision[] {
    if (!breaker.resting) setDegraded(false);
    for (const decision of decisions) options.onDecision?.(decision.name, decision.allowed);
    return decisions;
  }

  /** The decisions Redis made, or what kept it from making them: its error, or none while it rests. */
  async function fromRedis(
    requests: readonly LimitRequest[],
  ): Promise<RateLimitDecision[] | { error: Error | undefined }> {
    const pass = breaker.enter();
    if (pass === "rest") return { error: undefined };
    const keys = redisKeys(requests);
    let reply: number[];
    try {
      // The reply of consumeScript: admitted (1 or 0), then each limit's count and window ms left,
      // then the numbers (from 1) of the keys it repaired.
      reply = (await consumeScript.run(client, keys, redisArgs(requests))) as number[];
    } catch (error) {
      // Not connected (the client fails at once), a timeout, or an error reply.
      breaker.leave(pass, false, error);
      return { error: error instanceof Error ? error : undefined };
    }
    breaker.leave(pass, true);
    return decisionsOf(requests, keys, reply);
  }

  /** The decisions of consumeScript's reply (`luaConsumeLimits`), the keys it repaired named. */
  function decisionsOf(
    requests: readonly LimitRequest[],
    keys: readonly string[],
    reply: readonly number[],
  ): RateLimitDecision[] {
    for (const repaired of reply.slice(1 + 2 * requests.length))
      options.onKeyRepaired?.(keys[repaired - 1] as string);
    const admitted = reply[0] === 1;
    return requests.map((request, index) => {
      const msLeft = reply[2 + 2 * index] ?? -1;
      return toDecision(
        request,
        admitted,
        reply[1 + 2 * index] ?? 0,
        // No open window (a refused request opens none): a whole window lies ahead.
        msLeft >= 0 ? msLeft : windowOf(request) * 1000,
      );
    });
  }

  return {
    backend: "redis",
    degraded: () => degraded,
    inScript(requests) {
      const keys = redisKeys(requests);
      return {
        lua: luaConsumeLimits,
        keys,
        args: redisArgs(requests),
        decide: (reply) => reported(decisionsOf(requests, keys, reply)),
      };
    },
    async consumeAll(requests) {
      const decisions = await fromRedis(requests);
      if (!Array.isArray(decisions)) {
        setDegraded(true, decisions.error);
        // Not a refusal: Redis did not decide. Judged on this instance alone, never unlimited.
        return here.consumeAll(requests);
      }
      return reported(decisions);
    },
    close: () => here.close(),
  };
}

/**
 * KEYS[i] counts limit i's window; ARGV[2i - 1] is that limit, ARGV[2i] its window length (ms).
 * Admits the request only if every count is below its limit, and then counts it in every window
 * (a window opens, with its expiry, at its first counted request); a refused request changes no
 * count. Replies {admitted (1 or 0), count 1, ms left 1, count 2, ms left 2, ...}, the counts
 * after this request; ms left is negative for a window that is not open; then the number i of
 * each key repaired.
 *
 * Repairs what Sluice never writes but a restore, a manual SET or another program may: a key
 * without expiry, or whose expiry lies further ahead than its window (Redis's clock stepped back
 * keeps the expiry's moment), is given its window's (refused or not, so a count at its limit never
 * refuses for good, nor for longer than the `Retry-After` it reports, at most the window); a key of
 * another type, or a string that is not a count (digits), is deleted before anything is counted, so
 * its window opens afresh (a WRONGTYPE or INCR error would fail every request on it, and a failure
 * after another key's INCR would leave that count behind).
 */
const consumeScript = new RedisScript(`
${luaConsumeLimits(0, 0)}
return reply`);

/**
 * Lua: consumeScript's decision over KEYS after the first `keyOffset` and ARGV after the first
 * `argOffset` (limit i's key at KEYS[keyOffset + i], its limit and window at ARGV[argOffset + 2i - 1]
 * and ARGV[argOffset + 2i]), for another script to run in the same round trip: leaves `admitted`
 * (1 or 0) and `reply`, consumeScript's reply.
 */
export function luaConsumeLimits(keyOffset: number, argOffset: number): string {
  return `local limitKeys = {}
for i = ${keyOffset + 1}, #KEYS do limitKeys[#limitKeys + 1] = KEYS[i] end
local counts = {}
local limitsRepaired = {}
local admitted = 1
for i, key in ipairs(limitKeys) do
  local value = redis.pcall("GET", key)
  if ${luaNotSluiceCount} then
    redis.call("DEL", key)
    limitsRepaired[#limitsRepaired + 1] = i
    value = false
  end
  counts[i] = tonumber(value) or 0
  if counts[i] >= tonumber(ARGV[${argOffset} + 2 * i - 1]) then admitted = 0 end
end
local reply = {admitted}
for i, key in ipairs(limitKeys) do
  if admitted == 1 then counts[i] = redis.call("INCR", key) end
  local ttl = redis.call("PTTL", key)
  local windowMs = tonumber(ARGV[${argOffset} + 2 * i])
  if ttl == -1 or ttl > windowMs then
    ttl = windowMs
    redis.call("PEXPIRE", key, ttl)
  end
  reply[2 * i] = counts[i]
  reply[2 * i + 1] = ttl
end
for _, i in ipairs(limitsRepaired) do reply[#reply + 1] = i end`;
}

/** One limit's decision, from whether the request was admitted and the count of its window. */
function toDecision(
  request: LimitRequest,
  admitted: boolean,
  count: number,
  msLeft: number,
): RateLimitDecision {
  const limit = limitOf(request);
  const windowSeconds = windowOf(request);
  // A limit that had room for a request another limit refused says so; the request was not counted.
  const allowed = admitted || count < limit;
  const reset = Math.ceil(msLeft / 1000);
  return {
    allowed,
    limit,
    remaining: allowed ? Math.max(0, Math.min(limit, limit - count)) : 0,
    resetSeconds: Math.min(windowSeconds, Math.max(1, Number.isFinite(reset) ? reset : windowSeconds)),
    name: request.name,
    windowSeconds,
  };
}

/** Limits are whole numbers (the headers carry integers); nonsense becomes 0, which refuses. */
function limitOf(request: LimitRequest): number {
  return wholeNumber(request.limit, 0, 0);
}

/**
 * The count a limit is kept under, in memory and (after the key prefix) in Redis: per name, window
 * and key, without the limit, so a limit that changes keeps its count.
 */
function windowKey(request: LimitRequest): string {
  return `${request.name}:${windowOf(request)}:${request.key}`;
}

/** Windows are whole seconds, at least 1; 60 when not given (or nonsense). */
function windowOf(request: LimitRequest): number {
  return wholeNumber(request.windowSeconds ?? 60, 1, 60);
}

function wholeNumber(value: number, min: number, fallback: number): number {
  return Number.isFinite(value) ? Math.max(min, Math.floor(value)) : fallback;
}
