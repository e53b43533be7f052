import type { Redis } from "ioredis";

/**
 * A Redis client built to fail fast, as limits need: no offline queue (a command while
 * disconnected fails at once and the insurance limiter answers), one retry per request, short
 * connect and command timeouts, capped reconnect backoff, and an error listener so a lost Redis
 * never crashes the process. `ioredis` is loaded only when Redis is configured.
 */
export async function createRedisClient(url: string): Promise<Redis> {
  const { Redis: RedisClient } = await import("ioredis");
  const client = new RedisClient(url, {
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    connectTimeout: 1000,
    commandTimeout: 500,
    retryStrategy: (times) => Math.min(times * 200, 2000),
  });
  client.on("error", () => {});
  return client;
}
