import { createHash } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { Writable } from "node:stream";
import type { Redis } from "ioredis";
import { afterAll, describe, expect, it } from "vitest";
import { admissionRequestContext } from "../../test/support/admission-request-context.js";
import {
  developmentDeviceCheck,
  openingSecretBox,
  unreachableAppleConfig,
} from "../../test/support/device-check-settings.js";
import { directoryWithSlowReads, projectsReadAs } from "../../test/support/directory-with-slow-reads.js";
import { fakeUsageRepository, spent } from "../../test/support/fake-usage-repository.js";
import { heldRedisReplies } from "../../test/support/held-redis-replies.js";
// In CI (CI=true) an unreachable Redis makes this import throw, so the suite fails instead of skipping.
import { redisAvailable, redisTestSpace, redisUrl } from "../../test/support/services.js";
import { type AuthResult, createAuthenticator } from "../auth/authenticate.js";
import { createDeviceTokenVerifier } from "../auth/device-token-verifier.js";
import { createLogger } from "../observability/logger.js";
import { createMetrics } from "../observability/metrics.js";
import { createAuthThrottle } from "../rate-limit/auth-throttle.js";
import { createRateLimiter } from "../rate-limit/rate-limiter.js";
import { RedisBreaker } from "../redis/redis-breaker.js";
import { openDatabase } from "../storage/database.js";
import type { Project } from "../storage/project-repository.js";
import type { UsageRecord } from "../storage/usage-repository.js";
import { createSharedCallsInFlight, type SharedCallsInFlight } from "../usage/shared-calls-in-flight.js";
import { createSpendGuard } from "../usage/spend-guard.js";
import type { UsageRecorder } from "../usage/usage-recorder.js";
import { type AdmittedCall, createAdmission } from "./admission.js";

const { nextPrefix, readyClient, cleanup } = redisTestSpace("admission");
const closing: Array<() => Promise<void>> = [];
const opening = openDatabase({ dataDir: "unused", sqliteFile: ":memory:" });
closing.push(async () => (await opening).close());
afterAll(async () => {
  for (const close of closing) await close();
  await cleanup();
});

/**
 * Redis through a proxy that can hold its replies (`proxy`), and over one client and one breaker the
 * rate limiter, the calls in flight in Redis and a spend guard over them (12.50 spent by one call).
 */
async function overHeldRedis() {
  const proxy = await heldRedisReplies(redisUrl);
  const client = await readyClient(proxy.url);
  const breaker = new RedisBreaker(client);
  const prefix = nextPrefix();
  const limiter = createRateLimiter({ redis: client, breaker, keyPrefix: `${prefix}:rl` });
  const shared: SharedCallsInFlight = createSharedCallsInFlight({
    redis: client,
    breaker,
    keyPrefix: `${prefix}:spend-in-flight`,
  });
  closing.push(async () => {
    await shared.close();
    await limiter.close();
    client.disconnect();
    await proxy.close();
  });
  const spend = createSpendGuard({
    usage: fakeUsageRepository({ spendSince: async () => spent(12.5, 12.5) }),
    now: () => new Date(),
    shared,
  });
  return { proxy, client, breaker, prefix, limiter, spend };
}

/** Project prj_1, with a `capUsd` monthly cap and a `perMinute` limit (null: the default). */
function cappedProject(capUsd: number, perMinute: number | null = null): Project {
  return {
    id: "prj_1",
    createdAt: "2026-01-01T00:00:00.000Z",
    rateLimits: { perMinute, devicePerMinute: null },
    monthlySpendCapUsd: capUsd,
    proxyAllowList: null,
  } as unknown as Project;
}

/** Authentication that takes every call as `project`'s, by its test key, for provider A. */
const testKeyOf = (project: Project) => (): AuthResult => ({
  ok: true,
  method: "bearer-test-key",
  project,
  keyId: "key_1",
  provider: "provider-a",
  providerKey: "sk-real",
  deviceDigest: null,
  generation: 0,
  readAt: 0,
});

/**
 * Admission as the gateway wires it with REDIS_URL (the limits and the calls in flight on one client
 * and one breaker), through a proxy that can hold Redis's replies, for a project with a 30 USD cap
 * and 12.50 spent by one call: room for two calls in flight.
 */
