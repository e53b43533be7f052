import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { redisAvailable, redisTestSpace } from "../../test/support/services.js";
import { startTcpProxy } from "../../test/support/tcp-proxy.js";
import { deviceTokenTtlMaxSeconds } from "../config.js";
import { RedisBreaker } from "../redis/redis-breaker.js";
import {
  createMemoryDeviceTokenLedger,
  createRedisDeviceTokenLedger,
  type DeviceTokenLedger,
  type DeviceTokenPolicy,
  type DeviceTokenReceipt,
  deviceTokenDigest,
  RedisKeyDataError,
  RedisRestingError,
} from "./device-token-cache.js";

/** A ledger under test and a way to let `ms` pass on its clock. */
interface LedgerFixture {
  ledger: DeviceTokenLedger;
  advance(ms: number): Promise<void>;
  /** Milliseconds since the epoch on its clock. */
  now(): number;
}

/** Short lifetimes so the Redis run (real time) stays fast; the memory run moves a fake clock. */
const lifetimeMs = 300;
const budget: DeviceTokenPolicy = { mode: "budget", ttlMs: lifetimeMs, maxRequests: 3 };
const singleUse: DeviceTokenPolicy = { mode: "single-use", retentionMs: lifetimeMs };
/** Policies that keep an entry ten times longer than `budget` trusts it. */
const longSingleUse: DeviceTokenPolicy = { mode: "single-use", retentionMs: 10 * lifetimeMs };
const longBudget: DeviceTokenPolicy = { mode: "budget", ttlMs: 10 * lifetimeMs, maxRequests: 3 };
const newDigest = () => deviceTokenDigest(randomBytes(64).toString("base64")) as string;

