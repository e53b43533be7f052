import { describe, expect, it } from "vitest";
import { redisServerInstalled, startPrivateRedis } from "../support/private-redis.js";
import { logLinesOf, startTestGateway, type TestGateway } from "../support/test-gateway.js";

const evictionWarnings = (sluice: TestGateway) =>
  logLinesOf(sluice).filter((line) => line.level === "warn" && String(line.msg).includes("maxmemory-policy"));

/**
 * A Redis with a memory limit and a policy that evicts drops Sluice's keys (every one has an
 * expiry) when full: the gateway says so once it connects, and says nothing of one under noeviction.
 */
describe.skipIf(!redisServerInstalled)("a Redis that may evict Sluice's keys", () => {
  it("is named in one warning as the gateway starts, and one under noeviction in none", async () => {
    const evicting = await startPrivateRedis("--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru");
    const refusing = await startPrivateRedis("--maxmemory", "64mb", "--maxmemory-policy", "noeviction");
    const gateways: TestGateway[] = [];
    try {
      const onEvicting = await startTestGateway({ redisUrl: evicting.url });
      gateways.push(onEvicting);
      const onRefusing = await startTestGateway({ redisUrl: refusing.url });
      gateways.push(onRefusing);
      // The INFO is not awaited by the start: its answer comes soon after.
      const until = Date.now() + 3_000;
      while (evictionWarnings(onEvicting).length === 0 && Date.now() < until)
        await new Promise((resolve) => setTimeout(resolve, 20));
      // The gateway on noeviction had as long, and its /health answers (its INFO came back before).
      await fetch(`${onRefusing.url}/health`);
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(evictionWarnings(onEvicting)).toEqual([
        expect.objectContaining({
          setting: "REDIS_URL",
          maxmemoryPolicy: "allkeys-lru",
          msg: expect.stringContaining("set maxmemory-policy noeviction on this Redis"),
        }),
      ]);
      expect(evictionWarnings(onRefusing)).toEqual([]);
      // Nor of Redis at all: it answered the INFO, and nothing failed.
      expect(logLinesOf(onRefusing).filter((line) => line.setting === "REDIS_URL")).toEqual([]);
    } finally {
      for (const gateway of gateways) await gateway.close();
      await evicting.stop();
      await refusing.stop();
    }
  });
});
