import type { Migration } from "kysely";
import type { Engine } from "./database.js";
import { type Kysely, Migrator, sql } from "./kysely.js";

/**
 * Migrations in code, applied at start by `migrateToLatest`. Types are the portable subset:
 * text, integer (bigint where PostgreSQL's 32-bit integer is too small), double precision.
 * Exported for the upgrade tests, which build a database as each earlier release left it.
 */
export const migrations = (engine: Engine): Record<string, Migration> => ({
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
  "0003-project-proxy-allow-list": {
    /**
     * A project's proxy allow-list (JSON text), null for none. The build before it neither reads nor
     * writes the column: it keeps a list as it is, and does not enforce it.
     */
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable("projects").addColumn("proxy_allow_list", "text").execute();
    },
  },
  "0004-usage-requests": {
    /**
     * How many requests a usage row stands for: 1 for every row written so far (the default fills
     * them in), more for the row of an authenticated client's repeated refusals coalesced within a
     * minute (docs/decisions/0015). Reports sum it instead of counting rows. A constant default adds
     * the column without rewriting the table: on PostgreSQL 11 and later it is kept in the catalogue
     * and read for the existing rows (no rewrite, however large the table; the exclusive lock it
     * takes is brief, though it waits for queries holding the table, a long usage report say, and
     * the usage writes queue behind it meanwhile; PostgreSQL 10 and older would rewrite the table),
     * and SQLite only changes the schema text. The build before it neither reads nor writes the
     * column: its rows get 1, and its reports count rows, which undercounts only the coalesced rows
     * this build wrote.
     */
    async up(db: Kysely<unknown>) {
      await db.schema
        .alterTable("usage_records")
        .addColumn("requests", "integer", (column) => column.notNull().defaultTo(1))
        .execute();
    },
  },
  "0005-project-device-check-changed-at": {
    /**
     * When a project's DeviceCheck team id, key id, .p8 key or environment last changed (ISO text),
     * null for every project so far (none since its creation, as far as is known). The device token
     * ledger trusts no token verified before it (docs/auth.md). A nullable column: no rewrite on
     * either engine. The build before it neither reads nor writes it: its instances keep trusting
     * such tokens for their TTL, and a change of the settings it writes leaves the column as it was.
     */
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable("projects").addColumn("device_check_changed_at", "text").execute();
    },
  },
  "0006-usage-created-at-index": {
    /**
     * The usage rows by time alone, for SLUICE_USAGE_RETENTION_DAYS and `sluice usage prune`, which
     * delete the oldest rows of every project in batches: without it each batch scanned the table
     * (on PostgreSQL, ~240 ms a batch at a million rows, measured; SQLite read every row too). The
     * queries by project keep `usage_records_project_time`. On PostgreSQL building it takes a lock
     * that lets reads through but holds writes: the usage writes of other instances wait (and stay
     * queued, as in an outage) for as long as the build takes, about two seconds a million rows
     * here, SQLite half a second (raise SLUICE_DATABASE_START_TIMEOUT_MS for a far larger table). An
     * index of that name already there is kept: an operator may build it beforehand without holding
     * the writes (`create index concurrently`, which cannot run in the migration's transaction;
     * README, Usage rows). The build before it never uses the index; its writes keep it up to date.
     */
    async up(db: Kysely<unknown>) {
      await db.schema
        .createIndex("usage_records_created_at")
        .ifNotExists()
        .on("usage_records")
        .column("created_at")
        .execute();
    },
  },
  "0007-projects-created-at-index": {
    /**
     * The projects in the admin list's order (creation, then id), so that each page of it reads its
     * `limit` projects from where the page before ended (docs/decisions/0029): without it every
     * page read and sorted the whole table, output schemas included (SQLite has no other way to the
     * order). On PostgreSQL in code points ("C"), the order the list asks for whatever the database's
     * collation. Building it holds writes to the projects table: 32 ms for 20,000 projects on
     * PostgreSQL, measured. The build before it never uses the index; its writes keep it up to date.
     */
    async up(db: Kysely<unknown>) {
      const collate = engine === "postgres" ? sql.raw(' collate "C"') : sql.raw("");
      await sql`create index if not exists projects_created_at_id on projects (created_at${collate}, id${collate})`.execute(
        db,
      );
    },
  },
  "0008-usage-provider-answered": {
    /**
     * Whether the provider answered a usage row's call with a success (2xx): 1, else null (and
     * null for every row so far, not known). The spend cap and the usage report's
     * `unpricedRequests` count a failed call of unknown cost without tokens when it is 1: the
     * provider billed a call whose answer Sluice could not read (docs/decisions/0057, amended). A
     * nullable column: no rewrite on either engine (PostgreSQL keeps it in the catalogue, SQLite
     * changes the schema text). The build before it neither reads nor writes it: its rows are null,
     * and its spend reads and reports count such calls as nothing, as it always did.
     */
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable("usage_records").addColumn("provider_answered", "integer").execute();
    },
  },
});

/** Where the migrations run are recorded (and the lock table beside it). */
const migrationTableName = "sluice_migrations";

/**
 * Migrations stay backward compatible for one version: each only adds (a table, a nullable column
 * or one with a default, an index) or widens, so the build before it still runs on the database it
 * leaves. A rollback, or an older instance restarting during a rolling deploy, then finds migrations
 * it does not know. A build further back starts too, and works while no migration since has dropped
 * something it uses (docs/architecture.md, "Storage"): that is not promised.
 */
export interface MigrationOutcome {
  /** Migrations recorded in the database that this build does not know: a newer Sluice ran them. */
  unknownMigrations: string[];
}

