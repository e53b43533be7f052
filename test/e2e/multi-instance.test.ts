import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { proxiedChat } from "../support/proxied-chat.js";
import { createPostgresSchema, postgresAvailable, redisAvailable } from "../support/services.js";
import { startTcpProxyProcess } from "../support/tcp-proxy-process.js";

interface Instance {
  url: string;
  child: ChildProcess;
  output: string[];
  exit: Promise<number | null>;
}

const adminToken = `admin-${randomBytes(12).toString("hex")}`;

/** Starts `node --import tsx src/main.ts` as production does, and waits for its listening line. */
async function startInstance(env: Record<string, string>): Promise<Instance> {
  const child = spawn(process.execPath, ["--import", "tsx", "src/main.ts"], {
    cwd: join(import.meta.dirname, "../.."),
    env: { ...process.env, ...env, PORT: "0", HOST: "127.0.0.1", LOG_LEVEL: "info" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const output: string[] = [];
  const exit = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`instance did not start:\n${output.join("")}`)), 20_000);
    const onData = (chunk: Buffer) => {
      output.push(String(chunk));
      const match = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(output.join(""));
      if (match?.[1]) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", (chunk: Buffer) => output.push(String(chunk)));
    void exit.then((code) => reject(new Error(`instance exited with ${code}:\n${output.join("")}`)));
  });
  return { url, child, output, exit };
}

/** Polls `check` every 100 ms until it holds or `ms` passed; says whether it held. */
async function eventually(check: () => Promise<boolean>, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await check().catch(() => false)) return true;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return false;
}

describe.skipIf(!redisAvailable)("a REDIS_URL Redis refuses", () => {
  const dataDirs: string[] = [];
  afterAll(() => {
    for (const dir of dataDirs) rmSync(dir, { recursive: true, force: true });
  });
  const start = (redisUrl: string) => {
    const dataDir = mkdtempSync(join(tmpdir(), "sluice-instance-"));
    dataDirs.push(dataDir);
    return startInstance({ SLUICE_DATA_DIR: dataDir, REDIS_URL: redisUrl });
  };

  it("stops the start when the URL names a database the server does not have", async () => {
    await expect(start("redis://127.0.0.1:6379/99")).rejects.toThrow(
      /exited with 1:[\s\S]*sluice failed to start: Invalid configuration:\n {2}REDIS_URL: Redis refused SELECT 99 .*DB index is out of range/,
    );
  }, 30_000);

  it("stops the start on a user and password Redis refuses, never printing the password", async () => {
    const started = start("redis://sluice-test-nobody:not-the-password@127.0.0.1:6379");
    await expect(started).rejects.toThrow(/REDIS_URL: Redis refused AUTH .*WRONGPASS/);
    await expect(started).rejects.not.toThrow(/not-the-password/);
  }, 30_000);
});

