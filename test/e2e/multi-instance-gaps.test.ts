import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeApple, generateAppleKeyPair, startFakeApple } from "../fakes/fake-apple.js";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import { proxiedChatStatus } from "../support/proxied-chat.js";
import {
  createPostgresSchema,
  postgresAvailable,
  redisAvailable,
  redisTestSpace,
  redisUrl,
} from "../support/services.js";
import { startTcpProxy } from "../support/tcp-proxy.js";
import {
  adminToken,
  appleKeyId,
  appleTeamId,
  createDeviceCheckProject,
  createTestProject,
  startTestGateway,
  type TestGateway,
} from "../support/test-gateway.js";

const projectCacheTtlMs = 200;
const keys = generateAppleKeyPair();

/**
 * Two gateways on one PostgreSQL schema and one Redis prefix, for what the other multi-instance
 * suites leave out: a DeviceCheck token's budget counted across both, an output schema and
 * DeviceCheck turned off through one seen by the other within the cache TTL, and an instance that
 * started while its Redis was unreachable sharing the limits once Redis comes.
 */
describe.skipIf(!postgresAvailable || !redisAvailable)(
  "two gateways, the second's Redis behind a proxy",
  () => {
    const space = redisTestSpace("multi-instance-gaps");
    let fake: FakeUpstream;
    let apple: FakeApple;
    let schema: Awaited<ReturnType<typeof createPostgresSchema>>;
    let redisProxy: Awaited<ReturnType<typeof startTcpProxy>>;
    let first: TestGateway;
    let second: TestGateway;

    beforeAll(async () => {
      fake = await startFakeUpstream();
      apple = await startFakeApple({ label: "production" });
      apple.registerKey(appleKeyId, { teamId: appleTeamId, publicKeyPem: keys.publicKeyPem });
      schema = await createPostgresSchema();
      redisProxy = await startTcpProxy(6379);
      const shared = {
        ...providerBaseUrls(fake),
        masterKey: randomBytes(32).toString("base64"),
        databaseUrl: schema.url,
        redisKeyPrefix: `${space.nextPrefix()}:`,
        deviceCheckProductionUrl: apple.url,
        trustProxy: ["127.0.0.1"],
        projectCacheTtlMs,
        deviceTokenBudget: 3,
      };
      first = await startTestGateway({ ...shared, redisUrl });
      // The second starts while its Redis cannot be reached.
      redisProxy.cut();
      second = await startTestGateway({ ...shared, redisUrl: `redis://127.0.0.1:${redisProxy.port}` });
    });

    afterAll(async () => {
      await second?.close();
      await first?.close();
      await redisProxy?.close();
      await space.cleanup();
      await apple?.close();
      await fake?.close();
      await schema?.drop();
    });

    const newAddress = () =>
      `2001:db8:${randomBytes(2).toString("hex")}:${randomBytes(2).toString("hex")}::1`;
    const health = async (sluice: TestGateway) =>
      (await (await fetch(`${sluice.url}/health`)).json()) as {
        status: string;
        checks: { redis: { status: string } };
      };
    const patch = async (projectId: string, fields: Record<string, unknown>) => {
      const response = await fetch(`${first.url}/admin/v1/projects/${projectId}`, {
        method: "PATCH",
        headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
        body: JSON.stringify(fields),
      });
      expect(response.status).toBe(200);
      await response.arrayBuffer();
    };

    it("runs the second degraded on per-instance limits while its Redis is down, and shares them once it comes", async () => {
      expect(await health(first)).toMatchObject({ status: "ok", checks: { redis: { status: "ok" } } });
      // Started without Redis, it has counted nothing yet: its limits will run per instance all the same.
      expect(await health(second)).toMatchObject({
        status: "degraded",
        checks: { redis: { status: "down", rateLimits: "per-instance" } },
      });
      const during = await createTestProject(first.gateway, { rateLimits: { perMinute: 4 } });
      const statuses: number[] = [];
      for (let index = 0; index < 12; index++)
        statuses.push(
          await proxiedChatStatus((index % 2 ? second : first).url, during, {
            headers: { "x-forwarded-for": newAddress() },
          }),
        );
      // Four on each, counted apart: never unlimited.
      expect(statuses.filter((status) => status === 200)).toHaveLength(8);

      redisProxy.restore();
      const deadline = Date.now() + 10_000;
      while ((await health(second)).checks.redis.status !== "ok" && Date.now() < deadline) await sleep(100);
      const after = await createTestProject(first.gateway, { rateLimits: { perMinute: 4 } });
      const shared: number[] = [];
      for (let index = 0; index < 12; index++)
        shared.push(
          await proxiedChatStatus((index % 2 ? second : first).url, after, {
            headers: { "x-forwarded-for": newAddress() },
          }),
        );
      expect(shared.filter((status) => status === 200)).toHaveLength(4);
    }, 30_000);

    it("counts a DeviceCheck token's budget across both, asking Apple once", async () => {
      const project = await createDeviceCheckProject(first.gateway, keys.privateKeyPem, "cached");
      const deviceToken = Buffer.from(`budget-${randomBytes(12).toString("hex")}`).toString("base64");
      apple.registerValidToken(deviceToken);
      const asked = apple.calls.length;
      const bearer = `${project.partialKeys["provider-a"]}.${deviceToken}`;
      const statuses: number[] = [];
      for (let index = 0; index < 6; index++)
        statuses.push(
          await proxiedChatStatus(
            (index % 2 ? second : first).url,
            { projectId: project.projectId, bearer },
            { headers: { "x-forwarded-for": newAddress() } },
          ),
        );
      expect({ statuses, appleCalls: apple.calls.length - asked }).toEqual({
        statuses: [200, 200, 200, 401, 401, 401],
        appleCalls: 1,
      });
    });

    it("uses on the second an output schema changed through the first, within the cache TTL", async () => {
      const titled = { type: "object", properties: { title: { type: "string" } }, required: ["title"] };
      const scored = { type: "object", properties: { score: { type: "integer" } }, required: ["score"] };
      const project = await createTestProject(first.gateway, { outputSchema: titled });
      const analyse = async () => {
        const response = await fetch(`${second.url}/v1/text/${project.projectId}`, {
          method: "POST",
          headers: {
            authorization: `Bearer ${project.bearer("provider-a")}`,
            "content-type": "application/json",
            "x-forwarded-for": newAddress(),
          },
          body: JSON.stringify({ text: "A calm lake" }),
        });
        const schemaSent = fake.last()?.body.toString("utf8") ?? "";
        return { status: response.status, body: await response.json(), schemaSent };
      };
      fake.setStructuredOutput({ title: "Lake" });
      expect(await analyse()).toMatchObject({ status: 200, body: { title: "Lake" } });
      await patch(project.projectId, { outputSchema: scored });
      fake.setStructuredOutput({ score: 7 });
      await sleep(2 * projectCacheTtlMs);
      const changed = await analyse();
      expect(changed).toMatchObject({ status: 200, body: { score: 7 } });
      expect(changed.schemaSent).toContain('"score"');
      expect(changed.schemaSent).not.toContain('"title"');
    });

    it("refuses on the second a device token once DeviceCheck is turned off through the first, within the cache TTL", async () => {
      const project = await createDeviceCheckProject(first.gateway, keys.privateKeyPem, "cached");
      const deviceToken = Buffer.from(`off-${randomBytes(12).toString("hex")}`).toString("base64");
      apple.registerValidToken(deviceToken);
      const call = () =>
        proxiedChatStatus(
          second.url,
          { projectId: project.projectId, bearer: `${project.partialKeys["provider-a"]}.${deviceToken}` },
          { headers: { "x-forwarded-for": newAddress() } },
        );
      expect(await call()).toBe(200);
      await patch(project.projectId, { deviceCheck: { enabled: false } });
      await sleep(2 * projectCacheTtlMs);
      expect(await call()).toBe(401);
    });
  },
);
