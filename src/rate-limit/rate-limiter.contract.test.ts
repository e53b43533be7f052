import { afterAll, describe, expect, it, vi } from "vitest";
// In CI (CI=true) an unreachable Redis makes this import throw, so the suite fails instead of skipping.
import { redisAvailable, redisTestSpace } from "../../test/support/services.js";
import { startTcpProxy } from "../../test/support/tcp-proxy.js";
import { RedisBreaker } from "../redis/redis-breaker.js";
import { createRateLimiter, type RateLimiter, type RateLimiterOptions } from "./rate-limiter.js";

const { nextPrefix, readyClient, unreachableClient, cleanup } = redisTestSpace("rl");

afterAll(cleanup);

const backends: Array<{
  name: string;
  available: boolean;
  make(options?: RateLimiterOptions): Promise<RateLimiter>;
}> = [
  {
    name: "memory",
    available: true,
    make: async (options) => createRateLimiter({ keyPrefix: nextPrefix(), ...options }),
  },
  {
    name: "Redis",
    available: redisAvailable,
    make: async (options) =>
      createRateLimiter({ redis: await readyClient(), keyPrefix: nextPrefix(), ...options }),
  },
];

/** One request under one limit. */
async function consume(
  limiter: RateLimiter,
  name: string,
  key: string,
  limit: number,
  windowSeconds?: number,
) {
  const [decision] = await limiter.consumeAll([{ name, key, limit, windowSeconds }]);
  if (!decision) throw new Error("consumeAll gave no decision");
  return decision;
}

/** Time for any command a decision might still send in the background (there must be none). */
const settled = () => new Promise((resolve) => setTimeout(resolve, 50));

async function consumeTimes(limiter: RateLimiter, times: number, ...args: [string, string, number, number?]) {
  const decisions = [];
  for (let index = 0; index < times; index++) decisions.push(await consume(limiter, ...args));
  return decisions;
}

