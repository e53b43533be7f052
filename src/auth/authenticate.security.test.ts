import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type FakeApple, generateAppleKeyPair, startFakeApple } from "../../test/fakes/fake-apple.js";
import {
  deviceTokenVerifierOn,
  openThrottle,
  throttlePolicy,
  wireAdminAndDirectory,
} from "../../test/support/authenticator-wiring.js";
import type { createProjectAdmin } from "../admin/project-admin.js";
import type { ProviderId } from "../providers/provider-id.js";
import { type OpenDatabase, openDatabase } from "../storage/database.js";
import { createKeyRepository } from "../storage/key-repository.js";
import { createProjectRepository } from "../storage/project-repository.js";
import { type AuthResult, type AuthThrottle, createAuthenticator } from "./authenticate.js";
import { createCredentialDirectory } from "./credential-directory.js";
import { testKeyHeader } from "./credential-headers.js";
import { deviceTokenDigest } from "./device-token-cache.js";
import type { SecretBox } from "./secret-box.js";
import { createSecretBox } from "./secret-box.js";

const teamId = "TEAM123456";
const keyId = "KEY1234567";
const goodDevice = Buffer.from("a-valid-device-token-from-apple").toString("base64");
const badDevice = Buffer.from("an-invalid-device-token").toString("base64");

interface Fixture {
  projectId: string;
  testKey: string;
  partial: Record<ProviderId, string>;
}

/**
 * A project with DeviceCheck on and Test Mode off, its provider A key, and a request with that
 * key's partial key and the token the fake Apple accepts.
 */
async function deviceCheckProject(
  admin: ReturnType<typeof wireAdminAndDirectory>["admin"],
  privateKey: string,
  name: string,
  apiKey: string,
) {
  const created = await admin.createProject({
    name,
    provider: "provider-a",
    testMode: false,
    deviceCheck: { enabled: true, teamId, keyId, privateKey, environment: "production" },
  });
  const key = await admin.addProviderKey(created.project.id, { provider: "provider-a", apiKey });
  const request = {
    projectId: created.project.id,
    headers: { authorization: `Bearer ${key.partialKey}.${goodDevice}` },
    clientIp: "1.1.1.1",
    provider: "provider-a" as const,
  };
  return { created, key, request };
}

