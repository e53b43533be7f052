import type { Redis } from "ioredis";
import { ConfigError } from "../config.js";
import type { Logger } from "../observability/logger.js";
import { checkEvictionPolicy } from "./eviction-policy.js";
import { createRedisClient, RedisSetupError } from "./redis-client.js";

/** Distinct client errors logged per outage; any more are not (the degraded gauge and /health say it). */
const maxLoggedErrors = 20;

/**
 * The Redis client of `REDIS_URL`, its errors logged (by message: an AUTH error carries the
 * command's arguments, the password among them), and a password Redis does not need logged as a
 * warning naming REDIS_URL (the client runs without it). A Redis that refuses the URL's user,
 * password or database, or answers a `rediss://` URL without TLS, stops the start as invalid
 * configuration does; one that is unreachable does not (the gateway starts degraded, on
 * per-instance limits, and connects when Redis comes). A command unanswered for `commandTimeoutMs`
 * (SLUICE_REDIS_COMMAND_TIMEOUT_MS) fails, and its connection is replaced. Each connection made
 * ready asks `INFO memory`, unawaited, and a Redis that may evict keys (a `maxmemory` with a policy
 * other than `noeviction`) is logged as a warning, once per policy (`checkEvictionPolicy`).
 */
export async function connectRedis(url: string, logger: Logger, commandTimeoutMs: number): Promise<Redis> {
  // ioredis reports every failed reconnect (every 2 s at most), with one message or several in
  // turn (a proxy that takes the connection and drops it: `write EPIPE`, then the command's): each
  // message is logged once until the connection is ready again, at most `maxLoggedErrors` of them.
  const logged = new Set<string>();
  let client: Redis;
  try {
    client = await createRedisClient(url, {
      commandTimeoutMs,
      onError(error) {
        if (logged.has(error.message) || logged.size >= maxLoggedErrors) return;
        logged.add(error.message);
        logger.warn({ setting: "REDIS_URL", redisError: error.message }, "Redis client error");
      },
      // An AUTH Redis did not need (or could not take) is said in the log, not on the console.
      onWarning: (message) => logger.warn({ setting: "REDIS_URL" }, message),
    });
  } catch (error) {
    if (error instanceof RedisSetupError)
      throw new ConfigError(`Invalid configuration:\n  REDIS_URL: ${error.message}`);
    throw error;
  }
  // Policies already warned of: a reconnect to the same Redis says nothing new.
  const warnedPolicies = new Set<string>();
  client.on("ready", () => {
    if (logged.size > 0) logger.info("Redis connection ready again");
    logged.clear();
    checkEvictionPolicy(client, logger, warnedPolicies);
  });
  // The first connection got ready before the listener above (or is not ready yet: it will say so).
  checkEvictionPolicy(client, logger, warnedPolicies);
  return client;
}
