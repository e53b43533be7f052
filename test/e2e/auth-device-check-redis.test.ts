import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeApple, generateAppleKeyPair, startFakeApple } from "../fakes/fake-apple.js";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { proxiedChat, proxiedChatStatus } from "../support/proxied-chat.js";
import {
  createPostgresSchema,
  postgresAvailable,
  redisAvailable,
  redisTestSpace,
  redisUrl,
} from "../support/services.js";
import {
  appleKeyId,
  appleTeamId,
  createDeviceCheckProject,
  createTestProject,
  startTestGateway,
  type TestGateway,
} from "../support/test-gateway.js";

const clientIp = `2001:db8:${randomBytes(2).toString("hex")}:${randomBytes(2).toString("hex")}::1`;
/** A project on DeviceCheck alone, with single-use tokens, signed for by `privateKeyPem`. */
const singleUseProject = (sluice: TestGateway, privateKeyPem: string) =>
  createDeviceCheckProject(sluice.gateway, privateKeyPem, "single-use");
const token = (name: string) => Buffer.from(`device-token-${name}-${Date.now()}`).toString("base64");

describe.skipIf(!redisAvailable)("single-use device tokens on Redis", () => {
  let fake: FakeUpstream;
  let apple: FakeApple;
  let sluice: TestGateway | undefined;
  const keys = generateAppleKeyPair();

  beforeAll(async () => {
    fake = await startFakeUpstream();
    apple = await startFakeApple({ label: "production" });
    apple.registerKey(appleKeyId, { teamId: appleTeamId, publicKeyPem: keys.publicKeyPem });
  });

  afterAll(async () => {
    await sluice?.close();
    await apple.close();
    await fake.close();
  });

  it("are accepted once and refused on replay from the first request after start", async () => {
    const started = await startTestGateway({
      providerABaseUrl: `${fake.url}/a/v1`,
      deviceCheckProductionUrl: apple.url,
      redisUrl,
      // Failures are counted in the shared Redis: an address of this test's own keeps them apart.
      trustProxy: ["127.0.0.1"],
    });
    sluice = started;
    const project = await singleUseProject(started, keys.privateKeyPem);
    const call = (deviceToken: string) =>
      proxiedChat(
        started.url,
        { projectId: project.projectId, bearer: `${project.partialKeys["provider-a"]}.${deviceToken}` },
        { headers: { "x-forwarded-for": clientIp } },
      );
    const first = token("first");
    apple.registerValidToken(first);
    expect((await call(first)).status).toBe(200);
    expect((await call(first)).status).toBe(401);
    expect(started.logs.join("")).not.toContain("ledger in Redis failed");
  });

  it("once the project switches to cached tokens, trusts a token used as single-use only for the TTL", async () => {
    const started = await startTestGateway({
      providerABaseUrl: `${fake.url}/a/v1`,
      deviceCheckProductionUrl: apple.url,
      redisUrl,
      deviceTokenTtlSeconds: 1,
      trustProxy: ["127.0.0.1"],
    });
    try {
      const project = await singleUseProject(started, keys.privateKeyPem);
      const call = async (deviceToken: string) => {
        return proxiedChatStatus(
          started.url,
          { projectId: project.projectId, bearer: `${project.partialKeys["provider-a"]}.${deviceToken}` },
          { headers: { "x-forwarded-for": clientIp } },
        );
      };
      const early = token("single-use-era");
      apple.registerValidToken(early);
      expect(await call(early)).toBe(200);
      await started.gateway.admin.updateProject(project.projectId, { deviceCheck: { tokenMode: "cached" } });
      await new Promise((resolve) => setTimeout(resolve, 1200));
      // Past the 1 s TTL Apple is asked again, and now refuses: the 24 h entry is not trusted.
      apple.fail({ kind: "status", status: 400 });
      try {
        expect(await call(early)).toBe(401);
      } finally {
        apple.fail(null);
      }
    } finally {
      await started.close();
    }
  });
});

/**
 * Without REDIS_URL each instance keeps its own ledger (docs/auth.md): a single-use token is refused
 * on replay by the instance that accepted it, not by another one; the start says so.
 */
