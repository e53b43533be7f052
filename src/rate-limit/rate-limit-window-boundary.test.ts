import { afterAll, afterEach, describe, expect, it, vi } from "vitest";
// In CI (CI=true) an unreachable Redis makes this import throw, so the suite fails instead of skipping.
import { redisAvailable, redisTestSpace } from "../../test/support/services.js";
import { createRateLimiter, type RateLimiter } from "./rate-limiter.js";

const { nextPrefix, readyClient, cleanup } = redisTestSpace("rl-boundary");

afterAll(cleanup);
afterEach(() => {
  vi.useRealTimers();
});

async function consume(limiter: RateLimiter, key: string, limit: number) {
  const [decision] = await limiter.consumeAll([{ name: "project", key, limit }]);
  if (!decision) throw new Error("consumeAll gave no decision");
  return decision;
}

/**
 * The documented algorithm (docs/api.md, "Authenticated endpoints"): fixed windows of a minute, each opened by a
 * key's first admitted request. Across the end of one window and the start of the next a key gets
 * its limit twice, and never more than its limit within one window.
 */
describe("rate limit windows at their boundary", () => {
  it("in memory: refuses up to the window's last millisecond, and opens a whole new window at its end", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const opened = Date.UTC(2026, 10, 30, 23, 59, 30, 500);
    vi.setSystemTime(opened);
    const limiter = createRateLimiter();
    try {
      for (let index = 0; index < 3; index++) expect((await consume(limiter, "p", 3)).allowed).toBe(true);
      vi.setSystemTime(opened + 59_999);
      expect(await consume(limiter, "p", 3)).toMatchObject({ allowed: false, resetSeconds: 1 });
      // Not aligned to the clock: the minute turning (23:59:59.999 to 00:00) opened nothing.
      vi.setSystemTime(opened + 60_000);
      const first = await consume(limiter, "p", 3);
      expect(first).toMatchObject({ allowed: true, remaining: 2, resetSeconds: 60 });
      expect((await consume(limiter, "p", 3)).allowed).toBe(true);
      expect((await consume(limiter, "p", 3)).allowed).toBe(true);
      vi.setSystemTime(opened + 119_999);
      expect(await consume(limiter, "p", 3)).toMatchObject({ allowed: false, resetSeconds: 1 });
      vi.setSystemTime(opened + 120_000);
      expect((await consume(limiter, "p", 3)).allowed).toBe(true);
    } finally {
      await limiter.close();
    }
  });

  it("in memory: a wall clock set back holds a full window no longer than one window, the wait it reported", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const opened = Date.UTC(2026, 10, 30, 12, 0, 0);
    vi.setSystemTime(opened);
    const limiter = createRateLimiter();
    try {
      for (let index = 0; index < 3; index++) expect((await consume(limiter, "p", 3)).allowed).toBe(true);
      // The host's clock is stepped back ten minutes (NTP, a VM resumed): the window's end, kept on
      // that clock, now lies eleven minutes ahead, but its length is a minute and so is the wait.
      const stepped = opened - 600_000;
      vi.setSystemTime(stepped);
      const refused = await consume(limiter, "p", 3);
      expect(refused).toMatchObject({ allowed: false, resetSeconds: 60 });
      vi.setSystemTime(stepped + 59_999);
      expect(await consume(limiter, "p", 3)).toMatchObject({ allowed: false, resetSeconds: 1 });
      // Retry-After said 60 s: the client that waited them is admitted, not refused for ten more minutes.
      vi.setSystemTime(stepped + 60_000);
      expect(await consume(limiter, "p", 3)).toMatchObject({ allowed: true, remaining: 2, resetSeconds: 60 });
    } finally {
      await limiter.close();
    }
  });

  it.skipIf(!redisAvailable)(
    "on Redis: a window refuses until its key expires, then a new one opens for a whole window",
    async () => {
      const keyPrefix = nextPrefix();
      const redis = await readyClient();
      const limiter = createRateLimiter({ redis, keyPrefix });
      const key = `${keyPrefix}:project:60:p`;
      for (let index = 0; index < 3; index++) expect((await consume(limiter, "p", 3)).allowed).toBe(true);
      // The window's last moments: Redis's clock cannot be set, so the key is given 300 ms to live
      // (1 ms raced the next request on a busy machine, which then found the window gone).
      await redis.pexpire(key, 300);
      const refused = await consume(limiter, "p", 3);
      expect(refused).toMatchObject({ allowed: false, resetSeconds: 1 });
      await new Promise((resolve) => setTimeout(resolve, 350));
      expect(await redis.exists(key)).toBe(0);
      const first = await consume(limiter, "p", 3);
      expect(first).toMatchObject({ allowed: true, remaining: 2 });
      // The new window lasts a whole minute from its first request, not what the old one had left.
      expect(await redis.pttl(key)).toBeGreaterThan(55_000);
      expect((await consume(limiter, "p", 3)).allowed).toBe(true);
      expect((await consume(limiter, "p", 3)).allowed).toBe(true);
      expect((await consume(limiter, "p", 3)).allowed).toBe(false);
      expect(limiter.degraded()).toBe(false);
    },
  );

  it.skipIf(!redisAvailable)(
    "on Redis: instances whose clocks differ by an hour share one window, which Redis's clock ends",
    async () => {
      const keyPrefix = nextPrefix();
      const behind = createRateLimiter({ redis: await readyClient(), keyPrefix });
      const ahead = createRateLimiter({ redis: await readyClient(), keyPrefix });
      vi.useFakeTimers({ toFake: ["Date"], now: Date.now() - 3_600_000 });
      expect(await consume(behind, "skew", 3)).toMatchObject({ allowed: true, remaining: 2 });
      vi.setSystemTime(Date.now() + 7_200_000);
      expect(await consume(ahead, "skew", 3)).toMatchObject({ allowed: true, remaining: 1 });
      vi.setSystemTime(Date.now() - 7_200_000);
      expect(await consume(behind, "skew", 3)).toMatchObject({ allowed: true, remaining: 0 });
      vi.setSystemTime(Date.now() + 7_200_000);
      const refused = await consume(ahead, "skew", 3);
      expect(refused.allowed).toBe(false);
      expect(refused.resetSeconds).toBeGreaterThan(55);
      expect(refused.resetSeconds).toBeLessThanOrEqual(60);
      expect([behind.degraded(), ahead.degraded()]).toEqual([false, false]);
    },
  );
});
