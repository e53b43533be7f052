import { afterEach, describe, expect, it } from "vitest";
import { redisServerInstalled, startPrivateRedis } from "../../test/support/private-redis.js";
import { createRedisDeviceTokenLedger } from "../auth/device-token-cache.js";
import { createAuthThrottle } from "../rate-limit/auth-throttle.js";
import { createRateLimiter } from "../rate-limit/rate-limiter.js";
import { RedisBreaker } from "./redis-breaker.js";
import { createRedisClient } from "./redis-client.js";

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

/** Every user of one client, as the gateway builds them (one breaker), on a Redis of the test's own. */
async function usersOfOneRedis() {
  const server = await startPrivateRedis();
  closers.push(server.stop);
  const redis = await createRedisClient(server.url);
  closers.push(async () => redis.disconnect());
  const breaker = new RedisBreaker(redis);
  const limiter = createRateLimiter({ redis, breaker });
  const throttle = createAuthThrottle({ redis, breaker, failuresPerMinute: 100 });
  closers.push(async () => throttle.stop());
  const ledger = createRedisDeviceTokenLedger({ redis, breaker });
  let uses = 0;
  /** One use of each, and whether Redis decided it (a fresh key each time, so its count is 1). */
  async function allInRedis(): Promise<boolean> {
    uses++;
    const [decision] = await limiter.consumeAll([{ name: "project", key: `p${uses}`, limit: 5 }]);
    await throttle.recordFailure("192.0.2.1", `p${uses}`, true);
    const remembered = await ledger
      .remember("p", `digest-${uses}`, { mode: "single-use", retentionMs: 60_000 })
      .catch(() => "failed");
    return (
      decision?.remaining === 4 &&
      !limiter.degraded() &&
      remembered === "accepted" &&
      (await redis.get(`sluice:auth:ip:192.0.2.1:project:p${uses}`).catch(() => null)) === "1"
    );
  }
  return { server, redis, allInRedis };
}

describe.skipIf(!redisServerInstalled)("a Redis that lost its scripts", () => {
  it("by SCRIPT FLUSH: the limits, the throttle and the device token ledger send them again, nothing falling back", async () => {
    const { redis, allInRedis } = await usersOfOneRedis();
    expect(await allInRedis()).toBe(true);
    await redis.script("FLUSH");
    expect(await allInRedis()).toBe(true);
  });

  it("by a restart: all of them use Redis again within seconds, without a restart of their own", async () => {
    const { server, allInRedis } = await usersOfOneRedis();
    expect(await allInRedis()).toBe(true);
    await server.restart();
    const deadline = Date.now() + 5_000;
    let back = false;
    while (!back && Date.now() < deadline) {
      back = await allInRedis();
      if (!back) await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(back).toBe(true);
  });
});
