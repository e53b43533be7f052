import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { createPostgresSchema, postgresAvailable } from "../../test/support/services.js";
import { adminToken, startTestGateway } from "../../test/support/test-gateway.js";
import { usageRow } from "../../test/support/usage-row.js";
import { createProjectAdmin, type ProjectAdmin } from "../admin/project-admin.js";
import { createSecretBox } from "../auth/secret-box.js";
import { type OpenDatabase, openDatabase } from "./database.js";
import { createKeyRepository } from "./key-repository.js";
import { createProjectRepository } from "./project-repository.js";
import { createUsageRepository } from "./usage-repository.js";

describe.skipIf(!postgresAvailable)("usage reports on PostgreSQL", () => {
  let schema: Awaited<ReturnType<typeof createPostgresSchema>>;
  let database: OpenDatabase;
  let admin: ProjectAdmin;
  /** Another session holding the usage table, so a report waits for as long as the test says. */
  let blocker: pg.Client;
  let released: Promise<unknown>;

  beforeEach(async () => {
    schema = await createPostgresSchema();
    const adminOver = (opened: OpenDatabase) =>
      createProjectAdmin({
        projects: createProjectRepository(opened.db),
        keys: createKeyRepository(opened.db),
        usage: createUsageRepository(opened.db, undefined, opened.runReport),
        secretBox: createSecretBox(randomBytes(32)),
        // The project is created before its rows (2026-11-02), as it always is: a report reads a
        // project's rows from its creation on.
        now: () => new Date("2026-11-01T00:00:00.000Z"),
        onProjectChanged: () => {},
        testModeAllowed: true,
      });
    // The project and its rows are written with the default limits: under load the short query
    // timeout below failed the set-up itself (a connection opened in more than 200 ms).
    const setUp = await openDatabase({ databaseUrl: schema.url, dataDir: "unused" });
    try {
      await adminOver(setUp).createProject({ id: "p1", name: "Reported", provider: "provider-a" });
      await createUsageRepository(setUp.db).insertBatch([usageRow("r1"), usageRow("r2")]);
    } finally {
      await setUp.close();
    }
    database = await openDatabase({
      databaseUrl: schema.url,
      dataDir: "unused",
      queryTimeoutMs: 400,
      reportTimeoutMs: 1500,
    });
    admin = adminOver(database);
    blocker = new pg.Client({ connectionString: schema.url });
    await blocker.connect();
    released = Promise.resolve();
  });
  afterEach(async () => {
    await released;
    await blocker.end();
    await database.close();
    await schema.drop();
  });

  /** Holds the usage table against reads for `ms`, as a long report or a table rewrite would. */
  async function holdUsageTable(ms: number): Promise<void> {
    const client = blocker;
    await client.query("begin");
    await client.query("lock table usage_records in access exclusive mode");
    released = new Promise((resolve) => setTimeout(resolve, ms)).then(() => client.query("commit"));
  }

  it("gives a report that takes longer than the query timeout, within the report timeout", async () => {
    await holdUsageTable(800);
    const started = Date.now();
    const report = await admin.usageReport("p1", { from: "2026-11-01", to: "2026-11-30" });
    expect(Date.now() - started).toBeGreaterThanOrEqual(700);
    expect(report.rows.map((row) => [row.group, row.requests])).toEqual([["2026-11-02", 2]]);
  });

  it("answers 503 with the reason when the database cancels a report at the report timeout, leaving nothing running", async () => {
    await holdUsageTable(2500);
    const error = await admin
      .usageReport("p1", { from: "2026-11-01", to: "2026-11-30" })
      .catch((caught: unknown) => caught);
    expect(error).toMatchObject({
      code: "SERVICE_UNAVAILABLE",
      status: 503,
      message:
        "The usage report took too long and the database cancelled it; ask for a shorter range (from, to) or retry later",
      headers: { "retry-after": "30" },
    });
    // The server stopped the report itself: no session is still waiting to read the table. Waits to
    // read it, not any wait: the database is shared, and a database-wide ANALYZE or VACUUM from
    // elsewhere waits for this table too (for its ShareUpdateExclusiveLock).
    const { rows } = await blocker.query<{ waiting: number }>(
      "select count(*)::int as waiting from pg_locks where relation = 'usage_records'::regclass and mode = 'AccessShareLock' and not granted",
    );
    expect(rows[0]?.waiting).toBe(0);
    await released;
    // The report's connection went back to the pool without the report's limit.
    expect(await database.db.selectFrom("usage_records").select("request_id").execute()).toHaveLength(2);
  });
});

describe.skipIf(!postgresAvailable)("the gateway's PostgreSQL time limits", () => {
  it("come from its configuration: the query timeout for requests, the report timeout for usage reports", async () => {
    const schema = await createPostgresSchema();
    const sluice = await startTestGateway({
      databaseUrl: schema.url,
      databaseQueryTimeoutMs: 300,
      usageReportTimeoutMs: 1500,
    });
    const blocker = new pg.Client({ connectionString: schema.url });
    await blocker.connect();
    /** Holds the table locked for `ms`, once the lock is taken; resolves to the moment it is let go. */
    const hold = async (table: string, ms: number) => {
      await blocker.query("begin");
      await blocker.query(`lock table ${table} in access exclusive mode`);
      return {
        released: new Promise((resolve) => setTimeout(resolve, ms)).then(() => blocker.query("commit")),
      };
    };
    const get = (path: string) =>
      fetch(`${sluice.url}/admin/v1/projects/p1${path}`, {
        headers: { authorization: `Bearer ${adminToken}` },
      });
    try {
      await sluice.gateway.admin.createProject({ id: "p1", name: "Timed", provider: "provider-a" });
      // Each lock is taken before the request is sent: under load the request used to reach the
      // table first and find it free.
      let held = await hold("usage_records", 800);
      expect((await get("/usage")).status).toBe(200);
      await held.released;
      held = await hold("projects", 800);
      const project = await get("");
      expect(project.status).toBe(503);
      expect(await project.json()).toMatchObject({
        error: { message: "The gateway's database is unavailable; retry shortly" },
      });
      await held.released;
      held = await hold("usage_records", 2500);
      const report = await get("/usage");
      expect(report.status).toBe(503);
      expect(await report.json()).toMatchObject({
        error: { message: expect.stringMatching(/^The usage report took too long/) },
      });
      await held.released;
    } finally {
      await blocker.end();
      await sluice.close();
      await schema.drop();
    }
  }, 15_000);
});
