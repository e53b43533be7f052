import pg from "pg";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { createPostgresSchema, postgresAvailable } from "../../test/support/services.js";
import { storageEngines } from "../../test/support/storage-engines.js";
import { usageRow } from "../../test/support/usage-row.js";
import { type OpenDatabase, openDatabase } from "../storage/database.js";
import { sql } from "../storage/kysely.js";
import { createUsageRepository, type UsageRepository } from "../storage/usage-repository.js";
import { keptMonthsStart, pruneUsage, retentionCutoff } from "./usage-retention.js";

/** The clock of these tests: the last moment of a 31-day month after a 31-day month. */
const now = new Date("2026-08-31T23:59:59.999Z");
/** Rows of three projects: 7 older than 62 days (before 2026-06-30T23:59:59.999Z), and rows on either side of each edge. */
const rows = [
  ["old-1", "p1", "2026-01-15T10:00:00.000Z"],
  ["old-2", "p2", "2026-03-01T00:00:00.000Z"],
  ["old-3", "p3", "2026-05-31T23:59:59.999Z"],
  ["old-4", "p1", "2026-06-01T00:00:00.000Z"],
  ["old-5", "p2", "2026-06-15T12:00:00.000Z"],
  ["old-6", "p3", "2026-06-29T00:00:00.000Z"],
  ["old-7", "p1", "2026-06-30T23:59:59.998Z"],
  // The previous month (July) and the current one (August): always kept.
  ["kept-1", "p2", "2026-07-01T00:00:00.000Z"],
  ["kept-2", "p3", "2026-07-01T00:00:00.001Z"],
  ["kept-3", "p1", "2026-07-20T00:00:00.000Z"],
  ["kept-4", "p2", "2026-08-01T00:00:00.000Z"],
  ["kept-5", "p3", "2026-08-31T23:59:59.999Z"],
] as const;

/** The repository with each batch's size and answer recorded. */
function counted(repository: UsageRepository) {
  const batches: { limit: number; deleted: number }[] = [];
  return {
    batches,
    deleteBefore: async (before: string, limit: number) => {
      const deleted = await repository.deleteBefore(before, limit);
      batches.push({ limit, deleted });
      return deleted;
    },
  };
}

async function requestIds(database: OpenDatabase): Promise<string[]> {
  const found = await database.db
    .selectFrom("usage_records")
    .select("request_id")
    .orderBy("request_id")
    .execute();
  return found.map((row) => row.request_id);
}

for (const engine of storageEngines) {
  describe.skipIf(!engine.available)(`usage retention on ${engine.name}`, () => {
    let database: OpenDatabase;
    let cleanup: () => Promise<void>;
    let repository: UsageRepository;

    beforeAll(async () => {
      ({ database, cleanup } = await engine.open());
      repository = createUsageRepository(database.db, database.sqlite, database.runReport);
    });
    afterAll(async () => {
      await database.close();
      await cleanup();
    });
    beforeEach(async () => {
      await database.db.deleteFrom("usage_records").execute();
      await repository.insertBatch(
        rows.map(([id, project, createdAt]) => usageRow(id, { project_id: project, created_at: createdAt })),
      );
    });

    it("deletes only the rows older than the retention, a batch of the size given per statement", async () => {
      const cutoff = retentionCutoff(now, 62).toISOString();
      const watched = counted(repository);
      expect(await pruneUsage(watched, cutoff, { batchSize: 2 })).toBe(7);
      // 7 rows, 2 a statement: three full batches and the one that found the last row.
      expect(watched.batches).toEqual([
        { limit: 2, deleted: 2 },
        { limit: 2, deleted: 2 },
        { limit: 2, deleted: 2 },
        { limit: 2, deleted: 1 },
      ]);
      expect(await requestIds(database)).toEqual(["kept-1", "kept-2", "kept-3", "kept-4", "kept-5"]);
      // Run again: nothing is left to delete.
      expect(await pruneUsage(repository, cutoff, { batchSize: 2 })).toBe(0);
    });

    it("never deletes a row of the current or previous month, whatever the retention asked", async () => {
      expect(await pruneUsage(repository, retentionCutoff(now, 1).toISOString(), { batchSize: 3 })).toBe(7);
      expect(await requestIds(database)).toEqual(["kept-1", "kept-2", "kept-3", "kept-4", "kept-5"]);
      expect(keptMonthsStart(now).toISOString()).toBe("2026-07-01T00:00:00.000Z");
    });

    it("deletes the oldest rows first, so a prune stopped part-way leaves no gap in what it kept", async () => {
      await pruneUsage(repository, retentionCutoff(now, 62).toISOString(), {
        batchSize: 3,
        stopped: () => true,
      });
      expect(await requestIds(database)).toEqual([
        "kept-1",
        "kept-2",
        "kept-3",
        "kept-4",
        "kept-5",
        "old-4",
        "old-5",
        "old-6",
        "old-7",
      ]);
    });
  });
}

