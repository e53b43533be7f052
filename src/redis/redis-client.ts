import type { Redis } from "ioredis";

const connectTimeoutMs = 1_000;

/**
 * A Redis client built to fail fast, as limits need (`ioredis` is loaded only when Redis is
 * configured):
 * - no offline queue: a command while disconnected fails at once and the per-instance fallback answers;
 * - no retry of a command whose connection dropped (`maxRetriesPerRequest: 0`) and no replay of it
 *   after a reconnect: it fails at once, and a counter increment replayed later would count twice;
 * - short connect and command timeouts, so a Redis that hangs costs at most half a second;
 * - connects at once (`lazyConnect: false`) and reconnects forever with a capped backoff;
 * - an 'error' listener, so a lost Redis never crashes the process (ioredis emits 'error' on every
 *   failed reconnect, and an 'error' event without a listener would throw).
 *
 * Resolves once the first connection is ready, or failed, or after the connect timeout: without
 * an offline queue, commands sent while still connecting fail, so a gateway serving at once would
 * answer its first requests as if Redis were down (single-use device tokens refused with 503,
 * limits per instance). A Redis that is down still costs no wait beyond its first failure.
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
    connectTimeout: connectTimeoutMs,
    commandTimeout: 500,
    retryStrategy: (attempt) => Math.min(100 * 2 ** attempt, 2_000),
  });
  client.on("error", (error: Error) => options.onError?.(error));
  await firstConnection(client, connectTimeoutMs);
  return client;
}

function firstConnection(client: Redis, timeoutMs: number): Promise<void> {
  const events = ["ready", "error", "end"] as const;
  return new Promise((resolve) => {
    const settle = () => {
      clearTimeout(timer);
      for (const event of events) client.off(event, settle);
      resolve();
    };
    const timer = setTimeout(settle, timeoutMs);
    for (const event of events) client.once(event, settle);
  });
}
