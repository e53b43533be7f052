import { afterEach, describe, expect, it } from "vitest";
import { redisServerInstalled, startPrivateRedis } from "../../test/support/private-redis.js";
import { RedisBreaker } from "./redis-breaker.js";
import { createRedisClient } from "./redis-client.js";

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe.skipIf(!redisServerInstalled)("a Redis that hangs again and again", () => {
  it("is used again at the reconnect after each hang, however long the rest grew with the relapses", async () => {
    const server = await startPrivateRedis("--enable-debug-command", "local");
    closers.push(server.stop);
    const redis = await createRedisClient(server.url, { commandTimeoutMs: 100 });
    closers.push(async () => redis.disconnect());
    // Another client, which makes the server hang (DEBUG SLEEP blocks all of Redis) and waits it out.
    const admin = await createRedisClient(server.url, { commandTimeoutMs: 10_000 });
    closers.push(async () => admin.disconnect());
    // Rests 200 ms, doubled at each relapse: 200, 400, 800, 1,600, then 3,200 ms.
    const breaker = new RedisBreaker(redis, 200);
    closers.push(async () => breaker.close());
    const around = () => "around";
    expect(await breaker.run(() => redis.get("k"), around)).toBeNull();
    const backAfter: number[] = [];
    for (let hang = 0; hang < 5; hang++) {
      const hanging = admin.call("DEBUG", "SLEEP", "0.4");
      await expect(breaker.run(() => redis.get("k"), around)).rejects.toThrow("timed out");
      expect(breaker.resting).toBe(true);
      await hanging;
      const awake = performance.now();
      while (breaker.resting && performance.now() - awake < 5_000) await sleep(5);
      backAfter.push(performance.now() - awake);
    }
    // Each hang replaced the connection (its command timed out), and the new one's `ready` sent the
    // probe at once: the rest (3.2 s by the fifth hang) never kept a Redis that answers unused.
    expect(Math.max(...backAfter)).toBeLessThan(1_500);
    expect(await breaker.run(() => redis.get("k"), around)).toBeNull();
  }, 15_000);
});
