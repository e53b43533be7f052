import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { proxiedChat } from "../support/proxied-chat.js";
import {
  createPostgresSchema,
  postgresAvailable,
  redisAvailable,
  redisTestSpace,
} from "../support/services.js";
import { type SpawnedGateway, spawnGateway } from "../support/spawned-gateway.js";
import { startTcpProxy } from "../support/tcp-proxy.js";
import { startTcpProxyProcess } from "../support/tcp-proxy-process.js";

/**
 * What an operator running several instances relies on, with three gateway processes (`npm start`)
 * on one PostgreSQL schema and one Redis key prefix of this file's, both reached through TCP proxies
 * the tests cut or stall (the shared services themselves are never touched). Beside
 * multi-instance.test.ts: a start of all three at the same moment on an empty schema, every kind of
 * admin change seen by the other instances, limits counted exactly, a Redis that hangs for new
 * connections too, and usage rows through a database outage and a SIGTERM mid-load.
 */
describe.skipIf(!postgresAvailable || !redisAvailable)(
  "three gateway processes sharing PostgreSQL and Redis",
  () => {
    const adminToken = `admin-${randomBytes(12).toString("hex")}`;
    const cacheTtlMs = 500;
    const redisSpace = redisTestSpace("scale-out");
    let fake: FakeUpstream;
    let schema: Awaited<ReturnType<typeof createPostgresSchema>>;
    let postgresProxy: Awaited<ReturnType<typeof startTcpProxy>>;
    let redisProxy: Awaited<ReturnType<typeof startTcpProxyProcess>>;
    let instances: SpawnedGateway[] = [];
    let startMs = 0;

    beforeAll(async () => {
      fake = await startFakeUpstream();
      schema = await createPostgresSchema();
      postgresProxy = await startTcpProxy(5432);
      redisProxy = await startTcpProxyProcess(6379);
      const env = {
        DATABASE_URL: schema.url.replace("127.0.0.1:5432", `127.0.0.1:${postgresProxy.port}`),
        REDIS_URL: `redis://127.0.0.1:${redisProxy.port}`,
        SLUICE_REDIS_KEY_PREFIX: `${redisSpace.nextPrefix()}:`,
        SLUICE_MASTER_KEY: randomBytes(32).toString("base64"),
        SLUICE_ADMIN_TOKEN: adminToken,
        SLUICE_PROVIDER_A_BASE_URL: `${fake.url}/a/v1`,
        SLUICE_PROJECT_CACHE_TTL_MS: String(cacheTtlMs),
        SLUICE_RATE_LIMIT_IP_PER_MINUTE: "100000",
        SLUICE_USAGE_FLUSH_INTERVAL_MS: "50",
        LOG_LEVEL: "warn",
      };
      // All three at the same moment, on a schema without a table: one migrates, the others wait.
      const started = Date.now();
      const results = await Promise.allSettled([0, 1, 2].map(() => spawnGateway({ env })));
      startMs = Date.now() - started;
      instances = results.flatMap((result) => (result.status === "fulfilled" ? [result.value] : []));
      const failed = results.find((result) => result.status === "rejected");
      if (failed) throw (failed as PromiseRejectedResult).reason;
    }, 120_000);

    afterAll(async () => {
      await Promise.all(instances.map((instance) => instance.remove()));
      await redisProxy?.close();
      await postgresProxy?.close();
      await fake?.close();
      await schema?.drop();
      await redisSpace.cleanup();
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

    /** A Test Mode project made through the first instance, with a provider A key. */
    async function project(fields: Record<string, unknown> = {}) {
      const [first] = instances as [SpawnedGateway];
      const created = (await (
        await admin(first, "/projects", "POST", {
          name: "scale-out",
          provider: "provider-a",
          testMode: true,
          ...fields,
        })
      ).json()) as { project: { id: string }; testKey: string; testKeyId: string };
      const key = (await (
        await admin(first, `/projects/${created.project.id}/keys`, "POST", {
          provider: "provider-a",
          apiKey: "sk-scale-out-key-123",
        })
      ).json()) as { keyId: string; partialKey: string };
      return {
        projectId: created.project.id,
        bearer: `${key.partialKey}.${created.testKey}`,
        partialKey: key.partialKey,
        keyId: key.keyId,
        testKeyId: created.testKeyId,
      };
    }

    async function call(
      instance: SpawnedGateway,
      target: { projectId: string; bearer: string },
      stream = false,
    ) {
      const started = Date.now();
      const response = await proxiedChat(instance.url, target, {
        body: { model: "gpt-4o-mini", messages: [], stream },
      });
      await response.arrayBuffer();
      const ended = Date.now();
      return { status: response.status, headers: response.headers, ms: ended - started, started, ended };
    }

    /** Calls `instance` until it answers `status`; how long that took (ms), or Infinity after 5 s. */
    async function msUntil(
      instance: SpawnedGateway,
      target: { projectId: string; bearer: string },
      status: number,
    ) {
      const started = Date.now();
      while (Date.now() - started < 5000) {
        if ((await call(instance, target)).status === status) return Date.now() - started;
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
      return Number.POSITIVE_INFINITY;
    }

    async function query<T>(text: string, values: unknown[] = []): Promise<T[]> {
      const client = new pg.Client({ connectionString: schema.url });
      await client.connect();
      try {
        return (await client.query(text, values)).rows as T[];
      } finally {
        await client.end();
      }
    }

    it("start at the same moment on an empty schema: migrated once, all three serve", async () => {
      expect(instances).toHaveLength(3);
      const migrations = await query<{ name: string }>("select name from sluice_migrations order by name");
      expect(migrations.length).toBeGreaterThan(0);
      expect(new Set(migrations.map((row) => row.name)).size).toBe(migrations.length);
      const target = await project();
      expect(
        (await Promise.all(instances.map((instance) => call(instance, target)))).map((r) => r.status),
      ).toEqual([200, 200, 200]);
      // Against a hung lock wait (the start timeout is 60 s): three starts on two cores take seconds,
      // up to some 20 s when other test files keep the cores busy.
      expect(startMs).toBeLessThan(45_000);
    }, 20_000);

    it("count a project's limit exactly across the three, each admitted call seeing its own remaining count", async () => {
      const target = await project({ rateLimits: { perMinute: 43 } });
      // One call on each first: a burst of more than SLUICE_AUTH_FAILURE_LIMIT (30) first credential
      // checks from one address is held back by the failed-authentication throttle (docs/auth.md).
      const opening = await call(instances[0] as SpawnedGateway, target);
      expect(opening.status).toBe(200);
      for (const instance of instances.slice(1)) expect((await call(instance, target)).status).toBe(200);
      const responses = await Promise.all(
        Array.from({ length: 120 }, (_, index) => call(instances[index % 3] as SpawnedGateway, target)),
      );
      const admitted = responses.filter((response) => response.status === 200);
      expect(admitted).toHaveLength(40);
      expect(responses.filter((response) => response.status === 429)).toHaveLength(80);
      // Each admitted call was counted once, in one shared window: remaining 39 down to 0, each once.
      const remaining = admitted.map(
        (response) => /;r=(\d+);/.exec(response.headers.get("ratelimit") ?? "")?.[1],
      );
      expect(remaining.map(Number).sort((a, b) => a - b)).toEqual(
        Array.from({ length: 40 }, (_, index) => index),
      );
      for (const response of responses) {
        expect(response.headers.get("ratelimit-policy")).toBe('"project";q=43;w=60, "ip";q=100000;w=60');
      }
      const refused = responses.filter((response) => response.status === 429);
      // The window opened at the first call above, on Redis (its expiry): every refusal, on every
      // instance, waits for what is left of that window at the moment it was decided, and
      // Retry-After says so. Each refusal is held to the window's end as seen from its own call,
      // not to its neighbours': on a loaded machine a burst may take seconds, and t counts down
      // through it. The window ends 60 s after the opening call's decision (between its start and
      // its end); a refusal decided at d, during its own call, says t = ceil((end - d) / 1000).
      for (const response of refused) {
        const t = Number(/^"project";r=0;t=(\d+)$/.exec(response.headers.get("ratelimit") ?? "")?.[1]);
        expect(response.headers.get("retry-after")).toBe(String(t));
        // Date.now() reads whole milliseconds: 1 ms either way.
        expect(t * 1000).toBeGreaterThanOrEqual(opening.started + 60_000 - response.ended - 1);
        expect((t - 1) * 1000).toBeLessThan(opening.ended + 60_000 - response.started + 1);
      }
    }, 20_000);

    it("see an admin change made through the first instance within SLUICE_PROJECT_CACHE_TTL_MS", async () => {
      const [first, second, third] = instances as [SpawnedGateway, SpawnedGateway, SpawnedGateway];
      // Margin for a loaded machine: the change must not wait for the 5-minute stale limit, or never come.
      const within = cacheTtlMs + 2000;
      const warm = async (target: { projectId: string; bearer: string }) => {
        for (const instance of instances) expect((await call(instance, target)).status).toBe(200);
      };

      const lowered = await project({ rateLimits: { perMinute: 1000 } });
      await warm(lowered);
      expect(
        (await admin(first, `/projects/${lowered.projectId}`, "PATCH", { rateLimits: { perMinute: 3 } }))
          .status,
      ).toBe(200);
      expect(await msUntil(second, lowered, 429)).toBeLessThan(within);

      const revoked = await project();
      await warm(revoked);
      expect(
        (await admin(first, `/projects/${revoked.projectId}/keys/${revoked.keyId}`, "DELETE")).status,
      ).toBe(204);
      expect((await call(first, revoked)).status).toBe(403);
      expect(await msUntil(second, revoked, 403)).toBeLessThan(within);

      // Rotated twice: the newest works at once everywhere. (The first stays, issued in the minute
      // before: a rotation keeps those, docs/api.md; its revocation is the case below.)
      const rotated = await project();
      await warm(rotated);
      await admin(first, `/projects/${rotated.projectId}/test-keys`, "POST");
      const newest = (await (
        await admin(first, `/projects/${rotated.projectId}/test-keys`, "POST")
      ).json()) as {
        testKey: string;
      };
      expect(
        await msUntil(
          third,
          { projectId: rotated.projectId, bearer: `${rotated.partialKey}.${newest.testKey}` },
          200,
        ),
      ).toBeLessThan(within);

      const testKeyRevoked = await project();
      await warm(testKeyRevoked);
      await admin(
        first,
        `/projects/${testKeyRevoked.projectId}/test-keys/${testKeyRevoked.testKeyId}`,
        "DELETE",
      );
      expect(await msUntil(third, testKeyRevoked, 401)).toBeLessThan(within);

      const disabled = await project();
      await warm(disabled);
      await admin(first, `/projects/${disabled.projectId}`, "PATCH", { disabled: true });
      expect(await msUntil(third, disabled, 403)).toBeLessThan(within);

      const deleted = await project();
      await warm(deleted);
      expect((await admin(first, `/projects/${deleted.projectId}`, "DELETE")).status).toBe(204);
      expect(await msUntil(second, deleted, 404)).toBeLessThan(within);
    }, 20_000);

    it("keep answering within Redis's command timeout while Redis hangs for every connection, and share limits again after", async () => {
      const [first, second] = instances as [SpawnedGateway, SpawnedGateway];
      const target = await project({ rateLimits: { perMinute: 5 } });
      await redisProxy.stall({ newConnections: true });
      const during = [];
      try {
        for (let index = 0; index < 30; index++)
          during.push(await call(instances[index % 2] as SpawnedGateway, target));
      } finally {
        await redisProxy.restore();
      }
      // Per instance, never unlimited: 5 on each of the two.
      expect(during.filter((response) => response.status === 200)).toHaveLength(10);
      // One command timeout (500 ms) at most per call, with room for a loaded machine; never the
      // socket's reconnect backoff or a hang.
      expect(Math.max(...during.map((response) => response.ms))).toBeLessThan(1500);
      // Shared again: a fresh project's limit counts calls to both instances together.
      const health = async (instance: SpawnedGateway) =>
        ((await (await fetch(`${instance.url}/health`)).json()) as { checks: { redis: { status: string } } })
          .checks.redis.status;
      const deadline = Date.now() + 8000;
      while (Date.now() < deadline && ((await health(first)) !== "ok" || (await health(second)) !== "ok"))
        await new Promise((resolve) => setTimeout(resolve, 100));
      // Each instance's connection stalled before the restore is replaced at its first timeout: a
      // call on each first, so neither decides on its own memory below.
      for (const instance of [first, second]) await call(instance, await project());
      const shared = await project({ rateLimits: { perMinute: 5 } });
      const after = [];
      for (let index = 0; index < 12; index++)
        after.push(await call(instances[index % 2] as SpawnedGateway, shared));
      expect(after.filter((response) => response.status === 200)).toHaveLength(5);
    }, 20_000);

    it("hold a monthly spend cap on the other instances once they read the month's spend again (5 s)", async (context) => {
      // The processes run on the real clock: a month that turns during the test starts at 0 again.
      const now = new Date();
      if (Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1) - now.getTime() < 60_000) context.skip();
      const [first, second] = instances as [SpawnedGateway, SpawnedGateway];
      // A fake call costs about 5.6e-6 USD: four reach this cap, three do not.
      const target = await project({ monthlySpendCapUsd: 0.00002 });
      expect((await call(second, target)).status).toBe(200);
      const secondRead = Date.now();
      for (let index = 0; index < 3; index++) expect((await call(first, target)).status).toBe(200);
      // The first counts its own calls at once, written or not, and the second's once written.
      expect(await msUntil(first, target, 403)).toBeLessThan(2000);
      // The second reads the month again 5 s after its read above, and then counts the first's
      // calls: never more than three calls of its own, which alone stay below the cap.
      await new Promise((resolve) => setTimeout(resolve, secondRead + 5000 + 200 - Date.now()));
      const statuses: number[] = [];
      for (let attempt = 0; attempt < 3 && !statuses.includes(403); attempt++) {
        if (attempt > 0) await new Promise((resolve) => setTimeout(resolve, 300));
        statuses.push((await call(second, target)).status);
      }
      expect(statuses).toContain(403);
    }, 20_000);

    it("write every usage row once through a PostgreSQL outage and a SIGTERM to one instance mid-load", async () => {
      const target = await project();
      const third = instances[2] as SpawnedGateway;
      const answered: string[] = [];
      let stop = false;
      const load = instances.map(async (instance) => {
        while (!stop) {
          const calls = await Promise.all(
            Array.from({ length: 4 }, (_, index) =>
              proxiedChat(instance.url, target, {
                body: { model: "gpt-4o-mini", messages: [], stream: index % 2 === 0 },
              })
                .then(async (response) => {
                  await response.arrayBuffer();
                  return response;
                })
                .catch(() => null),
            ),
          );
          for (const response of calls) {
            if (response === null) continue;
            expect(response.status).toBe(200);
            answered.push(response.headers.get("x-request-id") ?? "missing");
          }
          if (calls.includes(null)) return; // the instance shut down
        }
      });
      await new Promise((resolve) => setTimeout(resolve, 700));
      postgresProxy.cut();
      await new Promise((resolve) => setTimeout(resolve, 700));
      // Mid-load and mid-outage: its rows are queued, and written once the database is back within
      // its shutdown's deadline (10 s).
      third.child.kill("SIGTERM");
      await new Promise((resolve) => setTimeout(resolve, 700));
      postgresProxy.restore();
      await new Promise((resolve) => setTimeout(resolve, 700));
      stop = true;
      await Promise.all(load);
      expect(await third.exit).toEqual({ code: 0, signal: null });

      const read = () =>
        query<{ request_id: string; n: string }>(
          "select request_id, count(*) as n from usage_records where project_id = $1 group by request_id",
          [target.projectId],
        );
      let rows = await read();
      const deadline = Date.now() + 5000;
      while (rows.length < answered.length && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        rows = await read();
      }
      expect(answered.length).toBeGreaterThan(50);
      expect(rows.filter((row) => row.n !== "1")).toEqual([]);
      expect(rows.map((row) => row.request_id).sort()).toEqual([...answered].sort());
    }, 20_000);
  },
);
