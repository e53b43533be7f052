import type { Redis } from "ioredis";

/**
 * A Redis client built to fail fast, as limits need (`ioredis` is loaded only when Redis is
 * configured):
 * - no offline queue: a command while disconnected fails at once and the insurance limiter answers;
 * - no retry of a command whose connection dropped (`maxRetriesPerRequest: 0`) and no replay of it
 *   after a reconnect: it fails at once, and a counter increment replayed later would count twice;
 * - short connect and command timeouts, so a Redis that hangs costs at most half a second;
 * - connects at once (`lazyConnect: false`) and reconnects forever with a capped backoff;
 * - an 'error' listener, so a lost Redis never crashes the process (ioredis emits 'error' on every
 *   failed reconnect, and an 'error' event without a listener would throw).
 */
export async function createRedisClient(
  url: string,
  options: { onError?: (error: Error) => void } = {},
): Promise<Redis> {
  const { Redis: RedisClient } = await import("ioredis");
  const client = new RedisClient(url, {
    lazyConnect: false,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
    connectTimeout: 1_000,
    commandTimeout: 500,
    retryStrategy: (attempt) => Math.min(100 * 2 ** attempt, 2_000),
  });
  client.on("error", (error: Error) => options.onError?.(error));
  return client;
}
