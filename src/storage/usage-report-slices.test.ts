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
    });
    expect(report.map((row) => [row.group, row.requests])).toEqual([["proxy", count]]);
  });
});
