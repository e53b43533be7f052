import type { Redis } from "ioredis";
import { afterEach, describe, expect, it } from "vitest";
// In CI (CI=true) an unreachable Redis makes this import throw, so the suite fails instead of skipping.
import { redisAvailable, redisUrl } from "../../test/support/services.js";
import { createRedisClient } from "./redis-client.js";

describe("createRedisClient's first connection", () => {
  const made: Redis[] = [];
  afterEach(() => {
    for (const client of made.splice(0)) client.disconnect();
  });

  it.skipIf(!redisAvailable)(
    "answers commands as soon as it is built (no offline queue to hide a connect)",
    async () => {
      const client = await createRedisClient(redisUrl);
      made.push(client);
      expect(client.status).toBe("ready");
      expect(await client.ping()).toBe("PONG");
    },
  );

  it("does not wait for a Redis that refuses connections", async () => {
    const started = performance.now();
    const client = await createRedisClient("redis://127.0.0.1:1");
    made.push(client);
    expect(performance.now() - started).toBeLessThan(900);
    await expect(client.ping()).rejects.toThrow();
  });
});