function ledgerContract(fixture: () => LedgerFixture) {
  it("calls a never-seen token fresh", async () => {
    const { ledger } = fixture();
    expect(await ledger.check("project-1", newDigest(), budget)).toBe("fresh");
  });

  it("serves a remembered token from the cache until its budget is spent, then refuses it", async () => {
    const { ledger } = fixture();
    const digest = newDigest();
    expect(await ledger.remember("project-1", digest, budget)).toBe("accepted");
    expect(await ledger.check("project-1", digest, budget)).toBe("cached-ok");
    expect(await ledger.check("project-1", digest, budget)).toBe("cached-ok");
    expect(await ledger.check("project-1", digest, budget)).toBe("budget-exhausted");
    expect(await ledger.check("project-1", digest, budget)).toBe("budget-exhausted");
  });

  it("forgets a token after its TTL, so it is fresh again", async () => {
    const { ledger, advance } = fixture();
    const digest = newDigest();
    await ledger.remember("project-1", digest, budget);
    await advance(lifetimeMs / 3);
    expect(await ledger.check("project-1", digest, budget)).toBe("cached-ok");
    await advance(lifetimeMs);
    expect(await ledger.check("project-1", digest, budget)).toBe("fresh");
  });

  it("asks Apple again for a token verified before the project was created (deleted and created again under its id)", async () => {
    const { ledger, advance, now } = fixture();
    const digest = newDigest();
    expect(await ledger.remember("project-1", digest, longBudget)).toBe("accepted");
    await advance(20);
    const recreated: DeviceTokenPolicy = {
      mode: "budget",
      ttlMs: 10 * lifetimeMs,
      maxRequests: 3,
      verifiedSince: now(),
    };
    expect(await ledger.check("project-1", digest, recreated)).toBe("fresh");
    expect(await ledger.remember("project-1", digest, recreated)).toBe("accepted");
    expect(await ledger.check("project-1", digest, recreated)).toBe("cached-ok");
  });

  it("keeps the budget of a token verified under settings stamped ahead of its clock (the writer's clock ahead)", async () => {
    const { ledger, advance, now } = fixture();
    const digest = newDigest();
    // The project was created (or its Apple settings changed) by an instance, or a CLI, whose clock
    // is a minute ahead of this ledger's: the token Apple verifies now is verified under them.
    const ahead: DeviceTokenPolicy = {
      mode: "budget",
      ttlMs: lifetimeMs,
      maxRequests: 3,
      verifiedSince: now() + 60_000,
    };
    expect(await ledger.check("project-1", digest, ahead)).toBe("fresh");
    const first: DeviceTokenReceipt = {};
    expect(await ledger.remember("project-1", digest, ahead, first)).toBe("accepted");
    expect(await ledger.check("project-1", digest, ahead)).toBe("cached-ok");
    // A refused request's use still goes back to the entry it was counted on.
    await ledger.release("project-1", digest, first.stamp as string);
    expect(await ledger.check("project-1", digest, ahead)).toBe("cached-ok");
    expect(await ledger.check("project-1", digest, ahead)).toBe("cached-ok");
    expect(await ledger.check("project-1", digest, ahead)).toBe("budget-exhausted");
    expect(await ledger.remember("project-1", digest, ahead)).toBe("budget-exhausted");
    // Trusted no longer than the entry lives: the TTL from the verification, on the ledger's clock.
    await advance(lifetimeMs + 50);
    expect(await ledger.check("project-1", digest, ahead)).toBe("fresh");
  });

  it("keeps projects apart", async () => {
    const { ledger } = fixture();
    const digest = newDigest();
    await ledger.remember("project-1", digest, budget);
    expect(await ledger.check("project-2", digest, budget)).toBe("fresh");
  });

  it("counts a concurrent second verification against the budget", async () => {
    const { ledger } = fixture();
    const digest = newDigest();
    const policy: DeviceTokenPolicy = { mode: "budget", ttlMs: lifetimeMs, maxRequests: 1 };
    const results = await Promise.all([
      ledger.remember("project-1", digest, policy),
      ledger.remember("project-1", digest, policy),
    ]);
    expect(results.sort()).toEqual(["accepted", "budget-exhausted"]);
  });

  it("accepts a single-use token once and calls every reuse a replay", async () => {
    const { ledger } = fixture();
    const digest = newDigest();
    expect(await ledger.check("project-1", digest, singleUse)).toBe("fresh");
    expect(await ledger.remember("project-1", digest, singleUse)).toBe("accepted");
    expect(await ledger.check("project-1", digest, singleUse)).toBe("replayed");
    expect(await ledger.remember("project-1", digest, singleUse)).toBe("replayed");
  });

  it("lets exactly one of two racing verifications of a single-use token through", async () => {
    const { ledger } = fixture();
    const digest = newDigest();
    const results = await Promise.all(
      Array.from({ length: 5 }, () => ledger.remember("project-1", digest, singleUse)),
    );
    expect(results.filter((result) => result === "accepted")).toHaveLength(1);
    expect(results.filter((result) => result === "replayed")).toHaveLength(4);
  });

  it("keeps refusing a single-use token for the whole retention window", async () => {
    const { ledger, advance } = fixture();
    const digest = newDigest();
    await ledger.remember("project-1", digest, singleUse);
    await advance(lifetimeMs / 2);
    expect(await ledger.check("project-1", digest, singleUse)).toBe("replayed");
    await advance(lifetimeMs);
    expect(await ledger.check("project-1", digest, singleUse)).toBe("fresh");
  });

  it("trusts a token first used as single-use for the budget TTL only, and keeps refusing it as single-use", async () => {
    const { ledger, advance } = fixture();
    const digest = newDigest();
    expect(await ledger.remember("project-1", digest, longSingleUse)).toBe("accepted");
    // The project switched to cached tokens: within the TTL from Apple's verification, trusted.
    expect(await ledger.check("project-1", digest, budget)).toBe("cached-ok");
    await advance(lifetimeMs + 50);
    // Past that TTL the entry (kept for single-use replays) is not trusted: Apple is asked again.
    expect(await ledger.check("project-1", digest, budget)).toBe("fresh");
    expect(await ledger.remember("project-1", digest, budget)).toBe("accepted");
    expect(await ledger.check("project-1", digest, budget)).toBe("cached-ok");
    // Switched back, the token is still a replay for the rest of its retention.
    expect(await ledger.check("project-1", digest, longSingleUse)).toBe("replayed");
    await advance(lifetimeMs + 50);
    expect(await ledger.check("project-1", digest, budget)).toBe("fresh");
    expect(await ledger.remember("project-1", digest, longSingleUse)).toBe("replayed");
  });

  it("trusts a token for the TTL of the caller, counted from its verification, when TTLs differ", async () => {
    const { ledger, advance } = fixture();
    const digest = newDigest();
    expect(await ledger.remember("project-1", digest, longBudget)).toBe("accepted");
    await advance(lifetimeMs + 50);
    expect(await ledger.check("project-1", digest, budget)).toBe("fresh");
    expect(await ledger.check("project-1", digest, longBudget)).toBe("cached-ok");
    // Verified anew by the caller with the shorter TTL: its budget starts again.
    expect(await ledger.remember("project-1", digest, budget)).toBe("accepted");
    expect(await ledger.check("project-1", digest, budget)).toBe("cached-ok");
    expect(await ledger.check("project-1", digest, budget)).toBe("cached-ok");
    expect(await ledger.check("project-1", digest, budget)).toBe("budget-exhausted");
  });

  it("gives a refused request's use back: the budget counts admitted requests only", async () => {
    const { ledger } = fixture();
    const digest = newDigest();
    const first: DeviceTokenReceipt = {};
    expect(await ledger.remember("project-1", digest, budget, first)).toBe("accepted");
    await ledger.release("project-1", digest, first.stamp as string);
    for (let i = 0; i < 3; i++) {
      const receipt: DeviceTokenReceipt = {};
      expect(await ledger.check("project-1", digest, budget, receipt)).toBe("cached-ok");
      expect(receipt.stamp).toBe(first.stamp);
    }
    expect(await ledger.check("project-1", digest, budget)).toBe("budget-exhausted");
  });

  it("unmarks a refused single-use token, which then passes once more and only once", async () => {
    const { ledger } = fixture();
    const digest = newDigest();
    const receipt: DeviceTokenReceipt = {};
    expect(await ledger.remember("project-1", digest, singleUse, receipt)).toBe("accepted");
    await ledger.release("project-1", digest, receipt.stamp as string);
    const results = await Promise.all(
      Array.from({ length: 5 }, () => ledger.check("project-1", digest, singleUse)),
    );
    expect(results.filter((result) => result === "cached-ok")).toHaveLength(1);
    expect(results.filter((result) => result === "replayed")).toHaveLength(4);
  });

  it("never lets a single-use token be admitted twice: a replay while it was marked keeps it used", async () => {
    const { ledger } = fixture();
    const digest = newDigest();
    const refused: DeviceTokenReceipt = {};
    // Request 1 passes authentication; request 2 (a replay) comes while the mark is set.
    expect(await ledger.remember("project-1", digest, singleUse, refused)).toBe("accepted");
    expect(await ledger.check("project-1", digest, singleUse)).toBe("replayed");
    // Request 1 is refused by the limits and gives its use back; the token stays used.
    await ledger.release("project-1", digest, refused.stamp as string);
    expect(await ledger.check("project-1", digest, singleUse)).toBe("replayed");
    // One refund per refused use: the token passes once (request 3), and nothing gives more back.
    const digest2 = newDigest();
    const use: DeviceTokenReceipt = {};
    expect(await ledger.remember("project-1", digest2, singleUse, use)).toBe("accepted");
    await ledger.release("project-1", digest2, use.stamp as string);
    await ledger.release("project-1", digest2, use.stamp as string);
    expect(await ledger.check("project-1", digest2, singleUse)).toBe("cached-ok");
    expect(await ledger.check("project-1", digest2, singleUse)).toBe("replayed");
    expect(await ledger.remember("project-1", digest2, singleUse)).toBe("replayed");
  });

  it("never gives a use back to an expired or replaced entry, nor to another project", async () => {
    const { ledger, advance } = fixture();
    const expired = newDigest();
    const old: DeviceTokenReceipt = {};
    await ledger.remember("project-1", expired, singleUse, old);
    await ledger.release("project-2", expired, old.stamp as string);
    expect(await ledger.check("project-1", expired, singleUse)).toBe("replayed");
    await advance(lifetimeMs + 50);
    await ledger.release("project-1", expired, old.stamp as string);
    expect(await ledger.check("project-1", expired, singleUse)).toBe("fresh");
    // Replaced: verified anew once the budget TTL passed; the old use's refund does not touch it.
    const replaced = newDigest();
    const before: DeviceTokenReceipt = {};
    const policy: DeviceTokenPolicy = { mode: "budget", ttlMs: lifetimeMs, maxRequests: 1 };
    await ledger.remember("project-1", replaced, { ...policy, ttlMs: 10 * lifetimeMs }, before);
    await advance(lifetimeMs + 50);
    expect(await ledger.check("project-1", replaced, policy)).toBe("fresh");
    const after: DeviceTokenReceipt = {};
    expect(await ledger.remember("project-1", replaced, policy, after)).toBe("accepted");
    expect(after.stamp).not.toBe(before.stamp);
    await ledger.release("project-1", replaced, before.stamp as string);
    expect(await ledger.check("project-1", replaced, policy)).toBe("budget-exhausted");
  });
}

