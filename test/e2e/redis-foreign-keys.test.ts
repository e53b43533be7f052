import { describe, expect, it } from "vitest";
import { createRedisClient } from "../../src/redis/redis-client.js";
import { useFakeUpstreamStage } from "../support/fake-upstream-stage.js";
import { redisServerInstalled, startPrivateRedis } from "../support/private-redis.js";
import { proxiedChatStatus } from "../support/proxied-chat.js";
import {
  createTestProject,
  logLinesOf,
  startTestGateway,
  type TestGateway,
} from "../support/test-gateway.js";

/**
 * Keys inside Sluice's prefix that Sluice did not write (another program, a restore, a manual
 * command), and Redis failures that a user other than the rate limits sees first.
 */
describe.skipIf(!redisServerInstalled)(
  "Redis keys Sluice did not write, and failures the throttle sees",
  () => {
    const stage = useFakeUpstreamStage();
    const { closers } = stage;

    async function started() {
      const redis = await startPrivateRedis();
      closers.push(redis.stop);
      const sluice: TestGateway = await startTestGateway({
        redisUrl: redis.url,
        providerABaseUrl: `${stage.fake.url}/a/v1`,
        metricsEnabled: true,
      });
      closers.push(sluice.close);
      const admin = await createRedisClient(redis.url);
      closers.push(async () => admin.disconnect());
      const health = async () => {
        const response = await fetch(`${sluice.url}/health`);
        return { code: response.status, body: (await response.json()) as Record<string, unknown> };
      };
      const degradedGauge = async () =>
        (await (await fetch(`${sluice.url}/metrics`)).text())
          .split("\n")
          .find((line) => line.startsWith('sluice_degraded{component="redis"}'));
      return { sluice, admin, health, degradedGauge };
    }

    it("counts afresh over a rate-limit key of another type, names it in the log, and stays ok", async () => {
      const { sluice, admin, health, degradedGauge } = await started();
      const project = await createTestProject(sluice.gateway, { rateLimits: { perMinute: 2 } });
      const key = `sluice:rl:project:60:${project.projectId}`;
      await admin.hset(key, "written-by", "another program");
      expect([
        await proxiedChatStatus(sluice.url, project),
        await proxiedChatStatus(sluice.url, project),
        await proxiedChatStatus(sluice.url, project),
      ]).toEqual([200, 200, 429]);
      // Counted in Redis, with the window's expiry; Redis was never taken for down.
      expect(await admin.get(key)).toBe("2");
      expect(await admin.pttl(key)).toBeGreaterThan(50_000);
      const warnings = logLinesOf(sluice).filter((line) => line.level === "warn" && "redisKey" in line);
      expect(warnings).toEqual([
        expect.objectContaining({ redisKey: key, msg: expect.stringMatching(/did not write/) }),
      ]);
      expect(await health()).toMatchObject({
        code: 200,
        body: { status: "ok", checks: { redis: { status: "ok" } } },
      });
      expect(await degradedGauge()).toBe('sluice_degraded{component="redis"} 0');
    });

    it("takes only what INCR writes for a count: a leading zero is counted afresh, 1e3 blocks no one", async () => {
      const { sluice, admin, health, degradedGauge } = await started();
      const limited = await createTestProject(sluice.gateway, { rateLimits: { perMinute: 2 } });
      // Digits INCR refuses (a leading zero): its error was taken for Redis failing, at every request.
      const window = `sluice:rl:project:60:${limited.projectId}`;
      await admin.set(window, "01", "PX", 60_000);
      expect([
        await proxiedChatStatus(sluice.url, limited),
        await proxiedChatStatus(sluice.url, limited),
        await proxiedChatStatus(sluice.url, limited),
      ]).toEqual([200, 200, 429]);
      expect(await admin.get(window)).toBe("2");
      // A failure makes this address a suspect here; then another program writes what Lua's
      // tonumber reads as 1,000 failures, which the throttle's count would not count on.
      const project = await createTestProject(sluice.gateway);
      const wrong = {
        projectId: project.projectId,
        bearer: `${project.partialKeys["provider-a"]}.wrong-test-key`,
      };
      expect(await proxiedChatStatus(sluice.url, wrong)).toBe(401);
      const failures = `sluice:auth:ip:127.0.0.1:project:${project.projectId}`;
      await admin.set(failures, "1e3", "PX", 60_000);
      expect(await proxiedChatStatus(sluice.url, project)).toBe(200);
      expect(await proxiedChatStatus(sluice.url, wrong)).toBe(401);
      expect(await admin.get(failures)).toBe("1");
      expect(
        logLinesOf(sluice)
          .filter(
            (line) => line.level === "warn" && ("redisKey" in line || String(line.msg).includes("Redis")),
          )
          .map((line) => line.redisKey ?? line.msg),
      ).toEqual([window, failures]);
      expect(await health()).toMatchObject({
        code: 200,
        body: { status: "ok", checks: { redis: { status: "ok" } } },
      });
      expect(await degradedGauge()).toBe('sluice_degraded{component="redis"} 0');
    });

    it("says the limits run per instance as soon as the failed-authentication throttle sees Redis refuse", async () => {
      const { sluice, admin, health, degradedGauge } = await started();
      const project = await createTestProject(sluice.gateway);
      expect(await proxiedChatStatus(sluice.url, project)).toBe(200);
      const failures = `sluice:auth:ip:127.0.0.1:project:${project.projectId}`;
      await admin.set(failures, "1", "PX", 60_000);
      await admin.config("SET", "maxmemory", "1");
      // A wrong test key: only the throttle asks Redis (it counts the failure), the limits do not.
      const wrong = {
        projectId: project.projectId,
        bearer: `${project.partialKeys["provider-a"]}.wrong-test-key`,
      };
      expect(await proxiedChatStatus(sluice.url, wrong)).toBe(401);
      expect(await health()).toMatchObject({
        code: 200,
        body: { status: "degraded", checks: { redis: { status: "degraded", rateLimits: "per-instance" } } },
      });
      expect(await degradedGauge()).toBe('sluice_degraded{component="redis"} 1');
      // Redis refused the count: the count it holds is left as it was, never taken for a bad key.
      expect(await admin.get(failures)).toBe("1");
      expect(
        logLinesOf(sluice).filter((line) => line.level === "warn" && String(line.msg).includes("Redis")),
      ).toEqual([
        expect.objectContaining({
          msg: "Redis answers with an error: rate limits fall back to per-instance limits",
          redisError: expect.stringMatching(/^OOM command not allowed/),
        }),
      ]);
    });
  },
);
