import { afterAll, describe, expect, it, vi } from "vitest";
import { beforeTimer } from "../../test/support/before-timer.js";
import { fakeUsageRepository, spent } from "../../test/support/fake-usage-repository.js";
import { redisRelay } from "../../test/support/held-redis-replies.js";
import { redisMonitor } from "../../test/support/redis-monitor.js";
// In CI (CI=true) an unreachable Redis makes this import throw, so the suite fails instead of skipping.
import { redisAvailable, redisTestSpace, redisUrl } from "../../test/support/services.js";
import { startTcpProxy } from "../../test/support/tcp-proxy.js";
import { createRateLimiter } from "../rate-limit/rate-limiter.js";
import { RedisBreaker } from "../redis/redis-breaker.js";
import { createRedisClient } from "../redis/redis-client.js";
import {
  createSharedCallsInFlight,
  type SharedCallsInFlight,
  type SharedCallsInFlightOptions,
  type SharedTake,
} from "./shared-calls-in-flight.js";
import { createSpendGuard } from "./spend-guard.js";

const { nextPrefix, readyClient, unreachableClient, cleanup } = redisTestSpace("spend-in-flight");

afterAll(cleanup);

const made: SharedCallsInFlight[] = [];
afterAll(async () => {
  for (const shared of made) await shared.close();
});

/** Instances on one Redis and one key prefix, each with a client and a breaker of its own. */
async function instances(count: number, options: Partial<SharedCallsInFlightOptions> = {}) {
  const keyPrefix = nextPrefix();
  const list: SharedCallsInFlight[] = [];
  for (let index = 0; index < count; index++) {
    const shared = createSharedCallsInFlight({ redis: await readyClient(), keyPrefix, ...options });
    made.push(shared);
    list.push(shared);
  }
  return { keyPrefix, list };
}

/**
 * A TCP proxy to the test Redis whose replies wait `delay.ms` (0: none) on their way back: a Redis
 * that runs each command but answers after the client's command timeout.
 */
async function slowRedis() {
  const delay = { ms: 0 };
  const relay = await redisRelay(redisUrl, {
    replied(socket, data) {
      if (delay.ms === 0) socket.write(data);
      else setTimeout(() => socket.writable && socket.write(data), delay.ms);
    },
  });
  return { ...relay, delay };
}

