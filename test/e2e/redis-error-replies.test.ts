import { describe, expect, it, vi } from "vitest";
import { createRedisClient } from "../../src/redis/redis-client.js";
import { useFakeUpstreamStage } from "../support/fake-upstream-stage.js";
import { redisServerInstalled, startPrivateRedis } from "../support/private-redis.js";
import { proxiedChatStatus } from "../support/proxied-chat.js";
import { refusedPort } from "../support/refused-port.js";
import {
  createTestProject,
  logLinesOf,
  startTestGateway,
  type TestGateway,
} from "../support/test-gateway.js";

/**
 * A Redis that is reachable (it answers PING, /health finds it) but refuses the limits' writes with
 * an error: full (OOM under maxmemory), or a replica (READONLY). The limits run per instance, and
 * the log says why, not that Redis is unreachable.
 */
describe.skipIf(!redisServerInstalled)("a Redis that answers with an error", () => {
  const stage = useFakeUpstreamStage();
  const { closers } = stage;

  async function gatewayOn(redisUrl: string): Promise<TestGateway> {
    const sluice = await startTestGateway({ redisUrl, providerABaseUrl: `${stage.fake.url}/a/v1` });
    closers.push(sluice.close);
    return sluice;
  }

  const warnings = (sluice: TestGateway) =>
    logLinesOf(sluice).filter((line) => line.level === "warn" && String(line.msg).includes("rate limits"));

  it("logs Redis's own error when it is full (OOM), and serves on per-instance limits", async () => {
    const redis = await startPrivateRedis();
    closers.push(redis.stop);
    const sluice = await gatewayOn(redis.url);
    const project = await createTestProject(sluice.gateway, { rateLimits: { perMinute: 2 } });
    expect(await proxiedChatStatus(sluice.url, project)).toBe(200);
    const admin = await createRedisClient(redis.url);
    closers.push(async () => admin.disconnect());
    await admin.config("SET", "maxmemory", "1");
    // Counted here from zero: the limit still holds, per instance.
    expect([
      await proxiedChatStatus(sluice.url, project),
      await proxiedChatStatus(sluice.url, project),
    ]).toEqual([200, 200]);
    expect(await proxiedChatStatus(sluice.url, project)).toBe(429);
    expect(warnings(sluice)).toEqual([
      expect.objectContaining({
        msg: "Redis answers with an error: rate limits fall back to per-instance limits",
        redisError: expect.stringMatching(/^OOM command not allowed/),
      }),
    ]);
  });

  it("logs Redis's error again when its reason changes while Redis rests (full, then refused by an ACL), once each", async () => {
    const redis = await startPrivateRedis();
    closers.push(redis.stop);
    const sluice = await gatewayOn(redis.url);
    const project = await createTestProject(sluice.gateway);
    expect(await proxiedChatStatus(sluice.url, project)).toBe(200);
    const setup = await createRedisClient(redis.url);
    closers.push(async () => setup.disconnect());
    // An operator's own user: the default user, Sluice's, is made stricter below.
    await setup.call("ACL", "SETUSER", "operator", "on", ">operator-password", "~*", "&*", "+@all");
    const admin = await createRedisClient(`redis://operator:operator-password@127.0.0.1:${redis.port}`);
    closers.push(async () => admin.disconnect());
    await admin.config("SET", "maxmemory", "1");
    expect(await proxiedChatStatus(sluice.url, project)).toBe(200);
    // Requests go around Redis while it rests: only the breaker's write probe meets the ACL.
    await admin.call("ACL", "SETUSER", "default", "resetkeys", "~elsewhere:*");
    await new Promise((resolve) => setTimeout(resolve, 4_500));
    expect(await proxiedChatStatus(sluice.url, project)).toBe(200);
    expect(warnings(sluice).map((line) => String(line.redisError).split(" ")[0])).toEqual(["OOM", "NOPERM"]);
  }, 15_000);

  it("logs a full Redis that starts hanging: the probe's timeout replaces the connection, and the client's error says so, once", async () => {
    const redis = await startPrivateRedis("--enable-debug-command", "local");
    closers.push(redis.stop);
    const sluice = await startTestGateway({
      redisUrl: redis.url,
      providerABaseUrl: `${stage.fake.url}/a/v1`,
      redisCommandTimeoutMs: 200,
    });
    closers.push(sluice.close);
    const project = await createTestProject(sluice.gateway);
    expect(await proxiedChatStatus(sluice.url, project)).toBe(200);
    const admin = await createRedisClient(redis.url, { commandTimeoutMs: 10_000 });
    closers.push(async () => admin.disconnect());
    await admin.config("SET", "maxmemory", "1");
    expect(await proxiedChatStatus(sluice.url, project)).toBe(200);
    // Redis rests: requests go around it, only the breaker's write probe (every 2 s) meets the hang.
    await admin.call("DEBUG", "SLEEP", "3");
    expect(await proxiedChatStatus(sluice.url, project)).toBe(200);
    await vi.waitFor(
      () => expect(logLinesOf(sluice).map((line) => line.msg)).toContain("Redis connection ready again"),
      { timeout: 3_000, interval: 20 },
    );
    const said = logLinesOf(sluice)
      .filter((line) => line.level === "warn" && String(line.msg).startsWith("Redis"))
      .map((line) => `${line.msg}: ${String(line.redisError).split(" script:")[0]}`);
    expect(said[0]).toBe(
      "Redis answers with an error: rate limits fall back to per-instance limits: OOM command not allowed when used memory > 'maxmemory'.",
    );
    const hang = "Redis client error: Redis did not answer within 200 ms: connection replaced";
    expect(said.filter((line) => line === hang)).toEqual([hang]);
  }, 15_000);

  it("says once that it is full, and decides here past each rest, though Redis would answer a decision that writes nothing (a refusal)", async () => {
    const redis = await startPrivateRedis();
    closers.push(redis.stop);
    const sluice = await gatewayOn(redis.url);
    const limited = await createTestProject(sluice.gateway, { rateLimits: { perMinute: 1 } });
    const open = await createTestProject(sluice.gateway);
    expect(await proxiedChatStatus(sluice.url, limited)).toBe(200);
    const admin = await createRedisClient(redis.url);
    closers.push(async () => admin.disconnect());
    await admin.config("SET", "maxmemory", "1");
    const redisLines = () => logLinesOf(sluice).filter((line) => String(line.msg).includes("rate limits"));
    const refusals: number[] = [];
    for (let round = 0; round < 2; round++) {
      // Counting needs a write: refused (OOM), decided here.
      expect(await proxiedChatStatus(sluice.url, open)).toBe(200);
      // Past the rest: Redis would refuse this one over its count, writing nothing, and so answer;
      // but it rests until it takes the breaker's write, so this instance decides, from zero.
      await new Promise((resolve) => setTimeout(resolve, 2_100));
      refusals.push(await proxiedChatStatus(sluice.url, limited));
    }
    expect(refusals).toEqual([200, 429]);
    expect(await proxiedChatStatus(sluice.url, open)).toBe(200);
    // Before, each rest ended by such an answer logged "answers again" and then the warning again.
    expect(redisLines()).toEqual([
      expect.objectContaining({
        level: "warn",
        msg: "Redis answers with an error: rate limits fall back to per-instance limits",
      }),
    ]);
    // Full no more: once the limits have run on Redis for a while, that is said, once.
    await admin.config("SET", "maxmemory", "0");
    await new Promise((resolve) => setTimeout(resolve, 2_100));
    expect(await proxiedChatStatus(sluice.url, open)).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, 5_500));
    expect(redisLines().map((line) => line.msg)).toEqual([
      "Redis answers with an error: rate limits fall back to per-instance limits",
      "Redis answers again: rate limits are shared again",
    ]);
  }, 20_000);

  /**
   * A gateway on `redisUrl` with a limited project whose count Redis holds (Redis refuses its next
   * requests over the limit, writing nothing) and an open one (each request a write); `refuseWrites`
   * makes Redis refuse writes, `takeWrites` makes it take them again. While Redis refuses writes,
   * requests come, mostly the limited project's, now and then the open one's, and /health's Redis
   * check and the gauge are sampled every 10 ms: neither may say ok. Once Redis takes writes (no
   * request coming), both must say ok within the rest (2 s) and stay so as requests come again.
   * Returns how long that took (ms).
   */
  async function honestRecovery(
    redisUrl: string,
    refuseWrites: () => Promise<void>,
    takeWrites: () => Promise<void>,
  ): Promise<number> {
    const sluice = await startTestGateway({
      redisUrl,
      providerABaseUrl: `${stage.fake.url}/a/v1`,
      metricsEnabled: true,
    });
    closers.push(sluice.close);
    const limited = await createTestProject(sluice.gateway, { rateLimits: { perMinute: 1 } });
    const open = await createTestProject(sluice.gateway);
    expect(await proxiedChatStatus(sluice.url, limited)).toBe(200);
    await refuseWrites();
    /** /health's Redis check and the gauge. */
    const sample = async () => {
      const [health, metrics] = await Promise.all([
        fetch(`${sluice.url}/health`).then(
          (response) => response.json() as Promise<{ checks: { redis: { status: string } } }>,
        ),
        fetch(`${sluice.url}/metrics`).then((response) => response.text()),
      ]);
      return {
        health: health.checks.redis.status,
        gauge: /sluice_degraded\{component="redis"\} 1/.test(metrics) ? 1 : 0,
      };
    };
    // The first write refused: Redis rests, the limits run per instance (the check is `down` while
    // a connection answered READONLY is being replaced, `degraded` else).
    expect(await proxiedChatStatus(sluice.url, open)).toBe(200);
    const first = await sample();
    expect([first.health === "ok", first.gauge]).toEqual([false, 1]);
    let sampling = true;
    const samples: Array<{ at: number; health: string; gauge: number }> = [];
    const sampler = (async () => {
      while (sampling) {
        samples.push({ at: Date.now(), ...(await sample()) });
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    })();
    const okAt = (from: number) =>
      samples.find((taken) => taken.at > from && taken.health === "ok" && taken.gauge === 0)?.at;
    const notOk = (from: number) =>
      samples.filter((taken) => taken.at > from && (taken.health !== "ok" || taken.gauge !== 0));
    let sending = true;
    const traffic = async () => {
      for (let turn = 0; sending; turn++) {
        await proxiedChatStatus(sluice.url, turn % 5 === 4 ? open : limited);
        await new Promise((resolve) => setTimeout(resolve, 40));
      }
    };
    let sent = traffic();
    try {
      // Three rests and more: before, each ended at the first refusal Redis answered (or at a
      // reconnect), and /health and the gauge said ok until the next write failed.
      const refusing = Date.now();
      await new Promise((resolve) => setTimeout(resolve, 7_000));
      // Sampled all along (a loaded machine takes ~80 in the 7 s, a quiet one ~300): the check below
      // would hold of no samples at all.
      const during = samples.filter((taken) => taken.at > refusing);
      expect(during.length).toBeGreaterThan(20);
      expect((during.at(-1)?.at ?? 0) - refusing).toBeGreaterThan(6_000);
      expect(okAt(refusing)).toBeUndefined();

      sending = false;
      await sent;
      await takeWrites();
      const writable = Date.now();
      await vi.waitFor(() => expect(okAt(writable)).toBeDefined(), { timeout: 5_000, interval: 20 });
      const recovered = okAt(writable) as number;
      expect(recovered - writable).toBeLessThanOrEqual(3_000);
      sending = true;
      sent = traffic();
      await new Promise((resolve) => setTimeout(resolve, 1_500));
      expect(notOk(recovered)).toEqual([]);
      return recovered - writable;
    } finally {
      sending = false;
      sampling = false;
      await sent;
      await sampler;
    }
  }

  it("stays degraded while a full Redis refuses writes, though it answers what writes nothing, and is ok within the rest once it takes writes", async () => {
    const redis = await startPrivateRedis("--maxmemory-policy", "noeviction");
    closers.push(redis.stop);
    const admin = await createRedisClient(redis.url);
    closers.push(async () => admin.disconnect());
    const usedMemory = async () => Number(/^used_memory:(\d+)/m.exec(await admin.info("memory"))?.[1]);
    await honestRecovery(
      redis.url,
      async () => {
        // 1 MiB of room (an empty Redis holds about 0.9 MiB of its own), filled by another program:
        // every write that takes memory is refused (OOM).
        await admin.config("SET", "maxmemory", String((await usedMemory()) + 1024 * 1024));
        const filler = "x".repeat(64 * 1024);
        for (let index = 0; ; index++) {
          const refused = await admin.set(`filler:${index}`, filler).then(
            () => false,
            () => true,
          );
          if (refused) break;
        }
        // Full for good: the last write passed the limit by less than a value, which the client
        // buffers Redis frees after a while may give back. Held a little below what it holds now,
        // it refuses every write that takes memory until the fillers go.
        await admin.config("SET", "maxmemory", String((await usedMemory()) - 128 * 1024));
      },
      async () => {
        for (let index = 0; (await admin.del(`filler:${index}`)) === 1; index++);
      },
    );
  }, 30_000);

  it("stays degraded while Redis is a replica (READONLY), though its reconnects get ready, and is ok within the rest once it is a primary", async () => {
    const redis = await startPrivateRedis();
    closers.push(redis.stop);
    const admin = await createRedisClient(redis.url);
    closers.push(async () => admin.disconnect());
    await honestRecovery(
      redis.url,
      // A replica of a primary it cannot reach: it serves its data (reads), and refuses writes.
      async () => void (await admin.call("REPLICAOF", "127.0.0.1", String(refusedPort))),
      async () => void (await admin.call("REPLICAOF", "NO", "ONE")),
    );
  }, 30_000);

  it("is degraded in /health while the limits run per instance, though it answers PING, and ok once it takes writes again", async () => {
    const redis = await startPrivateRedis();
    closers.push(redis.stop);
    const sluice = await gatewayOn(redis.url);
    const project = await createTestProject(sluice.gateway);
    const health = async () => {
      const response = await fetch(`${sluice.url}/health`);
      return { code: response.status, body: (await response.json()) as Record<string, unknown> };
    };
    expect(await proxiedChatStatus(sluice.url, project)).toBe(200);
    const admin = await createRedisClient(redis.url);
    closers.push(async () => admin.disconnect());
    await admin.config("SET", "maxmemory", "1");
    expect(await proxiedChatStatus(sluice.url, project)).toBe(200);
    expect(await health()).toMatchObject({
      code: 200,
      body: { status: "degraded", checks: { redis: { status: "degraded", rateLimits: "per-instance" } } },
    });
    await admin.config("SET", "maxmemory", "0");
    // Past the rest the next call asks Redis again, which now counts it.
    await new Promise((resolve) => setTimeout(resolve, 2_100));
    expect(await proxiedChatStatus(sluice.url, project)).toBe(200);
    const after = await health();
    expect(after).toMatchObject({ code: 200, body: { status: "ok", checks: { redis: { status: "ok" } } } });
    expect(after.body.checks).not.toHaveProperty("redis.rateLimits");
  });
});
