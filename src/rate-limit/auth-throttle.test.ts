import { afterAll, describe, expect, it, vi } from "vitest";
// In CI (CI=true) an unreachable Redis makes this import throw, so the suite fails instead of skipping.
import { exitOfScript } from "../../test/support/script-exit.js";
import { redisAvailable, redisTestSpace } from "../../test/support/services.js";
import { startTcpProxy } from "../../test/support/tcp-proxy.js";
import type { AuthThrottle } from "../auth/authenticate.js";
import { RedisBreaker } from "../redis/redis-breaker.js";
import { createAuthThrottle, ExpiringKeys } from "./auth-throttle.js";

const { nextPrefix, readyClient, unreachableClient, cleanup } = redisTestSpace("auth");

afterAll(cleanup);

async function fail(throttle: AuthThrottle, times: number, ip: string, projectId?: string, exists = true) {
  for (let index = 0; index < times; index++) await throttle.recordFailure(ip, projectId, exists);
}

const backends: Array<{ name: string; available: boolean; make(limit: number): Promise<AuthThrottle> }> = [
  {
    name: "memory",
    available: true,
    make: async (limit) => createAuthThrottle({ failuresPerMinute: limit, keyPrefix: nextPrefix() }),
  },
  {
    name: "Redis",
    available: redisAvailable,
    make: async (limit) =>
      createAuthThrottle({ redis: await readyClient(), failuresPerMinute: limit, keyPrefix: nextPrefix() }),
  },
];

