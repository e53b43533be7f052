import { afterAll, describe, expect, it } from "vitest";
import { heldRedisReplies } from "./held-redis-replies.js";
// In CI (CI=true) an unreachable Redis makes this import throw, so the suite fails instead of skipping.
import { redisAvailable, redisTestSpace, redisUrl } from "./services.js";

const { nextPrefix, readyClient, cleanup } = redisTestSpace("held-redis-replies");
afterAll(cleanup);

describe.skipIf(!redisAvailable)("heldRedisReplies", () => {
  it("counts, from holdAfter, no round for a command the client sent before without waiting for it", async () => {
    const proxy = await heldRedisReplies(redisUrl);
    try {
      const client = await readyClient(proxy.url);
      const key = `${nextPrefix()}:k`;
      // An earlier call's write, not waited for (as the ZREM of a place given back at `finish`).
      void client.set(key, "1");
      await proxy.holdAfter(client);
      // One command, its answer held, then let go: one round.
      const got = client.get(key);
      await proxy.replied();
      proxy.release();
      expect(await got).toBe("1");
      proxy.pass();
      expect(proxy.rounds()).toBe(1);
    } finally {
      await proxy.close();
    }
  });
});
