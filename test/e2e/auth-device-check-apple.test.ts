import { randomBytes } from "node:crypto";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { type FakeApple, generateAppleKeyPair, startFakeApple } from "../fakes/fake-apple.js";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { proxiedChat, proxiedChatStatus } from "../support/proxied-chat.js";
import {
  appleKeyId,
  appleTeamId,
  createDeviceCheckProject,
  logLinesOf,
  startTestGateway,
  type TestGateway,
} from "../support/test-gateway.js";

const token = (name: string) => Buffer.from(`${name}-${randomBytes(12).toString("hex")}`).toString("base64");

/** How the gateway answers a client for each thing Apple says about a device token (audit: devicecheck). */
describe("Apple's answers, through the gateway", () => {
  let fake: FakeUpstream;
  let apple: FakeApple;
  let sluice: TestGateway;
  const keys = generateAppleKeyPair();

  beforeAll(async () => {
    fake = await startFakeUpstream();
    apple = await startFakeApple({ label: "production" });
    apple.registerKey(appleKeyId, { teamId: appleTeamId, publicKeyPem: keys.publicKeyPem });
    sluice = await startTestGateway({
      providerABaseUrl: `${fake.url}/a/v1`,
      deviceCheckProductionUrl: apple.url,
      authFailureLimit: 1000,
    });
  });
  afterAll(async () => {
    await sluice.close();
    await apple.close();
    await fake.close();
  });
  afterEach(() => {
    apple.fail(null);
    apple.delay(0);
  });

  const project = (tokenMode: "single-use" | "cached" = "cached") =>
    createDeviceCheckProject(sluice.gateway, keys.privateKeyPem, tokenMode);
  const call = async (created: Awaited<ReturnType<typeof project>>, deviceToken: string) => {
    const response = await proxiedChat(sluice.url, {
      projectId: created.projectId,
      bearer: `${created.partialKeys["provider-a"]}.${deviceToken}`,
    });
    const body = (await response.json()) as { error?: { code: string } };
    return {
      status: response.status,
      code: body.error?.code,
      retryAfter: response.headers.get("retry-after"),
    };
  };

  /** The warn lines logged for `created` since the log held `from` lines. */
  const warningsFor = (created: { projectId: string }, from: number) =>
    logLinesOf(sluice, from).filter((line) => line.projectId === created.projectId && line.level === "warn");

  it.each([200, 400])(
    "answers 503, neither a pass nor the app's fault, when Apple answers %i that our JWT is badly formatted, and tells the operator",
    async (status) => {
      const created = await project();
      const deviceToken = token("jwt-refused");
      apple.registerValidToken(deviceToken);
      apple.fail({ kind: "status", status, body: "Missing or badly formatted authorization token" }, 1);
      const logsBefore = sluice.logs.length;
      expect(await call(created, deviceToken)).toEqual({
        status: 503,
        code: "SERVICE_UNAVAILABLE",
        retryAfter: "5",
      });
      const warning = warningsFor(created, logsBefore)[0];
      expect(warning).toMatchObject({
        reason: "misconfigured",
        status,
        keyId: appleKeyId,
        environment: "production",
        msg: expect.stringContaining("team id, key id or .p8 key"),
      });
      // Nothing was remembered: once Apple takes the JWT, the same token passes.
      expect(await call(created, deviceToken)).toMatchObject({ status: 200 });
    },
  );

  it("warns once per project and window while Apple refuses the operator's key, not once per call", async () => {
    const created = await project();
    apple.fail({ kind: "status", status: 401, body: "" }, 5);
    const logsBefore = sluice.logs.length;
    for (let call_ = 0; call_ < 5; call_++) {
      const deviceToken = token(`refused-${call_}`);
      apple.registerValidToken(deviceToken);
      expect(await call(created, deviceToken)).toMatchObject({ status: 503 });
    }
    const warnings = warningsFor(created, logsBefore);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ reason: "misconfigured", status: 401 });
  });

  it.each([
    ["cached", { 200: 100 }],
    ["single-use", { 200: 1, 401: 99 }],
  ] as const)(
    "asks Apple once for 100 simultaneous first requests with one %s token",
    async (tokenMode, statuses) => {
      const created = await project(tokenMode);
      const deviceToken = token(`simultaneous-${tokenMode}`);
      apple.registerValidToken(deviceToken);
      apple.delay(200);
      const before = apple.calls.length;
      const answers = await Promise.all(Array.from({ length: 100 }, () => call(created, deviceToken)));
      const counted: Record<number, number> = {};
      for (const { status } of answers) counted[status] = (counted[status] ?? 0) + 1;
      expect(counted).toEqual(statuses);
      expect(apple.calls.length - before).toBe(1);
    },
  );

  it("asks Apple again for one token once the call everyone waited for ended", async () => {
    const created = await project();
    const deviceToken = token("after-failure");
    apple.registerValidToken(deviceToken);
    apple.delay(100);
    apple.fail({ kind: "status", status: 500 }, 1);
    const first = await Promise.all([call(created, deviceToken), call(created, deviceToken)]);
    expect(first.map(({ status }) => status)).toEqual([503, 503]);
    expect(await call(created, deviceToken)).toMatchObject({ status: 200 });
  });

  it("answers 503, never a pass, when Apple's host answers 200 with a page that is not Apple's answer", async () => {
    const created = await project();
    // A token Apple never issued: a captive portal or a wrong host answering 200 must not admit it.
    const deviceToken = token("captive-portal");
    apple.fail({ kind: "status", status: 200, body: "<html><body>Sign in to the network</body></html>" }, 1);
    expect(await call(created, deviceToken)).toEqual({
      status: 503,
      code: "SERVICE_UNAVAILABLE",
      retryAfter: "5",
    });
    // Nothing was remembered: Apple itself, asked next, refuses the token.
    expect(await call(created, deviceToken)).toMatchObject({ status: 401, code: "UNAUTHORIZED" });
  });

  it("answers 503, not 401, and warns the operator when Apple's host answers 400 with a page that is not Apple's", async () => {
    const created = await project();
    // A proxy's or a wrong SLUICE_DEVICECHECK_*_URL's error page: every device would be refused as
    // holding a bad token, with nothing in the log.
    const deviceToken = token("proxy-page");
    apple.registerValidToken(deviceToken);
    apple.fail(
      { kind: "status", status: 400, body: "<html><body><h1>400 Bad Request</h1></body></html>" },
      1,
    );
    const logsBefore = sluice.logs.length;
    expect(await call(created, deviceToken)).toEqual({
      status: 503,
      code: "SERVICE_UNAVAILABLE",
      retryAfter: "5",
    });
    const warning = warningsFor(created, logsBefore)[0];
    expect(warning).toMatchObject({ reason: "apple-error", status: 400, environment: "production" });
    // Apple itself, asked next, takes the token.
    expect(await call(created, deviceToken)).toMatchObject({ status: 200 });
  });
});