for (const backend of backends) {
  describe.skipIf(!backend.available)(`auth-failure throttle on ${backend.name}`, () => {
    it("throttles an address once it reached the limit, and only that address", async () => {
      const throttle = await backend.make(3);
      await fail(throttle, 2, "192.0.2.1", "p");
      expect(await throttle.retryAfter("192.0.2.1", "p")).toBe(0);
      await fail(throttle, 1, "192.0.2.1", "p");
      const wait = await throttle.retryAfter("192.0.2.1", "p");
      expect(wait).toBeGreaterThan(55);
      expect(wait).toBeLessThanOrEqual(60);
      expect(await throttle.retryAfter("192.0.2.2", "p")).toBe(0);
    });

    it("keeps failures on one project from locking the address out of the others (a shared NAT)", async () => {
      const throttle = await backend.make(3);
      await fail(throttle, 5, "192.0.2.30", "broken-app");
      expect(await throttle.retryAfter("192.0.2.30", "broken-app")).toBeGreaterThan(0);
      expect(await throttle.retryAfter("192.0.2.30", "other-app")).toBe(0);
      expect(await throttle.retryAfter("192.0.2.30", undefined)).toBe(0);
    });

    it("locks the whole address out once it probed project ids that do not exist", async () => {
      const throttle = await backend.make(3);
      for (const ghost of ["g1", "g2", "g3"]) await fail(throttle, 1, "192.0.2.31", ghost, false);
      expect(await throttle.retryAfter("192.0.2.31", "real")).toBeGreaterThan(0);
      expect(await throttle.retryAfter("192.0.2.31", undefined)).toBeGreaterThan(0);
      expect(await throttle.retryAfter("192.0.2.32", "real")).toBe(0);
    });

    it("throttles an unknown project id across addresses, but never a project that exists", async () => {
      const throttle = await backend.make(3);
      for (const ip of ["198.51.100.1", "198.51.100.2", "198.51.100.3"])
        await fail(throttle, 1, ip, "ghost", false);
      expect(await throttle.retryAfterMissing("ghost")).toBeGreaterThan(0);
      for (const ip of ["198.51.100.4", "198.51.100.5", "198.51.100.6"])
        await fail(throttle, 1, ip, "real", true);
      expect(await throttle.retryAfter("203.0.113.9", "real")).toBe(0);
      expect(await throttle.retryAfterMissing("real")).toBe(0);
    });

    it("never refuses the callers of a project created under an id throttled while it named none", async () => {
      const throttle = await backend.make(3);
      for (const ip of ["198.51.100.7", "198.51.100.8", "198.51.100.9"])
        await fail(throttle, 1, ip, "created-later", false);
      // Asked before the lookup: the caller's own address and project only.
      expect(await throttle.retryAfter("203.0.113.10", "created-later")).toBe(0);
      // Asked once the lookup found no project: the id's count too.
      expect(await throttle.retryAfterMissing("created-later")).toBeGreaterThan(0);
    });

    it("answers at once (no promise) while no failure is remembered, and for a blocked address", async () => {
      const throttle = await backend.make(1);
      expect(throttle.retryAfter("192.0.2.60", "p")).toBe(0);
      await fail(throttle, 1, "192.0.2.60", "p");
      expect(throttle.retryAfter("192.0.2.60", "p")).toBeGreaterThan(0);
      expect(throttle.retryAfter("192.0.2.61", "p")).toBe(0);
    });

    it("never throttles successful callers", async () => {
      const throttle = await backend.make(2);
      for (let index = 0; index < 100; index++) expect(await throttle.retryAfter("192.0.2.50", "p")).toBe(0);
      await fail(throttle, 1, "192.0.2.50", "p");
      for (let index = 0; index < 100; index++) expect(await throttle.retryAfter("192.0.2.50", "p")).toBe(0);
    });

    it("counts attempts in flight with the failures: a burst is refused before it is checked", async () => {
      const throttle = await backend.make(3);
      const slots = [1, 2, 3].map(() => throttle.begin("192.0.2.70", "p"));
      expect(slots.every((slot) => typeof slot === "function")).toBe(true);
      expect(throttle.begin("192.0.2.70", "p")).toBe(1);
      // Other keys are not held: another project of the address, its own key, another address.
      expect(typeof throttle.begin("192.0.2.70", "other")).toBe("function");
      expect(typeof throttle.begin("192.0.2.70", undefined)).toBe("function");
      expect(typeof throttle.begin("192.0.2.71", "p")).toBe("function");
      // An attempt that ended gives its slot back; a second release gives nothing more.
      const first = slots[0] as () => void;
      first();
      first();
      const again = throttle.begin("192.0.2.70", "p");
      expect(typeof again).toBe("function");
      expect(throttle.begin("192.0.2.70", "p")).toBe(1);
    });

    it("refuses once failures and attempts in flight reach the limit; successes count as nothing", async () => {
      const throttle = await backend.make(3);
      for (let round = 0; round < 10; round++) {
        const slot = throttle.begin("192.0.2.72", "p");
        expect(typeof slot).toBe("function");
        (slot as () => void)();
      }
      expect(throttle.retryAfter("192.0.2.72", "p")).toBe(0);
      await fail(throttle, 2, "192.0.2.72", "p");
      const slot = throttle.begin("192.0.2.72", "p");
      expect(typeof slot).toBe("function");
      expect(throttle.begin("192.0.2.72", "p")).toBe(1);
      await throttle.recordFailure("192.0.2.72", "p", true);
      (slot as () => void)();
      expect(await throttle.retryAfter("192.0.2.72", "p")).toBeGreaterThan(0);
    });

    it("counts IPv6 clients per /64", async () => {
      const throttle = await backend.make(2);
      await fail(throttle, 1, "2001:db8:0:1::a");
      await fail(throttle, 1, "2001:db8:0:1:ffff:1:2:3");
      expect(await throttle.retryAfter("2001:0db8:0000:0001::9", undefined)).toBeGreaterThan(0);
      expect(await throttle.retryAfter("2001:db8:0:2::a", undefined)).toBe(0);
    });
  });
}

