import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeApple, generateAppleKeyPair, startFakeApple } from "../fakes/fake-apple.js";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { clockAwayFromMonthEnd } from "../support/away-from-month-end.js";
import { proxiedChat } from "../support/proxied-chat.js";
import { redisAvailable, redisUrl } from "../support/services.js";
import {
  adminToken,
  appleKeyId,
  appleTeamId,
  createDeviceCheckProject,
  startTestGateway,
  type TestGateway,
} from "../support/test-gateway.js";

/** An address of this run's own: with Redis the throttle and the limits are shared between runs. */
const address = (n: number) => `198.51.${randomBytes(1)[0]}.${n}`;
const token = (name: string) => Buffer.from(`${name}-${randomBytes(12).toString("hex")}`).toString("base64");

/**
 * A request refused after authentication (rate limits 429, spend cap 403) gives its device token's
 * use back: a client that waits out Retry-After and retries with the same token is admitted, and a
 * token's budget counts admitted requests only (audit: limits, defect 1).
 */
describe.each([
  { engine: "memory", redis: false },
  { engine: "redis", redis: true },
])("device tokens of refused requests ($engine ledger)", ({ redis }) => {
  let fake: FakeUpstream;
  let apple: FakeApple;
  let sluice: TestGateway;
  const keys = generateAppleKeyPair();
  const skip = redis && !redisAvailable;

  beforeAll(async () => {
    if (skip) return;
    fake = await startFakeUpstream();
    apple = await startFakeApple({ label: "production" });
    apple.registerKey(appleKeyId, { teamId: appleTeamId, publicKeyPem: keys.publicKeyPem });
    // Within one month: the spend cap test would see its spend start again on the 1st (UTC).
    sluice = await startTestGateway(
      {
        providerABaseUrl: `${fake.url}/a/v1`,
        deviceCheckProductionUrl: apple.url,
        deviceTokenBudget: 3,
        authFailureLimit: 2,
        trustProxy: ["127.0.0.1"],
        ...(redis ? { redisUrl } : {}),
      },
      { now: clockAwayFromMonthEnd() },
    );
  });
  afterAll(async () => {
    if (skip) return;
    await sluice.close();
    await apple.close();
    await fake.close();
  });

  const project = (tokenMode: "single-use" | "cached", fields: Record<string, unknown> = {}) =>
    createDeviceCheckProject(sluice.gateway, keys.privateKeyPem, tokenMode, {
      rateLimits: { perMinute: 1 },
      ...fields,
    });
  const call = async (projectId: string, partial: string, deviceToken: string, ip: string) => {
    const r = await proxiedChat(
      sluice.url,
      { projectId, bearer: `${partial}.${deviceToken}` },
      { headers: { "x-forwarded-for": ip } },
    );
    return { status: r.status, retryAfter: r.headers.get("retry-after"), body: await r.text() };
  };
  /** The admin raises the limit: as if the window had ended (ADR 0008: applies at once). */
  const raise = (projectId: string, fields: Record<string, unknown>) =>
    fetch(`${sluice.url}/admin/v1/projects/${projectId}`, {
      method: "PATCH",
      headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
      body: JSON.stringify(fields),
    });

  it.skipIf(skip)("single-use: a token refused 429 is admitted after Retry-After, once only", async () => {
    const p = await project("single-use");
    const partial = p.partialKeys["provider-a"];
    const [first, second] = [token("single-use-first"), token("single-use-second")];
    apple.registerValidToken(first);
    apple.registerValidToken(second);
    const ip = address(50);
    expect((await call(p.projectId, partial, first, ip)).status).toBe(200);
    const refused = await call(p.projectId, partial, second, ip);
    expect(refused.status).toBe(429);
    expect(Number(refused.retryAfter)).toBeGreaterThan(0);
    expect((await raise(p.projectId, { rateLimits: { perMinute: 10 } })).status).toBe(200);
    const retried = await call(p.projectId, partial, second, ip);
    expect(retried.status).toBe(200);
    // Admitted once: the next use is a replay.
    const replay = await call(p.projectId, partial, second, ip);
    expect(replay.status).toBe(401);
    expect(replay.body).toContain("already used");
    expect((await call(p.projectId, partial, first, address(51))).status).toBe(401);
  });

  it.skipIf(skip)(
    "single-use: a token refused 403 (the project disabled) is admitted once it is enabled",
    async () => {
      const p = await project("single-use", { rateLimits: { perMinute: 100 }, disabled: true });
      const partial = p.partialKeys["provider-a"];
      const deviceToken = token("disabled-project");
      apple.registerValidToken(deviceToken);
      const ip = address(54);
      expect((await call(p.projectId, partial, deviceToken, ip)).status).toBe(403);
      expect((await raise(p.projectId, { disabled: false })).status).toBe(200);
      // Before, the token was used up by the refused request: 401 "already used".
      expect((await call(p.projectId, partial, deviceToken, ip)).status).toBe(200);
      expect((await call(p.projectId, partial, deviceToken, ip)).status).toBe(401);
    },
  );

  it.skipIf(skip)("budget: refused requests do not use up the token's budget", async () => {
    const p = await project("cached");
    const partial = p.partialKeys["provider-a"];
    const deviceToken = token("budget-token");
    apple.registerValidToken(deviceToken);
    const ip = address(52);
    const statuses = [];
    for (let i = 0; i < 3; i++) statuses.push((await call(p.projectId, partial, deviceToken, ip)).status);
    expect(statuses).toEqual([200, 429, 429]);
    expect((await raise(p.projectId, { rateLimits: { perMinute: 10 } })).status).toBe(200);
    const after = [];
    for (let i = 0; i < 3; i++) {
      const r = await call(p.projectId, partial, deviceToken, ip);
      after.push(r.status === 401 ? `401 ${r.body.includes("used up its request budget")}` : `${r.status}`);
    }
    // Admitted once; a budget of 3 leaves two more, then the budget is spent.
    expect(after).toEqual(["200", "200", "401 true"]);
  });

  it.skipIf(skip)(
    "single-use: a token the spend cap refused (403) is admitted once the cap is raised",
    async () => {
      fake.setUsage({ input: 1_000_000, output: 1_000_000, cached: 0, reasoning: 0 });
      const p = await project("single-use", { rateLimits: { perMinute: 100 }, monthlySpendCapUsd: 0.01 });
      const partial = p.partialKeys["provider-a"];
      const [first, second] = [token("cap-first"), token("cap-second")];
      apple.registerValidToken(first);
      apple.registerValidToken(second);
      const ip = address(53);
      expect((await call(p.projectId, partial, first, ip)).status).toBe(200);
      // The first call's cost is over the cap: the second token's request is refused.
      expect((await call(p.projectId, partial, second, ip)).status).toBe(403);
      expect((await raise(p.projectId, { monthlySpendCapUsd: 1_000 })).status).toBe(200);
      expect((await call(p.projectId, partial, second, ip)).status).toBe(200);
      expect((await call(p.projectId, partial, second, ip)).status).toBe(401);
    },
  );
});
