import { describe, expect, it } from "vitest";
import { postgresPlanStage, sqlitePlanStage } from "../../test/support/query-plans.js";
import { postgresAvailable } from "../../test/support/services.js";
import type { Kysely } from "./kysely.js";
import type { Database } from "./schema.js";
import {
  createUsageRepository,
  projectSpendWalkQuery,
  pruneQuery,
  reportQuery,
  sliceEndQuery,
  spendQuery,
  spendSliceQuery,
  spendTopQuery,
  spendWalkQuery,
} from "./usage-repository.js";

/**
 * Each query the code runs on the usage table finds its rows through an index: the table grows by
 * a row a request (without bound unless SLUICE_USAGE_RETENTION_DAYS is set), so a query that scans
 * it whole grows as slow as the table is large. The plans are read, not timed.
 */

/** The queries, compiled as the code runs them, with the index each must use. */
const queries = (db: Kysely<Database>, postgres: boolean) => [
  {
    name: "the spend guard's month-to-date read (sum and largest row)",
    compiled: spendQuery(db, "p7", "2026-11-01T00:00:00.000Z", postgres).compile(),
    index: "usage_records_project_time",
  },
  ...(["day", "model", "endpoint"] as const).map((groupBy) => ({
    name: `the usage report by ${groupBy}`,
    compiled: reportQuery(
      db,
      {
        projectId: "p7",
        from: "2026-10-01T00:00:00.000Z",
        to: "2026-11-01T00:00:00.000Z",
        groupBy,
        limit: 1000,
        after: "a",
      },
      postgres,
    ).compile(),
    index: "usage_records_project_time",
  })),
  // Read from a project's creation: the calls begun before it (a deleted project's) left out.
  {
    name: "the spend guard's read from the project's creation",
    compiled: spendQuery(db, "p7", "2026-11-10T12:00:00.000Z", postgres, true).compile(),
    index: "usage_records_project_time",
  },
  {
    name: "the usage report from the project's creation",
    compiled: reportQuery(
      db,
      {
        projectId: "p7",
        from: "2026-10-10T12:00:00.000Z",
        to: "2026-11-01T00:00:00.000Z",
        begunFrom: "2026-10-10T12:00:00.000Z",
        groupBy: "model",
        limit: 1000,
      },
      postgres,
    ).compile(),
    index: "usage_records_project_time",
  },
  {
    name: "the usage report from after the project's creation",
    compiled: reportQuery(
      db,
      {
        projectId: "p7",
        from: "2026-10-10T12:00:00.000Z",
        to: "2026-11-01T00:00:00.000Z",
        begunFrom: "2026-10-01T12:00:00.000Z",
        groupBy: "model",
        limit: 1000,
      },
      postgres,
    ).compile(),
    index: "usage_records_project_time",
  },
  {
    name: "where a slice of a report ends (SQLite)",
    compiled: sliceEndQuery(db, "p7", "2026-10-01T00:00:00.000Z", "2026-11-01T00:00:00.000Z").compile(),
    index: "usage_records_project_time",
  },
  {
    name: "the retention's batch of deletes",
    compiled: pruneQuery(db, "2026-07-01T00:00:00.000Z", 1000, postgres).compile(),
    index: "usage_records_created_at",
  },
];

/** 3,000 rows of 30 projects over six months, written by the database itself. */
const rowCount = 3000;
const columns =
  "request_id, project_id, endpoint, status, cost_usd, latency_ms, outcome, created_at, requests";