async function capped(perMinute: number | null = null) {
  const { proxy, client, prefix, limiter, spend } = await overHeldRedis();
  const project = cappedProject(30, perMinute);
  const rows: UsageRecord[] = [];
  const admit = createAdmission({
    authenticate: testKeyOf(project),
    limiter,
    spend,
    recorder: { record: (row: UsageRecord) => rows.push(row) } as unknown as UsageRecorder,
    metrics: createMetrics({ collectDefaults: false }),
    now: () => new Date(),
    defaults: { projectPerMinute: 60, devicePerMinute: 60, ipPerMinute: 60 },
  });
  const call = () =>
    Promise.resolve(
      admit(admissionRequestContext(), { endpoint: "text", projectId: "prj_1", provider: "provider-a" }),
    );
  const watcher = await readyClient();
  return {
    proxy,
    client,
    call,
    rows,
    places: () => watcher.zcard(`${prefix}:spend-in-flight:prj_1`),
    projectCount: () => watcher.get(`${prefix}:rl:project:60:prj_1`),
  };
}

/**
 * Admission on `count` instances sharing one Redis key prefix (each with its own client, breaker,
 * limits, calls in flight and spend guard, as separate gateways), for a project with a `capUsd` cap
 * on a month with no cost known yet (nothing spent, no largest cost of one call).
 */
async function freshMonthOnInstances(count: number, capUsd: number) {
  const prefix = nextPrefix();
  const project = cappedProject(capUsd);
  const admits: Array<ReturnType<typeof createAdmission>> = [];
  for (let index = 0; index < count; index++) {
    const client = await readyClient();
    const breaker = new RedisBreaker(client);
    const limiter = createRateLimiter({ redis: client, breaker, keyPrefix: `${prefix}:rl` });
    const shared = createSharedCallsInFlight({
      redis: client,
      breaker,
      keyPrefix: `${prefix}:spend-in-flight`,
    });
    closing.push(async () => {
      await shared.close();
      await limiter.close();
    });
    admits.push(
      createAdmission({
        authenticate: testKeyOf(project),
        limiter,
        spend: createSpendGuard({ usage: fakeUsageRepository(), now: () => new Date(), shared }),
        recorder: { record: () => {} } as unknown as UsageRecorder,
        metrics: createMetrics({ collectDefaults: false }),
        now: () => new Date(),
        defaults: { projectPerMinute: 1000, devicePerMinute: 1000, ipPerMinute: 1000 },
      }),
    );
  }
  const call = (index: number) =>
    Promise.resolve(
      (admits[index % count] as ReturnType<typeof createAdmission>)(admissionRequestContext(), {
        endpoint: "text",
        projectId: "prj_1",
        provider: "provider-a",
      }),
    );
  const watcher = await readyClient();
  return { call, places: () => watcher.zcard(`${prefix}:spend-in-flight:prj_1`) };
}

/**
 * Admission as the gateway wires it with REDIS_URL, the real authenticator in front: a DeviceCheck
 * project (Test Mode off, budget mode unless `tokenMode` says otherwise) whose token ledger, limits and
 * calls in flight share one client and one breaker through a proxy that can hold Redis's replies;
 * Apple is a fake that passes `token` and the tokens of `otherToken`. `capUsd`: a monthly cap with
 * 12.50 spent by one call (room for two calls in flight at 30).
 */
