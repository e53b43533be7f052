import { Writable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, describe, expect, it, vi } from "vitest";
import {
  developmentDeviceCheck,
  openingSecretBox,
  unreachableAppleConfig,
} from "../../test/support/device-check-settings.js";
// In CI (CI=true) an unreachable Redis makes this import throw, so the suite fails instead of skipping.
import { redisServerInstalled, startPrivateRedis } from "../../test/support/private-redis.js";
import { redisAvailable, redisTestSpace } from "../../test/support/services.js";
import { blankProject } from "../admin/project-rules.js";
import { createLogger } from "../observability/logger.js";
import { RedisBreaker } from "../redis/redis-breaker.js";
import { createRedisClient } from "../redis/redis-client.js";
import type { Project } from "../storage/project-repository.js";
import type { DeviceCheckClient, DeviceCheckValidation } from "./device-check-client.js";
import { deviceTokenDigest } from "./device-token-cache.js";
import { createDeviceTokenVerifier } from "./device-token-verifier.js";

const deviceToken = Buffer.from("a-development-build-token").toString("base64");

/** An Apple that knows `deviceToken` on its development host only, and records what it is asked. */
function developmentOnlyApple(): DeviceCheckClient & { asked: DeviceCheckValidation[] } {
  const asked: DeviceCheckValidation[] = [];
  return {
    asked,
    async validate(input) {
      asked.push(input);
      return input.environment === "development" && input.deviceToken === deviceToken
        ? { kind: "valid" }
        : { kind: "invalid", reason: "rejected-by-apple" };
    },
  };
}

const openSecretBox = openingSecretBox();

function verifierWith(client: DeviceCheckClient) {
  return createDeviceTokenVerifier({
    config: unreachableAppleConfig(100),
    secretBox: openSecretBox,
    redis: undefined,
    logger: createLogger("silent", new Writable({ write: (_chunk, _encoding, done) => done() })),
    client,
  });
}

/** A DeviceCheck project on Apple's development host, created a second ago. */
function developmentProject(tokenMode: Project["deviceCheck"]["tokenMode"]): Project {
  const project = blankProject("apps", new Date(Date.now() - 1000).toISOString());
  project.deviceCheck = developmentDeviceCheck(project.deviceCheck, tokenMode);
  return project;
}

/** `project` as an admin's change leaves it, stamped now (a new record, as a reload reads it). */
async function changed(project: Project, deviceCheck: Partial<Project["deviceCheck"]>): Promise<Project> {
  await sleep(2);
  const at = new Date().toISOString();
  return {
    ...project,
    deviceCheck: { ...project.deviceCheck, ...deviceCheck, changedAt: at },
    updatedAt: at,
  };
}

/** An info logger whose lines are parsed into `lines`. */
function loggerInto(lines: Array<Record<string, unknown>>) {
  return createLogger(
    "info",
    new Writable({
      write(chunk, _encoding, done) {
        lines.push(JSON.parse(String(chunk)));
        done();
      },
    }),
  );
}