const taken = (take: SharedTake): take is () => void => typeof take === "function";
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe.skipIf(!redisAvailable)("the spend cap's calls in flight in Redis", () => {
  it("lets instances that take places at once have no more than the room between them", async () => {
    const { list } = await instances(3);
    const takes = await Promise.all(
      Array.from({ length: 30 }, (_, index) => (list[index % 3] as SharedCallsInFlight).take("p1", 2)),
    );
    expect(takes.filter(taken)).toHaveLength(2);
    expect(takes.filter((take) => take === "full")).toHaveLength(28);
    // Another project counts apart.
    expect(taken(await (list[0] as SharedCallsInFlight).take("p2", 2))).toBe(true);
    // A place given back (once, however often) is free for any instance.
    const [release] = takes.filter(taken);
    release?.();
    release?.();
    await vi.waitFor(async () =>
      expect(taken(await (list[2] as SharedCallsInFlight).take("p1", 2))).toBe(true),
    );
    expect(await (list[1] as SharedCallsInFlight).take("p1", 2)).toBe("full");
  });

  it("counts the calls of a room without bound (< 0) for the others, and leaves no key once all are given back", async () => {
    const { keyPrefix, list } = await instances(2);
    const [one, other] = list as [SharedCallsInFlight, SharedCallsInFlight];
    const releases = await Promise.all([one.take("p1", -1), one.take("p1", -1), one.take("p1", -1)]);
    expect(releases.every(taken)).toBe(true);
    expect(await other.take("p1", 3)).toBe("full");
    const redis = await readyClient();
    expect(await redis.zcard(`${keyPrefix}:p1`)).toBe(3);
    for (const release of releases) if (taken(release)) release();
    await vi.waitFor(async () => expect(await redis.exists(`${keyPrefix}:p1`)).toBe(0));
    expect(one.held()).toBe(0);
  });

  it("lets a crashed instance's places expire, and keeps a live instance's past their lifetime", async () => {
    const { list } = await instances(3, { placeTtlMs: 300 });
    const [crashed, live, other] = list as [SharedCallsInFlight, SharedCallsInFlight, SharedCallsInFlight];
    expect(taken(await crashed.take("gone", 1))).toBe(true);
    // A crashed process renews nothing (nor gives anything back).
    await crashed.close();
    expect(await other.take("gone", 1)).toBe("full");
    await sleep(400);
    expect(taken(await other.take("gone", 1))).toBe(true);

    // A call that runs three lifetimes keeps its place: renewed every third of one.
    const release = await live.take("long", 1);
    expect(taken(release)).toBe(true);
    for (let index = 0; index < 9; index++) {
      await sleep(100);
      expect(await other.take("long", 1)).toBe("full");
    }
    if (taken(release)) release();
    await vi.waitFor(async () => expect(taken(await other.take("long", 1))).toBe(true));
  });

  it("puts back, once Redis answers again, the places of calls still running that expired during an outage longer than their lifetime", async () => {
    // This instance reaches Redis through a proxy that the test cuts; the other directly.
    const proxy = await startTcpProxy(Number(new URL(redisUrl).port));
    const client = await readyClient(`redis://127.0.0.1:${proxy.port}`);
    const redis = await readyClient();
    try {
      const keyPrefix = nextPrefix();
      const key = `${keyPrefix}:p1`;
      // Renewed every 200 ms; Redis rests 50 ms after a failure.
      const live = createSharedCallsInFlight({
        redis: client,
        breaker: new RedisBreaker(client, 50),
        keyPrefix,
        placeTtlMs: 600,
      });
      const other = createSharedCallsInFlight({ redis: await readyClient(), keyPrefix });
      made.push(live, other);
      const release = await live.take("p1", 1);
      expect(taken(release)).toBe(true);
      expect(await other.take("p1", 1)).toBe("full");
      // Redis is cut off from this instance past the place's lifetime: no renewal reaches it, and
      // the place expires there, though its call still runs.
      proxy.cut();
      await vi.waitFor(async () => expect(await redis.exists(key)).toBe(0), {
        timeout: 10_000,
        interval: 50,
      });
      expect(live.held()).toBe(1);
      proxy.restore();
      // Redis answers again: the first renewal puts the place back, with a fresh lifetime. Before,
      // it renewed only the places still there (ZADD XX), and the call went uncounted by every
      // other instance until it ended.
      await vi.waitFor(async () => expect(await redis.zcard(key)).toBe(1), { timeout: 10_000, interval: 50 });
      expect(await redis.pttl(key)).toBeGreaterThan(0);
      expect(await other.take("p1", 1)).toBe("full");
      if (taken(release)) release();
      await vi.waitFor(async () => expect(await redis.exists(key)).toBe(0), {
        timeout: 10_000,
        interval: 50,
      });
      expect(taken(await other.take("p1", 1))).toBe(true);
    } finally {
      await proxy.close();
    }
  }, 30_000);

  it("does not put back a place given back while the renewal that restores it was sent again whole (NOSCRIPT)", async () => {
    const client = await readyClient();
    const redis = await readyClient();
    const keyPrefix = nextPrefix();
    const key = `${keyPrefix}:p1`;
    // Renewed every 20 s, and lasting 60 s: only close() renews here, and no place expires.
    const shared = createSharedCallsInFlight({ redis: client, keyPrefix, placeTtlMs: 60_000 });
    made.push(shared);
    const release = await shared.take("p1", 1);
    expect(taken(release)).toBe(true);
    // The client connected again (a Redis restart, whose script cache is empty): the next renewal
    // puts back the places held.
    client.emit("ready");
    // The renewal's EVALSHA meets a Redis without the script (NOSCRIPT) and is sent again as EVAL;
    // the call ends in between, its ZREM sent after the EVALSHA and before the EVAL.
    const evalsha = client.evalsha.bind(client) as (...args: unknown[]) => Promise<unknown>;
    let hooked = false;
    client.evalsha = ((...args: unknown[]) => {
      if (hooked) return evalsha(...args);
      hooked = true;
      const sent = evalsha("0".repeat(40), ...args.slice(1));
      if (taken(release)) release();
      return sent;
    }) as typeof client.evalsha;
    await shared.close();
    expect(hooked).toBe(true);
    expect(shared.held()).toBe(0);
    // The place given back is not there: it counted against the cap on every instance for its
    // whole lifetime (60 s), a place no call held.
    await vi.waitFor(async () => expect(await redis.zcard(key)).toBe(0), { timeout: 5_000, interval: 50 });
  });

  it("answers undefined at once while Redis is unreachable or rests, for the caller to count alone", async () => {
    const failures: unknown[] = [];
    const client = await unreachableClient();
    const breaker = new RedisBreaker(client, 60_000);
    breaker.onFailed((error) => failures.push(error));
    const shared = createSharedCallsInFlight({ redis: client, breaker, keyPrefix: nextPrefix() });
    made.push(shared);
    // Resting after the first: the second sends no command (one failure seen).
    const both = (async () => [await shared.take("p1", 1), await shared.take("p1", 1)])();
    // At once: not after the command timeout (500 ms), nor the client's next try to connect (200 ms
    // after its last), told by the order of events, before a timer of 100 ms set at the same time.
    // Neither take waits for a turn of the event loop (a command is refused at once while the client
    // is disconnected, the breaker sends none), so the order holds on a loaded machine.
    expect(await beforeTimer(both, 100)).toEqual([undefined, undefined]);
    expect(failures).toHaveLength(1);
    expect(breaker.resting).toBe(true);
  });

  it("gives back a place whose release met Redis resting with the next renewal", async () => {
    const client = await readyClient();
    const breaker = new RedisBreaker(client, 50);
    const keyPrefix = nextPrefix();
    const shared = createSharedCallsInFlight({ redis: client, breaker, keyPrefix, placeTtlMs: 30_000 / 100 });
    made.push(shared);
    const release = await shared.take("p1", 1);
    expect(taken(release)).toBe(true);
    // Another user of the client saw Redis fail: it rests, and the release sends nothing.
    breaker.leave(breaker.enter(), false, new Error("Connection is closed."));
    if (taken(release)) release();
    expect(await client.zcard(`${keyPrefix}:p1`)).toBe(1);
    // The rest ends (50 ms); the next renewal (every 100 ms) removes it, well before it expires.
    await vi.waitFor(async () => expect(await client.zcard(`${keyPrefix}:p1`)).toBe(0), {
      timeout: 250,
      interval: 20,
    });
  });

  it("gives back at close a place whose release met Redis resting, before the next renewal is due", async () => {
    const client = await readyClient();
    const breaker = new RedisBreaker(client, 50);
    const keyPrefix = nextPrefix();
    // Renewed every 10 s: the test is over long before.
    const shared = createSharedCallsInFlight({ redis: client, breaker, keyPrefix });
    const release = await shared.take("p1", 1);
    // The rest ends once the probe, sent 50 ms in, is answered: waited for, not slept (60 ms left
    // a loaded machine's probe unanswered, the rest still on at close, the place still in Redis).
    const recovered = new Promise<void>((resolve) => breaker.onRecovered(resolve));
    breaker.leave(breaker.enter(), false, new Error("Connection is closed."));
    if (taken(release)) release();
    await recovered;
    await shared.close();
    expect(await client.zcard(`${keyPrefix}:p1`)).toBe(0);
  });

  it("replaces a key of another type written inside the prefix, and names it", async () => {
    const repaired: string[] = [];
    const { keyPrefix, list } = await instances(1, { onKeyRepaired: (key) => repaired.push(key) });
    const redis = await readyClient();
    await redis.set(`${keyPrefix}:p1`, "not a sorted set");
    // A place set to expire later than any Sluice writes (a manual ZADD) does not count for good.
    await redis.zadd(`${keyPrefix}:p2`, "+inf", "forever");
    const shared = list[0] as SharedCallsInFlight;
    expect(taken(await shared.take("p1", 1))).toBe(true);
    expect(repaired).toEqual([`${keyPrefix}:p1`]);
    expect(taken(await shared.take("p2", 1))).toBe(true);
    expect(await redis.type(`${keyPrefix}:p1`)).toBe("zset");
    expect(await redis.pttl(`${keyPrefix}:p1`)).toBeGreaterThan(0);
  });

  it("takes a place with the limits in one script: a place only if they admit, counts only with a place, keys of another type replaced and named", async () => {
    const repaired: string[] = [];
    const { keyPrefix, list } = await instances(1, { onKeyRepaired: (key) => repaired.push(key) });
    const shared = list[0] as SharedCallsInFlight;
    const redis = await readyClient();
    const limiter = createRateLimiter({
      redis,
      keyPrefix: `${keyPrefix}:rl`,
      onKeyRepaired: (key) => repaired.push(key),
    });
    const project = `${keyPrefix}:rl:project:60:p1`;
    await redis.set(`${keyPrefix}:p1`, "not a sorted set");
    await redis.sadd(project, "not a count");
    const limits = (limit: number) => limiter.inScript?.([{ name: "project", key: "p1", limit }]);
    const take = (room: number, limit: number) =>
      shared.takeWithLimits?.("p1", room, limits(limit) as NonNullable<ReturnType<typeof limits>>);
    const first = await take(2, 1);
    expect(first).toMatchObject({ decisions: [{ name: "project", allowed: true, remaining: 0 }] });
    expect(repaired).toEqual([`${keyPrefix}:p1`, project]);
    expect(await redis.zcard(`${keyPrefix}:p1`)).toBe(1);
    // The limit refuses: no place taken, nothing counted.
    const refused = await take(2, 1);
    expect(refused).toMatchObject({ place: undefined, decisions: [{ allowed: false }] });
    expect(await redis.zcard(`${keyPrefix}:p1`)).toBe(1);
    expect(await redis.get(project)).toBe("1");
    // No room: "full", and the limits not asked (a limit with room counts nothing either).
    expect(await take(1, 5)).toBe("full");
    expect(await redis.get(project)).toBe("1");
    // Room and a limit with room: a place, counted.
    const second = await take(2, 5);
    expect(second).toMatchObject({ decisions: [{ allowed: true, remaining: 3 }] });
    expect(await redis.zcard(`${keyPrefix}:p1`)).toBe(2);
    expect(await redis.get(project)).toBe("2");
    for (const held of [first, second]) if (typeof held === "object") held.place?.();
    await vi.waitFor(async () => expect(await redis.zcard(`${keyPrefix}:p1`)).toBe(0), { timeout: 5_000 });
    await limiter.close();
  });

  it("gives back a place its script took when Redis answered past the command timeout", async () => {
    const slow = await slowRedis();
    const client = await createRedisClient(slow.url, { commandTimeoutMs: 100 });
    if (client.status !== "ready") await new Promise((resolve) => client.once("ready", resolve));
    const redis = await readyClient();
    try {
      const breaker = new RedisBreaker(client, 50);
      const keyPrefix = nextPrefix();
      const key = `${keyPrefix}:p1`;
      // Renewed every 2 s; a place given back is forgotten 6 s after, once it has expired in Redis:
      // a renewal that a loaded machine runs up to 4 s late still removes it.
      const shared = createSharedCallsInFlight({ redis: client, breaker, keyPrefix, placeTtlMs: 6_000 });
      made.push(shared);
      // Redis runs the script (the place is taken) but its answer comes after the timeout: the
      // caller decides alone, and no release will ever name that place.
      slow.delay.ms = 300;
      expect(await shared.take("p1", 1)).toBeUndefined();
      // Redis answers in time again, for the renewals (the late answer above is on its way).
      slow.delay.ms = 0;
      // The place is in Redis. Seen, it is made to outlive every wait here (60 s, in the same
      // transaction): only a script of this instance's removes it then, not its expiry (6 s), which
      // a loaded machine's late wake-ups could otherwise reach before the test looks.
      await vi.waitFor(
        async () => {
          const [seen] = (await redis.multi().zcard(key).pexpire(key, 60_000).exec()) ?? [];
          expect(seen).toEqual([null, 1]);
        },
        { timeout: 10_000, interval: 20 },
      );
      // The place nobody holds is given back with the next renewal (2 s in), not left to count
      // against the cap until it expires.
      await vi.waitFor(async () => expect(await redis.zcard(key)).toBe(0), { timeout: 10_000, interval: 50 });
      expect(taken(await shared.take("p1", 1))).toBe(true);
    } finally {
      client.disconnect();
      await slow.close();
    }
  });

  it("refuses a hold with no room left under the cap without sending Redis anything", async () => {
    const { keyPrefix, list } = await instances(1);
    const shared = list[0] as SharedCallsInFlight;
    const guard = createSpendGuard({
      usage: fakeUsageRepository({ spendSince: async () => spent(30, 12.5) }),
      now: () => new Date(),
      shared,
    });
    // Every command the Redis server runs, as MONITOR reports it: this prefix's only.
    // On a connection of its own, not ioredis's monitor(): see redisMonitor.
    const seen: string[] = [];
    const monitor = await redisMonitor(redisUrl, (args) => {
      if (args.some((arg) => arg.startsWith(keyPrefix))) seen.push(args.join(" "));
    });
    try {
      const client = await readyClient();
      // MONITOR is on once it reports a command sent after it.
      await vi.waitFor(
        async () => {
          await client.exists(`${keyPrefix}:ready`);
          expect(seen.some((line) => line.includes(`${keyPrefix}:ready`))).toBe(true);
        },
        { timeout: 5_000, interval: 20 },
      );
      seen.length = 0;
      // 30 USD spent of 30: no room at all (roomUnderCap 0). The script would answer "full".
      expect(await guard.hold("p1", 30, 30)).toBeUndefined();
      // Nor with the limits in the same script (they count nothing then either).
      const limiter = createRateLimiter({ redis: client, keyPrefix: `${keyPrefix}:rl` });
      const limits = limiter.inScript?.([{ name: "project", key: "p1", limit: 5 }]);
      expect(await guard.holdWithLimits("p1", 30, 30, limits)).toBeUndefined();
      await limiter.close();
      // A marker sent after the hold: once MONITOR shows it, it has shown whatever the hold sent.
      await client.exists(`${keyPrefix}:marker`);
      await vi.waitFor(() => expect(seen.some((line) => line.includes(`${keyPrefix}:marker`))).toBe(true), {
        timeout: 5_000,
        interval: 20,
      });
      expect(seen.filter((line) => !line.includes(`${keyPrefix}:marker`))).toEqual([]);
      // With room, the hold goes to Redis (the same watch sees it).
      const release = await guard.hold("p1", 60, 30);
      expect(release).toBeTypeOf("function");
      await vi.waitFor(() => expect(seen.some((line) => line.includes(`${keyPrefix}:p1`))).toBe(true), {
        timeout: 5_000,
        interval: 20,
      });
      release?.();
    } finally {
      await monitor.close();
    }
  });

  // A call of a price known before it runs (an image generation) counted at it on its own instance
  // only: another counted its place at the largest call's figure, so a second such call, or 89
  // calls of unknown cost, were admitted there where 45 fit.
  it("counts a place priced on one instance at its price on every other", async () => {
    const { keyPrefix, list } = await instances(2);
    const guards = list.map((shared) =>
      createSpendGuard({
        usage: fakeUsageRepository({ spendSince: async () => spent(0.011, 0.011) }),
        now: () => new Date(),
        shared,
      }),
    );
    const [one, other] = guards as [(typeof guards)[0], (typeof guards)[0]];
    for (const guard of guards) expect(await guard.monthToDate("p1")).toBe(0.011);
    const place = async (guard: typeof one) => {
      const held = await guard.holdWithLimits("p1", 1, 0.011, undefined);
      if (!held?.price) throw new Error("no place");
      return held;
    };
    // 0.50 counted on the first instance; another 0.50 on the second would take the month to 1.011.
    const first = await place(one);
    expect(await first.price?.(0.5)).toBe("counted");
    const second = await place(other);
    expect(await second.price?.(0.5)).toBe("in-flight");
    second.release();
    // The second's calls of unknown cost count it too: 45 more (0.011 + 0.50 + 44 x 0.011 = 0.995
    // before the last), not 89.
    const unknown = await Promise.all(Array.from({ length: 46 }, () => other.hold("p1", 1, 0.011)));
    expect(unknown.filter((release) => typeof release === "function")).toHaveLength(45);
    for (const release of unknown) release?.();
    // Given back, it counts nowhere: 0.011 + 0.988 fits on the second.
    first.release();
    await vi.waitFor(async () => {
      const last = await place(other);
      const verdict = await last.price?.(0.988);
      last.release();
      expect(verdict).toBe("counted");
    });
    const redis = await readyClient();
    await vi.waitFor(async () => expect(await redis.keys(`${keyPrefix}:*`)).toEqual([]));
  });

  it("keeps a place's price while its call runs, through renewals and a prices key lost, and repairs one of another type", async () => {
    const repaired: string[] = [];
    const { keyPrefix, list } = await instances(2, {
      placeTtlMs: 300,
      onKeyRepaired: (key) => repaired.push(key),
    });
    const [one, other] = list as [SharedCallsInFlight, SharedCallsInFlight];
    const figures = { unitNano: 11_000_000, leftNano: 989_000_000 };
    const place = await one.take("p1", -1, figures);
    if (!taken(place) || !place.price) throw new Error("no place");
    expect(await place.price(500_000_000, figures)).toBe("counted");
    // Three lifetimes later, renewed, it still counts at its price: another 0.50 does not fit.
    await sleep(900);
    const probe = async () => {
      const second = await other.take("p1", -1, figures);
      if (!taken(second) || !second.price) throw new Error("no place");
      const verdict = await second.price(500_000_000, figures);
      second();
      return verdict;
    };
    expect(await probe()).toBe("in-flight");
    // Its prices key lost (a failover, a manual DEL): the next renewal writes the price again.
    const redis = await readyClient();
    await redis.del(`${keyPrefix}:p1:prices`);
    await vi.waitFor(async () => expect(await redis.hlen(`${keyPrefix}:p1:prices`)).toBe(1));
    expect(await probe()).toBe("in-flight");
    // A key of another type where the prices go: deleted and counted afresh, named.
    await redis.set(`${keyPrefix}:p2:prices`, "not a hash");
    expect(taken(await other.take("p2", -1, figures))).toBe(true);
    expect(repaired).toEqual([`${keyPrefix}:p2`]);
    expect(await redis.type(`${keyPrefix}:p2:prices`)).toBe("none");
    place();
    await vi.waitFor(async () => expect(await redis.exists(`${keyPrefix}:p1:prices`)).toBe(0));
  });
});
