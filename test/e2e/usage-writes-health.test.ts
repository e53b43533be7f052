import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { proxiedChat } from "../support/proxied-chat.js";
import { createPostgresSchema, postgresAvailable } from "../support/services.js";
import { createTestProject, startTestGateway, type TestGateway } from "../support/test-gateway.js";

interface Health {
  status: string;
  checks: { database: Record<string, unknown> };
}

/**
 * /health while the database answers reads (its ping) and refuses every usage write: a full disk
 * on SQLite, a read-only PostgreSQL (a demoted primary after a failover). Before, it said ok.
 */
describe("/health while usage rows cannot be written", () => {
  const closers: Array<() => Promise<void>> = [];
  afterEach(async () => {
    for (const close of closers.splice(0).reverse()) await close();
  });

  async function start(databaseUrl?: string): Promise<{ sluice: TestGateway; call: () => Promise<void> }> {
    const fake: FakeUpstream = await startFakeUpstream();
    closers.push(() => fake.close());
    const sluice = await startTestGateway({
      providerABaseUrl: `${fake.url}/a/v1`,
      metricsEnabled: true,
      ...(databaseUrl ? { databaseUrl } : {}),
    });
    closers.push(() => sluice.close());
    const project = await createTestProject(sluice.gateway);
    const call = async () => {
      const response = await proxiedChat(sluice.url, project);
      await response.arrayBuffer();
      expect(response.status).toBe(200);
    };
    return { sluice, call };
  }

  const health = async (sluice: TestGateway) => {
    const response = await fetch(`${sluice.url}/health`);
    return { code: response.status, body: (await response.json()) as Health };
  };
  const databaseGauge = async (sluice: TestGateway) =>
    (await (await fetch(`${sluice.url}/metrics`)).text()).match(
      /^sluice_degraded\{component="database"\} (\d)$/m,
    )?.[1];

  /** Calls (each leaves a usage row) until /health answers as `done` says, for up to 15 s. */
  async function until(sluice: TestGateway, call: () => Promise<void>, done: (body: Health) => boolean) {
    const deadline = Date.now() + 15_000;
    for (;;) {
      const answer = await health(sluice);
      if (done(answer.body) || Date.now() > deadline) return answer;
      await call();
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  async function expectDegradedThenOk(
    sluice: TestGateway,
    call: () => Promise<void>,
    restore: () => Promise<void>,
  ) {
    const failing = await until(sluice, call, (body) => body.checks.database.usageWrites !== undefined);
    expect(failing.code).toBe(200);
    expect(failing.body).toMatchObject({
      status: "degraded",
      checks: { database: { status: "degraded", latencyMs: expect.any(Number), usageWrites: "failing" } },
    });
    expect(await databaseGauge(sluice)).toBe("1");
    await restore();
    const recovered = await until(
      sluice,
      async () => {},
      (body) => body.status === "ok",
    );
    expect(recovered.code).toBe(200);
    expect(recovered.body.checks.database).toEqual({ status: "ok", latencyMs: expect.any(Number) });
    expect(await databaseGauge(sluice)).toBe("0");
  }

  it("says degraded, 200, on SQLite with a full disk (SQLITE_FULL), and ok once a row is written", async () => {
    const { sluice, call } = await start();
    await call();
    expect((await health(sluice)).body.status).toBe("ok");
    // The file may not grow: what a full disk does to SQLite (SQLITE_FULL); reads still answer.
    const sqlite = sluice.gateway.database.sqlite;
    if (!sqlite) throw new Error("not SQLite");
    sqlite.pragma(`max_page_count = ${sqlite.pragma("page_count", { simple: true })}`);
    await expectDegradedThenOk(sluice, call, async () => {
      sqlite.pragma("max_page_count = 1073741823");
    });
  }, 40_000);

  it.skipIf(!postgresAvailable)(
    "says degraded, 200, on a PostgreSQL that refuses writes as read-only (25006), and ok once it takes them",
    async () => {
      const schema = await createPostgresSchema();
      closers.push(() => schema.drop());
      const { sluice, call } = await start(schema.url);
      await call();
      expect((await health(sluice)).body.status).toBe("ok");
      const admin = new pg.Client({ connectionString: schema.url });
      await admin.connect();
      closers.push(() => admin.end());
      // A demoted primary answers reads and refuses writes with SQLSTATE 25006.
      await admin.query(`create function refuse_writes() returns trigger language plpgsql as $$
        begin raise exception 'cannot execute INSERT in a read-only transaction' using errcode = '25006'; end $$`);
      await admin.query(
        "create trigger read_only before insert on usage_records for each statement execute function refuse_writes()",
      );
      await expectDegradedThenOk(sluice, call, async () => {
        await admin.query("drop trigger read_only on usage_records");
      });
    },
    40_000,
  );
});