describe("the device token verifier across a change of the project's Apple settings", () => {
  it("asks Apple again, on the new settings, for a token verified before they changed", async () => {
    const apple = developmentOnlyApple();
    const verifier = verifierWith(apple);
    const before = developmentProject("cached");
    expect(await verifier.verify(before, deviceToken)).toMatchObject({ kind: "ok" });
    expect(await verifier.verify(before, deviceToken)).toMatchObject({ kind: "ok" });
    expect(verifier.verifyNow?.(before, deviceToken)).toMatchObject({ kind: "ok" });
    expect(apple.asked).toHaveLength(1);

    const production = await changed(before, { environment: "production" });
    expect(verifier.verifyNow?.(production, deviceToken)).toBeNull();
    expect(await verifier.verify(production, deviceToken)).toEqual({
      kind: "invalid",
      reason: "Apple rejected the device token",
    });
    expect(apple.asked.map((input) => input.environment)).toEqual(["development", "production"]);
  });

  it("keeps trusting a verified token across changes that leave the Apple settings alone", async () => {
    const apple = developmentOnlyApple();
    const verifier = verifierWith(apple);
    const before = developmentProject("cached");
    expect(await verifier.verify(before, deviceToken)).toMatchObject({ kind: "ok" });
    await sleep(2);
    const renamed: Project = {
      ...before,
      name: "Renamed",
      rateLimits: { perMinute: 5, devicePerMinute: 5 },
      updatedAt: new Date().toISOString(),
    };
    expect(verifier.verifyNow?.(renamed, deviceToken)).toMatchObject({ kind: "ok" });
    expect(await verifier.verify(renamed, deviceToken)).toMatchObject({ kind: "ok" });
    expect(apple.asked).toHaveLength(1);
  });

  it("still refuses a single-use token used before the change as a replay, without asking Apple", async () => {
    const apple = developmentOnlyApple();
    const verifier = verifierWith(apple);
    const before = developmentProject("single-use");
    expect(await verifier.verify(before, deviceToken)).toMatchObject({ kind: "ok" });
    const rekeyed = await changed(before, { keyId: "KEY7654321" });
    expect(await verifier.verify(rekeyed, deviceToken)).toEqual({
      kind: "invalid",
      reason: "this single-use device token was already used",
    });
    expect(apple.asked).toHaveLength(1);
  });
});

describe("the device token verifier when the gateway closes", () => {
  // The close aborts the Apple calls still on their way (`closing`); their callers were refused at the
  // shutdown's deadline. Such a call is no Apple outage to warn of or count, and no failed attempt
  // of the caller's.
  it("hands Apple's call the closing signal, and neither counts, logs nor blames a call it aborted", async () => {
    const closing = new AbortController();
    const signals: Array<AbortSignal | undefined> = [];
    const lines: string[] = [];
    const verdicts: string[] = [];
    const verifier = createDeviceTokenVerifier({
      config: unreachableAppleConfig(100),
      secretBox: openSecretBox,
      redis: undefined,
      logger: createLogger(
        "debug",
        new Writable({
          write: (chunk, _encoding, done) => {
            lines.push(String(chunk));
            done();
          },
        }),
      ),
      client: {
        async validate(_input, signal) {
          signals.push(signal);
          closing.abort();
          return { kind: "unavailable", reason: "aborted", retryAfterSeconds: 5 };
        },
      },
      closing: closing.signal,
      onVerdict: (_environment, result) => verdicts.push(result),
    });
    expect(await verifier.verify(developmentProject("single-use"), deviceToken)).toEqual({
      kind: "unavailable",
      reason: "aborted",
      retryAfterSeconds: 5,
      askedApple: false,
    });
    expect(signals).toEqual([closing.signal]);
    expect(verdicts).toEqual([]);
    expect(lines).toEqual([]);
  });
});

describe("the device token verifier's opened private keys", () => {
  // Each project's opened .p8 key was kept by project id for good: an instance serving many
  // DeviceCheck projects over its life (deleted ones too) held every key it ever opened.
  it("keeps a bounded number of them, however many projects it serves", async () => {
    let opened = 0;
    const verifier = createDeviceTokenVerifier({
      config: unreachableAppleConfig(100),
      secretBox: {
        ...openSecretBox,
        open: () => {
          opened++;
          return Buffer.from("-----BEGIN PRIVATE KEY-----");
        },
      },
      redis: undefined,
      logger: createLogger("silent", new Writable({ write: (_chunk, _encoding, done) => done() })),
      client: { validate: async () => ({ kind: "invalid", reason: "rejected-by-apple" }) },
    });
    const projects = Array.from({ length: 3000 }, (_, index) => {
      const project = developmentProject("cached");
      return { ...project, id: `prj_${index}` };
    });
    for (const project of projects) await verifier.verify(project, deviceToken);
    expect(opened).toBe(projects.length);
    // Asked again: a key still held is not opened again, so at most the bound of them are held.
    for (const project of projects) await verifier.verify(project, deviceToken);
    expect(projects.length * 2 - opened).toBeLessThanOrEqual(1000);
  });
});