describe("usage query plans on SQLite", () => {
  const stage = sqlitePlanStage(`
    with recursive n(i) as (select 1 union all select i + 1 from n where i < ${rowCount})
    insert into usage_records (${columns})
    select 'r' || i, 'p' || (i % 30), 'proxy', 200, 0.001, 10, 'ok',
      strftime('%Y-%m-%dT%H:%M:%fZ', 1795996800 - i * 5184.0, 'unixepoch'), 1 from n`);
  const planOf = stage.plan;

  for (const index of [0, 1, 2, 3, 4, 5, 6, 7, 8]) {
    it(`finds the rows of query ${index + 1} through its index, never scanning the table`, () => {
      const query = queries(stage.database().db, false)[index];
      if (!query) throw new Error("no such query");
      const plan = planOf(query.compiled);
      expect(
        plan.filter((line) => /^SCAN usage_records\b/.test(line)),
        query.name,
      ).toEqual([]);
      expect(plan.join("\n"), query.name).toMatch(new RegExp(`USING (COVERING )?INDEX ${query.index}\\b`));
    });
  }

  const from = "2026-11-01T00:00:00.000Z";

  // A project's first read of the month on SQLite, in slices: each found in the project's rows,
  // never the table walked by rowid (the slice's bound on it).
  it("reads the spend guard's first read of the month, slice by slice, through the index on project and time", () => {
    for (const plan of [
      planOf(sliceEndQuery(stage.database().db, "p7", from, undefined).compile()),
      planOf(sliceEndQuery(stage.database().db, "p7", from, undefined, true).compile()),
      planOf(spendSliceQuery("p7", from, "2026-11-05T00:00:00.000Z", 2500).compile(stage.database().db)),
      planOf(spendSliceQuery("p7", from, undefined, 2500).compile(stage.database().db)),
      planOf(spendSliceQuery("p7", from, undefined, 2500, from).compile(stage.database().db)),
    ]) {
      expect(plan.filter((line) => /^SCAN usage_records\b/.test(line))).toEqual([]);
      expect(plan.join("\n")).toMatch(/USING (COVERING )?INDEX usage_records_project_time\b/);
    }
  });

  // The rows written since the last walk, of every project, by rowid: not a project's month again.
  // Each row is looked up among the figures carried by its key, however many there are.
  it("walks the rows written since the last walk by rowid, through no index", async () => {
    // The first read makes the connection's table of figures carried, which the walk joins.
    await createUsageRepository(stage.database().db, stage.database().sqlite).spendSince("p7", from);
    const scans = (plan: string[]) =>
      plan.filter((line) => /^SCAN\b/.test(line) && line !== "SCAN CONSTANT ROW");
    const walk = planOf(spendWalkQuery(1, 2500, 7500).compile(stage.database().db));
    expect(scans(walk)).toEqual([]);
    expect(walk).toContain("SEARCH usage USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)");
    expect(walk).toContain("SEARCH carried USING PRIMARY KEY (owner=? AND project_id=?)");
    expect(walk.join("\n")).not.toMatch(/ INDEX /);
    const project = planOf(projectSpendWalkQuery("p7", from, 2500, 7500).compile(stage.database().db));
    expect(project).toEqual(["SEARCH usage_records USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)"]);
    const fromCreation = projectSpendWalkQuery("p7", from, 2500, 7500, true);
    expect(planOf(fromCreation.compile(stage.database().db))).toEqual(project);
    expect(scans(planOf(spendTopQuery(2500).compile(stage.database().db)))).toEqual([]);
  });
});

describe.skipIf(!postgresAvailable)("usage query plans on PostgreSQL", () => {
  const stage = postgresPlanStage(`
      insert into usage_records (${columns})
      select 'r' || i, 'p' || (i % 30), 'proxy', 200, 0.001, 10, 'ok',
        to_char(to_timestamp(1795996800 - i * 5184.0) at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), 1
      from generate_series(1, ${rowCount}) i`);

  for (const index of [0, 1, 2, 3, 4, 5, 6, 7, 8]) {
    it(`finds the rows of query ${index + 1} through its index, never scanning the table`, async () => {
      const query = queries(stage.database().db, true)[index];
      if (!query) throw new Error("no such query");
      const plan = await stage.plan(query.compiled);
      expect(plan, query.name).not.toMatch(/Seq Scan on usage_records/);
      expect(plan, query.name).toMatch(new RegExp(`Index (Only )?Scan (using|on) ${query.index}\\b`));
    });
  }
});
