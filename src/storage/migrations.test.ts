import { sql } from "kysely";
import pg from "pg";
import { describe, expect, it } from "vitest";
import { createPostgresSchema, postgresAvailable } from "../../test/support/services.js";
import { type OpenDatabase, openDatabase } from "./database.js";

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
      await sql`delete from sluice_migrations where name = '0002-usage-token-counts-bigint'`.execute(
        before.db,
      );
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
