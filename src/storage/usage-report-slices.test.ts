import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { usageRow } from "../../test/support/usage-row.js";
import { type OpenDatabase, openDatabase } from "./database.js";
import { createUsageRepository, reportSliceRows, type UsageRecord } from "./usage-repository.js";

/**
 * SQLite runs a statement on the event loop: a report that aggregated all of a project's rows in
 * one statement held every proxied call for as long as it took (measured at 900,000 rows: 1.0 to
 * 1.3 s, any grouping). It is read in slices of at most `reportSliceRows` rows of the project, with
 * the event loop given back between them, and the slices add up to the rows' sums.
 */

/** Turns of the event loop (setImmediate callbacks run) while `work` runs. */
async function turnsDuring<T>(work: () => Promise<T>): Promise<{ result: T; turns: number }> {
  let turns = 0;
  let running = true;
  const turn = () => {
    if (!running) return;
    turns++;
    setImmediate(turn);
  };
  setImmediate(turn);
  const result = await work();
  running = false;
  return { result, turns };
}

describe("usage reports on SQLite", () => {
  let database: OpenDatabase;
  beforeAll(async () => {
    database = await openDatabase({ dataDir: "unused", sqliteFile: ":memory:" });
  });
  afterAll(() => database.close());

  it("gives the event loop back at least once per slice of rows, and sums the slices", async () => {
    const repository = createUsageRepository(database.db, database.sqlite, database.runReport);
    const count = Math.round(reportSliceRows * 4.5);
    const start = Date.parse("2026-11-01T00:00:00.000Z");
    const rows: UsageRecord[] = Array.from({ length: count }, (_, index) =>
      usageRow(`slice-${index}`, {
        project_id: "busy",
        // Three days of rows, a few milliseconds apart, several at each instant.
        created_at: new Date(start + Math.floor((index / count) * 3 * 86_400_000)).toISOString(),
        model: index % 3 === 0 ? null : `m-${index % 3}`,
        cost_usd: index % 7 === 0 ? null : 0.000000001 * (index % 11),
        input_tokens: index % 5 === 0 ? null : index,
        requests: index % 13 === 0 ? 3 : 1,
        outcome: index % 13 === 0 ? "error" : "ok",
      }),
    );
    await repository.insertBatch(rows);
    await repository.insertBatch([usageRow("elsewhere", { project_id: "quiet" })]);
    const query = {
      projectId: "busy",
      from: "2026-11-01T00:00:00.000Z",
      to: "2026-11-04T00:00:00.000Z",
      groupBy: "day" as const,
      limit: 10,
    };
    const { result, turns } = await turnsDuring(() => repository.report(query));
    expect(turns).toBeGreaterThanOrEqual(Math.floor(count / reportSliceRows));
    const expected = new Map<string, { requests: number; inputTokens: number; nanos: number }>();
    for (const row of rows) {
      const day = row.created_at.slice(0, 10);
      const sums = expected.get(day) ?? { requests: 0, inputTokens: 0, nanos: 0 };
      sums.requests += row.requests;
      sums.inputTokens += row.input_tokens ?? 0;
      sums.nanos += row.cost_usd === null ? 0 : Math.round(row.cost_usd * 1e9);
      expected.set(day, sums);
    }
    expect(result.map((row) => [row.group, row.requests, row.inputTokens, row.costUsd])).toEqual(
      [...expected].map(([day, sums]) => [day, sums.requests, sums.inputTokens, sums.nanos / 1e9]),
    );
  });

  // A report answers its first `limit` groups; the slices' sums are kept to the groups that can be
  // among them. Here each slice brings groups before all of the slices' before it (names counting
  // down as time goes on) and one group is in every slice: the pages, read on with `after`, must
  // still hold every group once, each with all of its rows.
  it("pages through many more groups than a page, each group summed whole across the slices", async () => {
    const repository = createUsageRepository(database.db, database.sqlite, database.runReport);
    const count = Math.round(reportSliceRows * 4.5);
    const start = Date.parse("2026-11-01T00:00:00.000Z");
    const modelOf = (index: number) =>
      index % 9 === 0
        ? "a-everywhere"
        : index % 11 === 0
          ? null
          : `m-${String(count - index)
              .padStart(6, "0")
              .slice(0, 4)}`;
    const rows: UsageRecord[] = Array.from({ length: count }, (_, index) =>
      usageRow(`paged-${index}`, {
        project_id: "many",
        created_at: new Date(start + index * 7).toISOString(),
        model: modelOf(index),
        cost_usd: 0.000000001 * (index % 13),
      }),
    );
    await repository.insertBatch(rows);
    const expected = new Map<string | null, { requests: number; nanos: number }>();
    for (const row of rows) {
      const sums = expected.get(row.model) ?? { requests: 0, nanos: 0 };
      sums.requests += row.requests;
      sums.nanos += Math.round((row.cost_usd ?? 0) * 1e9);
      expected.set(row.model, sums);
    }
    const window = { projectId: "many", from: "2026-11-01T00:00:00.000Z", to: "2026-11-04T00:00:00.000Z" };
    const limit = 7;
    const read: [string | null, number, number | null][] = [];
    let after: string | undefined;
    for (let page = 0; page < 100; page++) {
      const rowsOfPage = await repository.report({ ...window, groupBy: "model", limit, after });
      expect(rowsOfPage.length).toBeLessThanOrEqual(limit);
      read.push(
        ...rowsOfPage.map((row): [string | null, number, number | null] => [
          row.group,
          row.requests,
          row.costUsd,
        ]),
      );
      const last = rowsOfPage[rowsOfPage.length - 1];
      if (rowsOfPage.length < limit || last === undefined || last.group === null) break;
      after = last.group;
    }
    const groups = [...expected.keys()].sort((left, right) =>
      left === null ? 1 : right === null ? -1 : left < right ? -1 : 1,
    );
    expect(groups.length).toBeGreaterThan(limit * 10);
    expect(read).toEqual(
      groups.map((group) => {
        const sums = expected.get(group) as { requests: number; nanos: number };
        return [group, sums.requests, sums.nanos / 1e9];
      }),
    );
  });

  it("reads more rows than a slice that share one instant, once each", async () => {
    const repository = createUsageRepository(database.db, database.sqlite, database.runReport);
    const count = reportSliceRows * 2 + 10;
    const rows = Array.from({ length: count }, (_, index) =>
      usageRow(`same-${index}`, {
        project_id: "burst",
        created_at: index < count - 10 ? "2026-11-02T10:00:00.000Z" : "2026-11-02T10:00:00.001Z",
      }),
    );
    await repository.insertBatch(rows);
    const report = await repository.report({
      projectId: "burst",
      from: "2026-11-02T00:00:00.000Z",
      to: "2026-11-03T00:00:00.000Z",
      groupBy: "endpoint",
      limit: 10,
    });
    expect(report.map((row) => [row.group, row.requests])).toEqual([["proxy", count]]);
  });
});