describe.skipIf(!redisAvailable)("the device token verifier on a ledger entry another program wrote", () => {
  const space = redisTestSpace("device-token-verifier");
  afterAll(space.cleanup);

  it("answers for that token alone as without Redis, and logs the key once, never the token", async () => {
    const lines: Array<Record<string, unknown>> = [];
    const redisKeyPrefix = `${space.nextPrefix()}:`;
    const redis = await space.readyClient();
    const verifier = createDeviceTokenVerifier({
      config: unreachableAppleConfig(100),
      secretBox: openSecretBox,
      redis,
      redisKeyPrefix,
      logger: loggerInto(lines),
      client: developmentOnlyApple(),
    });
    const singleUse = developmentProject("single-use");
    const budget = { ...developmentProject("cached"), id: "apps-on-a-budget" };
    const digest = deviceTokenDigest(deviceToken) as string;
    await redis.hset(`${redisKeyPrefix}${singleUse.id}:${digest}`, "field", "1");
    // The budget token's entry holds a count, its verification time a hash.
    await redis.set(`${redisKeyPrefix}${budget.id}:${digest}`, "1", "PX", 60_000);
    await redis.hset(`${redisKeyPrefix}${budget.id}:${digest}:verified`, "field", "1");
    // Single-use: a replay cannot be ruled out for this token, so it is refused as with Redis down.
    expect(await verifier.verify(singleUse, deviceToken)).toMatchObject({ kind: "unavailable" });
    expect(await verifier.verify(singleUse, deviceToken)).toMatchObject({ kind: "unavailable" });
    // Budget: counted in this instance's memory (its check and its remember failed: logged once).
    expect(await verifier.verify(budget, deviceToken)).toMatchObject({ kind: "ok" });
    const warned = lines.filter((line) => line.level === "warn");
    expect(warned.map((line) => line.redisKey)).toEqual([
      `${redisKeyPrefix}${singleUse.id}:${digest}`,
      `${redisKeyPrefix}${budget.id}:${digest}`,
    ]);
    expect(warned[0]?.msg).toMatch(/did not write/);
    expect(warned[0]?.redisError).toMatch(/^WRONGTYPE /);
    expect(JSON.stringify(lines)).not.toContain(deviceToken);
  });
});

describe.skipIf(!redisServerInstalled)("the device token verifier while its Redis stays down", () => {
  it("warns of the ledger's failure once a minute, not after every rest of Redis", async () => {
    const lines: Array<Record<string, unknown>> = [];
    const server = await startPrivateRedis();
    const redis = await createRedisClient(server.url);
    try {
      const verifier = createDeviceTokenVerifier({
        config: unreachableAppleConfig(100),
        secretBox: openSecretBox,
        redis,
        // Rests of 20 ms: each check below is the probe that ends one, and fails.
        redisBreaker: new RedisBreaker(redis, 20),
        logger: loggerInto(lines),
        client: developmentOnlyApple(),
      });
      const project = developmentProject("cached");
      expect(await verifier.verify(project, deviceToken)).toMatchObject({ kind: "ok" });
      await server.stop();
      for (let probe = 0; probe < 5; probe++) {
        await sleep(40);
        // Counted in this instance's memory, as without Redis.
        expect(await verifier.verify(project, deviceToken)).toMatchObject({ kind: "ok" });
      }
      // Before, each probe's failure was a warning of its own, however long Redis stayed down.
      expect(lines.filter((line) => line.level === "warn").map((line) => line.msg)).toEqual([
        "device token ledger in Redis failed",
      ]);
    } finally {
      redis.disconnect();
      await server.stop();
    }
  });
});

/**
 * `recall` tells the authenticator which tokens may go without a throttle slot: those this instance
 * passed in budget mode, under the project's current Apple settings. `beforeApple` is the slot
 * such a token takes when the ledger no longer trusts it and Apple must be asked again.
 */