async function deviceChecked(
  options: {
    perMinute?: number | null;
    capUsd?: number | null;
    budget?: number;
    tokenMode?: Project["deviceCheck"]["tokenMode"];
    /** What Apple's fake waits for before it answers. */
    appleWaits?: () => Promise<void>;
    /** A failure of the authenticator's own after it settled (a programming error's, say). */
    failingAfter?: Error;
  } = {},
) {
  const { perMinute = null, capUsd = null, budget = 1000, failingAfter, tokenMode, appleWaits } = options;
  const { proxy, client, breaker, prefix, limiter, spend } = await overHeldRedis();
  const { directory, partialKey, request } = await directoryWithSlowReads(
    await opening,
    projectsReadAs((project) => ({
      ...project,
      testMode: false,
      rateLimits: { perMinute, devicePerMinute: null },
      monthlySpendCapUsd: capUsd,
      deviceCheck: developmentDeviceCheck(project.deviceCheck, tokenMode),
    })),
  );
  const projectId = request.projectId as string;
  const token = Buffer.from(`a-device-token-${prefix}`).toString("base64");
  /** Another token Apple passes, never sent before: the `n`th. */
  const otherToken = (n: number) => Buffer.from(`a-device-token-${prefix}-${n}`).toString("base64");
  let appleCalls = 0;
  const deviceTokens = createDeviceTokenVerifier({
    config: unreachableAppleConfig(budget),
    secretBox: openingSecretBox(),
    redis: client,
    redisBreaker: breaker,
    redisKeyPrefix: `${prefix}:device-token:`,
    logger: createLogger("silent", new Writable({ write: (_chunk, _encoding, done) => done() })),
    client: {
      async validate(input) {
        appleCalls++;
        await appleWaits?.();
        return Buffer.from(input.deviceToken, "base64").toString().startsWith(`a-device-token-${prefix}`)
          ? { kind: "valid" }
          : { kind: "invalid", reason: "rejected-by-apple" };
      },
    },
  });
  const rows: UsageRecord[] = [];
  const authenticate = createAuthenticator({
    directory,
    deviceTokens,
    throttle: createAuthThrottle({ failuresPerMinute: 30 }),
    testModeAllowed: true,
  });
  const admit = createAdmission({
    authenticate: failingAfter
      ? (request) =>
          Promise.resolve(authenticate(request)).then(() => {
            throw failingAfter;
          })
      : authenticate,
    limiter,
    spend,
    recorder: { record: (row: UsageRecord) => rows.push(row) } as unknown as UsageRecorder,
    metrics: createMetrics({ collectDefaults: false }),
    now: () => new Date(),
    defaults: { projectPerMinute: 60, devicePerMinute: 60, ipPerMinute: 60 },
  });
  const call = (socket = { destroyed: false }, sent = token) =>
    Promise.resolve(
      admit(
        admissionRequestContext({
          request: {
            headers: { authorization: `Bearer ${partialKey}.${sent}` },
            rawHeaders: [],
            socket,
          } as unknown as IncomingMessage,
        }),
        { endpoint: "text", projectId, provider: "provider-a" },
      ),
    );
  const watcher = await readyClient();
  const digestOf = (sent: string) => createHash("sha256").update(Buffer.from(sent, "base64")).digest("hex");
  return {
    proxy,
    client,
    call,
    otherToken,
    rows,
    appleCalls: () => appleCalls,
    places: () => watcher.zcard(`${prefix}:spend-in-flight:${projectId}`),
    projectCount: () => watcher.get(`${prefix}:rl:project:60:${projectId}`),
    tokenUses: (sent = token) => watcher.get(`${prefix}:device-token:${projectId}:${digestOf(sent)}`),
  };
}

/**
 * Rounds the call waited for at the proxy, its replies held and let go one round at a time, counted
 * once `client` has the answers to what the calls before sent (`holdAfter`).
 */
async function roundsOf(
  { proxy, client }: { proxy: Awaited<ReturnType<typeof heldRedisReplies>>; client: Redis },
  call: () => Promise<AdmittedCall>,
) {
  await proxy.holdAfter(client);
  const outcome = call().then(
    (admitted) => ({ admitted }),
    (error: unknown) => ({ error }),
  );
  for (;;) {
    const next = await Promise.race([outcome.then(() => "settled" as const), proxy.replied()]);
    if (next === "settled") break;
    proxy.release();
  }
  proxy.pass();
  return { rounds: proxy.rounds(), settled: await outcome };
}

/**
 * Ends an admitted call at no cost: a call of unknown cost would count toward the cap at the largest
 * known cost of one call (decision 0057), and take the room these tests count.
 */
const finish = (call: AdmittedCall) =>
  call.finish({
    status: 200,
    outcome: "ok",
    provider: "provider-a",
    model: "m",
    usage: null,
    costUsd: 0,
    streamed: false,
    timeToFirstByteMs: null,
    errorCode: null,
  });