describe("deviceTokenDigest", () => {
  it("is the hex SHA-256 of the decoded token, equal for padded and unpadded spellings", () => {
    const token = randomBytes(65).toString("base64");
    expect(token.endsWith("=")).toBe(true);
    expect(deviceTokenDigest(token)).toMatch(/^[0-9a-f]{64}$/);
    expect(deviceTokenDigest(token.replace(/=+$/, ""))).toBe(deviceTokenDigest(token));
    expect(deviceTokenDigest(token)).not.toBe(deviceTokenDigest(randomBytes(65).toString("base64")));
  });

  it("is the digest the ledgers already hold, for a known token", () => {
    const digest = "73fff793651a92729a8553521d5f1c55c9cb417046f1dc0f82b22fc4930b82b3";
    expect(deviceTokenDigest("ZGV2aWNlLXRva2Vu")).toBe(digest);
  });
});

describe("memory device token ledger", () => {
  ledgerContract(() => {
    let now = 1_000_000;
    return {
      ledger: createMemoryDeviceTokenLedger({ clock: () => now }),
      advance: async (ms) => {
        now += ms;
      },
      now: () => now,
    };
  });

  it("stays within its size bound by dropping the oldest entries", async () => {
    const ledger = createMemoryDeviceTokenLedger({ clock: () => 0, maxEntries: 2 });
    const [first, second, third] = [newDigest(), newDigest(), newDigest()];
    for (const digest of [first, second, third]) await ledger.remember("project-1", digest!, singleUse);
    expect(await ledger.check("project-1", first!, singleUse)).toBe("fresh");
    expect(await ledger.check("project-1", third!, singleUse)).toBe("replayed");
  });
});

