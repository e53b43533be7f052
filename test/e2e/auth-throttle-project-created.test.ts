import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { proxiedChatStatus } from "../support/proxied-chat.js";
import {
  createPostgresSchema,
  postgresAvailable,
  redisAvailable,
  redisTestSpace,
  redisUrl,
} from "../support/services.js";
import { createTestProject, startTestGateway, type TestGateway } from "../support/test-gateway.js";

/**
 * Failures on an id that names no project count for the id across addresses (docs/auth.md), to slow
 * an enumeration. Once a project is created under the id they no longer refuse its callers: on
 * another instance, requests that met its cached miss (or were sent before the project existed)
 * would otherwise lock every client out of the new project for the rest of the minute.
 */
describe.skipIf(!postgresAvailable || !redisAvailable)(
  "a project created under an id refused as unknown",
  () => {
    let fake: FakeUpstream;
    let schema: Awaited<ReturnType<typeof createPostgresSchema>>;
    const space = redisTestSpace("auth-project-created");
    const gateways: TestGateway[] = [];
    const limit = 5;
    // Long enough for the project's creation and five calls on a loaded machine to fall inside it
    // (at 500 ms a full run on 2 cores sometimes saw the project already).
    const ttlMs = 2000;
    const address = (index: number) => `198.51.100.${index + 1}`;

    beforeAll(async () => {
      fake = await startFakeUpstream();
      schema = await createPostgresSchema();
      const shared = {
        masterKey: randomBytes(32).toString("base64"),
        databaseUrl: schema.url,
        redisUrl,
        redisKeyPrefix: `${space.nextPrefix()}:`,
        providerABaseUrl: `${fake.url}/a/v1`,
        projectCacheTtlMs: ttlMs,
        authFailureLimit: limit,
        trustProxy: ["127.0.0.1"],
      };
      for (let i = 0; i < 2; i++) gateways.push(await startTestGateway(shared));
    });

    afterAll(async () => {
      for (const gateway of gateways) await gateway.close();
      await fake?.close();
      await schema?.drop();
      await space.cleanup();
    });

    it("serves the new project's callers on every instance once it sees the project", async () => {
      const [one, two] = gateways as [TestGateway, TestGateway];
      const projectId = `created-${randomBytes(4).toString("hex")}`;
      const call = async (gateway: TestGateway, bearer: string, from: string) => {
        return proxiedChatStatus(
          gateway.url,
          { projectId, bearer },
          { headers: { "x-forwarded-for": from } },
        );
      };
      // Instance two is asked for the id before the project exists, and holds it as missing.
      expect(await call(two, "sk_sluice_k_s.t", address(0))).toBe(404);
      const project = await createTestProject(one.gateway, { id: projectId });
      const bearer = project.bearer("provider-a");
      // Its clients reach instance two within its TTL, from addresses of their own: 404 each, and the
      // id's count reaches the limit.
      const early = [];
      for (let i = 1; i <= limit; i++) early.push(await call(two, bearer, address(i)));
      expect(early.every((status) => status === 404 || status === 429)).toBe(true);
      await new Promise((resolve) => setTimeout(resolve, ttlMs + 100));
      const statuses = [];
      for (let i = 0; i < 4; i++) statuses.push(await call(i % 2 ? one : two, bearer, address(20 + i)));
      expect(statuses).toEqual([200, 200, 200, 200]);
      // An id that still names no project stays throttled across addresses.
      const ghost = `ghost-${randomBytes(4).toString("hex")}`;
      const probe = async (from: string) => {
        return proxiedChatStatus(
          two.url,
          { projectId: ghost, bearer },
          { headers: { "x-forwarded-for": from } },
        );
      };
      const probes = [];
      for (let i = 0; i < limit + 2; i++) probes.push(await probe(address(40 + i)));
      expect(probes).toEqual([...Array(limit).fill(404), 429, 429]);
    });
  },
);
