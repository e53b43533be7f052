import { sql } from "kysely";
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
        expect(each?.migrations.map((migration) => migration.name)).toEqual(["0001-initial"]);
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
});
