import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { proxiedChat } from "../support/proxied-chat.js";
import { postgresAvailable, postgresBaseUrl, redisAvailable, redisTestSpace } from "../support/services.js";
import { type SpawnedGateway, spawnGateway } from "../support/spawned-gateway.js";
import { startTcpProxy } from "../support/tcp-proxy.js";

/**
 * Two gateway processes (`npm start`) behind one load balancer, as an operator deploys them: one
 * fresh PostgreSQL database of this file's (so the migration lock, one per database, is theirs
 * alone), one Redis key prefix, and the same SLUICE_CONFIG_FILE, started at the same moment. Each
 * reaches PostgreSQL and Redis through TCP proxies of its own, so one instance can lose PostgreSQL
 * while the other keeps it. Beside multi-instance-scale-out.test.ts: projects as code seeded by
 * both at once, the admin changes and limits on projects seeded so, and an outage of one instance.
 */
describe.skipIf(!postgresAvailable || !redisAvailable)(
  "two gateway processes seeded from one projects file",
  () => {
    const adminToken = `admin-${randomBytes(12).toString("hex")}`;
    const cacheTtlMs = 500;
    const database = `sluice_multi_${randomBytes(6).toString("hex")}`;
    const databaseUrl = postgresBaseUrl.replace(/\/test$/, `/${database}`);
    const redisSpace = redisTestSpace("seeded");
    const directory = mkdtempSync(join(tmpdir(), "sluice-multi-seeded-"));
    const configFile = join(directory, "projects.json");
    let fake: FakeUpstream;
    let postgresProxies: Awaited<ReturnType<typeof startTcpProxy>>[] = [];
    let redisProxies: Awaited<ReturnType<typeof startTcpProxy>>[] = [];
    let instances: SpawnedGateway[] = [];
    const seeded = ["seeded-app", "seeded-limited", "seeded-capped"];

    async function query<T>(text: string, values: unknown[] = [], url = databaseUrl): Promise<T[]> {
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      try {
        return (await client.query(text, values)).rows as T[];
      } finally {
        await client.end();
      }
    }

    beforeAll(async () => {
      await query(`create database ${database}`, [], postgresBaseUrl);
      writeFileSync(
        configFile,
        JSON.stringify({
          projects: [
            { id: "seeded-app", name: "Seeded app", provider: "provider-a", testMode: true },
            {
              id: "seeded-limited",
              name: "Seeded limited",
              provider: "provider-a",
              testMode: true,
              rateLimits: { perMinute: 9 },
            },
            {
              id: "seeded-capped",
              name: "Seeded capped",
              provider: "provider-a",
              testMode: true,
              monthlySpendCapUsd: 0.00002,
            },
          ],
        }),
      );
      fake = await startFakeUpstream();
      postgresProxies = await Promise.all([0, 1].map(() => startTcpProxy(5432)));
      redisProxies = await Promise.all([0, 1].map(() => startTcpProxy(6379)));
      const prefix = `${redisSpace.nextPrefix()}:`;
      const masterKey = randomBytes(32).toString("base64");
      const env = (index: number) => ({
        DATABASE_URL: databaseUrl.replace("127.0.0.1:5432", `127.0.0.1:${postgresProxies[index]?.port}`),
        REDIS_URL: `redis://127.0.0.1:${redisProxies[index]?.port}`,
        SLUICE_REDIS_KEY_PREFIX: prefix,
        SLUICE_MASTER_KEY: masterKey,
        SLUICE_ADMIN_TOKEN: adminToken,
        SLUICE_CONFIG_FILE: configFile,
        SLUICE_PROVIDER_A_BASE_URL: `${fake.url}/a/v1`,
        SLUICE_PROJECT_CACHE_TTL_MS: String(cacheTtlMs),
        SLUICE_RATE_LIMIT_IP_PER_MINUTE: "100000",
        SLUICE_USAGE_FLUSH_INTERVAL_MS: "50",
        LOG_LEVEL: "info",
      });
      // Both at the same moment, on a database without a table: one migrates, the other waits,
      // and both seed the same file.
      const results = await Promise.allSettled([0, 1].map((index) => spawnGateway({ env: env(index) })));
      instances = results.flatMap((result) => (result.status === "fulfilled" ? [result.value] : []));
      const failed = results.find((result) => result.status === "rejected");
      if (failed) throw (failed as PromiseRejectedResult).reason;
    }, 60_000);

    afterAll(async () => {
      await Promise.all(instances.map((instance) => instance.remove()));
      await Promise.all([...postgresProxies, ...redisProxies].map((proxy) => proxy.close()));
      await fake?.close();
      await redisSpace.cleanup();
      await query(`drop database if exists ${database} with (force)`, [], postgresBaseUrl);
      rmSync(directory, { recursive: true, force: true });
    });

    const admin = (instance: SpawnedGateway, path: string, method = "GET", body?: unknown) =>
      fetch(`${instance.url}/admin/v1${path}`, {
        method,
        headers: {
          authorization: `Bearer ${adminToken}`,
          "content-type": "application/json",
          connection: "close",
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });

    async function json<T>(response: Promise<Response>): Promise<T> {
      const answered = await response;
      expect(answered.status).toBeLessThan(300);
      return (await answered.json()) as T;
    }

    /** A seeded project made callable through `instance`: a provider A key and a test key. */
    async function credentials(instance: SpawnedGateway, projectId: string) {
      const key = await json<{ keyId: string; partialKey: string }>(
        admin(instance, `/projects/${projectId}/keys`, "POST", {
          provider: "provider-a",
          apiKey: "sk-multi-seeded-key-123",
        }),
      );
      const test = await json<{ testKey: string; testKeyId: string }>(
        admin(instance, `/projects/${projectId}/test-keys`, "POST"),
      );
      return {
        projectId,
        partialKey: key.partialKey,
        keyId: key.keyId,
        testKeyId: test.testKeyId,
        bearer: `${key.partialKey}.${test.testKey}`,
      };
    }

    async function call(instance: SpawnedGateway, target: { projectId: string; bearer: string }) {
      const response = await proxiedChat(instance.url, target, {
        body: { model: "gpt-4o-mini", messages: [] },
      });
      await response.arrayBuffer();
      return { status: response.status, requestId: response.headers.get("x-request-id") };
    }

    /**
     * Whether `instance` comes to answer `status`, called again and again for up to 15 s: a change
     * seen through the cache's expiry (500 ms) comes long before that, one left to the 5-minute
     * stale limit or never seen does not. (How soon is not asserted: a loaded CI machine decides it.)
     */
    async function comesToAnswer(
      instance: SpawnedGateway,
      target: { projectId: string; bearer: string },
      status: number,
    ) {
      const started = Date.now();
      while (Date.now() - started < 15_000) {
        if ((await call(instance, target)).status === status) return true;
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
      return false;
    }

    it("start at the same moment on an empty database and a projects file: migrated once, seeded once, both serve", async () => {
      expect(instances).toHaveLength(2);
      const migrations = await query<{ name: string }>("select name from sluice_migrations");
      expect(migrations.length).toBeGreaterThan(0);
      expect(new Set(migrations.map((row) => row.name)).size).toBe(migrations.length);
      const projects = await query<{ id: string }>("select id from projects order by id");
      expect(projects.map((row) => row.id)).toEqual([...seeded].sort());
      // Each start says what it seeded: every project was created by exactly one of the two, and
      // the other found it matching the file, written by neither a second time.
      const logged = instances.map((instance) => {
        const line = instance
          .output()
          .split("\n")
          .find((text) => text.includes("projects seeded from SLUICE_CONFIG_FILE"));
        expect(line).toBeDefined();
        return JSON.parse(line as string) as { created: string[]; updated: string[] };
      });
      expect(logged.flatMap((seeding) => seeding.created).sort()).toEqual([...seeded].sort());
      expect(logged.flatMap((seeding) => seeding.updated)).toEqual([]);
      const written = await query<{ id: string; created_at: string; updated_at: string }>(
        "select id, created_at, updated_at from projects",
      );
      expect(written.filter((row) => row.updated_at !== row.created_at)).toEqual([]);
      const [first, second] = instances as [SpawnedGateway, SpawnedGateway];
      const target = await credentials(first, "seeded-app");
      expect((await call(first, target)).status).toBe(200);
      expect((await call(second, target)).status).toBe(200);
    }, 60_000);

    it("see a project created through the first instance on the second, which had read its id as missing, within the TTL", async () => {
      const [first, second] = instances as [SpawnedGateway, SpawnedGateway];
      const projectId = `late-${randomBytes(4).toString("hex")}`;
      // The second instance reads the id as missing (no such project) and holds that.
      expect((await call(second, { projectId, bearer: "pk_x.tk_y" })).status).toBe(404);
      await json(
        admin(first, "/projects", "POST", {
          id: projectId,
          name: "Late",
          provider: "provider-a",
          testMode: true,
        }),
      );
      const target = await credentials(first, projectId);
      expect(await comesToAnswer(second, target, 200)).toBe(true);
    }, 60_000);

    it("honour on the second instance a test-key rotation, a test-key revocation and Test Mode turned off through the first", async () => {
      const [first, second] = instances as [SpawnedGateway, SpawnedGateway];
      const target = await credentials(first, "seeded-app");
      expect((await call(second, target)).status).toBe(200);
      // A new test key works on the second at once (its digest was never read there as absent).
      const rotated = await json<{ testKey: string; testKeyId: string }>(
        admin(first, "/projects/seeded-app/test-keys", "POST"),
      );
      const newest = { projectId: "seeded-app", bearer: `${target.partialKey}.${rotated.testKey}` };
      expect(await comesToAnswer(second, newest, 200)).toBe(true);
      // The previous one is revoked through the first: refused on the second within the TTL.
      expect(
        (await admin(first, `/projects/seeded-app/test-keys/${target.testKeyId}`, "DELETE")).status,
      ).toBe(204);
      expect(await comesToAnswer(second, target, 401)).toBe(true);
      expect((await call(second, newest)).status).toBe(200);
      // Test Mode off: no test key works any more, on either instance.
      expect((await admin(first, "/projects/seeded-app", "PATCH", { testMode: false })).status).toBe(200);
      const refused = await call(first, newest);
      expect(refused.status).not.toBe(200);
      expect(await comesToAnswer(second, newest, refused.status)).toBe(true);
    }, 60_000);

    it("count a seeded project's limit across both instances with Redis, and per instance while Redis is cut", async () => {
      const target = await credentials(instances[0] as SpawnedGateway, "seeded-limited");
      const statuses: number[] = [];
      for (let index = 0; index < 24; index++)
        statuses.push((await call(instances[index % 2] as SpawnedGateway, target)).status);
      expect(statuses.filter((status) => status === 200)).toHaveLength(9);
      expect(statuses.filter((status) => status === 429)).toHaveLength(15);

      // Redis lost by both: each instance counts from zero in its own memory, up to the limit.
      const fresh = await json<{ project: { id: string } }>(
        admin(instances[0] as SpawnedGateway, "/projects", "POST", {
          name: "Limited while Redis is cut",
          provider: "provider-a",
          testMode: true,
          rateLimits: { perMinute: 4 },
        }),
      );
      const cut = await credentials(instances[0] as SpawnedGateway, fresh.project.id);
      for (const proxy of redisProxies) proxy.cut();
      try {
        const during: number[] = [];
        for (let index = 0; index < 20; index++)
          during.push((await call(instances[index % 2] as SpawnedGateway, cut)).status);
        expect(during.filter((status) => status === 200)).toHaveLength(8);
        expect(during.filter((status) => status === 429)).toHaveLength(12);
      } finally {
        for (const proxy of redisProxies) proxy.restore();
      }
    }, 60_000);

    it("refuse a capped project on the second instance as soon as the first's calls are written, when the second had not read its spend", async () => {
      const [first, second] = instances as [SpawnedGateway, SpawnedGateway];
      const target = await credentials(first, "seeded-capped");
      // A fake call costs about 5.6e-6 USD: four reach this cap, three do not.
      for (let index = 0; index < 4; index++) expect((await call(first, target)).status).toBe(200);
      expect(await comesToAnswer(first, target, 403)).toBe(true);
      // The second instance reads the month's spend at its first call for the project.
      expect(await comesToAnswer(second, target, 403)).toBe(true);
      // Raised through the first: the second admits again within the TTL (the cap is the project's).
      expect((await admin(first, "/projects/seeded-capped", "PATCH", { monthlySpendCapUsd: 1 })).status).toBe(
        200,
      );
      expect(await comesToAnswer(second, target, 200)).toBe(true);
    }, 60_000);

    it("write every usage row of both instances once while one of them loses PostgreSQL for a while", async () => {
      const [first] = instances as [SpawnedGateway, SpawnedGateway];
      const projectId = `rows-${randomBytes(4).toString("hex")}`;
      await json(
        admin(first, "/projects", "POST", {
          id: projectId,
          name: "Rows",
          provider: "provider-a",
          testMode: true,
        }),
      );
      const target = await credentials(first, projectId);
      // Both hold the project's records before the first instance's PostgreSQL goes.
      for (const instance of instances) expect((await call(instance, target)).status).toBe(200);
      const answered: string[] = [];
      let stop = false;
      const load = instances.map(async (instance) => {
        while (!stop) {
          const calls = await Promise.all(Array.from({ length: 3 }, () => call(instance, target)));
          for (const answer of calls) {
            expect(answer.status).toBe(200);
            answered.push(answer.requestId ?? "missing");
          }
        }
      });
      await new Promise((resolve) => setTimeout(resolve, 500));
      (postgresProxies[0] as Awaited<ReturnType<typeof startTcpProxy>>).cut();
      // Shorter than SLUICE_PROJECT_CACHE_MAX_STALE_MS: the first keeps serving what it holds.
      await new Promise((resolve) => setTimeout(resolve, 1500));
      (postgresProxies[0] as Awaited<ReturnType<typeof startTcpProxy>>).restore();
      await new Promise((resolve) => setTimeout(resolve, 500));
      stop = true;
      await Promise.all(load);
      const read = () =>
        query<{ request_id: string; n: string }>(
          "select request_id, count(*) as n from usage_records where project_id = $1 group by request_id",
          [projectId],
        );
      let rows = await read();
      // The first instance retries its batches every 5 s at most during an outage.
      const deadline = Date.now() + 8000;
      while (rows.length < answered.length + 2 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        rows = await read();
      }
      expect(answered.length).toBeGreaterThan(30);
      expect(rows.filter((row) => row.n !== "1")).toEqual([]);
      expect(rows).toHaveLength(answered.length + 2);
      expect(answered.every((id) => rows.some((row) => row.request_id === id))).toBe(true);
    }, 25_000);
  },
);
