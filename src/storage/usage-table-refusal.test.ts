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

/** Rows of the mixed queue (fewer than a batch: a refused batch is written one row a statement). */
const mixedRows = 40;

/**
 * Records rows of a project the database refuses (`blocked`) between rows of one it takes, the
 * first row a blocked one, and flushes: `refuseSome` refuses only the blocked project's rows, with
 * a class-42 SQLSTATE (as the whole table's refusals are), so the rows it takes must be written and
 * only the blocked ones dropped, each counted as refused; then a queue of blocked rows alone.
 */
async function writesTheRowsItTakes(database: OpenDatabase, refuseSome: () => Promise<void>): Promise<void> {
  const usage = createUsageRepository(database.db, database.sqlite, database.runReport);
  const { recorder, seen } = countingRecorder(usage, 10_000);
  try {
    await refuseSome();
    const ids = Array.from({ length: mixedRows }, (_, index) => `row-${index}`);
    const blocked = (id: string) => Number(id.slice(4)) % 2 === 0;
    for (const id of ids) recorder.record(usageRow(id, blocked(id) ? { project_id: "blocked" } : {}));
    // Before, the batch stayed queued and was retried until the deadline: the rows it takes never written.
    await recorder.flush(10_000);
    expect(recorder.depth()).toBe(0);
    expect(recorder.writesFailing()).toBe(false);
    const stored = await database.db.selectFrom("usage_records").select("request_id").execute();
    expect(stored.map((each) => each.request_id).sort()).toEqual(ids.filter((id) => !blocked(id)).sort());
    expect(seen.refused).toHaveLength(mixedRows / 2);
    expect(seen.refused.every((error) => (error as { code?: unknown }).code === "42501")).toBe(true);
    // A queue of refused rows alone is not taken for a refusal of every row: the table took rows.
    for (const id of ["late-0", "late-1"]) recorder.record(usageRow(id, { project_id: "blocked" }));
    await recorder.flush(10_000);
    expect(recorder.depth()).toBe(0);
    expect(seen.refused).toHaveLength(mixedRows / 2 + 2);
    expect(recorder.writesFailing()).toBe(false);
    expect(await usage.count()).toBe(mixedRows / 2);
  } finally {
    await recorder.stop();
  }
}

describe.skipIf(!postgresAvailable)("usage rows PostgreSQL refuses some of with a class-42 SQLSTATE", () => {
  it("writes the rows a trigger takes when it raises 42501 for one project's rows, dropping only those", async () => {
    const { database, admin, close } = await openAsOwnRole();
    try {
      await writesTheRowsItTakes(database, async () => {
        await admin.query(`create function refuse_blocked() returns trigger language plpgsql as $$
          begin
            if new.project_id = 'blocked' then
              raise exception 'project % may not write usage', new.project_id using errcode = '42501';
            end if;
            return new;
          end $$`);
        await admin.query(
          "create trigger refuse_blocked before insert on usage_records for each row execute function refuse_blocked()",
        );
      });
    } finally {
      await close();
    }
  }, 30_000);

  it("writes the rows a row-level security policy's WITH CHECK takes, dropping only those it refuses", async () => {
    const { database, admin, close } = await openAsOwnRole();
    try {
      await writesTheRowsItTakes(database, async () => {
        await admin.query("alter table usage_records enable row level security");
        // The gateway's role owns the table: only a forced policy applies to it.
        await admin.query("alter table usage_records force row level security");
        await admin.query("create policy usage_read on usage_records for select using (true)");
        await admin.query(
          "create policy usage_write on usage_records for insert with check (project_id <> 'blocked')",
        );
      });
    } finally {
      await close();
    }
  }, 30_000);
});
