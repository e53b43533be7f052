import type { Redis } from "ioredis";
import { ConfigError } from "../config.js";
import type { Logger } from "../observability/logger.js";
import { createRedisClient, RedisSetupError } from "./redis-client.js";

/**
 * The Redis client of `REDIS_URL`, its errors logged (by message: an AUTH error carries the
 * command's arguments, the password among them), and a password Redis does not need logged as a
 * warning naming REDIS_URL (the client runs without it). A Redis that refuses the URL's user, password or
 * database, or answers a `rediss://` URL without TLS, stops the start as invalid configuration does; one that is unreachable does not (the
 * gateway starts degraded, on per-instance limits, and connects when Redis comes).
 */
export async function connectRedis(url: string, logger: Logger): Promise<Redis> {
  // ioredis reports every failed reconnect; a message is logged when it changes, not every 2 s.
  let last = "";
  let client: Redis;
  try {
    client = await createRedisClient(url, {
      onError(error) {
        if (error.message === last) return;
        last = error.message;
        logger.warn({ redisError: error.message }, "Redis client error");
      },
      // An AUTH Redis did not need (or could not take) is said in the log, not on the console.
      onWarning: (message) => logger.warn({ setting: "REDIS_URL" }, message),
    });
  } catch (error) {
    if (error instanceof RedisSetupError)
      throw new ConfigError(`Invalid configuration:\n  REDIS_URL: ${error.message}`);
    throw error;
  }
  client.on("ready", () => {
    if (last !== "") logger.info("Redis connection ready again");
    last = "";
  });
  return client;
}
