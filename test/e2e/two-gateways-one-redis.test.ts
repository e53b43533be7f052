import { randomBytes } from "node:crypto";
import type { Redis } from "ioredis";
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
  appleKeyId,
  appleTeamId,
  createDeviceCheckProject,
  createTestProject,
  startTestGateway,
  type TestGateway,
} from "../support/test-gateway.js";

/**
 * Two gateways on one database and one Redis, under one key prefix of this file's own: what one
 * Redis holds for both (a single-use device token, failed authentications) holds across both when
 * their requests race, and every key they leave has an expiry and no credential in clear.
 */
describe.skipIf(!postgresAvailable || !redisAvailable)("two gateways sharing one Redis", () => {
  const space = redisTestSpace("two-gateways");
  const prefix = `${space.nextPrefix()}:`;
  const appleKeys = generateAppleKeyPair();
  let fake: FakeUpstream;
  let apple: FakeApple;
  let schema: Awaited<ReturnType<typeof createPostgresSchema>>;
  let redis: Redis;
  const gateways: TestGateway[] = [];
  /** Every credential sent in this file, none of which may be found in Redis. */
  const sent: string[] = [];

  beforeAll(async () => {
    fake = await startFakeUpstream();
    apple = await startFakeApple({ label: "production" });
    apple.registerKey(appleKeyId, { teamId: appleTeamId, publicKeyPem: appleKeys.publicKeyPem });
    schema = await createPostgresSchema();
    redis = await space.readyClient();
    const shared = {
      masterKey: randomBytes(32).toString("base64"),
      databaseUrl: schema.url,
      redisUrl,
      redisKeyPrefix: prefix,
      providerABaseUrl: `${fake.url}/a/v1`,
      deviceCheckProductionUrl: apple.url,
      trustProxy: ["127.0.0.1"],
      authFailureLimit: 4,
    };
    for (let index = 0; index < 2; index++) gateways.push(await startTestGateway(shared));
  });

  afterAll(async () => {
    for (const gateway of gateways) await gateway.close();
    await space.cleanup();
    await apple?.close();
    await fake?.close();
    await schema?.drop();
  });

  /** An address block of a test's own, so the throttle's counts of one test are not another's. */
  const newAddress = () => `2001:db8:${randomBytes(2).toString("hex")}:${randomBytes(2).toString("hex")}::1`;

  async function call(gateway: TestGateway, projectId: string, bearer: string, address: string) {
    sent.push(bearer, ...bearer.split("."));
    return proxiedChatStatus(gateway.url, { projectId, bearer }, { headers: { "x-forwarded-for": address } });
  }

  it("admit a single-use device token once, though its requests race on both", async () => {
    const [one, two] = gateways as [TestGateway, TestGateway];
    const project = await createDeviceCheckProject(one.gateway, appleKeys.privateKeyPem, "single-use");
    for (let round = 0; round < 3; round++) {
      const deviceToken = Buffer.from(`race-${round}-${randomBytes(12).toString("hex")}`).toString("base64");
      apple.registerValidToken(deviceToken);
      const bearer = `${project.partialKeys["provider-a"]}.${deviceToken}`;
      const address = newAddress();
      const statuses = await Promise.all(
        Array.from({ length: 8 }, (_, index) =>
          call(index % 2 ? one : two, project.projectId, bearer, address),
        ),
      );
      expect(statuses.filter((status) => status === 200)).toHaveLength(1);
      expect(statuses.filter((status) => status !== 200).every((status) => status === 401)).toBe(true);
    }
  });

  it("admit exactly a project's limit of calls sent at once to both", async () => {
    const [one, two] = gateways as [TestGateway, TestGateway];
    const project = await createTestProject(one.gateway, { rateLimits: { perMinute: 5 } });
    const bearer = project.bearer("provider-a");
    const statuses = await Promise.all(
      Array.from({ length: 20 }, (_, index) =>
        call(index % 2 ? one : two, project.projectId, bearer, newAddress()),
      ),
    );
    expect(statuses.filter((status) => status === 200)).toHaveLength(5);
    expect(statuses.filter((status) => status !== 200).every((status) => status === 429)).toBe(true);
  });

  it("throttle an address on both once its failures on both reach the limit", async () => {
    const [one, two] = gateways as [TestGateway, TestGateway];
    const project = await createDeviceCheckProject(one.gateway, appleKeys.privateKeyPem, "cached");
    const address = newAddress();
    const wrong = `${randomBytes(8).toString("hex")}.not-a-token`;
    // Two failures on each: four in all, the limit.
    const failures = [];
    for (const gateway of [one, two, one, two])
      failures.push(await call(gateway, project.projectId, wrong, address));
    expect(failures).toEqual([401, 401, 401, 401]);
    expect([
      await call(one, project.projectId, wrong, address),
      await call(two, project.projectId, wrong, address),
    ]).toEqual([429, 429]);
    // Another address is not held.
    expect(await call(two, project.projectId, wrong, newAddress())).toBe(401);
  });

  // After the calls above: rate limits, failed authentications, the DeviceCheck ledger.
  it("leave only keys under their prefix, each with an expiry, none holding a credential in clear", async () => {
    const keys: string[] = [];
    let cursor = "0";
    do {
      const [next, found] = await redis.scan(cursor, "MATCH", `${prefix}*`, "COUNT", 1000);
      cursor = next;
      keys.push(...found);
    } while (cursor !== "0");
    for (const namespace of ["sluice:rl:", "sluice:auth:", "sluice:device-token:"])
      expect(
        keys.some((key) => key.startsWith(`${prefix}${namespace}`)),
        namespace,
      ).toBe(true);
    const credentials = [...new Set(sent)].filter((credential) => credential.length >= 16);
    for (const key of keys) {
      expect(await redis.pttl(key), key).toBeGreaterThan(0);
      const value = (await redis.get(key)) ?? "";
      for (const credential of credentials) {
        expect(key).not.toContain(credential);
        expect(value).not.toContain(credential);
      }
    }
  });
});
