import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeApple, generateAppleKeyPair, startFakeApple } from "../fakes/fake-apple.js";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { proxiedChatStatus } from "../support/proxied-chat.js";
import {
  createPostgresSchema,
  postgresAvailable,
  redisAvailable,
  redisTestSpace,
  redisUrl,
} from "../support/services.js";
import {
  adminToken,
  appleKeyId,
  appleTeamId,
  createTestProject,
  startTestGateway,
  type TestGateway,
} from "../support/test-gateway.js";

const keys = generateAppleKeyPair();
const token = (name: string) => Buffer.from(`${name}-${randomBytes(12).toString("hex")}`).toString("base64");
/** How long an instance trusts its copy of a project here; the test waits it out after a change. */
const projectCacheTtlMs = 100;

/**
 * A project's DeviceCheck settings changed in place (another environment, team, key) name another
 * Apple app: a token Apple verified under the old ones, a development build's, is asked of Apple
 * again under the new ones, on every instance, as for a project created again under its id. Other
 * changes keep the tokens verified. Each instance is asked in turn: `instances` may be one.
 */
async function developmentTokenAfterSwitchToProduction(
  instances: readonly TestGateway[],
  development: FakeApple,
  production: FakeApple,
  clientIp: string,
) {
  const [first] = instances as [TestGateway];
  const project = await createTestProject(first.gateway, {
    testMode: false,
    deviceCheck: {
      enabled: true,
      teamId: appleTeamId,
      keyId: appleKeyId,
      privateKey: keys.privateKeyPem,
      environment: "development",
      tokenMode: "cached",
    },
  });
  const call = async (sluice: TestGateway, deviceToken: string) => {
    return proxiedChatStatus(
      sluice.url,
      { projectId: project.projectId, bearer: `${project.partialKeys["provider-a"]}.${deviceToken}` },
      { headers: { "x-forwarded-for": clientIp } },
    );
  };
  const patch = async (fields: Record<string, unknown>) => {
    const response = await fetch(`${first.url}/admin/v1/projects/${project.projectId}`, {
      method: "PATCH",
      headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
      body: JSON.stringify(fields),
    });
    expect(response.status).toBe(200);
    await response.arrayBuffer();
    await sleep(2 * projectCacheTtlMs);
  };
  const asked = () => ({ development: development.calls.length, production: production.calls.length });

  const developmentBuild = token("development-build");
  development.registerValidToken(developmentBuild);
  const before = asked();
  for (const sluice of instances) expect(await call(sluice, developmentBuild)).toBe(200);
  expect(asked()).toEqual({ development: before.development + 1, production: before.production });

  await patch({ name: "Renamed", rateLimits: { perMinute: 1000 }, deviceCheck: { tokenMode: "cached" } });
  for (const sluice of instances) expect(await call(sluice, developmentBuild)).toBe(200);
  expect(asked()).toEqual({ development: before.development + 1, production: before.production });

  await patch({ deviceCheck: { environment: "production" } });
  // Apple's production host, asked now, knows no such token: 401 on every instance.
  for (const sluice of instances) expect(await call(sluice, developmentBuild)).toBe(401);
  expect(asked()).toEqual({
    development: before.development + 1,
    production: before.production + instances.length,
  });
  // A production build's token passes, and is trusted from the ledger after.
  const productionBuild = token("production-build");
  production.registerValidToken(productionBuild);
  for (const sluice of instances) expect(await call(sluice, productionBuild)).toBe(200);
  expect(asked().production).toBe(before.production + instances.length + 1);
}

describe("a development token once the project switches to production", () => {
  let fake: FakeUpstream;
  let development: FakeApple;
  let production: FakeApple;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    development = await startFakeApple({ label: "development" });
    production = await startFakeApple({ label: "production" });
    for (const apple of [development, production])
      apple.registerKey(appleKeyId, { teamId: appleTeamId, publicKeyPem: keys.publicKeyPem });
  });

  afterAll(async () => {
    await development?.close();
    await production?.close();
    await fake?.close();
  });

  const apple = () => ({
    providerABaseUrl: `${fake.url}/a/v1`,
    deviceCheckDevelopmentUrl: development.url,
    deviceCheckProductionUrl: production.url,
    projectCacheTtlMs,
  });

  it("is asked of Apple's production host again, and refused, with the ledger in memory", async () => {
    const sluice = await startTestGateway(apple());
    try {
      await developmentTokenAfterSwitchToProduction([sluice], development, production, "198.51.100.7");
    } finally {
      await sluice.close();
    }
  });

  it.skipIf(!postgresAvailable || !redisAvailable)(
    "is asked of Apple's production host again, and refused, on every instance sharing Redis",
    async () => {
      const space = redisTestSpace("device-token-settings-change");
      const schema = await createPostgresSchema();
      const shared = {
        ...apple(),
        masterKey: randomBytes(32).toString("base64"),
        databaseUrl: schema.url,
        redisUrl,
        redisKeyPrefix: `${space.nextPrefix()}:`,
        // Failures are counted in the shared Redis: an address of this test's own keeps them apart.
        trustProxy: ["127.0.0.1"],
      };
      const instances: TestGateway[] = [];
      const clientIp = `2001:db8:${randomBytes(2).toString("hex")}:${randomBytes(2).toString("hex")}::1`;
      try {
        for (let i = 0; i < 2; i++) instances.push(await startTestGateway(shared));
        await developmentTokenAfterSwitchToProduction(instances, development, production, clientIp);
      } finally {
        for (const instance of instances) await instance.close();
        await schema.drop();
        await space.cleanup();
      }
    },
  );
});