describe.skipIf(!redisAvailable)("auth-failure throttle across instances", () => {
  it("blocks on the instance that recorded the failure reaching the shared limit", async () => {
    const keyPrefix = nextPrefix();
    const one = createAuthThrottle({ redis: await readyClient(), failuresPerMinute: 4, keyPrefix });
    const two = createAuthThrottle({ redis: await readyClient(), failuresPerMinute: 4, keyPrefix });
    await fail(one, 3, "192.0.2.7");
    expect(await two.retryAfter("192.0.2.7", undefined)).toBe(0);
    await fail(two, 1, "192.0.2.7");
    expect(await two.retryAfter("192.0.2.7", undefined)).toBeGreaterThan(0);
  });

  it("keeps its counts where the previous version kept them: `<prefix>:<key>`, a count expiring with its window", async () => {
    const keyPrefix = nextPrefix();
    const redis = await readyClient();
    // A count a previous instance left (rate-limiter-flexible's format) is read and added to.
    await redis.set(`${keyPrefix}:ip:192.0.2.9`, "2", "PX", 30_000);
    const throttle = createAuthThrottle({ redis, failuresPerMinute: 4, keyPrefix });
    await fail(throttle, 1, "192.0.2.9");
    expect(await redis.get(`${keyPrefix}:ip:192.0.2.9`)).toBe("3");
    expect(await redis.pttl(`${keyPrefix}:ip:192.0.2.9`)).toBeLessThanOrEqual(30_000);
    await fail(throttle, 1, "192.0.2.9");
    const wait = await throttle.retryAfter("192.0.2.9", undefined);
    expect(wait).toBeGreaterThan(0);
    expect(wait).toBeLessThanOrEqual(30);
    // A new key opens a window of a minute.
    await fail(throttle, 1, "192.0.2.10");
    const ttl = await redis.pttl(`${keyPrefix}:ip:192.0.2.10`);
    expect(ttl).toBeGreaterThan(55_000);
    expect(ttl).toBeLessThanOrEqual(60_000);
  });

  it("counts an unknown id of a provider key's form under its digest: the key never becomes a Redis key", async () => {
    const keyPrefix = nextPrefix();
    const redis = await readyClient();
    const one = createAuthThrottle({ redis, failuresPerMinute: 2, keyPrefix });
    const two = createAuthThrottle({ redis: await readyClient(), failuresPerMinute: 2, keyPrefix });
    const key = "AIzaSyD4kX9e2Qm7TzA1bC3dE5fG7hJ9kL0mN1o";
    await one.recordFailure("192.0.2.21", key, false);
    await two.recordFailure("192.0.2.22", key, false);
    const stored = await redis.keys(`${keyPrefix}:*`);
    expect(stored.some((name) => name.includes(key.slice(4, 14)))).toBe(false);
    // Still one count per id, shared by the instances: this key is throttled, another is not.
    expect(await one.retryAfterMissing(key)).toBeGreaterThan(0);
    expect(await two.retryAfterMissing(`${key.slice(0, -1)}p`)).toBe(0);
  });

  it("asks the shared count for a client that failed here, but not for one that never did", async () => {
    const keyPrefix = nextPrefix();
    const make = async () =>
      createAuthThrottle({ redis: await readyClient(), failuresPerMinute: 3, keyPrefix });
    const [one, two, three] = [await make(), await make(), await make()];
    await fail(one, 1, "192.0.2.8");
    await fail(two, 2, "192.0.2.8");
    expect(await one.retryAfter("192.0.2.8", undefined)).toBeGreaterThan(0);
    // The documented trade-off: an instance that saw no failure lets one through, then blocks.
    expect(await three.retryAfter("192.0.2.8", undefined)).toBe(0);
    await fail(three, 1, "192.0.2.8");
    expect(await three.retryAfter("192.0.2.8", undefined)).toBeGreaterThan(0);
  });

  it("gives a count it reads without expiry the window's expiry, so it never blocks a client for good", async () => {
    const keyPrefix = nextPrefix();
    const redis = await readyClient();
    const throttle = createAuthThrottle({ redis, failuresPerMinute: 2, keyPrefix });
    await fail(throttle, 1, "192.0.2.11");
    // A restore, a manual SET or another program leaves the count at the limit without an expiry.
    await redis.set(`${keyPrefix}:ip:192.0.2.11`, "2");
    const wait = await throttle.retryAfter("192.0.2.11", undefined);
    expect(wait).toBeGreaterThan(55);
    expect(wait).toBeLessThanOrEqual(60);
    expect(await redis.pttl(`${keyPrefix}:ip:192.0.2.11`)).toBeGreaterThan(55_000);
    expect(await redis.pttl(`${keyPrefix}:ip:192.0.2.11`)).toBeLessThanOrEqual(60_000);
  });

  it("holds a count whose expiry is longer than its window (Redis's clock set back) to one window, read or counted", async () => {
    const keyPrefix = nextPrefix();
    const redis = await readyClient();
    const throttle = createAuthThrottle({ redis, failuresPerMinute: 2, keyPrefix });
    await fail(throttle, 1, "192.0.2.12");
    // Redis keeps an expiry as a moment on its own clock: stepped back ten minutes, the count at
    // the limit has ten minutes more to live.
    await redis.set(`${keyPrefix}:ip:192.0.2.12`, "2", "PX", 600_000);
    expect(await throttle.retryAfter("192.0.2.12", undefined)).toBeLessThanOrEqual(60);
    expect(await redis.pttl(`${keyPrefix}:ip:192.0.2.12`)).toBeLessThanOrEqual(60_000);
    await redis.set(`${keyPrefix}:ip:192.0.2.13`, "1", "PX", 600_000);
    await fail(throttle, 1, "192.0.2.13");
    expect(await throttle.retryAfter("192.0.2.13", undefined)).toBeLessThanOrEqual(60);
    expect(await redis.pttl(`${keyPrefix}:ip:192.0.2.13`)).toBeLessThanOrEqual(60_000);
  });

  it("counts afresh over a key of another type or that holds no count, without resting Redis", async () => {
    const keyPrefix = nextPrefix();
    const redis = await readyClient();
    const breaker = new RedisBreaker(redis, 60_000);
    const onKeyRepaired = vi.fn();
    const throttle = createAuthThrottle({ redis, breaker, failuresPerMinute: 3, keyPrefix, onKeyRepaired });
    const hashKey = `${keyPrefix}:ip:192.0.2.12`;
    const textKey = `${keyPrefix}:ip:192.0.2.13`;
    await redis.hset(hashKey, "field", "1");
    await redis.set(textKey, "not a count");
    await fail(throttle, 1, "192.0.2.12");
    await fail(throttle, 1, "192.0.2.13");
    expect(breaker.resting).toBe(false);
    expect([await redis.get(hashKey), await redis.get(textKey)]).toEqual(["1", "1"]);
    expect(await redis.pttl(hashKey)).toBeGreaterThan(55_000);
    expect(onKeyRepaired.mock.calls).toEqual([[hashKey], [textKey]]);
    // Read as no count (never an error) while another program holds the key in another type.
    await redis.del(hashKey);
    await redis.hset(hashKey, "field", "1");
    expect(await throttle.retryAfter("192.0.2.12", undefined)).toBe(0);
    expect(breaker.resting).toBe(false);
  });

  it("reads and counts only what Sluice writes as a count: any other string reads as none, and the next failure counts afresh", async () => {
    const keyPrefix = nextPrefix();
    const redis = await readyClient();
    const breaker = new RedisBreaker(redis, 60_000);
    const onKeyRepaired = vi.fn();
    const throttle = createAuthThrottle({ redis, breaker, failuresPerMinute: 2, keyPrefix, onKeyRepaired });
    // Strings Lua's tonumber reads as a number (or INCR refuses), which INCR never writes.
    const foreign = ["1e3", "0x10", " 7", "7 ", "007", "2.5", "-5", "inf", "nan", "9".repeat(16)];
    const keys: string[] = [];
    for (const [index, value] of foreign.entries()) {
      const address = `192.0.2.${100 + index}`;
      const key = `${keyPrefix}:ip:${address}`;
      keys.push(key);
      // A suspect here, so its shared count is read.
      await fail(throttle, 1, address);
      await redis.set(key, value);
      expect([value, await throttle.retryAfter(address, undefined)]).toEqual([value, 0]);
      expect(await redis.get(key)).toBe(value);
      // The next failure is the first of a new window in Redis, never counted here instead.
      await fail(throttle, 1, address);
      expect([value, await redis.get(key)]).toEqual([value, "1"]);
      expect(await redis.pttl(key)).toBeGreaterThan(55_000);
    }
    expect(onKeyRepaired.mock.calls).toEqual(keys.map((key) => [key]));
    expect(breaker.resting).toBe(false);
  });

  it("keeps counting per instance when Redis is unreachable", async () => {
    const unreachable = await unreachableClient();
    const throttle = createAuthThrottle({
      redis: unreachable,
      failuresPerMinute: 2,
      keyPrefix: nextPrefix(),
    });
    await fail(throttle, 2, "192.0.2.9");
    expect(await throttle.retryAfter("192.0.2.9", undefined)).toBeGreaterThan(0);
    expect(await throttle.retryAfter("192.0.2.10", undefined)).toBe(0);
  });

  it("stops asking a Redis that hangs: one count waits for the command timeout, the next count here", async () => {
    const proxy = await startTcpProxy(6379);
    try {
      const throttle = createAuthThrottle({
        redis: await readyClient(`redis://127.0.0.1:${proxy.port}`),
        failuresPerMinute: 3,
        keyPrefix: nextPrefix(),
      });
      await fail(throttle, 1, "192.0.2.11");
      proxy.stall();
      await fail(throttle, 1, "192.0.2.11");
      const firstSent = proxy.stalledText();
      expect(firstSent).toContain("192.0.2.11");
      // Counted on this instance: the third failure blocks, and the suspect's shared count is not read.
      await fail(throttle, 2, "192.0.2.11");
      expect(await throttle.retryAfter("192.0.2.11", undefined)).toBeGreaterThan(0);
      expect(await throttle.retryAfter("192.0.2.12", undefined)).toBe(0);
      expect(proxy.stalledText()).toBe(firstSent);
    } finally {
      await proxy.close();
    }
  });
});

