import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import BetterSqlite3 from "better-sqlite3";
import { sql } from "kysely";
import pg from "pg";
import { describe, expect, it } from "vitest";
import { createPostgresSchema, postgresAvailable } from "../../test/support/services.js";
import { type DatabaseOptions, type OpenDatabase, openDatabase, sqliteFileIn } from "./database.js";
import { createProjectRepository } from "./project-repository.js";

/** Where each table of the open database's connection lives, and the migrations it recorded. */
async function layout(database: OpenDatabase) {
  const { rows } = await sql<{ schema: string; tables: string[] }>`
    select current_schema() as schema,
      array(select table_name::text from information_schema.tables
            where table_schema = current_schema() order by table_name) as tables`.execute(database.db);
  const migrations = await sql<{ name: string; timestamp: string }>`
    select name, timestamp from sluice_migrations order by name`.execute(database.db);
  return { ...rows[0], migrations: migrations.rows };
}

describe.skipIf(!postgresAvailable)("PostgreSQL migrations", () => {
  it("migrate a schema while another schema of the same database already holds Sluice's tables", async () => {
    const first = await createPostgresSchema();
    const second = await createPostgresSchema();
    const opened: OpenDatabase[] = [];
    try {
      opened.push(await openDatabase({ databaseUrl: first.url, dataDir: "unused" }));
      opened.push(await openDatabase({ databaseUrl: second.url, dataDir: "unused" }));
      const [a, b] = await Promise.all(opened.map(layout));
      expect(a?.schema).not.toBe(b?.schema);
      for (const each of [a, b]) {
        expect(each?.tables).toEqual([
          "projects",
          "provider_keys",
          "sluice_migrations",
          "sluice_migrations_lock",
          "test_keys",
          "usage_records",
        ]);
        expect(each?.migrations.map((migration) => migration.name)).toEqual([
          "0001-initial",
          "0002-usage-token-counts-bigint",
          "0003-project-proxy-allow-list",
          "0004-usage-requests",
          "0005-project-device-check-changed-at",
          "0006-usage-created-at-index",
          "0007-projects-created-at-index",
          "0008-usage-provider-answered",
        ]);
      }
    } finally {
      for (const database of opened) await database.close();
      await first.drop();
      await second.drop();
    }
  });

  it("reopen a migrated schema without running any migration again", async () => {
    const schema = await createPostgresSchema();
    try {
      const before = await openDatabase({ databaseUrl: schema.url, dataDir: "unused" });
      const migrated = await layout(before);
      await before.close();
      const after = await openDatabase({ databaseUrl: schema.url, dataDir: "unused" });
      try {
        expect(await layout(after)).toEqual(migrated);
      } finally {
        await after.close();
      }
    } finally {
      await schema.drop();
    }
  });

  it("run a migration that takes longer than the query timeout to the end (0002 rewriting a large usage table)", async () => {
    const schema = await createPostgresSchema();
    const blocker = new pg.Client({ connectionString: schema.url });
    let released: Promise<unknown> = Promise.resolve();
    try {
      // The schema as a release before 0002 left it.
      const before = await openDatabase({ databaseUrl: schema.url, dataDir: "unused" });
      await sql`alter table usage_records alter column input_tokens type integer,
        alter column output_tokens type integer, alter column cached_tokens type integer,
        alter column reasoning_tokens type integer`.execute(before.db);
      // And before 0003 to 0005 and 0008, which a database migrated past 0002 has run too.
      await sql`alter table projects drop column proxy_allow_list`.execute(before.db);
      await sql`alter table projects drop column device_check_changed_at`.execute(before.db);
      await sql`alter table usage_records drop column requests`.execute(before.db);
      await sql`alter table usage_records drop column provider_answered`.execute(before.db);
      await sql`delete from sluice_migrations where name > '0001-initial'`.execute(before.db);
      await before.close();
      // A reader holds the table for well over the query timeout, so the rewrite waits that long.
      await blocker.connect();
      await blocker.query("begin");
      await blocker.query("lock table usage_records in access share mode");
      released = new Promise((resolve) => setTimeout(resolve, 1000)).then(() => blocker.query("commit"));
      const started = Date.now();
      const after = await openDatabase({ databaseUrl: schema.url, dataDir: "unused", queryTimeoutMs: 200 });
      try {
        expect(Date.now() - started).toBeGreaterThanOrEqual(900);
        const { rows } = await sql<{ type: string }>`
          select data_type as type from information_schema.columns
          where table_schema = current_schema() and table_name = 'usage_records'
            and column_name in ('input_tokens', 'output_tokens', 'cached_tokens', 'reasoning_tokens')`.execute(
          after.db,
        );
        expect(rows.map((row) => row.type)).toEqual(["bigint", "bigint", "bigint", "bigint"]);
      } finally {
        await after.close();
      }
    } finally {
      await released;
      await blocker.end();
      await schema.drop();
    }
  });
});