describe("authenticate: the SPEC's methods, in order", () => {
  let database: OpenDatabase;
  let production: FakeApple;
  let development: FakeApple;
  let authenticate: ReturnType<typeof createAuthenticator>;
  let admin: ReturnType<typeof createProjectAdmin>;
  const fixtures = new Map<string, Fixture>();
  const keys = generateAppleKeyPair();

  async function project(
    testMode: boolean,
    deviceCheck: boolean,
    environment: "production" | "development" = "production",
  ) {
    const name = `${testMode}-${deviceCheck}-${environment}`;
    const existing = fixtures.get(name);
    if (existing) return existing;
    const created = await admin.createProject({
      name,
      provider: "provider-a",
      testMode,
      deviceCheck: { enabled: deviceCheck, teamId, keyId, privateKey: keys.privateKeyPem, environment },
    });
    const partial = {} as Record<ProviderId, string>;
    for (const provider of ["provider-a", "provider-b", "provider-c"] as const) {
      partial[provider] = (
        await admin.addProviderKey(created.project.id, {
          provider,
          apiKey: `key-${provider}-${randomBytes(8).toString("hex")}`,
        })
      ).partialKey;
    }
    const fixture = { projectId: created.project.id, testKey: created.testKey, partial };
    fixtures.set(name, fixture);
    return fixture;
  }

  /** The verifier on the fake Apple hosts, its ledger in memory, with a budget of `budget` uses a token. */
  const verifierOn = (secretBox: SecretBox, budget: number) =>
    deviceTokenVerifierOn({ production: production.url, development: development.url }, secretBox, budget);

  beforeAll(async () => {
    production = await startFakeApple({ label: "production", validTokens: [goodDevice] });
    development = await startFakeApple({ label: "development", validTokens: [goodDevice] });
    for (const apple of [production, development])
      apple.registerKey(keyId, { teamId, publicKeyPem: keys.publicKeyPem });
    database = await openDatabase({ dataDir: "unused", sqliteFile: ":memory:" });
    const wired = wireAdminAndDirectory(database, 0);
    const { secretBox, directory } = wired;
    admin = wired.admin;
    const deviceTokens = verifierOn(secretBox, 1000);
    authenticate = createAuthenticator({
      directory,
      deviceTokens,
      throttle: openThrottle,
      testModeAllowed: true,
    });
  });

  afterAll(async () => {
    await database.close();
    await production.close();
    await development.close();
  });

  beforeEach(() => {
    production.fail(null);
  });

  const run = (
    projectId: string | undefined,
    headers: Record<string, string>,
    provider: ProviderId = "provider-a",
  ) => authenticate({ projectId, headers, clientIp: "203.0.113.9", provider });

  const statusOf = (result: AuthResult) => (result.ok ? 200 : result.error.status);

  type Method = "header" | "bearer-test" | "bearer-device" | "legacy-device";
  const methods: Method[] = ["header", "bearer-test", "bearer-device", "legacy-device"];

  function headersFor(method: Method, fixture: Fixture, rightKey: boolean): Record<string, string> {
    const partial = rightKey
      ? fixture.partial["provider-a"]
      : `${fixture.partial["provider-a"].slice(0, -4)}AAAA`;
    switch (method) {
      case "header":
        return { "x-sluice-test-key": fixture.testKey, "x-ai-key": partial };
      case "bearer-test":
        return { authorization: `Bearer ${partial}.${fixture.testKey}` };
      case "bearer-device":
        return { authorization: `Bearer ${partial}.${goodDevice}` };
      case "legacy-device":
        return { "x-device-token": goodDevice, "x-ai-key": partial };
    }
  }

  const cases: Array<[Method, boolean, boolean, boolean, number]> = [];
  for (const method of methods) {
    for (const testMode of [true, false]) {
      for (const deviceCheck of [true, false]) {
        for (const rightKey of [true, false]) {
          const needsTest = method === "header" || method === "bearer-test";
          const enabled = needsTest ? testMode : deviceCheck;
          cases.push([method, testMode, deviceCheck, rightKey, enabled && rightKey ? 200 : 401]);
        }
      }
    }
  }

  it.each(cases)(
    "%s with testMode=%s deviceCheck=%s rightKey=%s answers %i",
    async (method, testMode, deviceCheck, rightKey, expected) => {
      const fixture = await project(testMode, deviceCheck);
      const result = await run(fixture.projectId, headersFor(method, fixture, rightKey));
      expect(statusOf(result)).toBe(expected);
      if (result.ok) {
        expect(result.providerKey.startsWith("key-provider-a-")).toBe(true);
        expect(result.method).toBe(
          {
            header: "test-key-header",
            "bearer-test": "bearer-test-key",
            "bearer-device": "bearer-device-check",
            "legacy-device": "device-token-header",
          }[method],
        );
      } else {
        expect(result.error.code).toBe("UNAUTHORIZED");
      }
    },
  );

  it.each(methods)("%s against another project's id answers 401, and an unknown id 404", async (method) => {
    const mine = await project(true, true);
    const other = await project(true, true, "development");
    expect(statusOf(await run(other.projectId, headersFor(method, mine, true)))).toBe(401);
    const unknown = await run("no-such-project", headersFor(method, mine, true));
    expect(unknown.ok ? 200 : unknown.error.code).toBe("PROJECT_NOT_FOUND");
  });

  it("ignores x-ai-key when the Bearer method is used", async () => {
    const fixture = await project(true, false);
    const result = await run(fixture.projectId, {
      authorization: `Bearer ${fixture.partial["provider-a"]}.${fixture.testKey}`,
      "x-ai-key": "garbage",
    });
    expect(statusOf(result)).toBe(200);
  });

  it("never takes the partial key from x-ai-key when the Bearer value's is missing or wrong (SPEC rule 2)", async () => {
    const fixture = await project(true, false);
    const other = await project(true, false, "development");
    const valid = { "x-ai-key": fixture.partial["provider-a"] };
    for (const authorization of [
      `Bearer .${fixture.testKey}`,
      `Bearer ${other.partial["provider-a"]}.${fixture.testKey}`,
      `Bearer not-a-partial-key.${fixture.testKey}`,
    ])
      expect(statusOf(await run(fixture.projectId, { authorization, ...valid }))).toBe(401);
  });

  it("refuses a partial key of another provider with 403", async () => {
    const fixture = await project(true, false);
    const result = await run(fixture.projectId, {
      authorization: `Bearer ${fixture.partial["provider-b"]}.${fixture.testKey}`,
    });
    expect(result.ok ? 200 : result.error.code).toBe("FORBIDDEN");
  });

  it.each([
    ["bearer", (partial: string, token: string) => ({ authorization: `Bearer ${partial}.${token}` })],
    ["legacy header", (partial: string, token: string) => ({ "x-device-token": token, "x-ai-key": partial })],
  ])("says 403 for another provider's key only once the device token passed (%s)", async (_name, headers) => {
    const fixture = await project(false, true);
    const otherProvider = fixture.partial["provider-b"];
    const refused = await run(fixture.projectId, headers(otherProvider, badDevice));
    expect(refused.ok ? 200 : refused.error.code).toBe("UNAUTHORIZED");
    const forbidden = await run(fixture.projectId, headers(otherProvider, goodDevice));
    expect(forbidden.ok ? 200 : forbidden.error.code).toBe("FORBIDDEN");
  });

  /** A test-mode project of its own (the shared fixtures must not be revoked or disabled). */
  async function ownProject(name: string) {
    const created = await admin.createProject({ name, provider: "provider-a", testMode: true });
    const key = await admin.addProviderKey(created.project.id, {
      provider: "provider-a",
      apiKey: `sk-${name}-${randomBytes(8).toString("hex")}`,
    });
    const headers = { authorization: `Bearer ${key.partialKey}.${created.testKey}` };
    return { projectId: created.project.id, keyId: key.keyId, partialKey: key.partialKey, headers };
  }

  const codeAndMessage = (result: AuthResult) =>
    result.ok ? "ok" : `${result.error.status} ${result.error.code}: ${result.error.message}`;

  it("says a key was revoked (403) only to a caller whose partial key and test key pass", async () => {
    const own = await ownProject("revocation");
    const other = await ownProject("revocation-elsewhere");
    expect(statusOf(await run(own.projectId, own.headers))).toBe(200);
    await admin.revokeProviderKey(own.projectId, own.keyId);
    const revoked = "403 FORBIDDEN: This provider key was revoked";
    expect(codeAndMessage(await run(own.projectId, own.headers))).toBe(revoked);
    const testKey = own.headers.authorization.split(".")[1] ?? "";
    expect(
      codeAndMessage(await run(own.projectId, { "x-sluice-test-key": testKey, "x-ai-key": own.partialKey })),
    ).toBe(revoked);
    const invalidKey =
      "401 UNAUTHORIZED: No authentication method succeeded: the partial key is not valid for this project";
    const wrongShare = `${own.partialKey.slice(0, -2)}${own.partialKey.endsWith("AA") ? "BB" : "AA"}`;
    const strangers: Array<[string, Record<string, string>, string]> = [
      [
        own.projectId,
        { authorization: `Bearer ${own.partialKey}.tk_wrong` },
        "401 UNAUTHORIZED: No authentication method succeeded: the token is not a valid test key (device check is off for this project)",
      ],
      [own.projectId, { authorization: `Bearer ${wrongShare}.${testKey}` }, invalidKey],
      // Another project's right test key: the revoked key is not that project's.
      [
        other.projectId,
        { authorization: `Bearer ${own.partialKey}.${other.headers.authorization.split(".")[1]}` },
        invalidKey,
      ],
    ];
    for (const [projectId, headers, answer] of strangers)
      expect(codeAndMessage(await run(projectId, headers))).toBe(answer);
  });

  it("says the partial key goes first to a caller who sent <test key>.<partial key>", async () => {
    const own = await ownProject("swapped");
    const [partialKey, testKey] = own.headers.authorization.slice("Bearer ".length).split(".");
    const swapped = await run(own.projectId, { authorization: `Bearer ${testKey}.${partialKey}` });
    expect(codeAndMessage(swapped)).toBe(
      "401 UNAUTHORIZED: No authentication method succeeded: the token is not a valid test key (device check is off for this project); the partial key (sk_sluice_…) goes first: <partial_key>.<token>",
    );
    expect(codeAndMessage(await run(own.projectId, { authorization: `Bearer ${partialKey}.tk_wrong` }))).toBe(
      "401 UNAUTHORIZED: No authentication method succeeded: the token is not a valid test key (device check is off for this project)",
    );
  });

  it("says which of Sluice's headers is not read to a caller who spelt it with underscores", async () => {
    const own = await ownProject("underscores");
    const testKey = own.headers.authorization.split(".")[1] ?? "";
    const device = await project(false, true);
    const unauthorized = "401 UNAUTHORIZED: No authentication method succeeded:";
    const cases: Array<[string, Record<string, string>, string]> = [
      [
        own.projectId,
        { x_sluice_test_key: testKey, x_ai_key: own.partialKey },
        `${unauthorized} no credentials were sent; header x_sluice_test_key is not read: use x-sluice-test-key; header x_ai_key is not read: use x-ai-key`,
      ],
      [
        own.projectId,
        { "x-sluice-test-key": testKey, x_ai_key: own.partialKey },
        `${unauthorized} x-ai-key (the partial key) is required with the test-key header; header x_ai_key is not read: use x-ai-key`,
      ],
      [
        device.projectId,
        { "x-device-token": goodDevice, "x_ai-key": device.partial["provider-a"] },
        `${unauthorized} x-ai-key (the partial key) is required with x-device-token; header x_ai-key is not read: use x-ai-key`,
      ],
      [
        device.projectId,
        { x_device_token: goodDevice, "x-ai-key": device.partial["provider-a"] },
        `${unauthorized} no credentials were sent; header x_device_token is not read: use x-device-token`,
      ],
      // Nothing to say: no header of Sluice's under another spelling, or the right one sent beside it.
      [own.projectId, {}, `${unauthorized} no credentials were sent`],
      [
        own.projectId,
        { x_api_key: "sk-x", "x-sluice-test-key": testKey },
        `${unauthorized} x-ai-key (the partial key) is required with the test-key header`,
      ],
    ];
    for (const [projectId, headers, answer] of cases)
      expect(codeAndMessage(await run(projectId, headers))).toBe(answer);
    expect(
      statusOf(
        await run(own.projectId, { "x-sluice-test-key": testKey, "x-ai-key": own.partialKey, x_ai_key: "x" }),
      ),
    ).toBe(200);
  });

  it("says a project is disabled only to a caller whose credentials pass", async () => {
    const own = await ownProject("disabled");
    expect(statusOf(await run(own.projectId, own.headers))).toBe(200);
    await admin.updateProject(own.projectId, { disabled: true });
    const refused = await run(own.projectId, own.headers);
    expect(refused.ok ? 200 : refused.error.code).toBe("FORBIDDEN");
    expect(refused.ok ? null : refused.method).toBe("bearer-test-key");
    const strangers: Record<string, string>[] = [
      {},
      { authorization: `Bearer ${own.partialKey}.wrong-test-key` },
    ];
    for (const stranger of strangers) {
      const result = await run(own.projectId, stranger);
      expect(result.ok ? 200 : result.error.code).toBe("UNAUTHORIZED");
    }
  });

  /** A test-mode project with a provider key, on a directory that trusts its cache for a minute. */
  async function longCacheFixture(name: string, throttle: AuthThrottle, clientIp: string) {
    const { directory, admin: longAdmin } = wireAdminAndDirectory(database, 60_000);
    const cachedAuth = createAuthenticator({
      directory,
      deviceTokens: { verify: async () => ({ kind: "invalid", reason: "no" }) },
      throttle,
      testModeAllowed: true,
    });
    const created = await longAdmin.createProject({ name, provider: "provider-a", testMode: true });
    const key = await longAdmin.addProviderKey(created.project.id, {
      provider: "provider-a",
      apiKey: `sk-${name}-key-123`,
    });
    const request = {
      projectId: created.project.id,
      headers: { authorization: `Bearer ${key.partialKey}.${created.testKey}` },
      clientIp,
      provider: "provider-a" as const,
    };
    return { cachedAuth, longAdmin, created, key, request };
  }

  it("drops cached credentials at once when an admin revokes the key, even with a long cache TTL", async () => {
    const { cachedAuth, longAdmin, created, key, request } = await longCacheFixture(
      "cached",
      openThrottle,
      "1.1.1.1",
    );
    expect((await cachedAuth(request)).ok).toBe(true);
    // Everything is in memory now: the answer comes without a promise.
    const warm = cachedAuth(request);
    expect(warm).not.toBeInstanceOf(Promise);
    expect((warm as AuthResult).ok).toBe(true);
    await longAdmin.revokeProviderKey(created.project.id, key.keyId);
    const afterRevoke = cachedAuth(request);
    expect(afterRevoke).toBeInstanceOf(Promise);
    expect(statusOf(await afterRevoke)).toBe(403);
    // A wrong test key never takes the in-memory path, however warm the caches are.
    const wrong = { ...request, headers: { authorization: `Bearer ${key.partialKey}.tk_wrong` } };
    expect(statusOf(await cachedAuth(wrong))).toBe(401);
  });

  it("refuses a warm partial key on an endpoint of another provider (403), whatever the caches hold", async () => {
    const { cachedAuth, request } = await longCacheFixture("other-provider", openThrottle, "1.1.1.4");
    expect((await cachedAuth(request)).ok).toBe(true);
    const elsewhere = await cachedAuth({ ...request, provider: "provider-b" });
    expect(elsewhere.ok ? "ok" : elsewhere.error.message).toBe(
      "This partial key belongs to provider-a; this endpoint needs a provider-b key",
    );
  });

  it("answers with a later method's 403 rather than an earlier method's 401", async () => {
    const { cachedAuth, created, request } = await longCacheFixture("best-error", openThrottle, "1.1.1.5");
    // The test-key header's key is wrong (401); the Bearer credentials pass, for another provider (403).
    const result = await cachedAuth({
      ...request,
      provider: "provider-b",
      headers: { ...request.headers, "x-sluice-test-key": `${created.testKey}x`, "x-ai-key": "sk_sluice_x" },
    });
    expect(result.ok ? 200 : result.error.status).toBe(403);
  });

  it("remembers a test-key credential by what the test-key methods read, not by x-device-token", async () => {
    const { cachedAuth, request } = await longCacheFixture("junk-header", openThrottle, "1.1.1.3");
    expect((await cachedAuth(request)).ok).toBe(true);
    // The same credential with a new junk x-device-token each time is the one remembered entry: a
    // hit, without a promise (before, each new value was an entry of its own, up to 15 KiB each).
    for (const junk of ["a", "b".repeat(15_000), "c"]) {
      const again = cachedAuth({ ...request, headers: { ...request.headers, "x-device-token": junk } });
      expect(again).not.toBeInstanceOf(Promise);
      expect((again as AuthResult).ok).toBe(true);
    }
  });

  it("remembers a test-key header success by that header and x-ai-key alone, not the Authorization value beside them", async () => {
    let slots = 0;
    const throttle: AuthThrottle = {
      ...openThrottle,
      begin: () => {
        slots++;
        return () => {};
      },
    };
    const { cachedAuth, created, key, request } = await longCacheFixture(
      "header-beside",
      throttle,
      "1.1.1.6",
    );
    const method1 = { "x-sluice-test-key": created.testKey, "x-ai-key": key.partialKey };
    const first = await cachedAuth({ ...request, headers: method1 });
    expect(first.ok ? first.method : first.error.message).toBe("test-key-header");
    // Method 1 reads neither the Authorization value nor an SDK key header: a new one each time is
    // the same remembered success, without a promise or a throttle slot (before, each was a miss
    // that went the full way, took a slot and left an entry of its own in the cache).
    const before = slots;
    const beside = [
      { authorization: "Bearer junk-1" },
      { authorization: "Bearer junk-2.tk_junk" },
      { authorization: `Bearer ${key.partialKey}.tk_wrong` },
    ];
    for (const extra of beside) {
      const again = cachedAuth({ ...request, headers: { ...method1, ...extra } });
      expect(again).not.toBeInstanceOf(Promise);
      expect((again as AuthResult).ok ? (again as AuthResult).method : "refused").toBe("test-key-header");
    }
    const sdk = cachedAuth({
      ...request,
      sdkKeyHeader: "x-api-key",
      headers: { ...method1, "x-api-key": "junk-3" },
    });
    expect(sdk).not.toBeInstanceOf(Promise);
    expect(slots).toBe(before);
    // What authenticated stays in the key: another partial key or test key beside a Bearer value
    // that was remembered with the right ones is checked, and refused.
    const wrongPartial = `${key.partialKey.slice(0, -4)}AAAA`;
    for (const headers of [
      { ...method1, "x-ai-key": wrongPartial, authorization: "Bearer junk-1" },
      { ...method1, "x-sluice-test-key": `${created.testKey}x`, authorization: "Bearer junk-1" },
    ]) {
      const refused = cachedAuth({ ...request, headers });
      expect(refused).toBeInstanceOf(Promise);
      expect(statusOf(await refused)).toBe(401);
    }
  });

  it("checks the throttle before a warm credential: a blocked client is refused with everything in memory", async () => {
    let wait = 0;
    const { cachedAuth, request } = await longCacheFixture(
      "warm",
      {
        policy: throttlePolicy,
        retryAfter: () => wait,
        retryAfterMissing: () => wait,
        recordFailure: async () => {},
        begin: () => () => {},
      },
      "1.1.1.2",
    );
    expect((await cachedAuth(request)).ok).toBe(true);
    expect((cachedAuth(request) as AuthResult).ok).toBe(true);
    wait = 9;
    const refused = await cachedAuth(request);
    expect(refused.ok ? 200 : refused.error.code).toBe("TOO_MANY_REQUESTS");
    expect(refused.ok ? {} : refused.error.headers).toMatchObject({ "retry-after": "9" });
  });

  it("holds a throttle slot while a credential is checked and gives it back, but none for a warm one", async () => {
    let open = 0;
    let taken = 0;
    let refuse = false;
    const throttle: AuthThrottle = {
      policy: throttlePolicy,
      retryAfter: () => 0,
      retryAfterMissing: () => 0,
      recordFailure: async () => {},
      begin: () => {
        if (refuse) return 4;
        taken++;
        open++;
        return () => open--;
      },
    };
    const { cachedAuth, request } = await longCacheFixture("slots", throttle, "1.1.1.4");
    expect((await cachedAuth(request)).ok).toBe(true);
    expect(taken).toBeGreaterThan(0);
    expect(open).toBe(0);
    const before = taken;
    const warm = cachedAuth(request);
    expect(warm).not.toBeInstanceOf(Promise);
    expect(taken).toBe(before);
    // A credential still to be checked is refused while the key's slots are full.
    refuse = true;
    const wrong = { ...request, headers: { authorization: "Bearer pk_wrong.tk_wrong" } };
    const refused = await cachedAuth(wrong);
    expect(refused.ok ? 200 : refused.error.code).toBe("TOO_MANY_REQUESTS");
    expect(refused.ok ? {} : refused.error.headers).toMatchObject({ "retry-after": "4" });
    expect(open).toBe(0);
  });

  it("refuses a revoked key at once on the DeviceCheck path too, where the rebuilt key is cached", async () => {
    const { directory, admin: longAdmin } = wireAdminAndDirectory(database, 60_000);
    const verified: string[] = [];
    let accepted = true;
    const cachedAuth = createAuthenticator({
      directory,
      deviceTokens: {
        verify: async (_project, token) => {
          verified.push(token);
          return accepted ? { kind: "ok", digest: "device-digest" } : { kind: "invalid", reason: "no" };
        },
      },
      throttle: openThrottle,
      testModeAllowed: true,
    });
    const { created, key, request } = await deviceCheckProject(
      longAdmin,
      keys.privateKeyPem,
      "device cached",
      "sk-device-cached-123",
    );
    const first = await cachedAuth(request);
    const second = await cachedAuth(request);
    expect(first.ok && second.ok && second.providerKey).toBe("sk-device-cached-123");
    // The device token is verified every time; only the partial key's check is remembered.
    expect(verified).toEqual([goodDevice, goodDevice]);
    const wrong = `${key.partialKey.slice(0, -2)}${key.partialKey.endsWith("AA") ? "BB" : "AA"}`;
    expect(
      statusOf(await cachedAuth({ ...request, headers: { authorization: `Bearer ${wrong}.${goodDevice}` } })),
    ).toBe(401);
    await longAdmin.revokeProviderKey(created.project.id, key.keyId);
    expect(codeAndMessage(await cachedAuth(request))).toBe("403 FORBIDDEN: This provider key was revoked");
    // A device token Apple refuses learns nothing of the key.
    const refused = Buffer.from("a-token-apple-refuses").toString("base64");
    accepted = false;
    const stranger = await cachedAuth({
      ...request,
      headers: { authorization: `Bearer ${key.partialKey}.${refused}` },
    });
    expect(stranger.ok ? 200 : stranger.error.code).toBe("UNAUTHORIZED");
  });

  it("answers a warm DeviceCheck request without a promise, counting its use, and goes the full way for the rest", async () => {
    const { directory, admin: longAdmin, secretBox } = wireAdminAndDirectory(database, 60_000);
    const deviceTokens = verifierOn(secretBox, 4);
    const warmAuth = createAuthenticator({
      directory,
      deviceTokens,
      throttle: openThrottle,
      testModeAllowed: true,
    });
    const { created, key, request } = await deviceCheckProject(
      longAdmin,
      keys.privateKeyPem,
      "device warm",
      "sk-device-warm-123",
    );
    const appleCalls = production.calls.length;
    // The first use asks Apple (through the full path); the next two are in memory.
    const first = await warmAuth(request);
    expect(first.ok && first.method).toBe("bearer-device-check");
    for (let use = 2; use <= 3; use++) {
      const warm = warmAuth(request);
      expect(warm).not.toBeInstanceOf(Promise);
      const result = warm as Awaited<typeof warm>;
      expect(result.ok && [result.method, result.providerKey, result.deviceDigest]).toEqual([
        "bearer-device-check",
        "sk-device-warm-123",
        deviceTokenDigest(goodDevice),
      ]);
    }
    expect(production.calls.length).toBe(appleCalls + 1);
    // The warm path reads the Bearer value as sent. A spelling the full path refuses, though it
    // decodes to a warm token's bytes (URL-safe `-` for `+`, a space inside), or one it trims (a
    // second space, a trailing one) matches nothing the warm path holds: each goes the full way,
    // which answers it as before (the last one is the token's fourth and last use).
    const spelled = (authorization: string) => warmAuth({ ...request, headers: { authorization } });
    const withPlus = Buffer.concat([Buffer.from("device-token"), Buffer.from([0xfb, 0xef, 0xbe])]).toString(
      "base64",
    );
    expect(withPlus).toContain("+");
    production.registerValidToken(withPlus);
    expect(statusOf(await spelled(`Bearer ${key.partialKey}.${withPlus}`))).toBe(200);
    expect(spelled(`Bearer ${key.partialKey}.${withPlus}`)).not.toBeInstanceOf(Promise);
    for (const variant of [withPlus.replaceAll("+", "-"), `${withPlus.slice(0, 8)} ${withPlus.slice(8)}`]) {
      const refused = spelled(`Bearer ${key.partialKey}.${variant}`);
      expect(refused).toBeInstanceOf(Promise);
      expect(statusOf(await refused)).toBe(401);
    }
    const secondSpace = spelled(`Bearer  ${key.partialKey}.${goodDevice} `);
    expect(secondSpace).toBeInstanceOf(Promise);
    expect(statusOf(await secondSpace)).toBe(200);
    expect(production.calls.length).toBe(appleCalls + 2);
    // Its budget of 4 spent: refused by the full path, and counted once, not twice.
    const spent = warmAuth(request);
    expect(spent).toBeInstanceOf(Promise);
    expect(codeAndMessage(await spent)).toBe(
      "401 UNAUTHORIZED: No authentication method succeeded: the device token was refused: this device token has used up its request budget; get a new one",
    );
    // A token the ledger has not seen, a test-key header beside the Bearer value, a revoked key:
    // each goes the full way.
    const other = Buffer.from("another-valid-device-token").toString("base64");
    production.registerValidToken(other);
    const fresh = warmAuth({ ...request, headers: { authorization: `Bearer ${key.partialKey}.${other}` } });
    expect(fresh).toBeInstanceOf(Promise);
    expect((await fresh).ok).toBe(true);
    const withHeader = warmAuth({
      ...request,
      headers: { authorization: `Bearer ${key.partialKey}.${other}`, [testKeyHeader]: "tk_not-this" },
    });
    expect(withHeader).toBeInstanceOf(Promise);
    await withHeader;
    await longAdmin.revokeProviderKey(created.project.id, key.keyId);
    const revoked = warmAuth({ ...request, headers: { authorization: `Bearer ${key.partialKey}.${other}` } });
    expect(revoked).toBeInstanceOf(Promise);
    expect(codeAndMessage(await revoked)).toBe("403 FORBIDDEN: This provider key was revoked");
  });

  /** An admin on a clock the test sets, and the status its test keys get (the cache trusts nothing). */
  function adminOnClock(start: string) {
    const clock = { now: new Date(start) };
    const { directory, admin: clockAdmin } = wireAdminAndDirectory(database, 0, () => clock.now);
    const clockAuth = createAuthenticator({
      directory,
      deviceTokens: { verify: async () => ({ kind: "invalid", reason: "no" }) },
      throttle: openThrottle,
      testModeAllowed: true,
    });
    const advance = (ms: number) => {
      clock.now = new Date(clock.now.getTime() + ms);
    };
    const status = async (projectId: string, partialKey: string, testKey: string) =>
      statusOf(
        await clockAuth({
          projectId,
          headers: { authorization: `Bearer ${partialKey}.${testKey}` },
          clientIp: "1.1.1.1",
          provider: "provider-a",
        }),
      );
    return { admin: clockAdmin, advance, status };
  }

  it("keeps the newest two test keys even when they are issued in one millisecond", async () => {
    const clocked = adminOnClock("2026-11-23T12:00:00.000Z");
    // The old tie-break (random ids) kept the wrong keys about one time in four: try several.
    for (let attempt = 0; attempt < 12; attempt++) {
      const created = await clocked.admin.createProject({
        name: `same ms ${attempt}`,
        provider: "provider-a",
        testMode: true,
      });
      const key = await clocked.admin.addProviderKey(created.project.id, {
        provider: "provider-a",
        apiKey: "sk-same-ms-key-123",
      });
      // Two minutes on, the clock stops: both rotations are issued in one millisecond.
      clocked.advance(120_000);
      const second = await clocked.admin.rotateTestKey(created.project.id);
      const third = await clocked.admin.rotateTestKey(created.project.id);
      const status = (testKey: string) => clocked.status(created.project.id, key.partialKey, testKey);
      expect(await status(created.testKey)).toBe(401);
      expect(await status(second.testKey)).toBe(200);
      expect(await status(third.testKey)).toBe(200);
    }
  });

  it("keeps the previous test key working for one rotation, and any issued in the minute before one", async () => {
    const clocked = adminOnClock("2026-11-24T12:00:00.000Z");
    const created = await clocked.admin.createProject({
      name: "rotation",
      provider: "provider-a",
      testMode: true,
    });
    const key = await clocked.admin.addProviderKey(created.project.id, {
      provider: "provider-a",
      apiKey: "sk-rotation-key-123",
    });
    const status = (testKey: string) => clocked.status(created.project.id, key.partialKey, testKey);
    clocked.advance(120_000);
    const second = await clocked.admin.rotateTestKey(created.project.id);
    expect(await status(created.testKey)).toBe(200);
    expect(await status(second.testKey)).toBe(200);
    const third = await clocked.admin.rotateTestKey(created.project.id);
    expect(await status(created.testKey)).toBe(401);
    expect(await status(second.testKey)).toBe(200);
    expect(await status(third.testKey)).toBe(200);
    // Within the minute after the second: it stays though it is no longer the previous key.
    clocked.advance(59_000);
    const fourth = await clocked.admin.rotateTestKey(created.project.id);
    expect([await status(second.testKey), await status(third.testKey), await status(fourth.testKey)]).toEqual(
      [200, 200, 200],
    );
    // A minute after the third and the fourth: only the fourth, the previous, stays beside the new one.
    clocked.advance(61_000);
    const fifth = await clocked.admin.rotateTestKey(created.project.id);
    expect([
      await status(second.testKey),
      await status(third.testKey),
      await status(fourth.testKey),
      await status(fifth.testKey),
    ]).toEqual([401, 401, 200, 200]);
  });

  it("asks Apple on the project's environment host with a correctly signed JWT", async () => {
    const fixture = await project(false, true, "development");
    const token = Buffer.from(`dev-token-${randomBytes(4).toString("hex")}`).toString("base64");
    development.registerValidToken(token);
    const before = development.calls.length;
    const result = await run(fixture.projectId, {
      authorization: `Bearer ${fixture.partial["provider-a"]}.${token}`,
    });
    expect(statusOf(result)).toBe(200);
    const call = development.calls[before];
    expect(call?.status).toBe(200);
    expect(call?.jwtHeader).toMatchObject({ alg: "ES256", kid: keyId });
    expect(call?.jwtClaims).toMatchObject({ iss: teamId });
  });

  it("answers 401 when Apple says the token is invalid, and 503 with Retry-After when Apple is down", async () => {
    const fixture = await project(false, true);
    const invalid = await run(fixture.projectId, {
      authorization: `Bearer ${fixture.partial["provider-a"]}.${badDevice}`,
    });
    expect(statusOf(invalid)).toBe(401);
    production.fail({ kind: "status", status: 500 });
    const fresh = Buffer.from(`fresh-${randomBytes(4).toString("hex")}`).toString("base64");
    const down = await run(fixture.projectId, {
      authorization: `Bearer ${fixture.partial["provider-a"]}.${fresh}`,
    });
    expect(down.ok ? 200 : down.error.code).toBe("SERVICE_UNAVAILABLE");
    expect(down.ok ? {} : down.error.headers).toHaveProperty("retry-after");
  });

  it("never calls Apple for a wrong partial key or a malformed token", async () => {
    const fixture = await project(false, true);
    const before = production.calls.length;
    const wrongKey = headersFor("bearer-device", fixture, false);
    expect(statusOf(await run(fixture.projectId, wrongKey))).toBe(401);
    expect(
      statusOf(
        await run(fixture.projectId, {
          authorization: `Bearer ${fixture.partial["provider-a"]}.not base64!`,
        }),
      ),
    ).toBe(401);
    expect(production.calls.length).toBe(before);
  });

  it.each([
    ["bearer", (partial: string, token: string) => ({ authorization: `Bearer ${partial}.${token}` })],
    ["legacy header", (partial: string, token: string) => ({ "x-device-token": token, "x-ai-key": partial })],
  ])("never sends Apple a device token over 8 KiB (%s)", async (_name, headers) => {
    const fixture = await project(false, true);
    const before = production.calls.length;
    const result = await run(fixture.projectId, headers(fixture.partial["provider-a"], "QUFB".repeat(2049)));
    expect(result.ok ? "ok" : result.error.message).toBe(
      "No authentication method succeeded: the device token is too long",
    );
    expect(production.calls.length).toBe(before);
  });

  it("gives a passing device token's use back when the partial key is refused 403 (another provider's)", async () => {
    const fixture = await project(false, true);
    let refunds = 0;
    const refunding = createAuthenticator({
      directory: wireAdminAndDirectory(database, 0).directory,
      deviceTokens: {
        verify: async () => ({ kind: "ok", digest: "device", refund: async () => void refunds++ }),
      },
      throttle: openThrottle,
      testModeAllowed: true,
    });
    const result = await refunding({
      projectId: fixture.projectId,
      headers: { authorization: `Bearer ${fixture.partial["provider-b"]}.${goodDevice}` },
      clientIp: "203.0.113.9",
      provider: "provider-a",
    });
    expect(result.ok ? 200 : result.error.code).toBe("FORBIDDEN");
    expect(refunds).toBe(1);
  });

  it.each([
    "Bearer",
    "Bearer ",
    "Bearer .",
    "Bearer a.",
    "Bearer .b",
    "Basic dXNlcjpwYXNz",
    "bearer   sk_sluice_x.y",
    "BEARER\tsk_sluice_aaaaaaaaaaaa_abc.def",
    `Bearer ${"x".repeat(20_000)}.${"y".repeat(20_000)}`,
    "Bearer a.b.c",
    "Bearer 🙂.🙂",
  ])("answers 401 for the malformed Authorization %#", async (authorization) => {
    const fixture = await project(true, true);
    const before = production.calls.length;
    const result = await run(fixture.projectId, { authorization });
    expect(statusOf(result)).toBe(401);
    expect(production.calls.length).toBe(before);
  });

  it.each([
    ["Basic dXNlcjpwYXNz", "Authorization must be Bearer <partial_key>.<token>"],
    ["Token abc.def", "Authorization must be Bearer <partial_key>.<token>"],
    ["Bearer", "the key must be <partial_key>.<token>"],
    ["Bearer a.", "the key must be <partial_key>.<token>"],
  ])("says what is wrong with the Authorization %j", async (authorization, reason) => {
    const fixture = await project(true, true);
    const result = await run(fixture.projectId, { authorization });
    expect(result.ok ? "" : result.error.message).toBe(`No authentication method succeeded: ${reason}`);
  });

  it("answers 401 without a project id: no method can succeed (SPEC)", async () => {
    const result = await run(undefined, { authorization: "Bearer a.b" });
    expect(result.ok ? 200 : result.error.code).toBe("UNAUTHORIZED");
  });

  it("stops at the throttle before anything else", async () => {
    const fixture = await project(true, true);
    const throttled = createAuthenticator({
      directory: createCredentialDirectory({
        projects: createProjectRepository(database.db),
        keys: createKeyRepository(database.db),
        secretBox: createSecretBox(randomBytes(32)),
        ttlMs: 0,
      }),
      deviceTokens: { verify: async () => ({ kind: "ok", digest: "x" }) },
      throttle: {
        policy: throttlePolicy,
        retryAfter: async () => 17,
        retryAfterMissing: async () => 17,
        recordFailure: async () => {},
        begin: () => () => {},
      },
      testModeAllowed: true,
    });
    const result = await throttled({
      projectId: fixture.projectId,
      headers: {},
      clientIp: "1.2.3.4",
      provider: "provider-a",
    });
    expect(result.ok ? 200 : result.error.code).toBe("TOO_MANY_REQUESTS");
    // Like every 429: Retry-After and the RateLimit fields, here for the failure throttle's limit.
    expect(result.ok ? {} : result.error.headers).toEqual({
      "retry-after": "17",
      "ratelimit-policy": '"auth-failures";q=30;w=60',
      ratelimit: '"auth-failures";r=0;t=17',
    });
  });
});