describe.skipIf(!postgresAvailable)("usage retention on PostgreSQL with several instances", () => {
  let schema: Awaited<ReturnType<typeof createPostgresSchema>>;
  let databases: OpenDatabase[];
  beforeAll(async () => {
    schema = await createPostgresSchema();
    databases = [
      await openDatabase({ databaseUrl: schema.url, dataDir: "unused" }),
      await openDatabase({ databaseUrl: schema.url, dataDir: "unused" }),
    ];
  });
  afterAll(async () => {
    for (const database of databases ?? []) await database.close();
    await schema?.drop();
  });

  it("prunes past rows another session holds locked instead of waiting for it, and deletes them once free", async () => {
    const [first] = databases;
    if (!first) throw new Error("no database");
    const repository = createUsageRepository(first.db);
    await repository.insertBatch(
      Array.from({ length: 20 }, (_, index) =>
        usageRow(`old-${String(index).padStart(2, "0")}`, {
          created_at: `2026-01-01T00:00:${String(index).padStart(2, "0")}.000Z`,
        }),
      ),
    );
    // Another instance's batch, under way: its transaction holds the five oldest rows.
    const other = new pg.Client({ connectionString: schema.url });
    await other.connect();
    try {
      await other.query("begin");
      await other.query(
        "select request_id from usage_records where created_at < '2026-02-01' order by created_at limit 5 for update",
      );
      expect(await pruneUsage(repository, "2026-02-01T00:00:00.000Z", { batchSize: 4 })).toBe(15);
      await other.query("rollback");
    } finally {
      await other.end();
    }
    expect(await pruneUsage(repository, "2026-02-01T00:00:00.000Z", { batchSize: 4 })).toBe(5);
  });

  it("lets two instances prune at once: together they delete every old row, and only those", async () => {
    const [first, second] = databases;
    if (!first || !second) throw new Error("no database");
    const repositories = [first, second].map((database) => createUsageRepository(database.db));
    const [one] = repositories;
    if (!one) throw new Error("no repository");
    await one.insertBatch([
      ...Array.from({ length: 200 }, (_, index) =>
        usageRow(`race-${index}`, {
          created_at: new Date(Date.UTC(2026, 0, 1) + index * 1000).toISOString(),
        }),
      ),
      usageRow("race-kept", { created_at: "2026-03-01T00:00:00.000Z" }),
    ]);
    const deleted = await Promise.all(
      repositories.map((each) => pruneUsage(each, "2026-02-01T00:00:00.000Z", { batchSize: 7 })),
    );
    expect(deleted.reduce((sum, each) => sum + each, 0)).toBe(200);
    const left = await sql<{ id: string }>`select request_id as id from usage_records`.execute(first.db);
    expect(left.rows.map((row) => row.id)).toEqual(["race-kept"]);
  });
});