for (const backend of backends) {
  describe.skipIf(!backend.available)(`rate limiter contract on ${backend.name}`, () => {
    it("allows the limit, then refuses with the time left in the window", async () => {
      const limiter = await backend.make();
      const decisions = await consumeTimes(limiter, 4, "project", "p1", 3, 60);
      expect(decisions.map((decision) => decision.allowed)).toEqual([true, true, true, false]);
      expect(decisions.map((decision) => decision.remaining)).toEqual([2, 1, 0, 0]);
      expect(decisions[3]).toMatchObject({ name: "project", limit: 3, windowSeconds: 60 });
      expect(decisions[3]?.resetSeconds).toBeGreaterThanOrEqual(1);
      expect(decisions[3]?.resetSeconds).toBeLessThanOrEqual(60);
      expect(limiter.degraded()).toBe(false);
    });

    it("uses a window of 60 seconds by default", async () => {
      const limiter = await backend.make();
      const decision = await consume(limiter, "project", "p1", 5);
      expect(decision).toMatchObject({ allowed: true, windowSeconds: 60, remaining: 4 });
      expect(decision.resetSeconds).toBeGreaterThan(55);
    });

    it("counts separate keys independently", async () => {
      const limiter = await backend.make();
      expect((await consume(limiter, "project", "a", 1)).allowed).toBe(true);
      expect((await consume(limiter, "project", "b", 1)).allowed).toBe(true);
      expect((await consume(limiter, "project", "a", 1)).allowed).toBe(false);
      expect((await consume(limiter, "project", "b", 1)).allowed).toBe(false);
    });

    it("applies different limits to different names on the same key", async () => {
      const limiter = await backend.make();
      const ip = await consumeTimes(limiter, 3, "ip", "k", 2);
      const device = await consumeTimes(limiter, 3, "device", "k", 3);
      expect(ip.map((decision) => decision.allowed)).toEqual([true, true, false]);
      expect(device.map((decision) => decision.allowed)).toEqual([true, true, true]);
      expect(device[2]).toMatchObject({ name: "device", limit: 3, remaining: 0 });
    });

    it("opens again when the window ends", async () => {
      const limiter = await backend.make();
      expect((await consume(limiter, "ip", "x", 1, 1)).allowed).toBe(true);
      const refused = await consume(limiter, "ip", "x", 1, 1);
      expect(refused).toMatchObject({ allowed: false, resetSeconds: 1, windowSeconds: 1 });
      await new Promise((resolve) => setTimeout(resolve, 1_100));
      expect((await consume(limiter, "ip", "x", 1, 1)).allowed).toBe(true);
    });

    it("reports every decision", async () => {
      const seen: Array<[string, boolean]> = [];
      const limiter = await backend.make({ onDecision: (name, allowed) => seen.push([name, allowed]) });
      await consumeTimes(limiter, 2, "project", "p", 1);
      expect(seen).toEqual([
        ["project", true],
        ["project", false],
      ]);
    });

    it("keeps a key's count when its limit changes", async () => {
      const limiter = await backend.make();
      await consumeTimes(limiter, 3, "project", "changing", 5);
      expect(await consume(limiter, "project", "changing", 10)).toMatchObject({
        allowed: true,
        remaining: 6,
      });
      expect(await consume(limiter, "project", "changing", 4)).toMatchObject({
        allowed: false,
        remaining: 0,
      });
    });

    it("counts only admitted requests: a limit raised mid-window allows the difference", async () => {
      const limiter = await backend.make();
      const refused = await consumeTimes(limiter, 10, "project", "raised", 3);
      expect(refused.filter((decision) => decision.allowed)).toHaveLength(3);
      const raised = await consumeTimes(limiter, 3, "project", "raised", 5);
      expect(raised.map((decision) => [decision.allowed, decision.remaining])).toEqual([
        [true, 1],
        [true, 0],
        [false, 0],
      ]);
    });

    it("admits exactly the limit of many concurrent requests on one key", async () => {
      const limiter = await backend.make();
      const decisions = await Promise.all(
        Array.from({ length: 300 }, () => consume(limiter, "project", "crowd", 100)),
      );
      expect(decisions.filter((decision) => decision.allowed)).toHaveLength(100);
      for (const decision of decisions) {
        expect(decision.remaining).toBeGreaterThanOrEqual(0);
        expect(decision.resetSeconds).toBeGreaterThanOrEqual(1);
        expect(decision.resetSeconds).toBeLessThanOrEqual(60);
      }
    });

    it("counts a request that any limit refuses in none of its limits, and says which limits had room", async () => {
      const limiter = await backend.make();
      const project = { name: "project", key: "all-or-none", limit: 3 };
      const greedy = [project, { name: "ip", key: "greedy", limit: 1 }];
      expect(await limiter.consumeAll(greedy)).toMatchObject([
        { name: "project", allowed: true, remaining: 2 },
        { name: "ip", allowed: true, remaining: 0 },
      ]);
      // The project had room for the second request, but its IP limit did not: counted in neither.
      expect(await limiter.consumeAll(greedy)).toMatchObject([
        { name: "project", allowed: true, remaining: 2 },
        { name: "ip", allowed: false, remaining: 0 },
      ]);
      expect(await limiter.consumeAll([project, { name: "ip", key: "other", limit: 1 }])).toMatchObject([
        { allowed: true, remaining: 1 },
        { allowed: true, remaining: 0 },
      ]);
    });

    it("refuses every request under a limit of 0 and counts none of them in the request's other limits", async () => {
      const limiter = await backend.make();
      const limits = [
        { name: "project", key: "beside-zero", limit: 2 },
        { name: "device", key: "zero", limit: 0 },
      ];
      for (let index = 0; index < 3; index++) {
        expect(await limiter.consumeAll(limits)).toMatchObject([
          { allowed: true, remaining: 2 },
          { allowed: false, remaining: 0, resetSeconds: 60 },
        ]);
      }
      expect(await consume(limiter, "project", "beside-zero", 2)).toMatchObject({
        allowed: true,
        remaining: 1,
      });
    });

    it("refuses everything under a limit of 0", async () => {
      const limiter = await backend.make();
      expect(await consume(limiter, "project", "zero", 0)).toMatchObject({ allowed: false, remaining: 0 });
    });
  });
}

/** A Redis limiter whose connection passes through a TCP proxy the test can cut, and its fallback events. */
async function limiterBehindProxy() {
  const proxy = await startTcpProxy(6379);
  const events: boolean[] = [];
  const client = await readyClient(`redis://127.0.0.1:${proxy.port}`);
  const limiter = createRateLimiter({
    redis: client,
    keyPrefix: nextPrefix(),
    onFallback: (on) => events.push(on),
  });
  return { proxy, client, limiter, events };
}