describe("authenticate in production (SLUICE_ENV=production): no Test Mode", () => {
  let database: OpenDatabase;
  const validDevice = Buffer.from("a-device-token-apple-accepts").toString("base64");

  beforeAll(async () => {
    database = await openDatabase({ dataDir: "unused", sqliteFile: ":memory:" });
  });
  afterAll(async () => {
    await database.close();
  });

  /**
   * A project put in Test Mode (and Device Check) before production, and one authenticator per
   * environment over the same records.
   */
  async function testModeProject() {
    const { directory, admin } = wireAdminAndDirectory(database, 0);
    const authenticator = (testModeAllowed: boolean) =>
      createAuthenticator({
        directory,
        deviceTokens: {
          verify: async (_project, token) =>
            token === validDevice ? { kind: "ok", digest: "device" } : { kind: "invalid", reason: "no" },
        },
        throttle: openThrottle,
        testModeAllowed,
      });
    const created = await admin.createProject({
      name: "still testing",
      provider: "provider-a",
      testMode: true,
      deviceCheck: {
        enabled: true,
        teamId,
        keyId,
        privateKey: generateAppleKeyPair().privateKeyPem,
        environment: "production",
      },
    });
    const key = await admin.addProviderKey(created.project.id, {
      provider: "provider-a",
      apiKey: "sk-still-testing-123",
    });
    const request = (headers: Record<string, string>) => ({
      projectId: created.project.id,
      headers,
      clientIp: "192.0.2.7",
      provider: "provider-a" as const,
    });
    return {
      development: authenticator(true),
      production: authenticator(false),
      testKey: created.testKey,
      partialKey: key.partialKey,
      request,
    };
  }

  const refusal = (result: AuthResult) =>
    result.ok
      ? { status: 200 }
      : { status: result.error.status, code: result.error.code, message: result.error.message };

  it.each([
    [
      "the test-key header",
      (partial: string, testKey: string) => ({ "x-sluice-test-key": testKey, "x-ai-key": partial }),
      "No authentication method succeeded: Test Mode is off in production, so test keys are not accepted",
    ],
    [
      "Bearer with a test key",
      (partial: string, testKey: string) => ({ authorization: `Bearer ${partial}.${testKey}` }),
      "No authentication method succeeded: the token is not a valid device token (Test Mode is off in production, so test keys are not accepted)",
    ],
  ])(
    "refuses %s with 401, the same answer for a right and a wrong test key",
    async (_name, headers, message) => {
      const { development, production, testKey, partialKey, request } = await testModeProject();
      expect((await development(request(headers(partialKey, testKey)))).ok).toBe(true);
      const right = refusal(await production(request(headers(partialKey, testKey))));
      expect(right).toEqual({ status: 401, code: "UNAUTHORIZED", message });
      const wrongTestKey = refusal(await production(request(headers(partialKey, "tk_wrong"))));
      const wrongPartialKey = refusal(await production(request(headers(`${partialKey}x`, testKey))));
      expect(wrongTestKey).toEqual(right);
      expect(wrongPartialKey).toEqual(right);
    },
  );

  it("keeps the device token methods of a project in Test Mode working", async () => {
    const { production, partialKey, request } = await testModeProject();
    const bearer = await production(request({ authorization: `Bearer ${partialKey}.${validDevice}` }));
    expect(bearer.ok && bearer.providerKey).toBe("sk-still-testing-123");
    const legacy = await production(request({ "x-device-token": validDevice, "x-ai-key": partialKey }));
    expect(legacy.ok && legacy.method).toBe("device-token-header");
  });
});