describe.skipIf(!redisAvailable)("redis device token ledger", () => {
  const space = redisTestSpace("device-token");
  const keyPrefix = `${space.nextPrefix()}:`;
  let redis: Redis;

  beforeAll(async () => {
    redis = await space.readyClient();
  });

  afterAll(space.cleanup);

  ledgerContract(() => ({
    ledger: createRedisDeviceTokenLedger({ redis, keyPrefix }),
    advance: (ms) => sleep(ms),
    now: Date.now,
  }));

  it("stores digests with a TTL, never the token", async () => {
    const ledger = createRedisDeviceTokenLedger({ redis, keyPrefix });
    const token = randomBytes(64).toString("base64");
    await ledger.remember("project-9", deviceTokenDigest(token) as string, {
      mode: "budget",
      ttlMs: 60_000,
      maxRequests: 2,
    });
    const key = `${keyPrefix}project-9:${deviceTokenDigest(token)}`;
    expect(await redis.get(key)).toBe("1");
    expect(await redis.pttl(key)).toBeGreaterThan(59_000);
    expect(Number(await redis.get(`${key}:verified`))).toBeGreaterThan(Date.now() - 60_000);
    expect(await redis.pttl(`${key}:verified`)).toBeGreaterThan(59_000);
    const stored = await redis.keys(`${keyPrefix}*`);
    expect(stored.some((entry) => entry.includes(token))).toBe(false);
  });

  it("takes the longest SLUICE_DEVICE_TOKEN_TTL_SECONDS, which Redis must accept as an expiry", async () => {
    const ledger = createRedisDeviceTokenLedger({ redis, keyPrefix });
    const digest = newDigest();
    const policy = { mode: "budget", ttlMs: deviceTokenTtlMaxSeconds * 1000, maxRequests: 2 } as const;
    expect(await ledger.remember("project-9", digest, policy)).toBe("accepted");
    expect(await ledger.check("project-9", digest, policy)).toBe("cached-ok");
    expect(await redis.pttl(`${keyPrefix}project-9:${digest}`)).toBeGreaterThan(
      deviceTokenTtlMaxSeconds * 999,
    );
  });

  it("never creates an entry when it gives a use back, nor touches one without a verification time", async () => {
    const ledger = createRedisDeviceTokenLedger({ redis, keyPrefix });
    const missing = newDigest();
    await ledger.release("project-9", missing, String(Date.now()));
    expect(await redis.exists(`${keyPrefix}project-9:${missing}`)).toBe(0);
    // An entry written before the verification time was kept: never given anything back.
    const old = newDigest();
    const key = `${keyPrefix}project-9:${old}`;
    await redis.set(key, 1, "PX", 60_000);
    const receipt: DeviceTokenReceipt = {};
    expect(await ledger.check("project-9", old, singleUse, receipt)).toBe("replayed");
    expect(receipt.stamp).toBeUndefined();
    await ledger.release("project-9", old, "");
    expect(await redis.get(key)).toBe("2");
    // A use given back keeps the entry's lifetime, and the count never goes below zero.
    const digest = newDigest();
    const use: DeviceTokenReceipt = {};
    await ledger.remember("project-9", digest, { mode: "single-use", retentionMs: 60_000 }, use);
    await ledger.release("project-9", digest, use.stamp as string);
    await ledger.release("project-9", digest, use.stamp as string);
    expect(await redis.get(`${keyPrefix}project-9:${digest}`)).toBe("0");
    expect(await redis.pttl(`${keyPrefix}project-9:${digest}`)).toBeGreaterThan(59_000);
  });

  it("refuses only the token whose entry another program wrote in another type, naming it, without resting Redis", async () => {
    const breaker = new RedisBreaker(redis, 60_000);
    const ledger = createRedisDeviceTokenLedger({ redis, breaker, keyPrefix });
    const digest = newDigest();
    const key = `${keyPrefix}project-9:${digest}`;
    await redis.hset(key, "field", "1");
    const refused = ledger.check("project-9", digest, singleUse);
    await expect(refused).rejects.toThrow(RedisKeyDataError);
    await expect(refused).rejects.toMatchObject({ key });
    await expect(ledger.remember("project-9", digest, singleUse)).rejects.toThrow(RedisKeyDataError);
    // The `…:verified` key alike, and a count that is no number.
    const other = newDigest();
    await redis.set(`${keyPrefix}project-9:${other}`, "1", "PX", 60_000);
    await redis.hset(`${keyPrefix}project-9:${other}:verified`, "field", "1");
    await expect(ledger.check("project-9", other, budget)).rejects.toMatchObject({
      key: `${keyPrefix}project-9:${other}`,
    });
    const text = newDigest();
    await redis.set(`${keyPrefix}project-9:${text}`, "not a count", "PX", 60_000);
    await expect(ledger.check("project-9", text, singleUse)).rejects.toThrow(RedisKeyDataError);
    // Redis itself answers: every other token is decided there, none waits for a rest.
    expect(breaker.resting).toBe(false);
    expect(await ledger.remember("project-9", newDigest(), singleUse)).toBe("accepted");
  });

  it("refuses a use count INCR would take but Sluice never writes (negative), leaving it as it is", async () => {
    const breaker = new RedisBreaker(redis, 60_000);
    const ledger = createRedisDeviceTokenLedger({ redis, breaker, keyPrefix });
    for (const value of ["-1", "-5", "007", "1e3"]) {
      const digest = newDigest();
      const key = `${keyPrefix}project-9:${digest}`;
      await redis.set(key, value, "PX", 60_000);
      await redis.set(`${key}:verified`, String(Date.now()), "PX", 60_000);
      for (const policy of [singleUse, longBudget]) {
        await expect(ledger.check("project-9", digest, policy), value).rejects.toMatchObject({
          name: "RedisKeyDataError",
          key,
        });
        await expect(ledger.remember("project-9", digest, policy), value).rejects.toMatchObject({ key });
      }
      const stamp = (await redis.get(`${key}:verified`)) as string;
      await expect(ledger.release("project-9", digest, stamp), value).rejects.toMatchObject({ key });
      expect(await redis.get(key)).toBe(value);
    }
    expect(breaker.resting).toBe(false);
  });

  it("takes a verification time that is no count of milliseconds for an unknown one: a budget caller asks Apple again", async () => {
    const ledger = createRedisDeviceTokenLedger({ redis, keyPrefix });
    for (const stamp of ["inf", "nan", "1e20", ` ${Date.now()}`, "0x7fffffffffff"]) {
      const digest = newDigest();
      const key = `${keyPrefix}project-9:${digest}`;
      await redis.set(key, "1", "PX", 60_000);
      await redis.set(`${key}:verified`, stamp, "PX", 60_000);
      expect([stamp, await ledger.check("project-9", digest, longBudget)]).toEqual([stamp, "fresh"]);
      expect(await ledger.remember("project-9", digest, longBudget)).toBe("accepted");
      expect(Number(await redis.get(`${key}:verified`))).toBeGreaterThan(Date.now() - 60_000);
      expect(await ledger.check("project-9", digest, longBudget)).toBe("cached-ok");
    }
  });

  it("gives an entry without expiry its lifetime when next used, so a single-use token is never refused for good", async () => {
    const breaker = new RedisBreaker(redis, 60_000);
    const ledger = createRedisDeviceTokenLedger({ redis, breaker, keyPrefix });
    // A restore, or another program's PERSIST: Sluice never writes an entry without expiry.
    const digest = newDigest();
    const key = `${keyPrefix}project-9:${digest}`;
    expect(await ledger.remember("project-9", digest, singleUse)).toBe("accepted");
    await redis.persist(key);
    await redis.persist(`${key}:verified`);
    expect(await ledger.check("project-9", digest, singleUse)).toBe("replayed");
    for (const stored of [key, `${key}:verified`]) {
      expect(await redis.pttl(stored)).toBeGreaterThan(0);
      expect(await redis.pttl(stored)).toBeLessThanOrEqual(lifetimeMs);
    }
    await sleep(lifetimeMs + 50);
    expect(await ledger.check("project-9", digest, singleUse)).toBe("fresh");
    expect(await ledger.remember("project-9", digest, singleUse)).toBe("accepted");
    // A count the second verification of a token finds without expiry, and its verification time.
    const raced = newDigest();
    const racedKey = `${keyPrefix}project-9:${raced}`;
    expect(await ledger.remember("project-9", raced, longBudget)).toBe("accepted");
    await redis.persist(racedKey);
    await redis.persist(`${racedKey}:verified`);
    expect(await ledger.remember("project-9", raced, longBudget)).toBe("accepted");
    for (const stored of [racedKey, `${racedKey}:verified`])
      expect(await redis.pttl(stored)).toBeGreaterThan(9 * lifetimeMs);
    // An entry another program wrote in another type, without expiry: refused, but not for good.
    const foreign = newDigest();
    const foreignKey = `${keyPrefix}project-9:${foreign}`;
    await redis.hset(foreignKey, "field", "1");
    await expect(ledger.check("project-9", foreign, singleUse)).rejects.toThrow(RedisKeyDataError);
    expect(await redis.hget(foreignKey, "field")).toBe("1");
    expect(await redis.pttl(foreignKey)).toBeGreaterThan(0);
    await sleep(lifetimeMs + 50);
    expect(await ledger.check("project-9", foreign, singleUse)).toBe("fresh");
    expect(breaker.resting).toBe(false);
  });

  it("rejects at once while Redis rests after hanging, instead of waiting for each command's timeout", async () => {
    const proxy = await startTcpProxy(6379);
    try {
      const ledger = createRedisDeviceTokenLedger({
        redis: await space.readyClient(`redis://127.0.0.1:${proxy.port}`),
        keyPrefix,
      });
      const digest = newDigest();
      expect(await ledger.check("project-1", digest, singleUse)).toBe("fresh");
      proxy.stall();
      await expect(ledger.remember("project-1", digest, singleUse)).rejects.toThrow(/timed out/i);
      const firstSent = proxy.stalledText();
      expect(firstSent).toContain(digest);
      await expect(ledger.remember("project-1", digest, singleUse)).rejects.toThrow(RedisRestingError);
      await expect(ledger.check("project-1", digest, singleUse)).rejects.toThrow(RedisRestingError);
      expect(proxy.stalledText()).toBe(firstSent);
    } finally {
      await proxy.close();
    }
  });

  it("asks Apple again for a budget caller's entry without a verification time, still refusing a replay", async () => {
    // An entry as an earlier version wrote it: the use count alone.
    const ledger = createRedisDeviceTokenLedger({ redis, keyPrefix });
    const digest = newDigest();
    const key = `${keyPrefix}project-1:${digest}`;
    await redis.set(key, 1, "PX", 60_000);
    expect(await ledger.check("project-1", digest, singleUse)).toBe("replayed");
    expect(await ledger.check("project-1", digest, budget)).toBe("fresh");
    expect(await ledger.remember("project-1", digest, budget)).toBe("accepted");
    expect(await ledger.check("project-1", digest, budget)).toBe("cached-ok");
    expect(await redis.pttl(key)).toBeGreaterThan(59_000);
    expect(await ledger.check("project-1", digest, singleUse)).toBe("replayed");
  });

  it("decides another user's part in its lookup's script only for a token it passes, counting the use only if the part admits the call", async () => {
    const ledger = createRedisDeviceTokenLedger({ redis, keyPrefix });
    const digest = newDigest();
    const entry = `${keyPrefix}project-part:${digest}`;
    // The part counts its own key (left without expiry: the ledger's lifetime is not given to it)
    // and admits the call as ARGV says.
    const partKey = `${keyPrefix}part-count`;
    const decided: number[][] = [];
    const part = countingPart(partKey, decided);
    const policy: DeviceTokenPolicy = { mode: "budget", ttlMs: 60_000, maxRequests: 3 };
    const partRuns = async () => Number(await redis.get(partKey));

    expect(await ledger.checkWith("project-part", digest, policy, {}, part(1))).toBe("fresh");
    expect([decided, await partRuns()]).toEqual([[], 0]);

    await ledger.remember("project-part", digest, policy);
    const refused: DeviceTokenReceipt = {};
    expect(await ledger.checkWith("project-part", digest, policy, refused, part(0))).toBe("cached-ok");
    expect([decided, await partRuns(), await redis.get(entry), refused.stamp]).toEqual([
      [[0, 7]],
      1,
      "1",
      undefined,
    ]);
    expect(await redis.pttl(partKey)).toBe(-1);

    const admitted: DeviceTokenReceipt = {};
    expect(await ledger.checkWith("project-part", digest, policy, admitted, part(1))).toBe("cached-ok");
    expect([decided.at(-1), await redis.get(entry), typeof admitted.stamp]).toEqual([[1, 7], "2", "string"]);
    expect(await ledger.checkWith("project-part", digest, policy, {}, part(1))).toBe("cached-ok");

    // Over its budget: refused and counted as `check` does, the part not run.
    expect(await ledger.checkWith("project-part", digest, policy, {}, part(1))).toBe("budget-exhausted");
    expect([decided.length, await partRuns(), await redis.get(entry)]).toEqual([3, 3, "4"]);

    const once = newDigest();
    await ledger.remember("project-part", once, singleUse);
    expect(await ledger.checkWith("project-part", once, singleUse, {}, part(1))).toBe("replayed");
    expect(decided.length).toBe(3);
  });

  it("decides another user's part in its remembering script only for a token it accepts, counting the use only if the part admits the call", async () => {
    const ledger = createRedisDeviceTokenLedger({ redis, keyPrefix });
    const entry = (digest: string) => `${keyPrefix}project-remember:${digest}`;
    const partKey = `${keyPrefix}remember-part-count`;
    const decided: number[][] = [];
    const part = countingPart(partKey, decided);
    const policy: DeviceTokenPolicy = { mode: "budget", ttlMs: 60_000, maxRequests: 2 };
    const partRuns = async () => Number(await redis.get(partKey));

    // A new entry: written, Apple's verification recorded, the use counted only if the part admits.
    const refusedNew = newDigest();
    const refused: DeviceTokenReceipt = {};
    expect(await ledger.rememberWith("project-remember", refusedNew, policy, refused, part(0))).toBe(
      "accepted",
    );
    expect([decided, await partRuns(), await redis.get(entry(refusedNew)), refused.stamp]).toEqual([
      [[0, 7]],
      1,
      "0",
      undefined,
    ]);
    expect(await redis.pttl(entry(refusedNew))).toBeGreaterThan(59_000);
    expect(await redis.pttl(partKey)).toBe(-1);
    // As `remember` then `release` would leave it: the next lookup passes it, no Apple asked.
    expect(await ledger.check("project-remember", refusedNew, policy)).toBe("cached-ok");

    const digest = newDigest();
    const admitted: DeviceTokenReceipt = {};
    expect(await ledger.rememberWith("project-remember", digest, policy, admitted, part(1))).toBe("accepted");
    expect([decided.at(-1), await redis.get(entry(digest))]).toEqual([[1, 7], "1"]);
    expect(admitted.stamp).toBe(await redis.get(`${entry(digest)}:verified`));
    // An entry there already (another instance verified the token at once): one more use.
    expect(await ledger.rememberWith("project-remember", digest, policy, {}, part(0))).toBe("accepted");
    expect(await redis.get(entry(digest))).toBe("1");
    expect(await ledger.rememberWith("project-remember", digest, policy, {}, part(1))).toBe("accepted");
    expect([decided.length, await redis.get(entry(digest))]).toEqual([4, "2"]);
    // Over its budget: refused and counted as `remember` does, the part not run.
    expect(await ledger.rememberWith("project-remember", digest, policy, {}, part(1))).toBe(
      "budget-exhausted",
    );
    expect([decided.length, await partRuns(), await redis.get(entry(digest))]).toEqual([4, 4, "3"]);

    // An entry the caller no longer trusts starts again, its use counted only if the part admits.
    const later: DeviceTokenPolicy = { ...policy, verifiedSince: Date.now() + 60_000 };
    const restarted: DeviceTokenReceipt = {};
    expect(await ledger.rememberWith("project-remember", digest, later, restarted, part(0))).toBe("accepted");
    expect([await redis.get(entry(digest)), restarted.stamp]).toEqual(["0", undefined]);
    expect(await redis.get(`${entry(digest)}:verified`)).toBe(String(later.verifiedSince));

    // A single-use token: accepted once, its replay refused with no part run.
    const once = newDigest();
    expect(await ledger.rememberWith("project-remember", once, singleUse, {}, part(1))).toBe("accepted");
    expect(await ledger.rememberWith("project-remember", once, singleUse, {}, part(1))).toBe("replayed");
    expect([decided.length, await redis.get(entry(once))]).toEqual([6, "2"]);
  });

  it("is shared by two instances", async () => {
    const other = await space.readyClient();
    const digest = newDigest();
    await createRedisDeviceTokenLedger({ redis, keyPrefix }).remember("project-1", digest, singleUse);
    const second = createRedisDeviceTokenLedger({ redis: other, keyPrefix });
    expect(await second.check("project-1", digest, singleUse)).toBe("replayed");
  });
});

/**
 * Another user's part of a ledger script: counts its runs in `partKey` (left without expiry) and
 * admits the call as its argument says, replying {admitted, 7}; each reply is pushed to `decided`.
 */
function countingPart(partKey: string, decided: number[][]) {
  return (admit: number) => ({
    lua: (keyOffset: number, argOffset: number) => `redis.call("INCR", KEYS[${keyOffset + 1}])
local admitted = tonumber(ARGV[${argOffset + 1}])
local reply = {admitted, 7}`,
    keys: [partKey],
    args: [admit],
    decide: (reply: readonly number[]) => decided.push([...reply]),
  });
}