describe.skipIf(!redisAvailable)("rate limiter on Redis", () => {
  it("shares one count between instances: exactly the limit is allowed", async () => {
    const keyPrefix = nextPrefix();
    const one = createRateLimiter({ redis: await readyClient(), keyPrefix });
    const two = createRateLimiter({ redis: await readyClient(), keyPrefix });
    const decisions = await Promise.all(
      Array.from({ length: 200 }, (_, index) => consume(index % 2 ? one : two, "project", "shared", 50)),
    );
    expect(decisions.filter((decision) => decision.allowed)).toHaveLength(50);
    expect([one.backend, one.degraded(), two.degraded()]).toEqual(["redis", false, false]);
  });

  it("keeps deciding in Redis when this process stalls past the command timeout while Redis answers", async () => {
    // Straight to Redis: a proxy in this process would stall too. Three instances' worth of
    // decisions on one key, then this process held for longer than the command timeout (500 ms) with
    // the next ones sent: a long GC pause, or a busy machine that did not run it. Redis answered in
    // time, its answers wait in the socket, and the timers come first when the loop turns again.
    const keyPrefix = nextPrefix();
    const limiter = createRateLimiter({ redis: await readyClient(), keyPrefix });
    const before = await Promise.all(
      Array.from({ length: 3 }, () => consume(limiter, "project", "stall", 5)),
    );
    const during = Array.from({ length: 4 }, () => consume(limiter, "project", "stall", 5));
    const until = performance.now() + 700;
    while (performance.now() < until) {}
    const decisions = [...before, ...(await Promise.all(during))];
    // The shared count decided each once: five admitted, remaining 4 down to 0, and no fallback,
    // which would have admitted the four on this instance's own count (and counted them in Redis too).
    expect(decisions.map((decision) => decision.allowed)).toEqual([
      true,
      true,
      true,
      true,
      true,
      false,
      false,
    ]);
    expect(decisions.map((decision) => decision.remaining)).toEqual([4, 3, 2, 1, 0, 0, 0]);
    expect(limiter.degraded()).toBe(false);
    expect(await (await readyClient()).get(`${keyPrefix}:project:60:stall`)).toBe("5");
  });

  it("decides all the limits of a request in one round trip, with nothing to give back after a refusal", async () => {
    const redis = await readyClient();
    const limiter = createRateLimiter({ redis, keyPrefix: nextPrefix() });
    const limits = [
      { name: "project", key: "trip", limit: 10 },
      { name: "ip", key: "trip", limit: 1 },
      { name: "device", key: "trip", limit: 10 },
    ];
    // The first request also sends the script itself.
    expect((await limiter.consumeAll(limits)).every((decision) => decision.allowed)).toBe(true);
    const sent = vi.spyOn(redis, "sendCommand");
    expect((await limiter.consumeAll(limits)).map((decision) => decision.allowed)).toEqual([
      true,
      false,
      true,
    ]);
    await settled();
    expect(sent).toHaveBeenCalledTimes(1);
  });

  it("never lets requests one limit refuses take from another limit, not even for a moment, across instances", async () => {
    const keyPrefix = nextPrefix();
    const one = createRateLimiter({ redis: await readyClient(), keyPrefix });
    const two = createRateLimiter({ redis: await readyClient(), keyPrefix });
    const project = { name: "project", key: "busy", limit: 21 };
    const greedy = [project, { name: "ip", key: "greedy", limit: 1 }];
    expect((await one.consumeAll(greedy)).every((decision) => decision.allowed)).toBe(true);
    // 200 requests from the greedy client, over its IP limit, and among them 20 from other clients.
    const others = new Set<number>();
    const decided = await Promise.all(
      Array.from({ length: 220 }, (_, index) => {
        const limiter = index % 2 ? one : two;
        if (index % 11 !== 0) return limiter.consumeAll(greedy);
        others.add(index);
        return limiter.consumeAll([project, { name: "ip", key: `other-${index}`, limit: 1 }]);
      }),
    );
    const greedyDecisions = decided.filter((_, index) => !others.has(index));
    expect(greedyDecisions.every(([, ip]) => ip?.allowed === false)).toBe(true);
    // Every other client is admitted, each seeing the project's count of admitted requests only.
    const otherDecisions = decided.filter((_, index) => others.has(index));
    expect(otherDecisions.every((decisions) => decisions.every((decision) => decision.allowed))).toBe(true);
    expect(
      otherDecisions.map(([projectDecision]) => projectDecision?.remaining).sort((a = 0, b = 0) => a - b),
    ).toEqual(Array.from({ length: 20 }, (_, index) => index));
  });

  it("admits exactly the limit of heavy concurrent traffic on two instances while another limit refuses most of it", async () => {
    const keyPrefix = nextPrefix();
    const one = createRateLimiter({ redis: await readyClient(), keyPrefix });
    const two = createRateLimiter({ redis: await readyClient(), keyPrefix });
    const project = { name: "project", key: "crowded", limit: 60 };
    // 320 requests from one client over its IP limit of 10, and 80 from clients of their own.
    const decided = await Promise.all(
      Array.from({ length: 400 }, (_, index) =>
        (index % 2 ? one : two).consumeAll([
          project,
          index % 5
            ? { name: "ip", key: "greedy", limit: 10 }
            : { name: "ip", key: `client-${index}`, limit: 10 },
        ]),
      ),
    );
    const admitted = (index: number) => decided[index]?.every((decision) => decision.allowed) ?? false;
    const indices = decided.map((_, index) => index);
    expect(indices.filter(admitted)).toHaveLength(60);
    expect(indices.filter((index) => index % 5 !== 0 && admitted(index))).toHaveLength(10);
    expect(await consume(one, "project", "crowded", 60)).toMatchObject({ allowed: false, remaining: 0 });
  });

  it("decides all the limits of a request together on this instance while Redis is unreachable", async () => {
    const events: boolean[] = [];
    const decisions: Array<[string, boolean]> = [];
    const limiter = createRateLimiter({
      redis: await unreachableClient(),
      keyPrefix: nextPrefix(),
      onFallback: (on) => events.push(on),
      onDecision: (name, allowed) => decisions.push([name, allowed]),
    });
    const greedy = [
      { name: "project", key: "down", limit: 3 },
      { name: "ip", key: "greedy", limit: 1 },
    ];
    expect((await limiter.consumeAll(greedy)).every((decision) => decision.allowed)).toBe(true);
    expect(await limiter.consumeAll(greedy)).toMatchObject([
      { allowed: true, remaining: 2 },
      { allowed: false, remaining: 0 },
    ]);
    const others = await consumeTimes(limiter, 3, "project", "down", 3);
    expect(others.map((decision) => decision.allowed)).toEqual([true, true, false]);
    expect(decisions.slice(0, 4)).toEqual([
      ["project", true],
      ["ip", true],
      ["project", true],
      ["ip", false],
    ]);
    expect([limiter.degraded(), events]).toEqual([true, [true]]);
  });

  it("falls back to per-instance limits when Redis is unreachable, never unlimited", async () => {
    const events: boolean[] = [];
    const limiter = createRateLimiter({
      redis: await unreachableClient(),
      keyPrefix: nextPrefix(),
      onFallback: (on) => events.push(on),
    });
    const decisions = await consumeTimes(limiter, 5, "project", "down", 3);
    expect(decisions.map((decision) => decision.allowed)).toEqual([true, true, true, false, false]);
    expect(decisions[4]?.resetSeconds).toBeGreaterThanOrEqual(1);
    expect(limiter.degraded()).toBe(true);
    expect(events).toEqual([true]);
  });

  it("says when Redis answers again, and counts in Redis again", async () => {
    const { proxy, client, limiter, events } = await limiterBehindProxy();
    try {
      expect((await consume(limiter, "project", "flap", 3)).remaining).toBe(2);

      proxy.cut();
      const local = await consumeTimes(limiter, 4, "project", "flap", 3);
      expect(local.map((decision) => decision.allowed)).toEqual([true, true, true, false]);
      expect(limiter.degraded()).toBe(true);

      proxy.restore();
      await new Promise((resolve) => client.once("ready", resolve));
      // The reconnect sends the breaker's write probe at once; it ends the rest when it writes.
      await vi.waitFor(() => expect(limiter.degraded()).toBe(false), { timeout: 1_000, interval: 5 });
      expect(await consume(limiter, "project", "flap", 3)).toMatchObject({ allowed: true, remaining: 1 });
      expect(events).toEqual([true, false]);
    } finally {
      await proxy.close();
    }
  });

  it("stops reporting the fallback as soon as Redis takes writes again, before any decision", async () => {
    const { proxy, client, limiter, events } = await limiterBehindProxy();
    try {
      proxy.cut();
      await consume(limiter, "project", "back", 3);
      expect([limiter.degraded(), events]).toEqual([true, [true]]);
      proxy.restore();
      await new Promise((resolve) => client.once("ready", resolve));
      // Not the reconnect itself (a full Redis, or a replica, gets ready too): the write probe it
      // sends at once, one round trip later, well within the rest (2 s).
      expect(limiter.degraded()).toBe(true);
      await vi.waitFor(() => expect([limiter.degraded(), events]).toEqual([false, [true, false]]), {
        timeout: 1_000,
        interval: 5,
      });
    } finally {
      await proxy.close();
    }
  });

  it("replaces a connection that goes silent: decisions are made in Redis again within seconds", async () => {
    const proxy = await startTcpProxy(6379);
    try {
      const prefix = nextPrefix();
      const limiter = createRateLimiter({
        redis: await readyClient(`redis://127.0.0.1:${proxy.port}`),
        keyPrefix: prefix,
      });
      expect((await consume(limiter, "project", "silent", 100)).remaining).toBe(99);
      // The connection stops passing anything on (a black-holed path); a new one would get through.
      proxy.stall();
      expect((await consume(limiter, "project", "silent", 100)).allowed).toBe(true);
      expect(limiter.degraded()).toBe(true);
      const deadline = Date.now() + 5_000;
      while (limiter.degraded() && Date.now() < deadline)
        await new Promise((resolve) => setTimeout(resolve, 50));
      expect(limiter.degraded()).toBe(false);
      // Counted in Redis again, where the first decision left its count.
      expect(await consume(limiter, "project", "silent", 100)).toMatchObject({
        allowed: true,
        remaining: 98,
      });
      expect(await (await readyClient()).get(`${prefix}:project:60:silent`)).toBe("2");
    } finally {
      await proxy.close();
    }
  });

  it("stops asking a Redis that hangs: one decision waits for the command timeout, the next stay here", async () => {
    const proxy = await startTcpProxy(6379);
    try {
      const limiter = createRateLimiter({
        redis: await readyClient(`redis://127.0.0.1:${proxy.port}`),
        keyPrefix: nextPrefix(),
        redisRestMs: 60_000,
      });
      expect((await consume(limiter, "project", "hang", 3)).allowed).toBe(true);
      proxy.stall();
      const decisions = [await consume(limiter, "project", "hang", 3)];
      const firstSent = proxy.stalledText();
      decisions.push(...(await consumeTimes(limiter, 4, "project", "hang", 3)));
      expect(decisions.map((decision) => decision.allowed)).toEqual([true, true, true, false, false]);
      expect(limiter.degraded()).toBe(true);
      // Only the first decision's commands were sent to the hanging Redis.
      const sent = proxy.stalledText();
      expect(sent).toContain("hang");
      expect(sent.split("hang").length - 1).toBe(firstSent.split("hang").length - 1);
    } finally {
      await proxy.close();
    }
  });

  it("after a rest, decides here while the breaker's own write probes Redis: no decision waits for a Redis that hangs", async () => {
    const proxy = await startTcpProxy(6379);
    try {
      const client = await readyClient(`redis://127.0.0.1:${proxy.port}`);
      const breaker = new RedisBreaker(client, 50);
      const enter = vi.spyOn(breaker, "enter");
      const limiter = createRateLimiter({ redis: client, breaker, keyPrefix: nextPrefix() });
      await consume(limiter, "project", "probe", 100);
      // Redis hangs altogether: the replacement connection hangs too, so the client never gets ready.
      proxy.stall({ newConnections: true });
      await consume(limiter, "project", "probe", 100);
      await new Promise((resolve) => setTimeout(resolve, 60));
      enter.mockClear();
      const started = Date.now();
      const concurrent = await Promise.all(
        Array.from({ length: 5 }, () => consume(limiter, "project", "probe", 100)),
      );
      // None waited for the command timeout (500 ms): before, one of them was the probe.
      expect(Date.now() - started).toBeLessThan(400);
      expect(concurrent.every((decision) => decision.allowed)).toBe(true);
      expect(enter.mock.results.map((result) => result.value)).toEqual([
        "rest",
        "rest",
        "rest",
        "rest",
        "rest",
      ]);
      expect(breaker.resting).toBe(true);
      breaker.close();
    } finally {
      await proxy.close();
    }
  });

  it("decides here while a failure another user of the client saw rests Redis", async () => {
    const redis = await readyClient();
    const breaker = new RedisBreaker(redis, 60_000);
    const prefix = nextPrefix();
    const limiter = createRateLimiter({ redis, breaker, keyPrefix: prefix });
    // The device token ledger, say, saw Redis fail.
    await breaker
      .run(
        () => Promise.reject(new Error("Command timed out")),
        () => null,
      )
      .catch(() => {});
    expect((await consume(limiter, "project", "rested", 1)).allowed).toBe(true);
    expect((await consume(limiter, "project", "rested", 1)).allowed).toBe(false);
    expect(limiter.degraded()).toBe(true);
    expect(await redis.keys(`${prefix}*`)).toEqual([]);
  });
});

