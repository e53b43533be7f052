import { sql } from "kysely";
import { describe, expect, it, vi } from "vitest";
import { countingRecorder, openAsOwnRole } from "../../test/support/counting-recorder.js";
import { postgresAvailable } from "../../test/support/services.js";
import { storageEngines } from "../../test/support/storage-engines.js";
import { usageRow } from "../../test/support/usage-row.js";
import type { OpenDatabase } from "./database.js";
import { createUsageRepository } from "./usage-repository.js";

/** More than one batch (200 rows). */
const rowCount = 250;

/**
 * Records a row, `refuse`s the table, records `rowCount` more and flushes: the database refuses
 * every row whatever it holds, so they must all stay queued, the recorder saying its writes fail,
 * none refused (dropped) as a bad row is, until `restore` lets them all be written, each once.
 */
async function keepsRowsWhileRefused(
  database: OpenDatabase,
  refuse: () => Promise<void>,
  restore: () => Promise<void>,
): Promise<void> {
  const usage = createUsageRepository(database.db, database.sqlite, database.runReport);
  const { recorder, seen } = countingRecorder(usage, 10_000);
  try {
    recorder.record(usageRow("before"));
    await recorder.flush(2000);
    await refuse();
    const ids = Array.from({ length: rowCount }, (_, index) => `refused-${index}`);
    for (const id of ids) recorder.record(usageRow(id));
    seen.writes = 0;
    const flushed = recorder.flush(10_000);
    await vi.waitFor(() => expect(seen.writes).toBeGreaterThanOrEqual(3), { timeout: 5000, interval: 5 });
    // Before, the batch was written row by row, and each row refused and dropped.
    expect(seen.refused).toEqual([]);
    expect(recorder.writesFailing()).toBe(true);
    expect(recorder.depth()).toBe(rowCount);
    expect(seen.failures.length).toBeGreaterThan(0);
    await restore();
    await flushed;
    expect(seen.refused).toEqual([]);
    expect(recorder.depth()).toBe(0);
    expect(recorder.writesFailing()).toBe(false);
    const stored = await database.db.selectFrom("usage_records").select("request_id").execute();
    expect(stored.map((each) => each.request_id).sort()).toEqual(["before", ...ids].sort());
    expect(await usage.count("p1")).toBe(rowCount + 1);
  } finally {
    await recorder.stop();
  }
}

describe.each(storageEngines)("usage rows the $name table refuses whatever they hold", (engine) => {
  /** A statement on the engine's own connection: SQLite's handle, or a PostgreSQL client of the schema. */
  async function onTable(database: OpenDatabase, statement: string): Promise<void> {
    if (database.sqlite) {
      database.sqlite.exec(statement);
      return;
    }
    await sql.raw(statement).execute(database.db);
  }

  it.skipIf(!engine.available)(
    "are kept queued while the table is missing (42P01, SQLITE_ERROR), and written once it is back",
    async () => {
      const { database, cleanup } = await engine.open();
      try {
        await keepsRowsWhileRefused(
          database,
          () => onTable(database, "alter table usage_records rename to usage_records_away"),
          () => onTable(database, "alter table usage_records_away rename to usage_records"),
        );
      } finally {
        await database.close();
        await cleanup();
      }
    },
    15_000,
  );

  it.skipIf(!engine.available)(
    "are kept queued while a column they fill is missing (a build against another schema: 42703, SQLITE_ERROR)",
    async () => {
      const { database, cleanup } = await engine.open();
      try {
        await keepsRowsWhileRefused(
          database,
          () => onTable(database, "alter table usage_records rename column requests to requests_away"),
          () => onTable(database, "alter table usage_records rename column requests_away to requests"),
        );
      } finally {
        await database.close();
        await cleanup();
      }
    },
    15_000,
  );
});

describe.skipIf(!postgresAvailable)("usage rows PostgreSQL refuses the gateway's role", () => {
  it("are kept queued while the role's INSERT on usage_records is revoked (42501), and written once granted", async () => {
    const { database, admin, role, close } = await openAsOwnRole();
    try {
      await keepsRowsWhileRefused(
        database,
        () => admin.query(`revoke insert on usage_records from ${role}`).then(() => {}),
        () => admin.query(`grant insert on usage_records to ${role}`).then(() => {}),
      );
    } finally {
      await close();
    }
  }, 15_000);
});
