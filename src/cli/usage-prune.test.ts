import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cli } from "../../test/support/cli-run.js";
import { usageRow } from "../../test/support/usage-row.js";
import { openDatabase } from "../storage/database.js";
import { createUsageRepository } from "../storage/usage-repository.js";
import { keptMonthsStart } from "../usage/usage-retention.js";

const day = 86_400_000;

describe("sluice usage prune", () => {
  const dataDir = mkdtempSync(join(tmpdir(), "sluice-prune-"));
  const saved = { ...process.env };

  /** The usage rows' ids the data dir's database holds, in order. */
  async function storedIds(): Promise<string[]> {
    const database = await openDatabase({ dataDir });
    try {
      const rows = await database.db
        .selectFrom("usage_records")
        .select("request_id")
        .orderBy("request_id")
        .execute();
      return rows.map((row) => row.request_id);
    } finally {
      await database.close();
    }
  }

  beforeAll(async () => {
    process.env.SLUICE_DATA_DIR = dataDir;
    process.env.SLUICE_MASTER_KEY = randomBytes(32).toString("base64");
    delete process.env.DATABASE_URL;
    expect(
      (await cli("projects", "create", "--id", "prune", "--name", "P", "--provider", "provider-a")).code,
    ).toBe(0);
  });
  afterAll(() => {
    process.env = saved;
    rmSync(dataDir, { recursive: true, force: true });
  });

  it("deletes the rows before the date given and prints how many as JSON, keeping the rest", async () => {
    const kept = keptMonthsStart(new Date());
    const database = await openDatabase({ dataDir });
    try {
      await createUsageRepository(database.db, database.sqlite).insertBatch([
        usageRow("a-old", { created_at: new Date(kept.getTime() - 100 * day).toISOString() }),
        usageRow("b-old", { created_at: new Date(kept.getTime() - 1).toISOString() }),
        usageRow("c-kept", { created_at: kept.toISOString() }),
        usageRow("d-kept", { created_at: new Date().toISOString() }),
      ]);
    } finally {
      await database.close();
    }
    const date = kept.toISOString().slice(0, 10);
    const result = await cli("usage", "prune", "--before", date);
    expect(result).toMatchObject({ code: 0, err: "" });
    expect(JSON.parse(result.out)).toEqual({ deleted: 2, before: kept.toISOString() });
    expect(await storedIds()).toEqual(["c-kept", "d-kept"]);
    expect(JSON.parse((await cli("usage", "prune", "--before", date)).out)).toEqual({
      deleted: 0,
      before: kept.toISOString(),
    });
  });

  it.each([
    ["today", () => new Date().toISOString()],
    [
      "a day into the previous month",
      () => new Date(keptMonthsStart(new Date()).getTime() + day).toISOString(),
    ],
  ])(
    "refuses a date inside the current or previous month (%s) as a usage error, deleting nothing",
    async (_, before) => {
      const idsBefore = await storedIds();
      const result = await cli("usage", "prune", "--before", before());
      expect(result.code).toBe(2);
      expect(result.err.split("\n")[0]).toMatch(
        /^error: --before: .* is inside the current or previous calendar month \(UTC\), which are always kept for spend caps and reports: give a date no later than \d{4}-\d{2}-01$/,
      );
      expect(await storedIds()).toEqual(idsBefore);
    },
  );

  it.each([
    [["usage", "prune"], /^error: Invalid usage prune: --before: /],
    [
      ["usage", "prune", "--before", "last year"],
      /^error: Invalid usage prune: --before: must be an ISO instant/,
    ],
    [
      ["usage", "prune", "--before", "2020-01-01", "extra"],
      /^error: unexpected argument "extra": usage prune takes no arguments/,
    ],
  ])("refuses %j as a usage error", async (argv, message) => {
    const result = await cli(...argv);
    expect(result.code).toBe(2);
    expect(result.err.split("\n")[0]).toMatch(message);
  });

  it("still reports on a project named prune when given the report's flags", async () => {
    const result = await cli("usage", "prune", "--group-by", "model");
    expect(result).toMatchObject({ code: 0, err: "" });
    expect(JSON.parse(result.out)).toMatchObject({ groupBy: "model", rows: [] });
  });
});