describe.skipIf(!redisAvailable)("admission with the limits and the spend cap in Redis", () => {
  it("admits a capped project's call after one Redis round trip: the calls in flight and the limits together", async () => {
    const { proxy, client, call } = await capped();
    // The month's spend read, and the scripts loaded into Redis (EVAL after NOSCRIPT), beforehand.
    finish(await call());
    await proxy.holdAfter(client);
    const outcome = call().then(
      (admitted) => ({ admitted }),
      (error: unknown) => ({ error }),
    );
    let released = 0;
    for (;;) {
      const next = await Promise.race([outcome.then(() => "settled" as const), proxy.replied()]);
      if (next === "settled") break;
      released++;
      proxy.release();
    }
    proxy.pass();
    const settled = await outcome;
    expect(settled).toHaveProperty("admitted");
    expect(proxy.rounds()).toBe(1);
    expect(released).toBe(1);
    if ("admitted" in settled) finish(settled.admitted);
  });

  it("answers a call over both the calls in flight and a limit with the calls in flight's 429, counted by no limit", async () => {
    const { call, projectCount, places } = await capped(2);
    // Room for two calls in flight; the project's limit is two a minute.
    const first = await call();
    const second = await call();
    expect(await projectCount()).toBe("2");
    await expect(call()).rejects.toMatchObject({
      code: "TOO_MANY_REQUESTS",
      message: expect.stringContaining("calls in flight"),
    });
    expect(await projectCount()).toBe("2");
    expect(await places()).toBe(2);
    finish(first);
    finish(second);
  });

  it("leaves no place among the calls in flight to a call a limit refuses", async () => {
    const { call, projectCount, places, rows } = await capped(1);
    const first = await call();
    expect(await places()).toBe(1);
    await expect(call()).rejects.toMatchObject({
      code: "TOO_MANY_REQUESTS",
      message: expect.stringContaining("Rate limit exceeded (project"),
    });
    expect(await places()).toBe(1);
    expect(await projectCount()).toBe("1");
    expect(rows.at(-1)).toMatchObject({ status: 429 });
    finish(first);
  });

  it("decides on this instance alone, limits and calls in flight, while Redis cannot answer", async () => {
    const { proxy, call } = await capped(5);
    await proxy.close();
    // Room for two here, as without Redis; the limits in memory.
    const first = await call();
    const second = await call();
    await expect(call()).rejects.toMatchObject({ message: expect.stringContaining("calls in flight") });
    finish(first);
    finish(second);
  });
  // Before the month's first call of known cost there is no largest one: the calls in flight counted
  // for nothing in Redis too (a room without bound), and a burst sent at once to every instance all
  // ran. Each counts now at SLUICE_UNPRICED_CALL_USD (0.10 by default): 0.30 / 0.10, three at once.
  it("admits calls at once to several instances on a month with no known cost only while those in flight, each at SLUICE_UNPRICED_CALL_USD, leave room", async () => {
    const { call, places } = await freshMonthOnInstances(2, 0.3);
    const outcomes = await Promise.all(
      Array.from({ length: 12 }, (_, index) =>
        call(index).then(
          (admitted) => ({ admitted }),
          (error: unknown) => ({ error }),
        ),
      ),
    );
    const admitted = outcomes.flatMap((outcome) => ("admitted" in outcome ? [outcome.admitted] : []));
    const refused = outcomes.flatMap((outcome) => ("error" in outcome ? [outcome.error] : []));
    expect(admitted).toHaveLength(3);
    expect(await places()).toBe(3);
    expect(refused).toHaveLength(9);
    for (const error of refused) {
      expect(error).toMatchObject({
        code: "TOO_MANY_REQUESTS",
        headers: { "retry-after": "1" },
        message: expect.stringContaining("calls in flight"),
      });
    }
    for (const call of admitted) finish(call);
  });
});

