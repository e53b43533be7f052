import { type Kysely, type Migration, type MigrationProvider, Migrator, sql } from "kysely";
import type { Engine } from "./database.js";

/**
 * Migrations in code, applied at start by `migrateToLatest`. Types are the portable subset:
 * text, integer (bigint where PostgreSQL's 32-bit integer is too small), double precision.
 */
const migrations = (engine: Engine): Record<string, Migration> => ({
  "0001-initial": {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable("projects")
        .addColumn("id", "text", (column) => column.primaryKey())
        .addColumn("name", "text", (column) => column.notNull())
        .addColumn("team_id", "text")
        .addColumn("provider", "text", (column) => column.notNull())
        .addColumn("model", "text")
        .addColumn("test_mode", "integer", (column) => column.notNull().defaultTo(0))
        .addColumn("device_check_enabled", "integer", (column) => column.notNull().defaultTo(0))
        .addColumn("device_check_team_id", "text")
        .addColumn("device_check_key_id", "text")
        .addColumn("device_check_private_key", "text")
        .addColumn("device_check_environment", "text", (column) => column.notNull().defaultTo("production"))
        .addColumn("device_token_mode", "text", (column) => column.notNull().defaultTo("cached"))
        .addColumn("output_schema", "text")
        .addColumn("save_images_to_vault", "integer", (column) => column.notNull().defaultTo(0))
        .addColumn("rate_limit_per_minute", "integer")
        .addColumn("device_rate_limit_per_minute", "integer")
        .addColumn("monthly_spend_cap_usd", "double precision")
        .addColumn("disabled", "integer", (column) => column.notNull().defaultTo(0))
        .addColumn("created_at", "text", (column) => column.notNull())
        .addColumn("updated_at", "text", (column) => column.notNull())
        .execute();
      await db.schema
        .createTable("provider_keys")
        .addColumn("id", "text", (column) => column.primaryKey())
        .addColumn("project_id", "text", (column) =>
          column.notNull().references("projects.id").onDelete("cascade"),
        )
        .addColumn("provider", "text", (column) => column.notNull())
        .addColumn("label", "text")
        .addColumn("server_share", "text", (column) => column.notNull())
        .addColumn("client_share_digest", "text", (column) => column.notNull())
        .addColumn("created_at", "text", (column) => column.notNull())
        .addColumn("revoked_at", "text")
        .execute();
      await db.schema.createIndex("provider_keys_project").on("provider_keys").column("project_id").execute();
      await db.schema
        .createTable("test_keys")
        .addColumn("id", "text", (column) => column.primaryKey())
        .addColumn("project_id", "text", (column) =>
          column.notNull().references("projects.id").onDelete("cascade"),
        )
        .addColumn("digest", "text", (column) => column.notNull())
        .addColumn("created_at", "text", (column) => column.notNull())
        .execute();
      await db.schema.createIndex("test_keys_project").on("test_keys").column("project_id").execute();
      await db.schema
        .createTable("usage_records")
        .addColumn("request_id", "text", (column) => column.primaryKey())
        .addColumn("project_id", "text", (column) => column.notNull())
        .addColumn("key_id", "text")
        .addColumn("endpoint", "text", (column) => column.notNull())
        .addColumn("provider", "text")
        .addColumn("model", "text")
        .addColumn("status", "integer", (column) => column.notNull())
        .addColumn("error_code", "text")
        .addColumn("input_tokens", "integer")
        .addColumn("output_tokens", "integer")
        .addColumn("cached_tokens", "integer")
        .addColumn("reasoning_tokens", "integer")
        .addColumn("cost_usd", "double precision")
        .addColumn("latency_ms", "double precision", (column) => column.notNull())
        .addColumn("ttfb_ms", "double precision")
        .addColumn("streamed", "integer", (column) => column.notNull().defaultTo(0))
        .addColumn("outcome", "text", (column) => column.notNull())
        .addColumn("auth_method", "text")
        .addColumn("client_ip", "text")
        .addColumn("created_at", "text", (column) => column.notNull())
        .execute();
      await db.schema
        .createIndex("usage_records_project_time")
        .on("usage_records")
        .columns(["project_id", "created_at"])
        .execute();
    },
  },
  "0002-usage-token-counts-bigint": {
    /**
     * PostgreSQL's integer is 32-bit: a token count above 2^31 - 1 (a long batch job, or a provider
     * reporting nonsense) was refused, and its usage row dropped. SQLite's INTEGER is already 64-bit.
     * On PostgreSQL this rewrites the usage table under an exclusive lock: on a large table it takes
     * a while, during which other instances' usage writes wait (and stay queued, as in an outage).
     */
    async up(db: Kysely<unknown>) {
      if (engine !== "postgres") return;
      await db.schema
        .alterTable("usage_records")
        .alterColumn("input_tokens", (column) => column.setDataType("bigint"))
        .alterColumn("output_tokens", (column) => column.setDataType("bigint"))
        .alterColumn("cached_tokens", (column) => column.setDataType("bigint"))
        .alterColumn("reasoning_tokens", (column) => column.setDataType("bigint"))
        .execute();
    },
  },
});

/**
 * Applies every pending migration. On PostgreSQL the migration tables are looked up and created in
 * the connection's current schema (the first existing one on its search_path), where the tables
 * themselves go: Kysely's own existence check otherwise looks across every schema of the database
 * and would take another schema's Sluice tables for this one's.
 */
export async function migrateToLatest(
  db: Kysely<unknown>,
  engine: Engine,
  options: { onMigration?: (name: string) => void } = {},
): Promise<void> {
  const provider: MigrationProvider = { getMigrations: async () => announced(migrations(engine), options) };
  const migrator = new Migrator({
    db,
    provider,
    migrationTableName: "sluice_migrations",
    migrationLockTableName: "sluice_migrations_lock",
    ...(engine === "postgres" ? { migrationTableSchema: await currentSchema(db) } : {}),
  });
  const { error, results } = await migrator.migrateToLatest();
  const failed = results?.find((result) => result.status === "Error");
  if (error || failed) {
    const name = failed ? ` ${failed.migrationName}` : "";
    throw new Error(`Database migration${name} failed`, { cause: error });
  }
}

/** `all`, each telling `onMigration` its name as it starts (what a start that waits too long names). */
function announced(
  all: Record<string, Migration>,
  { onMigration }: { onMigration?: (name: string) => void },
): Record<string, Migration> {
  if (!onMigration) return all;
  return Object.fromEntries(
    Object.entries(all).map(([name, migration]) => [
      name,
      {
        ...migration,
        async up(db: Kysely<unknown>) {
          onMigration(name);
          await migration.up(db);
        },
      },
    ]),
  );
}

async function currentSchema(db: Kysely<unknown>): Promise<string> {
  const { rows } = await sql<{ schema: string | null }>`select current_schema() as schema`.execute(db);
  const schema = rows[0]?.schema;
  if (!schema) throw new Error("PostgreSQL has no current schema: the search_path names no existing schema");
  return schema;
}

/** A cheap round trip for /health. */
export async function pingDatabase(db: Kysely<unknown>): Promise<void> {
  await sql`select 1`.execute(db);
}