describe("the throttle's remembered keys", () => {
  it("forgets every key once the last one expired, so the success path is a size check again", () => {
    const keys = new ExpiringKeys(10);
    keys.add("ip:192.0.2.1", 1_000);
    keys.add("ip:192.0.2.2", 2_000);
    expect(keys.empty(1_500)).toBe(false);
    expect(keys.secondsLeft("ip:192.0.2.2", 1_500)).toBe(1);
    expect(keys.empty(2_000)).toBe(true);
    expect(keys.size).toBe(0);
    keys.add("ip:192.0.2.3", 3_000);
    expect(keys.empty(2_500)).toBe(false);
    expect(keys.size).toBe(1);
  });

  // A burst of failures from many addresses left one key per address in the keys failing here for
  // good (up to 100,000 of them): they were dropped only when met again, or at the bound, and,
  // unlike the blocked keys, never all at once, so a trickle of later failures did not matter.
  it("lets go of a burst's keys once their windows ended, though failures go on elsewhere", async () => {
    vi.useFakeTimers({ toFake: ["Date", "setInterval", "clearInterval"] });
    try {
      const throttle = createAuthThrottle({ failuresPerMinute: 2 });
      for (let index = 0; index < 3000; index++)
        await throttle.recordFailure(`198.51.${index >> 8}.${index & 255}`, undefined, false);
      expect(throttle.remembered()).toBeGreaterThanOrEqual(3000);
      // One address fails every 20 s: some key is always live.
      for (let step = 0; step < 7; step++) {
        vi.advanceTimersByTime(20_000);
        await throttle.recordFailure("192.0.2.1", undefined, false);
      }
      expect(throttle.remembered()).toBeLessThan(10);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe("the throttle under a clock stepped back", () => {
  it("refuses a blocked address for at most a window, and says so in its Retry-After", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const failedAt = Date.UTC(2026, 10, 30, 12, 0, 0);
    vi.setSystemTime(failedAt);
    const throttle = createAuthThrottle({ failuresPerMinute: 3 });
    try {
      await fail(throttle, 3, "192.0.2.40", "p");
      expect(await throttle.retryAfter("192.0.2.40", "p")).toBe(60);
      // The host's clock is stepped back ten minutes (NTP, a VM resumed): the block, kept as a moment
      // on that clock, lies eleven minutes ahead, but the throttle's window is a minute.
      const stepped = failedAt - 600_000;
      vi.setSystemTime(stepped);
      expect(await throttle.retryAfter("192.0.2.40", "p")).toBe(60);
      expect(throttle.begin("192.0.2.40", "p")).toBe(1);
      vi.setSystemTime(stepped + 60_000);
      expect(await throttle.retryAfter("192.0.2.40", "p")).toBe(0);
      expect(throttle.begin("192.0.2.40", "p")).toBeTypeOf("function");
    } finally {
      (throttle as { stop?: () => void }).stop?.();
      vi.useRealTimers();
    }
  });
});

describe("the throttle's sweeps", () => {
  it("are stopped by stop(): a gateway closed in a process that goes on leaves no timer behind", () => {
    vi.useFakeTimers();
    try {
      const throttle = createAuthThrottle({ failuresPerMinute: 5, keyPrefix: nextPrefix() });
      expect(vi.getTimerCount()).toBe(2);
      throttle.stop();
      expect(vi.getTimerCount()).toBe(0);
    } finally {
      vi.useRealTimers();
    }
  });

  // A sweep's timer that held the event loop kept any process that built the throttle running for
  // good (a CLI command, a test, a script that builds the gateway and leaves it): the sweeps run
  // for as long as something else keeps the process alive, never in its place.
  it("do not keep a process alive that built the throttle and never stopped it", async () => {
    const script = [
      'import { createAuthThrottle } from "./src/rate-limit/auth-throttle.ts";',
      "const throttle = createAuthThrottle({ failuresPerMinute: 5 });",
      'await throttle.recordFailure("192.0.2.1", "p1", true);',
      'console.log("built");',
    ].join("\n");
    const { code, output } = await exitOfScript(script);
    expect(output).toContain("built");
    expect(code).toBe(0);
  }, 30_000);
});