/**
 * Applies every pending migration. On PostgreSQL the migration tables are looked up and created in
 * the connection's current schema (the first existing one on its search_path), where the tables
 * themselves go: Kysely's own existence check otherwise looks across every schema of the database
 * and would take another schema's Sluice tables for this one's.
 *
 * A database a newer build migrated further (every migration this build knows has run, and later
 * ones too) is used as it is: Kysely calls such a schema corrupted, so the later migrations are
 * given to it as ones already run. A database with migrations this build does not know that also
 * lacks one it does is refused (`UnknownMigrationsError`): no build can run on it as it stands.
 */
export async function migrateToLatest(
  db: Kysely<unknown>,
  engine: Engine,
  options: {
    onMigration?: (name: string) => void;
    /**
     * The caller runs it inside a transaction of its own, which holds the migration lock (the
     * PostgreSQL start's): Kysely's migrator then opens none.
     */
    inTransaction?: boolean;
  } = {},
): Promise<MigrationOutcome> {
  const schema = engine === "postgres" ? await currentSchema(db) : undefined;
  const known = announced(migrations(engine), options);
  let unknown = await unknownExecuted(db, known, schema);
  for (let attempt = 1; ; attempt++) {
    const allKnown = { ...known, ...Object.fromEntries(unknown.map((name) => [name, alreadyRun(name)])) };
    const migrator = new Migrator({
      db,
      provider: { getMigrations: async () => allKnown },
      migrationTableName,
      migrationLockTableName: "sluice_migrations_lock",
      ...(schema ? { migrationTableSchema: schema } : {}),
      // Kysely checks the migrations run against the list in the order of their recorded times,
      // which come from the clock of whichever process ran each: one run by an instance whose clock
      // was ahead of the one that ran the next (a release later) made it call the database
      // corrupted, and every start failed. The order that matters is the names', in which pending
      // migrations run either way; which names a build does not know is checked above.
      allowUnorderedMigrations: true,
      disableTransactions: options.inTransaction ?? false,
    });
    const { error, results } = await migrator.migrateToLatest();
    const failed = results?.find((result) => result.status === "Error");
    if (!error && !failed) return { unknownMigrations: unknown };
    // Migrations read before the migration lock was taken (by a caller that does not hold it
    // first; the PostgreSQL start does): a newer instance that migrated meanwhile made Kysely find
    // a migration it was not given. Read them again.
    const now =
      attempt < 3
        ? await unknownExecuted(db, known, schema).catch((reread: unknown) => {
            if (reread instanceof UnknownMigrationsError) throw reread;
            return unknown;
          })
        : unknown;
    if (now.some((name) => !unknown.includes(name))) {
      unknown = now;
      continue;
    }
    const name = failed ? ` ${failed.migrationName}` : "";
    throw new Error(`Database migration${name} failed`, { cause: error });
  }
}

/**
 * The database holds migrations this build does not know and lacks some it knows: a build of
 * another line of history ran them, or one more than a version ahead whose migrations replaced ones
 * this build needs. This build cannot run on it; the one that migrated it (or a newer one) can.
 */
class UnknownMigrationsError extends Error {
  override name = "UnknownMigrationsError";
}

/**
 * The names of the migrations the database records that `known` lacks; throws
 * `UnknownMigrationsError` when there are some and a known one has not run.
 */
async function unknownExecuted(
  db: Kysely<unknown>,
  known: Record<string, Migration>,
  schema: string | undefined,
): Promise<string[]> {
  const executed = await executedMigrations(db, schema);
  const unknown = executed.filter((name) => !Object.hasOwn(known, name));
  if (unknown.length === 0) return unknown;
  const missing = Object.keys(known).filter((name) => !executed.includes(name));
  if (missing.length > 0)
    throw new UnknownMigrationsError(
      `The database has migrations this Sluice does not know (${unknown.join(", ")}: another build ran ` +
        `them) and lacks ${missing.length === 1 ? "one" : "some"} it needs (${missing.join(", ")}), so this ` +
        "build cannot run on it: start the Sluice build that migrated it, or a newer one",
    );
  return unknown;
}

/** The names recorded in the migration table, none when it does not exist yet (a new database). */
async function executedMigrations(db: Kysely<unknown>, schema: string | undefined): Promise<string[]> {
  const table = schema ? `${schema}.${migrationTableName}` : migrationTableName;
  const present = schema
    ? sql`select 1 from information_schema.tables where table_schema = ${schema} and table_name = ${migrationTableName}`
    : sql`select 1 from sqlite_master where type = 'table' and name = ${migrationTableName}`;
  if ((await present.execute(db)).rows.length === 0) return [];
  const { rows } = await sql<{ name: string }>`select name from ${sql.table(table)}`.execute(db);
  return rows.map((row) => row.name);
}

/** A migration a newer build ran, as Kysely must be given it: recorded as run, so never run here. */
function alreadyRun(name: string): Migration {
  return {
    async up() {
      throw new Error(`Migration ${name} is not known to this build and cannot be run by it`);
    },
  };
}

/**
 * The warning of a start on a database a newer Sluice migrated (`MigrationOutcome.unknownMigrations`):
 * the gateway logs it, the CLI prints it.
 */
export function migratedByNewerWarning(unknown: readonly string[]): string {
  return (
    `The database was migrated by a newer Sluice (migrations this build does not know: ${unknown.join(", ")}): ` +
    "this build runs on it, as migrations stay backward compatible for one version (a build further back " +
    "works only while no later migration has dropped something it uses), but upgrade it to the build " +
    "that migrated the database"
  );
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
  if (!schema)
    throw new Error(
      "PostgreSQL has no current schema: the search_path names no existing schema the role has USAGE on",
    );
  return schema;
}

/** A cheap round trip for /health. */
export async function pingDatabase(db: Kysely<unknown>): Promise<void> {
  await sql`select 1`.execute(db);
}
