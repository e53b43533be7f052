import { afterAll, describe, expect, it } from "vitest";
import { admissionRequestContext } from "../../test/support/admission-request-context.js";
import { fakeUsageRepository, spent } from "../../test/support/fake-usage-repository.js";
import { heldRedisReplies } from "../../test/support/held-redis-replies.js";
// In CI (CI=true) an unreachable Redis makes this import throw, so the suite fails instead of skipping.
import { redisAvailable, redisTestSpace, redisUrl } from "../../test/support/services.js";
import type { AuthResult } from "../auth/authenticate.js";
import { createMetrics } from "../observability/metrics.js";
import { createRateLimiter } from "../rate-limit/rate-limiter.js";
import { RedisBreaker } from "../redis/redis-breaker.js";
import type { Project } from "../storage/project-repository.js";
import type { UsageRecord } from "../storage/usage-repository.js";
import { createSharedCallsInFlight, type SharedCallsInFlight } from "../usage/shared-calls-in-flight.js";
import { createSpendGuard } from "../usage/spend-guard.js";
import type { UsageRecorder } from "../usage/usage-recorder.js";
import { type AdmittedCall, createAdmission } from "./admission.js";

const { nextPrefix, readyClient, cleanup } = redisTestSpace("admission");
const closing: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const close of closing) await close();
  await cleanup();
});

/**
 * Admission as the gateway wires it with REDIS_URL (the limits and the calls in flight on one client
 * and one breaker), through a proxy that can hold Redis's replies, for a project with a 30 USD cap
 * and 12.50 spent by one call: room for two calls in flight.
 */
async function capped(perMinute: number | null = null) {
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
  const project = {
    id: "prj_1",
    createdAt: "2026-01-01T00:00:00.000Z",
    rateLimits: { perMinute, devicePerMinute: null },
    monthlySpendCapUsd: 30,
    proxyAllowList: null,
  } as unknown as Project;
  const rows: UsageRecord[] = [];
  const admit = createAdmission({
    authenticate: (): AuthResult => ({
      ok: true,
      method: "bearer-test-key",
      project,
      keyId: "key_1",
      provider: "provider-a",
      providerKey: "sk-real",
      deviceDigest: null,
    }),
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
    call,
    rows,
    places: () => watcher.zcard(`${prefix}:spend-in-flight:prj_1`),
    projectCount: () => watcher.get(`${prefix}:rl:project:60:prj_1`),
  };
}

const finish = (call: AdmittedCall) =>
  call.finish({
    status: 200,
    outcome: "ok",
    provider: "provider-a",
    model: "m",
    usage: null,
    costUsd: null,
    streamed: false,
    timeToFirstByteMs: null,
    errorCode: null,
  });

describe.skipIf(!redisAvailable)("admission with the limits and the spend cap in Redis", () => {
  it("admits a capped project's call after one Redis round trip: the calls in flight and the limits together", async () => {
    const { proxy, call } = await capped();
    // The month's spend read, and the scripts loaded into Redis (EVAL after NOSCRIPT), beforehand.
    finish(await call());
    proxy.hold();
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
});
