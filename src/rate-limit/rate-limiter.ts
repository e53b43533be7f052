import type { Redis } from "ioredis";
import { RateLimiterMemory, RateLimiterRedis, RateLimiterRes } from "rate-limiter-flexible";

export interface RateLimitDecision {
  allowed: boolean;
  limit: number;
  remaining: number;
  /** Seconds until the window resets. */
  resetSeconds: number;
  /** Which limit, e.g. "project". */
  name: string;
  windowSeconds: number;
}

export interface RateLimiter {
  /** Consumes one request from `key` under a limit of `limit` per `windowSeconds` (60 by default). Never throws. */
  consume(name: string, key: string, limit: number, windowSeconds?: number): Promise<RateLimitDecision>;
  readonly backend: "memory" | "redis";
  /** True while Redis fails and limits run per instance. */
  degraded(): boolean;
  close(): Promise<void>;
}

export interface RateLimiterOptions {
  redis?: Redis | undefined;
  keyPrefix?: string;
  onFallback?: (on: boolean) => void;
  onDecision?: (name: string, allowed: boolean) => void;
}

type Limiter = RateLimiterMemory | RateLimiterRedis;

/** How long after the last fallback use the limiter still reports itself degraded. */
const fallbackMemoryMs = 5000;
const maxLimiters = 10_000;

/**
 * Rate limits on rate-limiter-flexible: in memory by default, in Redis when a client is given so
 * the limit holds across instances. Each Redis limiter has an in-memory insurance limiter of the
 * same size: when Redis fails, limits fall back to per-instance limits, never to unlimited.
 * Limits differ per project, so one limiter is kept per (name, limit, window).
 */
export function createRateLimiter(options: RateLimiterOptions = {}): RateLimiter {
  const prefix = options.keyPrefix ?? "sluice:rl";
  const limiters = new Map<string, Limiter>();
  let lastFallbackAt = 0;
  let reportedDegraded = false;

  const markFallback = () => {
    lastFallbackAt = Date.now();
    if (!reportedDegraded) {
      reportedDegraded = true;
      options.onFallback?.(true);
    }
  };
  const checkRecovered = () => {
    if (reportedDegraded && Date.now() - lastFallbackAt > fallbackMemoryMs) {
      reportedDegraded = false;
      options.onFallback?.(false);
    }
  };

  function limiterFor(name: string, limit: number, windowSeconds: number): Limiter {
    const id = `${name}:${limit}:${windowSeconds}`;
    let limiter = limiters.get(id);
    if (!limiter) {
      if (limiters.size >= maxLimiters) limiters.clear();
      const keyPrefix = `${prefix}:${id}`;
      limiter = options.redis
        ? new RateLimiterRedis({
            storeClient: options.redis,
            points: limit,
            duration: windowSeconds,
            keyPrefix,
            rejectIfRedisNotReady: true,
            insuranceLimiter: new FallbackLimiter(
              { points: limit, duration: windowSeconds, keyPrefix },
              markFallback,
            ),
          })
        : new RateLimiterMemory({ points: limit, duration: windowSeconds, keyPrefix });
      limiters.set(id, limiter);
    }
    return limiter;
  }

  return {
    backend: options.redis ? "redis" : "memory",
    degraded: () => reportedDegraded && Date.now() - lastFallbackAt <= fallbackMemoryMs,
    async consume(name, key, limit, windowSeconds = 60) {
      const limiter = limiterFor(name, limit, windowSeconds);
      let decision: RateLimitDecision;
      try {
        decision = toDecision(name, limit, windowSeconds, await limiter.consume(key), true);
      } catch (outcome) {
        if (outcome instanceof RateLimiterRes)
          decision = toDecision(name, limit, windowSeconds, outcome, false);
        else {
          // Both stores failed: judge on this instance alone rather than letting the request through unlimited.
          markFallback();
          const local = limiterFor(`${name}-local`, limit, windowSeconds);
          decision = await local.consume(key).then(
            (result) => toDecision(name, limit, windowSeconds, result, true),
            (result: RateLimiterRes) => toDecision(name, limit, windowSeconds, result, false),
          );
        }
      }
      checkRecovered();
      options.onDecision?.(name, decision.allowed);
      return decision;
    },
    async close() {
      limiters.clear();
    },
  };
}

class FallbackLimiter extends RateLimiterMemory {
  constructor(
    options: ConstructorParameters<typeof RateLimiterMemory>[0],
    private readonly onUse: () => void,
  ) {
    super(options);
  }

  override consume(
    key: string | number,
    pointsToConsume?: number,
    options?: { [key: string]: unknown },
  ): Promise<RateLimiterRes> {
    this.onUse();
    return super.consume(key, pointsToConsume, options);
  }
}

function toDecision(
  name: string,
  limit: number,
  windowSeconds: number,
  result: RateLimiterRes,
  allowed: boolean,
): RateLimitDecision {
  return {
    allowed,
    limit,
    remaining: Math.max(0, result.remainingPoints),
    resetSeconds: Math.max(1, Math.ceil(result.msBeforeNext / 1000)),
    name,
    windowSeconds,
  };
}