/** One engine's database that outlives its connections: each `open` reopens the same one. */
const durableEngines = [
  {
    name: "SQLite",
    available: true,
    async create(): Promise<{ options: DatabaseOptions; drop(): Promise<void> }> {
      const dataDir = mkdtempSync(join(tmpdir(), "sluice-migrations-"));
      return { options: { dataDir }, drop: async () => rmSync(dataDir, { recursive: true, force: true }) };
    },
  },
  {
    name: "PostgreSQL",
    available: postgresAvailable,
    async create(): Promise<{ options: DatabaseOptions; drop(): Promise<void> }> {
      const schema = await createPostgresSchema();
      return { options: { databaseUrl: schema.url, dataDir: "unused" }, drop: schema.drop };
    },
  },
];

/** Runs `change` on the database `options` names, as another build of Sluice would have left it. */
async function alter(options: DatabaseOptions, change: (database: OpenDatabase) => Promise<void>) {
  const database = await openDatabase(options);
  try {
    await change(database);
  } finally {
    await database.close();
  }
}

/** A migration a later build added: recorded, and its column added (migrations only add). */
async function migrateAsLaterBuild(database: OpenDatabase): Promise<void> {
  await sql`alter table projects add column added_by_a_later_build text`.execute(database.db);
  await sql`insert into sluice_migrations (name, timestamp)
    values ('0099-added-by-a-later-build', '2099-01-01T00:00:00.000Z')`.execute(database.db);
}

for (const engine of durableEngines) {
  describe.skipIf(!engine.available)(`migrations on ${engine.name} a later build ran`, () => {
    it("start on a database a newer Sluice migrated further, naming the migrations this build does not know", async () => {
      const { options, drop } = await engine.create();
      try {
        await alter(options, migrateAsLaterBuild);
        const reopened = await openDatabase(options);
        try {
          expect(reopened.unknownMigrations).toEqual(["0099-added-by-a-later-build"]);
          const { rows } = await sql<{ name: string }>`
            select name from sluice_migrations order by name`.execute(reopened.db);
          expect(rows.map((row) => row.name)).toEqual([
            "0001-initial",
            "0002-usage-token-counts-bigint",
            "0003-project-proxy-allow-list",
            "0004-usage-requests",
            "0005-project-device-check-changed-at",
            "0006-usage-created-at-index",
            "0007-projects-created-at-index",
            "0008-usage-provider-answered",
            "0099-added-by-a-later-build",
          ]);
          // The tables this build knows are used as before.
          expect(await reopened.db.selectFrom("projects").select("id").execute()).toEqual([]);
        } finally {
          await reopened.close();
        }
      } finally {
        await drop();
      }
    });

    it("refuse a database with migrations this build does not know that lacks one it knows, naming both", async () => {
      const { options, drop } = await engine.create();
      try {
        await alter(options, async (database) => {
          await migrateAsLaterBuild(database);
          await sql`delete from sluice_migrations where name = '0002-usage-token-counts-bigint'`.execute(
            database.db,
          );
        });
        const error = await openDatabase(options).then(
          async (opened) => {
            await opened.close();
            return undefined;
          },
          (failure: unknown) => failure,
        );
        expect(error).toBeInstanceOf(Error);
        expect((error as Error).message).toBe(
          "The database has migrations this Sluice does not know (0099-added-by-a-later-build: another " +
            "build ran them) and lacks one it needs (0002-usage-token-counts-bigint), so this build " +
            "cannot run on it: start the Sluice build that migrated it, or a newer one",
        );
      } finally {
        await drop();
      }
    });

    it("count each usage row written before 0004 as one request", async () => {
      const { options, drop } = await engine.create();
      try {
        // The table as a build before 0004 left it, with a row that build wrote.
        await alter(options, async (database) => {
          await sql`alter table usage_records drop column requests`.execute(database.db);
          await sql`alter table projects drop column device_check_changed_at`.execute(database.db);
          await sql`alter table usage_records drop column provider_answered`.execute(database.db);
          await sql`delete from sluice_migrations where name >= '0004'`.execute(database.db);
          await sql`insert into usage_records (request_id, project_id, endpoint, status, latency_ms,
            outcome, created_at) values ('before-0004', 'p1', 'proxy', 429, 1.5, 'error',
            '2026-11-02T10:00:00.000Z')`.execute(database.db);
        });
        const reopened = await openDatabase(options);
        try {
          const { rows } = await sql<{ requests: number }>`
            select requests from usage_records where request_id = 'before-0004'`.execute(reopened.db);
          expect(rows.map((row) => Number(row.requests))).toEqual([1]);
          // A row written without it, as that build still writes during a rolling deploy, counts one too.
          await sql`insert into usage_records (request_id, project_id, endpoint, status, latency_ms,
            outcome, created_at) values ('older-build', 'p1', 'proxy', 200, 1.5, 'ok',
            '2026-11-02T10:00:01.000Z')`.execute(reopened.db);
          const { rows: sum } = await sql<{ n: number }>`
            select sum(requests) as n from usage_records`.execute(reopened.db);
          expect(Number(sum[0]?.n)).toBe(2);
        } finally {
          await reopened.close();
        }
      } finally {
        await drop();
      }
    });

    it("read every project stored before 0005, and one an older build writes, as no DeviceCheck change since creation", async () => {
      const { options, drop } = await engine.create();
      try {
        // The table as a build before 0005 left it, with a project that build wrote.
        await alter(options, async (database) => {
          await sql`alter table projects drop column device_check_changed_at`.execute(database.db);
          await sql`alter table usage_records drop column provider_answered`.execute(database.db);
          await sql`delete from sluice_migrations where name >= '0005'`.execute(database.db);
          await sql`insert into projects (id, name, provider, created_at, updated_at)
            values ('before-0005', 'Old', 'provider-a', '2026-11-02T10:00:00.000Z',
            '2026-11-02T10:00:00.000Z')`.execute(database.db);
        });
        const reopened = await openDatabase(options);
        try {
          // As that build still writes during a rolling deploy: without the column.
          await sql`insert into projects (id, name, provider, created_at, updated_at)
            values ('older-build', 'Older', 'provider-a', '2026-11-02T10:00:01.000Z',
            '2026-11-02T10:00:01.000Z')`.execute(reopened.db);
          const projects = createProjectRepository(reopened.db);
          for (const id of ["before-0005", "older-build"])
            expect((await projects.get(id))?.deviceCheck.changedAt).toBeNull();
        } finally {
          await reopened.close();
        }
      } finally {
        await drop();
      }
    });

    it("start on a database whose migrations were recorded out of order in time (a clock ahead ran one)", async () => {
      const { options, drop } = await engine.create();
      try {
        // 0004 run by an instance whose clock was ahead of the one that ran 0005 in a later release.
        await alter(options, async (database) => {
          await sql`update sluice_migrations set timestamp = '2099-01-01T00:00:00.000Z'
            where name = '0004-usage-requests'`.execute(database.db);
        });
        const reopened = await openDatabase(options);
        await reopened.close();
        expect(reopened.unknownMigrations).toEqual([]);
      } finally {
        await drop();
      }
    });

    it("start on a new database with no unknown migrations", async () => {
      const { options, drop } = await engine.create();
      try {
        const database = await openDatabase(options);
        await database.close();
        expect(database.unknownMigrations).toEqual([]);
      } finally {
        await drop();
      }
    });
  });
}