describe.skipIf(!postgresAvailable)("single-use device tokens on several instances without Redis", () => {
  let fake: FakeUpstream;
  let apple: FakeApple;
  let schema: Awaited<ReturnType<typeof createPostgresSchema>>;
  const gateways: TestGateway[] = [];
  const keys = generateAppleKeyPair();

  beforeAll(async () => {
    fake = await startFakeUpstream();
    apple = await startFakeApple({ label: "production" });
    apple.registerKey(appleKeyId, { teamId: appleTeamId, publicKeyPem: keys.publicKeyPem });
    schema = await createPostgresSchema();
  });

  afterAll(async () => {
    for (const gateway of gateways) await gateway.close();
    await apple?.close();
    await fake?.close();
    await schema?.drop();
  });

  it("are refused on replay per instance only, and each start warns that REDIS_URL is unset", async () => {
    const masterKey = randomBytes(32).toString("base64");
    for (let i = 0; i < 2; i++)
      gateways.push(
        await startTestGateway({
          masterKey,
          databaseUrl: schema.url,
          providerABaseUrl: `${fake.url}/a/v1`,
          deviceCheckProductionUrl: apple.url,
        }),
      );
    const [one, two] = gateways as [TestGateway, TestGateway];
    for (const gateway of [one, two])
      expect(gateway.logs.join("")).toContain("DATABASE_URL is set without REDIS_URL");
    const project = await singleUseProject(one, keys.privateKeyPem);
    const call = async (gateway: TestGateway, deviceToken: string) => {
      return proxiedChatStatus(gateway.url, {
        projectId: project.projectId,
        bearer: `${project.partialKeys["provider-a"]}.${deviceToken}`,
      });
    };
    const used = token("per-instance");
    apple.registerValidToken(used);
    expect(await call(one, used)).toBe(200);
    expect(await call(one, used)).toBe(401);
    expect(await call(two, used)).toBe(200);
  });
});

/**
 * A project deleted and created again under its id is a new project (docs/api.md, DELETE): a
 * device token Apple verified for the deleted one, perhaps for another app, is no credential of the
 * new one. The ledger in Redis outlives the project, and is shared by every instance.
 */
describe.skipIf(!postgresAvailable || !redisAvailable)(
  "a project created again under its id, on two instances",
  () => {
    let fake: FakeUpstream;
    let apple: FakeApple;
    let schema: Awaited<ReturnType<typeof createPostgresSchema>>;
    const gateways: TestGateway[] = [];
    const space = redisTestSpace("device-token-recreated");
    const keys = generateAppleKeyPair();
    const otherKeys = generateAppleKeyPair();

    beforeAll(async () => {
      fake = await startFakeUpstream();
      apple = await startFakeApple({ label: "production" });
      apple.registerKey(appleKeyId, { teamId: appleTeamId, publicKeyPem: keys.publicKeyPem });
      apple.registerKey("OTHERKEY01", { teamId: "OTHERTEAM1", publicKeyPem: otherKeys.publicKeyPem });
      schema = await createPostgresSchema();
    });

    afterAll(async () => {
      for (const gateway of gateways) await gateway.close();
      await apple?.close();
      await fake?.close();
      await schema?.drop();
      await space.cleanup();
    });

    it("asks Apple again for a token the deleted project's app had verified", async () => {
      const shared = {
        masterKey: randomBytes(32).toString("base64"),
        databaseUrl: schema.url,
        redisUrl,
        redisKeyPrefix: `${space.nextPrefix()}:`,
        providerABaseUrl: `${fake.url}/a/v1`,
        deviceCheckProductionUrl: apple.url,
        trustProxy: ["127.0.0.1"],
      };
      for (let i = 0; i < 2; i++) gateways.push(await startTestGateway(shared));
      const [one, two] = gateways as [TestGateway, TestGateway];
      const projectId = `recreated-${randomBytes(4).toString("hex")}`;
      const before = await createDeviceCheckProject(one.gateway, keys.privateKeyPem, "cached", {
        id: projectId,
      });
      const call = async (gateway: TestGateway, partialKey: string, deviceToken: string) => {
        return proxiedChatStatus(
          gateway.url,
          { projectId, bearer: `${partialKey}.${deviceToken}` },
          { headers: { "x-forwarded-for": clientIp } },
        );
      };
      const verified = token("old-app");
      apple.registerValidToken(verified);
      expect(await call(one, before.partialKeys["provider-a"], verified)).toBe(200);
      await one.gateway.admin.deleteProject(projectId);
      // Created again for another app (another Apple team): Apple, asked for that team, refuses it.
      const after = await createTestProject(one.gateway, {
        id: projectId,
        testMode: false,
        deviceCheck: {
          enabled: true,
          teamId: "OTHERTEAM1",
          keyId: "OTHERKEY01",
          privateKey: otherKeys.privateKeyPem,
          environment: "production",
          tokenMode: "cached",
        },
      });
      apple.fail({ kind: "status", status: 400 });
      try {
        const calls = apple.calls.length;
        expect(await call(two, after.partialKeys["provider-a"], verified)).toBe(401);
        expect(await call(one, after.partialKeys["provider-a"], verified)).toBe(401);
        expect(apple.calls.length - calls).toBe(2);
      } finally {
        apple.fail(null);
      }
    });
  },
);