describe("Apple's answers, in the metrics", () => {
  it("counts each Apple validation by environment and result, so an operator sees Apple's outages", async () => {
    const fake = await startFakeUpstream();
    const apple = await startFakeApple({ label: "production" });
    const keys = generateAppleKeyPair();
    apple.registerKey(appleKeyId, { teamId: appleTeamId, publicKeyPem: keys.publicKeyPem });
    const sluice = await startTestGateway({
      providerABaseUrl: `${fake.url}/a/v1`,
      deviceCheckProductionUrl: apple.url,
      authFailureLimit: 1000,
      metricsEnabled: true,
    });
    try {
      const created = await createDeviceCheckProject(sluice.gateway, keys.privateKeyPem, "cached");
      const call = async (deviceToken: string) => {
        return proxiedChatStatus(sluice.url, {
          projectId: created.projectId,
          bearer: `${created.partialKeys["provider-a"]}.${deviceToken}`,
        });
      };
      const valid = token("valid");
      apple.registerValidToken(valid);
      expect(await call(valid)).toBe(200);
      // Trusted for its TTL: no second Apple call, nothing more counted.
      expect(await call(valid)).toBe(200);
      expect(await call(token("unknown"))).toBe(401);
      apple.fail({ kind: "status", status: 500 }, 1);
      expect(await call(token("apple-down"))).toBe(503);
      apple.fail({ kind: "close" }, 1);
      expect(await call(token("apple-gone"))).toBe(503);
      apple.fail({ kind: "status", status: 401 }, 1);
      expect(await call(token("jwt-refused"))).toBe(503);
      const metrics = await (await fetch(`${sluice.url}/metrics`)).text();
      const counted = metrics
        .split("\n")
        .filter((line) => line.startsWith("sluice_devicecheck_results_total"));
      expect(counted.sort()).toEqual(
        [
          'sluice_devicecheck_results_total{environment="production",result="valid"} 1',
          'sluice_devicecheck_results_total{environment="production",result="rejected"} 1',
          'sluice_devicecheck_results_total{environment="production",result="apple-error"} 1',
          'sluice_devicecheck_results_total{environment="production",result="network"} 1',
          'sluice_devicecheck_results_total{environment="production",result="misconfigured"} 1',
        ].sort(),
      );
      expect(metrics).toContain("# TYPE sluice_devicecheck_results_total counter");
    } finally {
      await sluice.close();
      await apple.close();
      await fake.close();
    }
  });
});