describe("the device token verifier's recall of tokens passed here", () => {
  it("recalls a budget-mode token once it passed, and not after the project's Apple settings changed", async () => {
    const verifier = verifierWith(developmentOnlyApple());
    const before = developmentProject("cached");
    expect(verifier.recall?.(before, deviceToken)).toEqual({
      digest: deviceTokenDigest(deviceToken),
      passedHere: false,
    });
    expect(await verifier.verify(before, deviceToken)).toMatchObject({ kind: "ok" });
    expect(verifier.recall?.(before, deviceToken)?.passedHere).toBe(true);
    const production = await changed(before, { environment: "production" });
    expect(verifier.recall?.(production, deviceToken)?.passedHere).toBe(false);
    expect(verifier.recall?.(before, "not base64!")).toBeNull();
  });

  it("never recalls a single-use token as passed: its every further use is a replay", async () => {
    const verifier = verifierWith(developmentOnlyApple());
    const project = developmentProject("single-use");
    expect(await verifier.verify(project, deviceToken)).toMatchObject({ kind: "ok" });
    expect(verifier.recall?.(project, deviceToken)?.passedHere).toBe(false);
  });

  it("asks Apple only once beforeApple admits the call, and counts nothing when it refuses", async () => {
    const apple = developmentOnlyApple();
    const verifier = verifierWith(apple);
    const project = developmentProject("cached");
    let admitted = 0;
    const refused = await verifier.verify(project, deviceToken, { beforeApple: () => 3 });
    expect(refused).toEqual({ kind: "throttled", retryAfterSeconds: 3 });
    expect(apple.asked).toHaveLength(0);
    const beforeApple = () => {
      admitted++;
      return 0;
    };
    expect(await verifier.verify(project, deviceToken, { beforeApple })).toMatchObject({ kind: "ok" });
    // The ledger now holds the token: no Apple call, so no slot asked for.
    const recalled = verifier.recall?.(project, deviceToken);
    expect(
      await verifier.verify(project, deviceToken, { beforeApple, ...(recalled ? { recalled } : {}) }),
    ).toMatchObject({ kind: "ok" });
    expect({ asked: apple.asked.length, admitted }).toEqual({ asked: 1, admitted: 1 });
  });
});

describe("the device token verifier for a request whose client left", () => {
  it("starts no Apple call for it, counts nothing in the ledger, and asks Apple once it is asked again", async () => {
    const apple = developmentOnlyApple();
    const verifier = verifierWith(apple);
    const project = developmentProject("single-use");
    expect(await verifier.verify(project, deviceToken, { clientLeft: () => true })).toEqual({
      kind: "client-left",
    });
    expect(apple.asked).toHaveLength(0);
    // The token was not marked used: the app's retry passes, once.
    expect(await verifier.verify(project, deviceToken, { clientLeft: () => false })).toMatchObject({
      kind: "ok",
    });
    expect(apple.asked).toHaveLength(1);
  });

  it("waits for the call another request started for the same token, which costs nothing more", async () => {
    const asked: DeviceCheckValidation[] = [];
    let answer: () => void = () => {};
    const held: DeviceCheckClient = {
      validate(input) {
        asked.push(input);
        return new Promise((resolve) => {
          answer = () => resolve({ kind: "valid" });
        });
      },
    };
    const verifier = verifierWith(held);
    const project = developmentProject("cached");
    const first = verifier.verify(project, deviceToken, { clientLeft: () => false });
    await vi.waitFor(() => expect(asked).toHaveLength(1));
    const left = verifier.verify(project, deviceToken, { clientLeft: () => true });
    // Its ledger lookup (in memory) is microtasks only: by the next turn of the loop it waits for Apple.
    await new Promise((resolve) => setImmediate(resolve));
    answer();
    expect(await first).toMatchObject({ kind: "ok" });
    expect(await left).toMatchObject({ kind: "ok" });
    expect(asked).toHaveLength(1);
  });
});