describe.skipIf(!redisAvailable)("rate limiter on Redis, keys Sluice did not write", () => {
  /** A limiter on Redis under a fresh prefix, its repairs of foreign keys and its fallbacks watched. */
  async function watchedLimiter() {
    const redis = await readyClient();
    const keyPrefix = nextPrefix();
    const breaker = new RedisBreaker(redis, 60_000);
    const onFallback = vi.fn();
    const onKeyRepaired = vi.fn();
    const limiter = createRateLimiter({ redis, breaker, keyPrefix, onFallback, onKeyRepaired });
    return { redis, keyPrefix, breaker, onFallback, onKeyRepaired, limiter };
  }

  it("gives a window key without expiry, at its limit, the window's expiry instead of refusing it for good", async () => {
    const redis = await readyClient();
    const keyPrefix = nextPrefix();
    const limiter = createRateLimiter({ redis, keyPrefix });
    // Sluice never writes one; a restore, a manual SET or another program's script may.
    await redis.set(`${keyPrefix}:project:1:stuck`, "3");
    await redis.set(`${keyPrefix}:ip:60:stuck`, "1");
    const refused = await limiter.consumeAll([
      { name: "project", key: "stuck", limit: 3, windowSeconds: 1 },
      { name: "ip", key: "stuck", limit: 5 },
    ]);
    expect(refused.map((decision) => decision.allowed)).toEqual([false, true]);
    expect(await redis.pttl(`${keyPrefix}:project:1:stuck`)).toBeGreaterThan(0);
    expect(await redis.pttl(`${keyPrefix}:project:1:stuck`)).toBeLessThanOrEqual(1_000);
    // A limit that had room, in a request another refused, gets its expiry too; its count stays.
    expect(await redis.pttl(`${keyPrefix}:ip:60:stuck`)).toBeGreaterThan(55_000);
    expect(await redis.get(`${keyPrefix}:ip:60:stuck`)).toBe("1");
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    expect((await consume(limiter, "project", "stuck", 3, 1)).allowed).toBe(true);
  });

  it("holds a window key whose expiry is longer than its window (Redis's clock set back, a restore) to one window", async () => {
    const redis = await readyClient();
    const keyPrefix = nextPrefix();
    const limiter = createRateLimiter({ redis, keyPrefix });
    // Redis keeps an expiry as a moment on its own clock: stepped back ten minutes, a full window's
    // key has ten minutes more to live, though its window is a second long.
    await redis.set(`${keyPrefix}:project:1:long`, "3", "PX", 600_000);
    await redis.set(`${keyPrefix}:ip:60:long`, "1", "PX", 600_000);
    const refused = await limiter.consumeAll([
      { name: "project", key: "long", limit: 3, windowSeconds: 1 },
      { name: "ip", key: "long", limit: 5 },
    ]);
    expect(refused.map((decision) => [decision.allowed, decision.resetSeconds])).toEqual([
      [false, 1],
      [true, 60],
    ]);
    expect(await redis.pttl(`${keyPrefix}:project:1:long`)).toBeLessThanOrEqual(1_000);
    // A limit that had room, in a request another refused, is held to its window too; its count stays.
    expect(await redis.pttl(`${keyPrefix}:ip:60:long`)).toBeLessThanOrEqual(60_000);
    expect(await redis.get(`${keyPrefix}:ip:60:long`)).toBe("1");
    // Retry-After said 1 s: the client that waited it is admitted.
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    expect((await consume(limiter, "project", "long", 3, 1)).allowed).toBe(true);
  });

  it("counts afresh over a window key of another type or that holds no count, without falling back", async () => {
    const { redis, keyPrefix, breaker, onFallback, onKeyRepaired, limiter } = await watchedLimiter();
    const projectKey = `${keyPrefix}:project:60:odd`;
    const ipKey = `${keyPrefix}:ip:60:odd`;
    await redis.hset(projectKey, "field", "1");
    await redis.set(ipKey, "not a count");
    const limits = [
      { name: "project", key: "odd", limit: 2 },
      { name: "ip", key: "odd", limit: 2 },
    ];
    expect((await limiter.consumeAll(limits)).map((decision) => decision.remaining)).toEqual([1, 1]);
    expect([await redis.get(projectKey), await redis.get(ipKey)]).toEqual(["1", "1"]);
    expect(await redis.pttl(projectKey)).toBeGreaterThan(55_000);
    expect(onKeyRepaired.mock.calls).toEqual([[projectKey], [ipKey]]);
    expect([limiter.degraded(), breaker.resting]).toEqual([false, false]);
    expect(onFallback).not.toHaveBeenCalled();
    // Repaired once: the next request finds the counts Sluice wrote.
    expect((await limiter.consumeAll(limits)).map((decision) => decision.remaining)).toEqual([0, 0]);
    expect(onKeyRepaired).toHaveBeenCalledTimes(2);
  });

  it("counts afresh over any string INCR does not write, never taking INCR's error for a failing Redis", async () => {
    const { redis, keyPrefix, breaker, onFallback, onKeyRepaired, limiter } = await watchedLimiter();
    // Digits INCR refuses (a leading zero) or Lua's tonumber reads, none of which INCR writes.
    const foreign = ["007", "00", "-5", "1e3", " 7"];
    for (const value of foreign) {
      const key = `${keyPrefix}:project:60:${value}`;
      await redis.set(key, value, "PX", 60_000);
      const [decision] = await limiter.consumeAll([{ name: "project", key: value, limit: 10 }]);
      expect([value, decision?.remaining, await redis.get(key)]).toEqual([value, 9, "1"]);
    }
    expect(onKeyRepaired.mock.calls).toEqual(foreign.map((value) => [`${keyPrefix}:project:60:${value}`]));
    expect([limiter.degraded(), breaker.resting]).toEqual([false, false]);
    expect(onFallback).not.toHaveBeenCalled();
  });

  it("reports the fallback as soon as another user of the client sees Redis fail, before any decision", async () => {
    const redis = await readyClient();
    const breaker = new RedisBreaker(redis, 60_000);
    const events: Array<[boolean, string | undefined]> = [];
    const limiter = createRateLimiter({
      redis,
      breaker,
      keyPrefix: nextPrefix(),
      onFallback: (on, error) => events.push([on, error?.message]),
    });
    // The authentication throttle, say, saw Redis fail: the limits are per instance from now on.
    await breaker
      .run(
        () => Promise.reject(new Error("Command timed out")),
        () => null,
      )
      .catch(() => {});
    expect(limiter.degraded()).toBe(true);
    expect(events).toEqual([[true, "Command timed out"]]);
  });
});

describe("createRedisClient", () => {
  it("builds a client that fails fast and survives an unreachable server", async () => {
    const errors: Error[] = [];
    const client = await unreachableClient({ onError: (error) => errors.push(error) });
    expect(client.options).toMatchObject({
      lazyConnect: false,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      autoResendUnfulfilledCommands: false,
    });
    expect(client.options.commandTimeout).toBeLessThanOrEqual(1_000);
    await expect(client.get("anything")).rejects.toThrow();
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(errors.length).toBeGreaterThan(0);
  });
});