describe.skipIf(!postgresAvailable || !redisAvailable)(
  "several gateway processes on shared PostgreSQL and Redis",
  () => {
    let fake: FakeUpstream;
    let schema: Awaited<ReturnType<typeof createPostgresSchema>>;
    let redisProxy: Awaited<ReturnType<typeof startTcpProxyProcess>>;
    let one: Instance;
    let two: Instance;
    const dataDirs: string[] = [];

    beforeAll(async () => {
      fake = await startFakeUpstream();
      schema = await createPostgresSchema();
      redisProxy = await startTcpProxyProcess(6379);
      const masterKey = randomBytes(32).toString("base64");
      const env = () => {
        const dataDir = mkdtempSync(join(tmpdir(), "sluice-instance-"));
        dataDirs.push(dataDir);
        return {
          SLUICE_DATA_DIR: dataDir,
          DATABASE_URL: schema.url,
          REDIS_URL: `redis://127.0.0.1:${redisProxy.port}`,
          SLUICE_MASTER_KEY: masterKey,
          SLUICE_ADMIN_TOKEN: adminToken,
          SLUICE_PROVIDER_A_BASE_URL: `${fake.url}/a/v1`,
          SLUICE_PROJECT_CACHE_TTL_MS: "1000",
          SLUICE_RATE_LIMIT_IP_PER_MINUTE: "100000",
        };
      };
      one = await startInstance(env());
      two = await startInstance(env());
    }, 60_000);

    afterAll(async () => {
      for (const instance of [one, two]) instance?.child.kill("SIGKILL");
      await redisProxy?.close();
      await fake?.close();
      await schema?.drop();
      for (const dir of dataDirs) rmSync(dir, { recursive: true, force: true });
    });

    const admin = (instance: Instance, path: string, method = "GET", body?: unknown) =>
      fetch(`${instance.url}/admin/v1${path}`, {
        method,
        headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });

    /** Redis is ok in /health and the instance no longer reports per-instance limits. */
    async function redisHealthy(instance: Instance): Promise<boolean> {
      const health = (await (await fetch(`${instance.url}/health`)).json()) as {
        checks: { redis: { status: string } };
      };
      const metrics = await (await fetch(`${instance.url}/metrics`)).text();
      return health.checks.redis.status === "ok" && !/sluice_degraded\{component="redis"\} 1/.test(metrics);
    }

    async function project(perMinute: number) {
      const created = (await (
        await admin(one, "/projects", "POST", {
          name: "shared",
          provider: "provider-a",
          testMode: true,
          rateLimits: { perMinute },
        })
      ).json()) as {
        project: { id: string };
        testKey: string;
      };
      const key = (await (
        await admin(one, `/projects/${created.project.id}/keys`, "POST", {
          provider: "provider-a",
          apiKey: "sk-shared-key-123",
        })
      ).json()) as { partialKey: string };
      return { id: created.project.id, bearer: `${key.partialKey}.${created.testKey}` };
    }

    const call = (instance: Instance, target: { id: string; bearer: string }) =>
      proxiedChat(instance.url, { projectId: target.id, bearer: target.bearer }).then(async (response) => {
        await response.arrayBuffer();
        return response;
      });

    it("holds a project's limit across both instances, exactly", async () => {
      const target = await project(100);
      const responses: Response[] = [];
      for (let round = 0; round < 6; round++) {
        responses.push(
          ...(await Promise.all(
            Array.from({ length: 50 }, (_, index) => call(index % 2 ? one : two, target)),
          )),
        );
      }
      const allowed = responses.filter((response) => response.status === 200).length;
      // One Redis script decides each request against the shared count: no overshoot.
      expect(allowed).toBe(100);
      const refused = responses.find((response) => response.status === 429)!;
      expect(refused.headers.get("retry-after")).toMatch(/^\d+$/);
      expect(refused.headers.get("ratelimit-policy")).toContain('"project";q=100;w=60');
    }, 30_000);

    it("shows a change made through one instance on the other within seconds", async () => {
      const target = await project(1000);
      expect((await call(two, target)).status).toBe(200);
      await admin(one, `/projects/${target.id}`, "PATCH", { disabled: true });
      expect((await call(one, target)).status).toBe(403);
      const deadline = Date.now() + 5000;
      let status = 200;
      while (status === 200 && Date.now() < deadline) {
        status = (await call(two, target)).status;
        if (status === 200) await new Promise((resolve) => setTimeout(resolve, 100));
      }
      expect(status).toBe(403);
    }, 30_000);

    it("falls back to per-instance limits when Redis is lost, never to unlimited, and says so", async () => {
      const target = await project(10);
      await redisProxy.cut();
      try {
        const responses = [];
        for (let index = 0; index < 60; index++) responses.push(await call(index % 2 ? one : two, target));
        const allowed = responses.filter((response) => response.status === 200).length;
        expect(allowed).toBeGreaterThanOrEqual(10);
        expect(allowed).toBeLessThanOrEqual(20);
        const metrics = await (await fetch(`${one.url}/metrics`)).text();
        expect(metrics).toMatch(/sluice_degraded\{component="redis"\} 1/);
        expect(metrics).toMatch(
          /sluice_rate_limit_decisions_total\{limit="project",decision="limited"\} \d+/,
        );
        const health = (await (await fetch(`${one.url}/health`)).json()) as {
          status: string;
          checks: { redis: { status: string } };
        };
        expect(health).toMatchObject({ status: "degraded", checks: { redis: { status: "down" } } });
      } finally {
        await redisProxy.restore();
      }
      // Back to shared limits once Redis is back, without waiting for a request to reach the limits.
      expect(await eventually(async () => (await redisHealthy(one)) && redisHealthy(two), 10_000)).toBe(true);
    }, 30_000);

    it("replaces Redis connections that go silent: limits are shared again within seconds", async () => {
      const target = await project(10);
      // Both instances on an open connection first: one still reconnecting after the test before
      // would connect after the stall, and its call below would be counted in Redis.
      expect(await eventually(async () => (await redisHealthy(one)) && redisHealthy(two), 10_000)).toBe(true);
      // The open connections stop passing anything on; new connections get through.
      await redisProxy.stall();
      const during = [await call(one, target), await call(two, target)];
      expect(during.map((response) => response.status)).toEqual([200, 200]);
      expect(await eventually(async () => (await redisHealthy(one)) && redisHealthy(two), 8_000)).toBe(true);
      // Decided in Redis again: the two calls above were counted on their instances only.
      const responses = [];
      for (let index = 0; index < 20; index++) responses.push(await call(index % 2 ? one : two, target));
      const statuses = responses.map((response) => response.status);
      expect({ allowed: statuses.filter((status) => status === 200).length, statuses }).toMatchObject({
        allowed: 10,
      });
    }, 30_000);

    it("reports usage that matches the requests made, from either instance", async () => {
      const target = await project(1000);
      for (let index = 0; index < 10; index++) await call(index % 2 ? one : two, target);
      const read = async () =>
        (await (await admin(two, `/projects/${target.id}/usage?groupBy=model`)).json()) as {
          rows: Array<{
            group: string;
            requests: number;
            inputTokens: number;
            outputTokens: number;
            costUsd: number;
          }>;
        };
      // Each instance writes its rows a flush interval (250 ms) and an insert after the call: on a
      // loaded machine the last can land after any fixed wait. Read again until ten are in (10 s).
      let report = await read();
      const deadline = Date.now() + 10_000;
      while ((report.rows[0]?.requests ?? 0) < 10 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        report = await read();
      }
      expect(report.rows).toEqual([
        expect.objectContaining({ group: "gpt-4o-mini", requests: 10, inputTokens: 110, outputTokens: 70 }),
      ]);
      expect(report.rows[0]?.costUsd).toBeCloseTo((10 * ((11 - 3) * 0.15 + 3 * 0.075 + 7 * 0.6)) / 1e6, 12);
    }, 30_000);

    it("finishes in-flight streams and exits 0 on SIGTERM", async () => {
      const target = await project(1000);
      fake.setSseDelayMs(150);
      const response = await proxiedChat(
        one.url,
        { projectId: target.id, bearer: target.bearer },
        { body: { model: "gpt-4o-mini", messages: [], stream: true } },
      );
      one.child.kill("SIGTERM");
      const text = await response.text();
      fake.setSseDelayMs(0);
      expect(text.trim().endsWith("data: [DONE]")).toBe(true);
      expect(await one.exit).toBe(0);
      expect(one.output.join("")).toContain('"msg":"stopped"');
      await expect(fetch(`${one.url}/health`)).rejects.toThrow();
    }, 30_000);
  },
);
