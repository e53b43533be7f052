import { mkdirSync } from "node:fs";
import { join } from "node:path";
import BetterSqlite3 from "better-sqlite3";
import { Kysely, PostgresDialect, type PostgresPool, type PostgresPoolClient, SqliteDialect } from "kysely";
import type { Pool as PgPool } from "pg";
import { migrateToLatest, pingDatabase } from "./migrations.js";
import type { Database } from "./schema.js";

export type Engine = "sqlite" | "postgres";

export interface OpenDatabase {
  db: Kysely<Database>;
  engine: Engine;
  /** The better-sqlite3 handle on the embedded engine, for the usage writer's prepared statement. */
  sqlite?: BetterSqlite3.Database;
  ping(): Promise<void>;
  close(): Promise<void>;
}

export interface DatabaseOptions {
  /** PostgreSQL URL; unset means the embedded SQLite database in `dataDir`. */
  databaseUrl?: string | undefined;
  dataDir: string;
  /** SQLite only: `:memory:` for tests. */
  sqliteFile?: string;
  /**
   * PostgreSQL only: how long a query may wait for the server's answer (default 10 s). A server or
   * network that hangs without closing the connection then fails the query as an outage, instead of
   * holding the usage writer, the request and the shutdown until TCP gives up minutes later.
   */
  queryTimeoutMs?: number;
}

/** Opens the configured engine and applies migrations. */
export async function openDatabase(options: DatabaseOptions): Promise<OpenDatabase> {
  const { db, engine, sqlite } = options.databaseUrl
    ? await openPostgres(options.databaseUrl, options.queryTimeoutMs ?? 10_000)
    : await openSqliteMigrated(options);
  return {
    db,
    engine,
    ...(sqlite ? { sqlite } : {}),
    ping: () => pingDatabase(db as Kysely<unknown>),
    close: () => db.destroy(),
  };
}

/**
 * Opens and migrates the embedded database. Kysely takes no lock for SQLite migrations: two
 * processes starting on a fresh data dir at once (the gateway and a CLI command) would both create
 * the tables, and one would fail. So the whole migration runs in one `BEGIN IMMEDIATE`
 * transaction, which the other process waits for (busy_timeout) and then finds nothing to do.
 * Two processes creating a fresh file at the same instant can still get SQLITE_BUSY from SQLite
 * without its busy handler being consulted (setting up the WAL file); that start is retried with a
 * fresh handle, for up to about 5 s.
 */
async function openSqliteMigrated(options: DatabaseOptions): Promise<ReturnType<typeof openSqlite>> {
  for (let attempt = 1; ; attempt++) {
    let opened: ReturnType<typeof openSqlite> | undefined;
    try {
      opened = openSqlite(options);
      opened.sqlite.exec("begin immediate");
      await migrateToLatest(opened.db as Kysely<unknown>, "sqlite");
      opened.sqlite.exec("commit");
      return opened;
    } catch (error) {
      if (opened?.sqlite.inTransaction) opened.sqlite.exec("rollback");
      opened?.sqlite.close();
      const code = (error as { code?: unknown } | null)?.code;
      if (attempt >= 20 || typeof code !== "string" || !code.startsWith("SQLITE_BUSY")) throw error;
      await new Promise((resolve) => setTimeout(resolve, 25 * attempt));
    }
  }
}

/** Page cache per connection, in KiB. */
export const sqliteCacheKiB = 2000;

function openSqlite(options: DatabaseOptions): {
  db: Kysely<Database>;
  engine: Engine;
  sqlite: BetterSqlite3.Database;
} {
  let file = options.sqliteFile;
  if (!file) {
    mkdirSync(options.dataDir, { recursive: true });
    file = join(options.dataDir, "sluice.sqlite");
  }
  const database = new BetterSqlite3(file);
  // First: switching a fresh file to WAL takes a lock, which another process starting on the same
  // data dir (the gateway and a CLI command) may hold for a moment; without a busy timeout that
  // fails at once with SQLITE_BUSY.
  database.pragma("busy_timeout = 5000");
  // WAL lets readers run beside the batched usage writer; NORMAL is durable across process crashes.
  database.pragma("journal_mode = WAL");
  database.pragma("synchronous = NORMAL");
  database.pragma("foreign_keys = ON");
  // SQLite's stock page cache (2 MiB). better-sqlite3 builds with 16 MiB, which the usage writer
  // fills within minutes of traffic: ~17 MiB more RSS for no measured gain, as the usage rows
  // append at the right edge of each B-tree (docs/decisions/0005).
  database.pragma(`cache_size = -${sqliteCacheKiB}`);
  return {
    db: new Kysely<Database>({ dialect: new SqliteDialect({ database }) }),
    engine: "sqlite",
    sqlite: database,
  };
}

/** `pg` is loaded only when PostgreSQL is configured: the embedded default never pays for it. */
async function openPostgres(
  databaseUrl: string,
  queryTimeoutMs: number,
): Promise<{ db: Kysely<Database>; engine: Engine; sqlite?: undefined }> {
  const { default: pg } = await import("pg");
  const pool = new pg.Pool({
    connectionString: databaseUrl,
    max: 10,
    connectionTimeoutMillis: 5000,
    query_timeout: queryTimeoutMs,
  });
  // A client that loses its connection (idle or checked out) must not crash the process: its query
  // fails, the pool discards it, and the next query opens a new connection.
  pool.on("error", () => {});
  pool.on("connect", (client) => client.on("error", () => {}));
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool: closingTimedOut(pool) }) });
  // Under Kysely's own migration lock table, so instances starting together migrate once.
  await migrateToLatest(db as Kysely<unknown>, "postgres");
  return { db, engine: "postgres" };
}

/**
 * The pool as Kysely sees it, except that a connection on which a query timed out is closed when
 * released instead of going back to the pool. pg gives up waiting but keeps the connection, and
 * its next query would queue behind the unanswered one: on a connection a network dropped without
 * a word, every query would time out until TCP gives up, minutes later, even with the server back.
 */
function closingTimedOut(pool: PgPool): PostgresPool {
  return {
    async connect() {
      const client = await pool.connect();
      let timedOut = false;
      const query = (sql: string, parameters: readonly unknown[]) =>
        client.query(sql, parameters as unknown[]).catch((error: unknown) => {
          if (error instanceof Error && error.message === "Query read timeout") timedOut = true;
          throw error;
        });
      return {
        // Only the (sql, parameters) form: Kysely passes a cursor only when given one to stream with.
        query: query as unknown as PostgresPoolClient["query"],
        release: () => client.release(timedOut),
      };
    },
    end: () => pool.end(),
  };
}
