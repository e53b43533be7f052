import { describe, expect, it } from "vitest";
import { postgresPlanStage, sqlitePlanStage } from "../../test/support/query-plans.js";
import { postgresAvailable } from "../../test/support/services.js";
import { type ProjectPage, projectListQuery } from "./project-repository.js";

/**
 * Each page of the admin project list reads its projects from where the page before ended, through
 * the index on creation time and id: without it, every page read and sorted the whole table, each
 * project's output schema (up to 64 KiB) included. The plans are read, not timed.
 */
const pages: [string, ProjectPage][] = [
  ["the first page", { limit: 101 }],
  ["a page after a cursor", { limit: 101, after: { createdAt: "2026-06-01T00:00:00.000Z", id: "p1" } }],
];

/** 2,000 projects, written by the database itself. */
const projects = 2000;
const columns = "id, name, provider, created_at, updated_at";

describe("project list plans on SQLite", () => {
  const stage = sqlitePlanStage(`
    with recursive n(i) as (select 1 union all select i + 1 from n where i < ${projects})
    insert into projects (${columns})
    select 'p' || i, 'P', 'provider-a', strftime('%Y-%m-%dT%H:%M:%fZ', 1780000000 + i, 'unixepoch'),
      strftime('%Y-%m-%dT%H:%M:%fZ', 1780000000 + i, 'unixepoch') from n;
    analyze`);

  it.each(pages)("reads %s through the index, in its order: no scan of the table, no sort", (_name, page) => {
    const plan = stage.plan(projectListQuery(stage.database().db, page).compile());
    expect(plan.join("\n")).toMatch(/^(SCAN|SEARCH) projects USING INDEX projects_created_at_id\b/);
    expect(plan.join("\n")).not.toMatch(/TEMP B-TREE|^SCAN projects$/m);
  });
});

describe.skipIf(!postgresAvailable)("project list plans on PostgreSQL", () => {
  const stage = postgresPlanStage(`
      insert into projects (${columns})
      select 'p' || i, 'P', 'provider-a',
        to_char(to_timestamp(1780000000 + i) at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        to_char(to_timestamp(1780000000 + i) at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
      from generate_series(1, ${projects}) i`);

  it.each(pages)(
    "reads %s through the index, in its order: no scan of the table, no sort",
    async (_name, page) => {
      const plan = await stage.plan(projectListQuery(stage.database().db, page).compile());
      expect(plan).toMatch(/Index Scan using projects_created_at_id\b/);
      expect(plan).not.toMatch(/Seq Scan|Sort/);
    },
  );
});
