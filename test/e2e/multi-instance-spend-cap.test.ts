import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { proxiedChat } from "../support/proxied-chat.js";
import {
  createPostgresSchema,
  postgresAvailable,
  redisAvailable,
  redisTestSpace,
} from "../support/services.js";
import { type SpawnedGateway, spawnGateway } from "../support/spawned-gateway.js";
import { startTcpProxyProcess } from "../support/tcp-proxy-process.js";

/**
 * The spend cap's calls in flight with two gateway processes (`npm start`) on one PostgreSQL schema
 * and one Redis key prefix (Redis reached through a TCP proxy the tests cut): calls sent at once to
 * both, just under a project's cap, are admitted as one instance alone would admit them. Before, each
 * instance counted only its own calls in flight, and each let about one call's cost more through.
 */
describe.skipIf(!postgresAvailable || !redisAvailable)(
  "two gateway processes sharing PostgreSQL and Redis: the spend cap's calls in flight",
  () => {
    const adminToken = `admin-${randomBytes(12).toString("hex")}`;
    const redisSpace = redisTestSpace("spend-in-flight");
    let fake: FakeUpstream;
    let schema: Awaited<ReturnType<typeof createPostgresSchema>>;
    let redisProxy: Awaited<ReturnType<typeof startTcpProxyProcess>>;
    let instances: SpawnedGateway[] = [];
    const prefix = `${redisSpace.nextPrefix()}:`;

    beforeAll(async () => {
      fake = await startFakeUpstream();
      schema = await createPostgresSchema();
      redisProxy = await startTcpProxyProcess(6379);
      const env = {
        DATABASE_URL: schema.url,
        REDIS_URL: `redis://127.0.0.1:${redisProxy.port}`,
        SLUICE_REDIS_KEY_PREFIX: prefix,
        SLUICE_MASTER_KEY: randomBytes(32).toString("base64"),
        SLUICE_ADMIN_TOKEN: adminToken,
        SLUICE_PROVIDER_A_BASE_URL: `${fake.url}/a/v1`,
        SLUICE_RATE_LIMIT_IP_PER_MINUTE: "100000",
        SLUICE_USAGE_FLUSH_INTERVAL_MS: "50",
        LOG_LEVEL: "warn",
      };
      // One after the other: the first creates the tables.
      instances.push(await spawnGateway({ env }));
      instances.push(await spawnGateway({ env }));
    }, 60_000);

    afterAll(async () => {
      await Promise.all(instances.map((instance) => instance.remove()));
      instances = [];
      await redisProxy?.close();
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

    async function cappedProject(monthlySpendCapUsd: number) {
      const [first] = instances as [SpawnedGateway];
      const created = (await (
        await admin(first, "/projects", "POST", {
          name: "spend-in-flight",
          provider: "provider-a",
          testMode: true,
          monthlySpendCapUsd,
        })
      ).json()) as { project: { id: string }; testKey: string };
      const key = (await (
        await admin(first, `/projects/${created.project.id}/keys`, "POST", {
          provider: "provider-a",
          apiKey: "sk-spend-in-flight-123",
        })
      ).json()) as { partialKey: string };
      return { projectId: created.project.id, bearer: `${key.partialKey}.${created.testKey}` };
    }

    async function status(instance: SpawnedGateway, project: { projectId: string; bearer: string }) {
      const response = await proxiedChat(instance.url, project, {
        body: { model: "gpt-4o", messages: [] },
      });
      await response.arrayBuffer();
      return response.status;
    }

    async function costsWritten(projectId: string): Promise<number[]> {
      const client = new pg.Client({ connectionString: schema.url });
      await client.connect();
      try {
        const { rows } = await client.query<{ cost_usd: number | null }>(
          "select cost_usd from usage_records where project_id = $1 and status = 200",
          [projectId],
        );
        return rows.map((row) => Number(row.cost_usd));
      } finally {
        await client.end();
      }
    }

    /**
     * A project with a 30 USD cap and one call of 12.50 USD (1M input and 1M output tokens of
     * gpt-4o), its row written, so that both instances read 12.50 spent and 12.50 as the largest
     * cost of one call this month; then 20 calls of 1.25 USD, slow, 10 to each instance at once.
     * Each in flight counts at 12.50: one instance alone admits two (12.50 spent, then 12.50 + 12.50
     * = 25 < 30), not a third (37.50). The statuses, and how many calls reached the provider.
     */
    async function burstUnderCap() {
      const [first, second] = instances as [SpawnedGateway, SpawnedGateway];
      const project = await cappedProject(30);
      fake.setUsage({ input: 1_000_000, output: 1_000_000, cached: 0, reasoning: 0 });
      expect(await status(first, project)).toBe(200);
      const deadline = Date.now() + 5000;
      while ((await costsWritten(project.projectId)).length === 0 && Date.now() < deadline)
        await new Promise((resolve) => setTimeout(resolve, 50));
      expect(await costsWritten(project.projectId)).toEqual([12.5]);
      fake.setUsage({ input: 100_000, output: 100_000 });
      fake.setLatencyMs(1000);
      const before = fake.requests.length;
      try {
        const statuses = await Promise.all(
          Array.from({ length: 20 }, (_, index) => status(index % 2 === 0 ? first : second, project)),
        );
        return { project, statuses, reached: fake.requests.length - before };
      } finally {
        fake.setLatencyMs(0);
      }
    }

    /** The Redis keys of the spend cap's calls in flight under this file's prefix. */
    async function inFlightKeys(): Promise<string[]> {
      const redis = await redisSpace.readyClient();
      return redis.keys(`${prefix}sluice:spend-in-flight:*`);
    }

    const awayFromMonthEnd = () => {
      // The processes run on the real clock: a month that turns during the test starts at 0 again.
      const now = new Date();
      return Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1) - now.getTime() >= 60_000;
    };

    // Counted per instance, each admitted two: four, 17.50 USD above what one instance lets through.
    it("admits calls sent at once to both instances as one instance alone would", async (context) => {
      if (!awayFromMonthEnd()) context.skip();
      const { statuses, reached } = await burstUnderCap();
      expect(statuses.filter((code) => code === 429)).toHaveLength(18);
      expect(statuses.filter((code) => code === 200)).toHaveLength(2);
      expect(reached).toBe(2);
      // Every place was given back as its call ended (the release is sent as its row is recorded,
      // which may follow the answer by a moment): nothing is left counted in Redis.
      await vi.waitFor(async () => expect(await inFlightKeys()).toEqual([]), { timeout: 2000 });
    }, 30_000);

    it("counts on each instance alone while Redis is unreachable, failing no call", async (context) => {
      if (!awayFromMonthEnd()) context.skip();
      await redisProxy.cut();
      try {
        const { statuses, reached } = await burstUnderCap();
        // Two on each instance, as before Redis counted them: none answered 5xx.
        expect(statuses.filter((code) => code === 200)).toHaveLength(4);
        expect(statuses.filter((code) => code === 429)).toHaveLength(16);
        expect(reached).toBe(4);
      } finally {
        await redisProxy.restore();
      }
    }, 30_000);

    it("sends nothing to Redis for a project without a cap", async () => {
      const [first, second] = instances as [SpawnedGateway, SpawnedGateway];
      const project = await cappedProject(30);
      await admin(first, `/projects/${project.projectId}`, "PATCH", { monthlySpendCapUsd: null });
      fake.setLatencyMs(500);
      try {
        const calls = Promise.all(
          [first, second, first, second].map((instance) => status(instance, project)),
        );
        await new Promise((resolve) => setTimeout(resolve, 250));
        // Mid-call: no key of its calls in flight.
        expect(await inFlightKeys()).toEqual([]);
        expect(await calls).toEqual([200, 200, 200, 200]);
      } finally {
        fake.setLatencyMs(0);
      }
    }, 30_000);
  },
);