describe.skipIf(!postgresAvailable)("PostgreSQL migrations beside a newer instance", () => {
  it("start when a newer instance migrates while this one waits for the lock, which that one holds for its session", async () => {
    const schema = await createPostgresSchema();
    const options = { databaseUrl: schema.url, dataDir: "unused" };
    const holder = new pg.Client({ connectionString: schema.url });
    try {
      await alter(options, async () => {});
      await holder.connect();
      // The newer instance holds the migration lock (Kysely's advisory lock) while it migrates.
      await holder.query("select pg_advisory_lock(3853314791062309107)");
      const opening = openDatabase(options);
      const waitingForLock = async () => {
        const { rows } = await holder.query<{ waiting: number }>(
          "select count(*)::int as waiting from pg_locks where locktype = 'advisory' and not granted",
        );
        return (rows[0]?.waiting ?? 0) > 0;
      };
      while (!(await waitingForLock())) await new Promise((resolve) => setTimeout(resolve, 10));
      await holder.query(`alter table projects add column added_by_a_later_build text`);
      await holder.query(`insert into sluice_migrations (name, timestamp)
        values ('0099-added-by-a-later-build', '2099-01-01T00:00:00.000Z')`);
      await holder.query("select pg_advisory_unlock(3853314791062309107)");
      const opened = await opening;
      await opened.close();
      expect(opened.unknownMigrations).toEqual(["0099-added-by-a-later-build"]);
    } finally {
      await holder.end();
      await schema.drop();
    }
  });
});

/**
 * Runs `statement` on the database `options` names as another client, not through `openDatabase`
 * (which migrates): what an operator looking at it after a failed start sees.
 */
async function raw(options: DatabaseOptions, statement: string): Promise<Record<string, unknown>[]> {
  if (!options.databaseUrl) {
    const database = new BetterSqlite3(sqliteFileIn(options.dataDir));
    try {
      const prepared = database.prepare(statement);
      if (prepared.reader) return prepared.all() as Record<string, unknown>[];
      prepared.run();
      return [];
    } finally {
      database.close();
    }
  }
  const client = new pg.Client({ connectionString: options.databaseUrl });
  await client.connect();
  try {
    return (await client.query(statement)).rows;
  } finally {
    await client.end();
  }
}

