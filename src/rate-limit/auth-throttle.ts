import type { Redis } from "ioredis";
import type { AuthThrottle } from "../auth/authenticate.js";
import { createRateLimiter } from "./rate-limiter.js";

/**
 * Counts failed authentications per client IP and, for project ids that do not exist, per
 * project id; once a key reached `failuresPerMinute` within the window, it is refused (429) until
 * the window ends, before any Apple or provider call.
 *
 * Trade-off: the success path must not pay a Redis round trip, so `retryAfter` only reads a local
 * map. Failures are counted in the shared store (Redis when configured): a caller spreading
 * failures over several instances is blocked on each instance at its first failure there after
 * the shared count reached the limit.
 */
export function createAuthThrottle(options: {
  redis?: Redis | undefined;
  failuresPerMinute: number;
  keyPrefix?: string;
}): AuthThrottle {
  const windowSeconds = 60;
  const limiter = createRateLimiter({ redis: options.redis, keyPrefix: options.keyPrefix ?? "sluice:auth" });
  const blockedUntil = new Map<string, number>();

  function wait(key: string, now: number): number {
    const until = blockedUntil.get(key);
    if (until === undefined) return 0;
    if (until <= now) {
      blockedUntil.delete(key);
      return 0;
    }
    return Math.ceil((until - now) / 1000);
  }

  return {
    async retryAfter(clientIp, projectId) {
      if (blockedUntil.size === 0) return 0;
      const now = Date.now();
      return Math.max(wait(`ip:${clientIp}`, now), projectId ? wait(`project:${projectId}`, now) : 0);
    },
    async recordFailure(clientIp, projectId, projectExists) {
      const keys = [`ip:${clientIp}`, ...(projectId && !projectExists ? [`project:${projectId}`] : [])];
      for (const key of keys) {
        const decision = await limiter.consume(
          "auth-failures",
          key,
          options.failuresPerMinute,
          windowSeconds,
        );
        if (!decision.allowed || decision.remaining === 0) {
          if (blockedUntil.size > 100_000) blockedUntil.clear();
          blockedUntil.set(key, Date.now() + decision.resetSeconds * 1000);
        }
      }
    },
  };
}