describe.skipIf(!redisAvailable)("admission of a DeviceCheck token with its ledger in Redis", () => {
  it("admits a call with a token passed before after one Redis round trip: the ledger and the limits together", async () => {
    const { proxy, client, call, appleCalls, tokenUses, projectCount } = await deviceChecked();
    // Apple asked, the partial key rebuilt and the scripts loaded into Redis, beforehand.
    finish(await call());
    finish(await call());
    expect(appleCalls()).toBe(1);
    const { rounds, settled } = await roundsOf({ proxy, client }, call);
    expect(settled).toHaveProperty("admitted");
    expect(rounds).toBe(1);
    expect(await tokenUses()).toBe("3");
    expect(await projectCount()).toBe("3");
    if ("admitted" in settled) finish(settled.admitted);
  });

  it("admits a capped project's call after one round trip: the ledger, the calls in flight and the limits together", async () => {
    const { proxy, client, call, places, tokenUses } = await deviceChecked({ capUsd: 30 });
    finish(await call());
    finish(await call());
    const { rounds, settled } = await roundsOf({ proxy, client }, call);
    expect(settled).toHaveProperty("admitted");
    expect(rounds).toBe(1);
    expect(await places()).toBe(1);
    expect(await tokenUses()).toBe("3");
    if ("admitted" in settled) finish(settled.admitted);
  });

  for (const [tokenMode, capUsd] of [
    ["cached", null],
    ["cached", 30],
    ["single-use", null],
    ["single-use", 30],
  ] as const) {
    it(`admits a call with a token Apple is asked about (${tokenMode}, cap ${capUsd}) after two round trips: the lookup, then the entry and the limits together`, async () => {
      const { proxy, client, call, otherToken, appleCalls, tokenUses, projectCount } = await deviceChecked({
        tokenMode,
        capUsd,
      });
      // The partial key rebuilt with one token, then the scripts of a token Apple is asked about (the
      // lookup, then the entry, each with what admission decides) loaded into Redis with another,
      // beforehand: the first call runs other scripts, and on a Redis that had not run these yet (a
      // restart, their Lua changed) the entry's EVALSHA met NOSCRIPT, its EVAL a third round trip.
      finish(await call());
      finish(await call(undefined, otherToken(2)));
      const { rounds, settled } = await roundsOf({ proxy, client }, () => call(undefined, otherToken(1)));
      expect(settled).toHaveProperty("admitted");
      expect(appleCalls()).toBe(3);
      expect(rounds).toBe(2);
      expect(await tokenUses(otherToken(1))).toBe("1");
      expect(await projectCount()).toBe("3");
      if ("admitted" in settled) finish(settled.admitted);
      // A single-use token's replay is refused in its one lookup.
      if (tokenMode === "single-use")
        await expect(call(undefined, otherToken(1))).rejects.toMatchObject({ code: "UNAUTHORIZED" });
    });
  }

  it("counts no use of a token Apple passed for a call a limit then refuses, in two round trips", async () => {
    const { proxy, client, call, otherToken, rows, appleCalls, tokenUses, projectCount } =
      await deviceChecked({
        tokenMode: "single-use",
        perMinute: 1,
      });
    finish(await call());
    // The scripts of a token Apple is asked about loaded into Redis with another, beforehand (see
    // above): refused by the limit as well, in the entry's script.
    await expect(call(undefined, otherToken(2))).rejects.toMatchObject({ code: "TOO_MANY_REQUESTS" });
    const { rounds, settled } = await roundsOf({ proxy, client }, () => call(undefined, otherToken(1)));
    expect(settled).toMatchObject({
      error: { code: "TOO_MANY_REQUESTS", message: expect.stringContaining("Rate limit exceeded (project") },
    });
    expect(rows.at(-1)).toMatchObject({ status: 429 });
    expect(appleCalls()).toBe(3);
    // The lookup, then the entry with the limits: no use counted there to give back after.
    expect(rounds).toBe(2);
    // Remembered as Apple passed it, its one use still the token's.
    expect([await tokenUses(otherToken(1)), await projectCount()]).toEqual(["0", "1"]);
  });

  it("counts no limit and no use of a token Apple passed for a client that left while Apple was asked", async () => {
    let answer = () => {};
    let asked = () => {};
    const apple = new Promise<void>((resolve) => {
      asked = resolve;
    });
    let holding = false;
    const { call, otherToken, rows, tokenUses, projectCount, places } = await deviceChecked({
      capUsd: 30,
      appleWaits: () => {
        if (!holding) return Promise.resolve();
        asked();
        return new Promise((resolve) => {
          answer = resolve;
        });
      },
    });
    finish(await call());
    holding = true;
    const socket = { destroyed: false };
    const outcome = call(socket, otherToken(1)).catch((error: unknown) => error);
    await apple;
    socket.destroyed = true;
    answer();
    expect(await outcome).toMatchObject({ message: "The client disconnected" });
    expect(rows.at(-1)).toMatchObject({ status: 499 });
    // Refused after authentication, as without Redis: no limit counted it, no place held, and its
    // token's use given back.
    expect([await tokenUses(otherToken(1)), await projectCount()]).toEqual(["0", "1"]);
    await expect.poll(places).toBe(0);
  });

  it("counts no use of the token for a call a limit refuses, and no limit for a token the ledger refuses", async () => {
    const { call, rows, tokenUses, projectCount } = await deviceChecked({ perMinute: 2, budget: 3 });
    finish(await call());
    finish(await call());
    expect([await tokenUses(), await projectCount()]).toEqual(["2", "2"]);
    await expect(call()).rejects.toMatchObject({
      code: "TOO_MANY_REQUESTS",
      message: expect.stringContaining("Rate limit exceeded (project"),
    });
    expect(rows.at(-1)).toMatchObject({ status: 429 });
    // Not counted, nor counted and given back: the third use is still the token's.
    expect([await tokenUses(), await projectCount()]).toEqual(["2", "2"]);
  });

  it("counts no limit for a token whose budget is used up", async () => {
    const { call, tokenUses, projectCount } = await deviceChecked({ budget: 1 });
    finish(await call());
    await expect(call()).rejects.toMatchObject({ code: "UNAUTHORIZED" });
    expect(await projectCount()).toBe("1");
    // Counted as a use, as the ledger's own lookup does.
    expect(await tokenUses()).toBe("2");
  });

  it("counts no use of the token and no limit for a call the calls in flight refuse", async () => {
    const { call, places, tokenUses, projectCount } = await deviceChecked({ capUsd: 30 });
    const first = await call();
    const second = await call();
    // The second passed the ledger (Apple asked only for the first): room for two in flight.
    expect([await places(), await tokenUses(), await projectCount()]).toEqual([2, "2", "2"]);
    await expect(call()).rejects.toMatchObject({
      code: "TOO_MANY_REQUESTS",
      message: expect.stringContaining("calls in flight"),
    });
    expect([await places(), await tokenUses(), await projectCount()]).toEqual([2, "2", "2"]);
    finish(first);
    finish(second);
  });

  it("gives back the place and the token's use of a client that left while the script was on its way", async () => {
    const { proxy, client, call, rows, places, tokenUses, projectCount } = await deviceChecked({
      capUsd: 30,
    });
    finish(await call());
    const socket = { destroyed: false };
    await proxy.holdAfter(client);
    const outcome = call(socket).catch((error: unknown) => error);
    await proxy.replied();
    socket.destroyed = true;
    proxy.pass();
    expect(await outcome).toMatchObject({ message: "The client disconnected" });
    expect(rows.at(-1)).toMatchObject({ status: 499 });
    // Its limits were counted with the place, in the one script, as when a client leaves while its
    // limits are asked.
    await expect.poll(places).toBe(0);
    expect([await tokenUses(), await projectCount()]).toEqual(["1", "2"]);
  });

  it("gives back the place the script took when the authenticator then fails with an error of its own", async () => {
    const failure = new TypeError("a programming error");
    const { call, places, tokenUses } = await deviceChecked({ capUsd: 30, failingAfter: failure });
    // The first call asks Apple; the second passes the ledger in the script, its place taken there.
    await expect(call()).rejects.toBe(failure);
    await expect(call()).rejects.toBe(failure);
    expect(await tokenUses()).toBe("2");
    await expect.poll(places).toBe(0);
  });

  it("decides on this instance alone, the token on its memory ledger, while Redis cannot answer", async () => {
    const { proxy, call, appleCalls } = await deviceChecked({ capUsd: 30, perMinute: 5 });
    finish(await call());
    await proxy.close();
    // The memory ledger does not hold the token: Apple is asked again, then it passes there.
    const first = await call();
    const second = await call();
    expect(appleCalls()).toBe(2);
    await expect(call()).rejects.toMatchObject({ message: expect.stringContaining("calls in flight") });
    finish(first);
    finish(second);
  });
});