/** The names of a table's columns (sorted) and of the migrations recorded, read as `raw` does. */
async function state(options: DatabaseOptions) {
  const columns = async (table: string) =>
    (
      await raw(
        options,
        options.databaseUrl
          ? `select column_name as name from information_schema.columns
             where table_schema = current_schema() and table_name = '${table}'`
          : `select name from pragma_table_info('${table}')`,
      )
    )
      .map((row) => String(row.name))
      .sort();
  return {
    projects: await columns("projects"),
    usage: await columns("usage_records"),
    migrations: (await raw(options, "select name from sluice_migrations order by name")).map(
      (row) => row.name,
    ),
  };
}

for (const engine of durableEngines) {
  describe.skipIf(!engine.available)(`an upgrade on ${engine.name} that fails half-way`, () => {
    it("leaves the database as the release before it left it, and the next start completes it", async () => {
      const { options, drop } = await engine.create();
      try {
        // A release that ran 0001 and 0002, and a column of the name 0005 adds already there (as an
        // operator's, say): of the migrations the start runs, 0005 fails after 0003 and 0004 ran.
        await alter(options, async (database) => {
          await sql`alter table projects drop column proxy_allow_list`.execute(database.db);
          await sql`alter table usage_records drop column requests`.execute(database.db);
          await sql`alter table usage_records drop column provider_answered`.execute(database.db);
          await sql`delete from sluice_migrations where name >= '0003'`.execute(database.db);
          await sql`insert into usage_records (request_id, project_id, endpoint, status, latency_ms,
            outcome, created_at) values ('before-0003', 'p1', 'proxy', 200, 1.5, 'ok',
            '2026-11-02T10:00:00.000Z')`.execute(database.db);
        });
        const before = await state(options);
        expect(before.migrations).toEqual(["0001-initial", "0002-usage-token-counts-bigint"]);
        await expect(openDatabase(options)).rejects.toThrow(
          "Database migration 0005-project-device-check-changed-at failed",
        );
        // Neither 0003's nor 0004's column, nor their record: all of them ran in one transaction.
        expect(await state(options)).toEqual(before);
        // The operator removes the column in the way; the next start runs them all.
        await raw(options, "alter table projects drop column device_check_changed_at");
        const reopened = await openDatabase(options);
        try {
          expect(await state(options)).toEqual({
            projects: [...before.projects, "proxy_allow_list"].sort(),
            usage: [...before.usage, "provider_answered", "requests"].sort(),
            migrations: [
              "0001-initial",
              "0002-usage-token-counts-bigint",
              "0003-project-proxy-allow-list",
              "0004-usage-requests",
              "0005-project-device-check-changed-at",
              "0006-usage-created-at-index",
              "0007-projects-created-at-index",
              "0008-usage-provider-answered",
            ],
          });
          const { rows } = await sql<{ requests: number }>`select requests from usage_records`.execute(
            reopened.db,
          );
          expect(rows.map((row) => Number(row.requests))).toEqual([1]);
        } finally {
          await reopened.close();
        }
      } finally {
        await drop();
      }
    });
  });
}

describe.skipIf(!postgresAvailable)("PostgreSQL upgrade with instances starting together", () => {
  it("migrates a database an earlier release left once, when three instances of this one start at once", async () => {
    const schema = await createPostgresSchema();
    const options = { databaseUrl: schema.url, dataDir: "unused" };
    const opened: OpenDatabase[] = [];
    try {
      // As the release whose last migration was 0002 left it.
      await alter(options, async (database) => {
        await sql`alter table projects drop column proxy_allow_list`.execute(database.db);
        await sql`alter table projects drop column device_check_changed_at`.execute(database.db);
        await sql`alter table usage_records drop column requests`.execute(database.db);
        await sql`alter table usage_records drop column provider_answered`.execute(database.db);
        await sql`delete from sluice_migrations where name >= '0003'`.execute(database.db);
      });
      const results = await Promise.allSettled([1, 2, 3].map(() => openDatabase(options)));
      for (const result of results) if (result.status === "fulfilled") opened.push(result.value);
      expect(results.map((result) => result.status)).toEqual(["fulfilled", "fulfilled", "fulfilled"]);
      expect((await state(options)).migrations).toEqual([
        "0001-initial",
        "0002-usage-token-counts-bigint",
        "0003-project-proxy-allow-list",
        "0004-usage-requests",
        "0005-project-device-check-changed-at",
        "0006-usage-created-at-index",
        "0007-projects-created-at-index",
        "0008-usage-provider-answered",
      ]);
    } finally {
      for (const database of opened) await database.close();
      await schema.drop();
    }
  });
});
