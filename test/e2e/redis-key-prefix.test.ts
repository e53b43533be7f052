import { randomBytes } from "node:crypto";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { Config } from "../../src/config.js";
import { addressBlock } from "../../src/net/ip-address.js";
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

/**
 * SLUICE_REDIS_KEY_PREFIX: gateways on one Redis (and one database, so their projects are the same)
 * count apart under prefixes of their own and together under one, and every key they write begins
 * with theirs. The prefixes are under a random root of this file's, which `cleanup` deletes.
 */
describe.skipIf(!postgresAvailable || !redisAvailable)("SLUICE_REDIS_KEY_PREFIX", () => {
  const space = redisTestSpace("redis-key-prefix");
  const masterKey = randomBytes(32).toString("base64");
  const appleKeys = generateAppleKeyPair();
  let fake: FakeUpstream;
  let apple: FakeApple;
  let schema: Awaited<ReturnType<typeof createPostgresSchema>>;
  let redis: Redis;
  const gateways: TestGateway[] = [];

  beforeAll(async () => {
    fake = await startFakeUpstream();
    apple = await startFakeApple({ label: "production" });
    apple.registerKey(appleKeyId, { teamId: appleTeamId, publicKeyPem: appleKeys.publicKeyPem });
    schema = await createPostgresSchema();
    redis = await space.readyClient();
  });

  afterAll(async () => {
    for (const gateway of gateways) await gateway.close();
    await space.cleanup();
    await apple?.close();
    await fake?.close();
    await schema?.drop();
  });

  /** A gateway on the shared database and Redis whose keys begin with `prefix` (none: undefined). */
  async function gatewayUnder(
    prefix: string | undefined,
    overrides: Partial<Config> = {},
  ): Promise<TestGateway> {
    const gateway = await startTestGateway({
      masterKey,
      databaseUrl: schema.url,
      redisUrl,
      redisKeyPrefix: prefix,
      providerABaseUrl: `${fake.url}/a/v1`,
      deviceCheckProductionUrl: apple.url,
      ...overrides,
    });
    gateways.push(gateway);
    return gateway;
  }

  /** Every key in Redis whose name contains `marker` (SCAN, so the server is never blocked). */
  async function keysWith(marker: string): Promise<string[]> {
    const found: string[] = [];
    let cursor = "0";
    do {
      const [next, keys] = await redis.scan(cursor, "MATCH", `*${marker}*`, "COUNT", 1000);
      cursor = next;
      found.push(...keys);
    } while (cursor !== "0");
    return [...new Set(found)].sort();
  }

  it("keeps the counts of gateways with different prefixes apart, and shares them under one prefix", async () => {
    const [prefixA, prefixB] = [`${space.nextPrefix()}:`, `${space.nextPrefix()}:`];
    const one = await gatewayUnder(prefixA);
    const other = await gatewayUnder(prefixB);
    const sameAsOne = await gatewayUnder(prefixA);
    const project = await createTestProject(one.gateway, { rateLimits: { perMinute: 2 } });
    const status = async (sluice: TestGateway) => {
      return proxiedChatStatus(sluice.url, project);
    };

    expect([await status(one), await status(one)]).toEqual([200, 200]);
    // Under its own prefix the other deployment has the whole limit still.
    expect([await status(other), await status(other), await status(other)]).toEqual([200, 200, 429]);
    // Under the same prefix the count is the one the first gateway filled.
    expect(await status(sameAsOne)).toBe(429);
    expect(await status(one)).toBe(429);

    expect(await keysWith(project.projectId)).toEqual([
      `${prefixA}sluice:rl:ip:60:${project.projectId}:127.0.0.1`,
      `${prefixA}sluice:rl:project:60:${project.projectId}`,
      `${prefixB}sluice:rl:ip:60:${project.projectId}:127.0.0.1`,
      `${prefixB}sluice:rl:project:60:${project.projectId}`,
    ]);
  });

  it("without a prefix keeps the keys of earlier versions, so an upgrade keeps their counts", async () => {
    const sluice = await gatewayUnder(undefined);
    const project = await createTestProject(sluice.gateway);
    const response = await proxiedChat(sluice.url, project);
    await response.arrayBuffer();
    expect(response.status).toBe(200);
    const written = await keysWith(project.projectId);
    try {
      expect(written).toEqual([
        `sluice:rl:ip:60:${project.projectId}:127.0.0.1`,
        `sluice:rl:project:60:${project.projectId}`,
      ]);
    } finally {
      if (written.length > 0) await redis.del(...written);
    }
  });

  it("writes every key under the prefix: rate limits, both failed-authentication throttles, the DeviceCheck ledger", async () => {
    const prefix = `${space.nextPrefix()}:`;
    const sluice = await gatewayUnder(prefix, { trustProxy: ["127.0.0.1"] });
    // An address block of this test's own, so that its keys can be told from any other's; looked
    // for as Sluice writes it (a group's leading zeros dropped: `0a1b` is `a1b`).
    const address = `2001:db8:${randomBytes(2).toString("hex")}:${randomBytes(2).toString("hex")}::1`;
    const block = addressBlock(address);
    const from = { "x-forwarded-for": address };
    const project = await createDeviceCheckProject(sluice.gateway, appleKeys.privateKeyPem, "cached");
    const unknownProjectId = `prj_${randomBytes(8).toString("hex")}`;
    const deviceToken = Buffer.from(`device-token-${randomBytes(8).toString("hex")}`).toString("base64");
    apple.registerValidToken(deviceToken);
    const call = async (projectId: string, bearer: string) => {
      return proxiedChatStatus(sluice.url, { projectId, bearer }, { headers: from });
    };

    // Rate limits (project, device, address) and the ledger, twice: the second use is the ledger's.
    const bearer = `${project.partialKeys["provider-a"]}.${deviceToken}`;
    expect([await call(project.projectId, bearer), await call(project.projectId, bearer)]).toEqual([
      200, 200,
    ]);
    // Failed authentications: on a project that exists, on one that does not, on the admin API.
    expect(await call(project.projectId, "not-a-partial-key.not-a-token")).toBe(401);
    expect(await call(unknownProjectId, "not-a-partial-key.not-a-token")).toBe(404);
    const admin = await fetch(`${sluice.url}/admin/v1/projects`, {
      headers: { ...from, authorization: `Bearer wrong-admin-token-${randomBytes(8).toString("hex")}` },
    });
    await admin.arrayBuffer();
    expect(admin.status).toBe(401);

    // Looked for again for up to 5 s (a key written late), and a failure names the namespace.
    const namespaces = ["sluice:rl:", "sluice:auth:", "sluice:admin-auth:", "sluice:device-token:"];
    const written = await vi.waitFor(
      async () => {
        const keys = [
          ...(await keysWith(project.projectId)),
          ...(await keysWith(unknownProjectId)),
          ...(await keysWith(block)),
        ];
        for (const namespace of namespaces)
          expect(
            keys.some((key) => key.startsWith(`${prefix}${namespace}`)),
            namespace,
          ).toBe(true);
        return keys;
      },
      { timeout: 5000, interval: 100 },
    );
    expect(written.filter((key) => !key.startsWith(prefix))).toEqual([]);
    // And everything under the prefix is one of these.
    const underPrefix = await keysWith(prefix);
    expect(underPrefix.length).toBeGreaterThan(0);
    for (const key of underPrefix)
      expect(namespaces.some((namespace) => key.startsWith(`${prefix}${namespace}`))).toBe(true);
  });
});
