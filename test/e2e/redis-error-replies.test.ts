import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createRedisClient } from "../../src/redis/redis-client.js";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { redisServerInstalled, startPrivateRedis } from "../support/private-redis.js";
import { proxiedChatStatus } from "../support/proxied-chat.js";
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
  let fake: FakeUpstream;
  const closers: Array<() => Promise<void>> = [];

  beforeAll(async () => {
    fake = await startFakeUpstream();
  });
  afterEach(async () => {
    for (const close of closers.splice(0).reverse()) await close();
  });
  afterAll(async () => {
    await fake?.close();
  });

  async function gatewayOn(redisUrl: string): Promise<TestGateway> {
    const sluice = await startTestGateway({ redisUrl, providerABaseUrl: `${fake.url}/a/v1` });
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

  it("says once that it is full, though a decision that writes nothing (a refusal) still gets an answer after each rest", async () => {
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
    for (let round = 0; round < 2; round++) {
      // Counting needs a write: refused (OOM), decided here.
      expect(await proxiedChatStatus(sluice.url, open)).toBe(200);
      // Past the rest: Redis refuses this one over its count, which writes nothing, and so answers.
      await new Promise((resolve) => setTimeout(resolve, 2_100));
      expect(await proxiedChatStatus(sluice.url, limited)).toBe(429);
    }
    expect(await proxiedChatStatus(sluice.url, open)).toBe(200);
    // Before, each rest ended that way logged "answers again" and then the warning again.
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
