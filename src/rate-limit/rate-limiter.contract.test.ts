import { randomBytes } from "node:crypto";
import type { Redis } from "ioredis";
import { afterAll, describe, expect, it } from "vitest";
import { redisAvailable, redisUrl } from "../../test/support/services.js";
import { createAuthThrottle } from "./auth-throttle.js";
import { rateLimitHeaders } from "./rate-limit-headers.js";
import { createRateLimiter, type RateLimiter } from "./rate-limiter.js";
import { createRedisClient } from "./redis-client.js";

const clients: Redis[] = [];
afterAll(() => {
  for (const client of clients) client.disconnect();
});

async function redisClient(url = redisUrl): Promise<Redis> {
  const client = await createRedisClient(url);
  clients.push(client);
  if (url === redisUrl)
    await new Promise<void>((resolve) =>
      client.status === "ready" ? resolve() : client.once("ready", () => resolve()),
    );
  return client;
}

const backends: Array<{ name: string; available: boolean; make(prefix: string): Promise<RateLimiter> }> = [
  { name: "memory", available: true, make: async (keyPrefix) => createRateLimiter({ keyPrefix }) },
  {
    name: "Redis",
    available: redisAvailable,
    make: async (keyPrefix) => createRateLimiter({ redis: await redisClient(), keyPrefix }),
  },
];

for (const backend of backends) {
  describe.skipIf(!backend.available)(`rate limiter contract on ${backend.name}`, () => {
    const prefix = () => `sluice-test:${randomBytes(6).toString("hex")}`;

    it("allows the limit, then refuses with the time to reset", async () => {
      const limiter = await backend.make(prefix());
      const decisions = [];
      for (let index = 0; index < 4; index++) decisions.push(await limiter.consume("project", "p1", 3, 60));
      expect(decisions.map((decision) => decision.allowed)).toEqual([true, true, true, false]);
      expect(decisions.map((decision) => decision.remaining)).toEqual([2, 1, 0, 0]);
      expect(decisions[3]?.resetSeconds).toBeGreaterThan(0);
      expect(decisions[3]?.resetSeconds).toBeLessThanOrEqual(60);
    });

    it("keeps keys, names and limits apart", async () => {
      const limiter = await backend.make(prefix());
      expect((await limiter.consume("project", "a", 1)).allowed).toBe(true);
      expect((await limiter.consume("project", "b", 1)).allowed).toBe(true);
      expect((await limiter.consume("ip", "a", 1)).allowed).toBe(true);
      expect((await limiter.consume("project", "a", 1)).allowed).toBe(false);
      expect((await limiter.consume("project", "a", 5)).allowed).toBe(true);
    });

    it("opens again after the window", async () => {
      const limiter = await backend.make(prefix());
      expect((await limiter.consume("ip", "x", 1, 1)).allowed).toBe(true);
      expect((await limiter.consume("ip", "x", 1, 1)).allowed).toBe(false);
      await new Promise((resolve) => setTimeout(resolve, 1100));
      expect((await limiter.consume("ip", "x", 1, 1)).allowed).toBe(true);
    });
  });
}

describe.skipIf(!redisAvailable)("rate limiter on Redis across instances", () => {
  it("shares one count between two limiters: exactly the limit is allowed", async () => {
    const keyPrefix = `sluice-test:${randomBytes(6).toString("hex")}`;
    const one = createRateLimiter({ redis: await redisClient(), keyPrefix });
    const two = createRateLimiter({ redis: await redisClient(), keyPrefix });
    const results = await Promise.all(
      Array.from({ length: 200 }, (_, index) => (index % 2 ? one : two).consume("project", "shared", 50)),
    );
    expect(results.filter((decision) => decision.allowed)).toHaveLength(50);
  });

  it("falls back to per-instance limits when Redis is unreachable, never unlimited", async () => {
    const events: boolean[] = [];
    const limiter = createRateLimiter({
      redis: await redisClient("redis://127.0.0.1:1"),
      keyPrefix: "fallback",
      onFallback: (on) => events.push(on),
    });
    const decisions = [];
    for (let index = 0; index < 5; index++) decisions.push(await limiter.consume("project", "down", 3));
    expect(decisions.map((decision) => decision.allowed)).toEqual([true, true, true, false, false]);
    expect(limiter.degraded()).toBe(true);
    expect(events).toEqual([true]);
  });
});

describe("rate limit headers", () => {
  const decision = (name: string, allowed: boolean, remaining: number, resetSeconds: number) => ({
    name,
    allowed,
    limit: 10,
    remaining,
    resetSeconds,
    windowSeconds: 60,
  });

  it("lists every policy and reports the tightest one", () => {
    expect(rateLimitHeaders([decision("project", true, 7, 30), decision("ip", true, 2, 10)])).toEqual({
      "ratelimit-policy": '"project";q=10;w=60, "ip";q=10;w=60',
      ratelimit: '"ip";r=2;t=10',
    });
  });

  it("adds Retry-After on a refusal", () => {
    expect(
      rateLimitHeaders([decision("project", true, 7, 30), decision("device", false, 0, 42)]),
    ).toMatchObject({
      ratelimit: '"device";r=0;t=42',
      "retry-after": "42",
    });
  });
});

describe("auth-failure throttle", () => {
  it("throttles an IP after repeated failures, and only that IP", async () => {
    const throttle = createAuthThrottle({
      failuresPerMinute: 3,
      keyPrefix: `t:${randomBytes(4).toString("hex")}`,
    });
    for (let index = 0; index < 2; index++) await throttle.recordFailure("1.1.1.1", "p", true);
    expect(await throttle.retryAfter("1.1.1.1", "p")).toBe(0);
    await throttle.recordFailure("1.1.1.1", "p", true);
    expect(await throttle.retryAfter("1.1.1.1", "p")).toBeGreaterThan(0);
    expect(await throttle.retryAfter("2.2.2.2", "p")).toBe(0);
  });

  it("throttles an unknown project id across IPs, but not a real project", async () => {
    const throttle = createAuthThrottle({
      failuresPerMinute: 3,
      keyPrefix: `t:${randomBytes(4).toString("hex")}`,
    });
    for (const ip of ["1.0.0.1", "1.0.0.2", "1.0.0.3"]) await throttle.recordFailure(ip, "ghost", false);
    expect(await throttle.retryAfter("9.9.9.9", "ghost")).toBeGreaterThan(0);
    for (const ip of ["1.0.0.4", "1.0.0.5", "1.0.0.6"]) await throttle.recordFailure(ip, "real", true);
    expect(await throttle.retryAfter("9.9.9.9", "real")).toBe(0);
  });

  it.skipIf(!redisAvailable)("shares the failure count through Redis", async () => {
    const keyPrefix = `t:${randomBytes(4).toString("hex")}`;
    const one = createAuthThrottle({ redis: await redisClient(), failuresPerMinute: 4, keyPrefix });
    const two = createAuthThrottle({ redis: await redisClient(), failuresPerMinute: 4, keyPrefix });
    for (let index = 0; index < 3; index++) await one.recordFailure("5.5.5.5", undefined, true);
    expect(await two.retryAfter("5.5.5.5", undefined)).toBe(0);
    await two.recordFailure("5.5.5.5", undefined, true);
    expect(await two.retryAfter("5.5.5.5", undefined)).toBeGreaterThan(0);
  });
});
