import { closeSync, openSync, statSync } from "node:fs";
import { join } from "node:path";
import BetterSqlite3 from "better-sqlite3";
import type { PostgresPool, PostgresPoolClient } from "kysely";
import type { Pool as PgPool, PoolClient as PgPoolClient, PoolConfig as PgPoolConfig } from "pg";
import type { Config } from "../config.js";
import { CancellableQueries } from "./cancellable-queries.js";
import { dataDirError, inDataDir } from "./data-dir-error.js";
import { isConnectionLost } from "./database-unavailable.js";
import { Kysely, PostgresDialect, sql } from "./kysely.js";
import { makeDirectorySync } from "./make-directory.js";
import { type MigrationOutcome, migrateToLatest, pingDatabase } from "./migrations.js";
import { type CancelRequest, type CancelTarget, sendCancelRequest } from "./postgres-cancel-request.js";
import { checkSslFiles, migrateWithinStartTimeout, pgClientOf } from "./postgres-start.js";
import type { Database } from "./schema.js";
import { LockWait, LockWaitingSqliteDialect, waitingOutLocks } from "./sqlite-lock-wait.js";
import { cachingStatements } from "./statement-cache.js";

export type Engine = "sqlite" | "postgres";

export interface OpenDatabase {
  db: Kysely<Database>;
  engine: Engine;
  /** The better-sqlite3 handle on the embedded engine, for the usage writer's prepared statement. */
  sqlite?: BetterSqlite3.Database;
  /**
   * SQLite only: how long a statement waits for another process's lock on the file before it fails
   * with SQLITE_BUSY (`sqliteBusyTimeoutMs`), off the event loop (`waitingOutLocks`). Tests shorten it.
   * The shutdown's deadline ends the waits under way (`LockWait.end`), and `close` what still waits.
   */
  sqliteLockWait?: LockWait;
  /** Runs a report's query within the report time limit: see `DatabaseOptions.reportTimeoutMs`. */
  runReport: RunReport;
  /**
   * What the admin API queries through (its projects, keys and usage report). On PostgreSQL, the
   * same pools as `db` and `runReport`, through connections that report their queries to `queries`,
   * whose `end` cancels them when the shutdown's deadline refuses the admin calls (decision 0049);
   * the proxy's reads and the usage recorder's writes, through `db`, are never cancelled. On SQLite,
   * `db` and `runReport` themselves (`sqliteLockWait` ends their waits).
   */
  admin: AdminDatabase;
  /**
   * What the reads that calls share go through: authentication's of the credentials (the
   * credential directory: projects, test keys, provider keys) and the spend cap's of a project's
   * month spend. On PostgreSQL, the same pool as `db`, through connections that report their
   * queries to `queries`, which the gateway's close ends: a read still running then (a project this
   * instance holds no record of or a month's spend read again, on a database slow to answer or a
   * table locked) is cancelled on the server, not left to its query timeout, holding the pool's
   * close. The close, not a call's refusal: one read answers every call that asks for the record or
   * the figure meanwhile. On SQLite, `db` itself.
   */
  sharedReads: { db: Kysely<Database>; queries?: CancellableQueries };
  /**
   * Migrations the database records that this build does not know: a newer Sluice migrated it (a
   * rollback, or an older instance during a rolling deploy). It runs on it; the caller warns.
   */
  unknownMigrations: readonly string[];
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
   * PostgreSQL only: how long a query may wait for its connection and the server's answer together
   * (default 10 s; opening a connection waits at most 5 s of it). A server or network that hangs
   * without closing the connection then fails the query as an outage, instead of holding the usage
   * writer, the request and the shutdown until TCP gives up minutes later.
   */
  queryTimeoutMs?: number;
  /**
   * PostgreSQL only: how long the server may work on one report query (the admin usage report)
   * before it cancels it (default 60 s). Reports aggregate many rows and may take longer than the
   * query timeout allows, so they run with a statement timeout the server enforces (a report given
   * up on is not left running there), on two connections of their own (reports never hold the
   * connections requests and the usage writer need), and wait for the answer `queryTimeoutMs`
   * longer than that before taking the server for hung. SQLite runs them without a limit.
   */
  reportTimeoutMs?: number;
  /**
   * PostgreSQL only: how long opening it may take, connecting and migrating (default 60 s): past
   * it, it fails with a `DatabaseStartError` naming DATABASE_URL and what it waited for.
   */
  startTimeoutMs?: number;
}

/** Runs `read` (a report's queries) on the connection given to it, within the report time limit. */
export type RunReport = <T>(read: (db: Kysely<Database>) => Promise<T>) => Promise<T>;

/** `OpenDatabase.admin`. */
export interface AdminDatabase {
  db: Kysely<Database>;
  runReport: RunReport;
  /** PostgreSQL only: the admin API's queries in flight, which `end` cancels. */
  queries?: CancellableQueries;
}

/** The database settings of a configuration: the gateway and the CLI open the same database alike. */
export function databaseOptionsOf(config: Config): DatabaseOptions {
  return {
    databaseUrl: config.databaseUrl,
    dataDir: config.dataDir,
    queryTimeoutMs: config.databaseQueryTimeoutMs,
    reportTimeoutMs: config.usageReportTimeoutMs,
    startTimeoutMs: config.databaseStartTimeoutMs,
  };
}

/** Opens the configured engine and applies migrations. */
export async function openDatabase(options: DatabaseOptions): Promise<OpenDatabase> {
  if (options.databaseUrl) {
    return openPostgres(options.databaseUrl, {
      queryTimeoutMs: options.queryTimeoutMs ?? 10_000,
      reportTimeoutMs: options.reportTimeoutMs ?? 60_000,
      startTimeoutMs: options.startTimeoutMs ?? 60_000,
    });
  }
  const { db, engine, sqlite, lockWait, unknownMigrations } = await openSqliteMigrated(options);
  const runReport: RunReport = (read) => read(db);
  return {
    db,
    engine,
    sqlite,
    sqliteLockWait: lockWait,
    unknownMigrations,
    runReport,
    admin: { db, runReport },
    sharedReads: { db },
    ping: () => pingDatabase(db as Kysely<unknown>),
    close: () => {
      // A statement still waiting for another process's lock fails now, as a locked database
      // (503 for the admin API), not at its next try on the closed handle with a bare TypeError.
      lockWait.end(closedWhileWaiting);
      return db.destroy();
    },
  };
}

/**
 * The error a statement still waiting for another process's lock on the SQLite file fails with
 * once the database closes, or the gateway's close gives the waits up before that (`LockWait.end`).
 */
export function closedWhileWaiting(busy: unknown): Error {
  return new Error(
    "The database closed while this statement waited for another process's lock on the SQLite file",
    { cause: busy },
  );
}

interface OpenedSqlite {
  db: Kysely<Database>;
  engine: Engine;
  sqlite: BetterSqlite3.Database;
  lockWait: LockWait;
}

/**
 * Opens and migrates the embedded database. Kysely takes no lock for SQLite migrations: two
 * processes starting on a fresh data dir at once (the gateway and a CLI command) would both create
 * the tables, and one would fail. So the whole migration runs in one `BEGIN IMMEDIATE`
 * transaction, which the other process waits for (off its event loop, as every statement does:
 * `waitingOutLocks`) and then finds nothing to do.
 */
async function openSqliteMigrated(options: DatabaseOptions): Promise<OpenedSqlite & MigrationOutcome> {
  const opened = await openSqlite(options);
  try {
    await waitingOutLocks(() => opened.sqlite.exec("begin immediate"), opened.lockWait.ms);
    const outcome = await migrateToLatest(opened.db as Kysely<unknown>, "sqlite");
    opened.sqlite.exec("commit");
    return { ...opened, ...outcome };
  } catch (error) {
    if (opened.sqlite.inTransaction) opened.sqlite.exec("rollback");
    opened.sqlite.close();
    throw error;
  }
}

/** The embedded database's file in a data dir. */
export function sqliteFileIn(dataDir: string): string {
  return join(dataDir, "sluice.sqlite");
}

/**
 * Whether the data dir holds an embedded database. A dir that cannot be looked into (a path
 * through a file, no permission) is a `DataDirError` naming SLUICE_DATA_DIR, not a missing database.
 */
export function hasSqliteFile(dataDir: string): boolean {
  const file = sqliteFileIn(dataDir);
  return (
    inDataDir(dataDir, `look for the database ${file}`, () => statSync(file, { throwIfNoEntry: false })) !==
    undefined
  );
}

/** Page cache per connection, in KiB. */
export const sqliteCacheKiB = 2000;
/**
 * How long a statement waits for another process's lock on the file before SQLITE_BUSY: SQLite's
 * busy timeout, which the connection leaves at 0 once open; the wait is `waitingOutLocks`'s, off
 * the event loop (docs/decisions/0044).
 */
export const sqliteBusyTimeoutMs = 5000;

async function openSqlite(options: DatabaseOptions): Promise<OpenedSqlite> {
  const file = options.sqliteFile ?? sqliteFileIn(options.dataDir);
  // A data dir that cannot hold the database (a path through a file, no permission) is named as
  // the setting, with the reason; an in-memory database (tests) has none.
  const named = <T>(work: () => T): T =>
    options.sqliteFile ? work() : inDataDir(options.dataDir, `open the database ${file}`, work);
  const database = named(() => {
    if (!options.sqliteFile) {
      // Only the gateway's own user reads the data dir: it holds the master key, projects, and the
      // usage table's client addresses. (Modes apply to what is created; an existing dir keeps its own.)
      makeDirectorySync(options.dataDir, 0o700);
      // Created owner-only before SQLite opens it; its -wal and -shm files take the same mode.
      closeSync(openSync(file, "a", 0o600));
    }
    return new BetterSqlite3(file);
  });
  try {
    database.pragma(`busy_timeout = ${sqliteBusyTimeoutMs}`);
    // WAL lets readers run beside the batched usage writer; NORMAL is durable across process crashes.
    await switchToWal(database);
    database.pragma("synchronous = NORMAL");
    database.pragma("foreign_keys = ON");
    // SQLite's stock page cache (2 MiB). better-sqlite3 builds with 16 MiB, which the usage writer
    // fills within minutes of traffic: ~17 MiB more RSS for no measured gain, as the usage rows
    // append at the right edge of each B-tree (docs/decisions/0005).
    database.pragma(`cache_size = -${sqliteCacheKiB}`);
    // From now on a statement that finds the file locked fails at once, and is tried again after a
    // timer (`waitingOutLocks`): SQLite's busy handler would sleep on the event loop.
    database.pragma("busy_timeout = 0");
  } catch (error) {
    database.close();
    // WAL's -wal and -shm files are created beside the database: a dir that refuses them is named.
    throw options.sqliteFile ? error : dataDirError(options.dataDir, `open the database ${file}`, error);
  }
  const lockWait = new LockWait(sqliteBusyTimeoutMs);
  return {
    db: new Kysely<Database>({
      dialect: new LockWaitingSqliteDialect(database, cachingStatements(database), lockWait),
    }),
    engine: "sqlite",
    sqlite: database,
    lockWait,
  };
}

/**
 * Switches the file to WAL (a no-op once it is). On a fresh file, SQLite reads its header and then
 * takes the write lock to rewrite it; when another process holds that lock on a file not yet in
 * WAL (the gateway and a CLI command starting together on a fresh data dir, each switching it),
 * SQLite answers SQLITE_BUSY at once instead of waiting out busy_timeout: a read lock is never
 * upgraded by waiting, which could deadlock. Every other statement here waits (measured with each
 * lock another process can hold during its start: only this one fails at once, in 0 ms rather than
 * after the busy timeout). So this one is retried for as long as busy_timeout would have waited;
 * once the other process has switched the file, it finds it in WAL and returns at once.
 */
async function switchToWal(database: BetterSqlite3.Database): Promise<void> {
  await waitingOutLocks(() => database.pragma("journal_mode = WAL"), sqliteBusyTimeoutMs);
}

/**
 * `pg` is loaded only when PostgreSQL is configured: the embedded default never pays for it.
 * Migrations run first, on a connection of their own without the query timeout: one that rewrites
 * a large table (0002 widens the usage token columns) may take minutes, and cut off at the query
 * timeout it would roll back and fail every start. They run within the start timeout instead
 * (`migrateWithinStartTimeout`), which also bounds connecting and waiting for the migration lock.
 * Instances starting together migrate once, under Kysely's migration lock.
 */
async function openPostgres(
  databaseUrl: string,
  limits: { queryTimeoutMs: number; reportTimeoutMs: number; startTimeoutMs: number },
): Promise<OpenDatabase> {
  const { default: pg } = await import("pg");
  const types = new pg.TypeOverrides();
  types.setTypeParser(pg.types.builtins.INT8, int8AsNumber);
  /**
   * Cancels what a backend is running with PostgreSQL's CancelRequest (`sendCancelRequest`), on a
   * connection of its own to where its session was opened: no session, no authentication, and a
   * pooler in between passes it on. Not done within the query timeout (5 s at most), it is given
   * up, and the query runs to its own end, as it would have. One still on its way when the pools
   * have ended (its connection slow to open, or a pooler still passing it on) is ended by `close`:
   * every query it could stop has settled by then. Cut at once while its 16 bytes are not sent;
   * once they are, left `cancelGraceMs` (50 ms) for the server to close it first, as PgBouncer
   * before 1.19.1 mishandles a cancel its sender closes early (pgbouncer#801).
   */
  const cancellers = new Set<CancelRequest>();
  const cancelBackend = (backend: CancelTarget) => {
    const canceller = sendCancelRequest(backend, Math.min(5000, limits.queryTimeoutMs));
    cancellers.add(canceller);
    void canceller.settled.then(() => cancellers.delete(canceller));
  };
  const adminQueries = new CancellableQueries(cancelBackend);
  const sharedQueries = new CancellableQueries(cancelBackend);
  /**
   * A pool whose queries are unanswered for at most `queryTimeoutMs`, the wait for their connection
   * included: opening one (a server that accepts connections and never answers would otherwise hold
   * a request for pg's connection timeout, whatever the query timeout says) or a free one of the
   * pool's, within the query timeout and at most pg's 5 s; the first query on it in what is left.
   * Kysely instances over it: `db`, and those `over` makes whose queries report to one
   * `CancellableQueries` (the admin API's, the shared reads'); `end` ends the pool (not
   * their `destroy`: Kysely ends it only through an instance that was used, and the reports' pool
   * may have been used by the admin API's alone).
   */
  const connect = (
    config: PgPoolConfig & { max: number; query_timeout: number },
  ): {
    db: Kysely<Database>;
    over: (queries: CancellableQueries) => Kysely<Database>;
    end: () => Promise<void>;
  } => {
    const settings = {
      connectionString: databaseUrl,
      // pg's own 5 s, or less when the query timeout is shorter: a longer one would hold every
      // request queued for a connection during an outage that much longer.
      connectionTimeoutMillis: Math.min(5000, limits.queryTimeoutMs),
      types,
      ...config,
    };
    const pool = new pg.Pool(settings);
    // A client that loses its connection (idle or checked out) must not crash the process: its
    // query fails, the pool discards it (pg's own listener, on its idle clients' `error`), and the
    // next query opens a new connection.
    pool.on("error", () => {});
    pool.on("connect", (client) => client.on("error", () => {}));
    /**
     * A connection of its own, outside the pool, with the pool's settings, for a statement sent
     * again because its pooled connection was gone (`sentAgainOnLoss`): the pool may hold more of
     * them, not known to be gone until used. Closed when released; the database's close closes
     * what is left.
     */
    const unpooled = new Set<InstanceType<typeof pg.Client>>();
    const openUnpooled = async (): Promise<PgPoolClient> => {
      const client = new pg.Client(settings);
      client.on("error", () => {});
      unpooled.add(client);
      const release = () => {
        if (unpooled.delete(client)) void client.end().catch(() => {});
      };
      try {
        await client.connect();
      } catch (error) {
        release();
        throw error;
      }
      return Object.assign(client, { release }) as unknown as PgPoolClient;
    };
    const over = (queries?: CancellableQueries) =>
      new Kysely<Database>({
        dialect: new PostgresDialect({
          pool: closingTimedOut(pool, openUnpooled, config.query_timeout, limits.queryTimeoutMs, queries),
        }),
      });
    const end = async () => {
      await pool.end();
      await Promise.all([...unpooled].map((client) => client.end().catch(() => {})));
    };
    return { db: over(), over, end };
  };
  checkSslFiles(databaseUrl);
  const migrating = pgClientOf(
    databaseUrl,
    () =>
      new pg.Client({
        connectionString: databaseUrl,
        // A second after the start timeout: pg's own connect timeout destroys a socket still connecting
        // (ending the client at the start timeout waits for the connection), and never fires first.
        connectionTimeoutMillis: limits.startTimeoutMs + 1000,
      }),
  );
  migrating.on("error", () => {});
  const { unknownMigrations } = await migrateWithinStartTimeout(migrating, {
    databaseUrl,
    timeoutMs: limits.startTimeoutMs,
  });
  const main = connect({ max: 10, query_timeout: limits.queryTimeoutMs });
  const { db } = main;
  const reports = connect({ max: 2, query_timeout: limits.reportTimeoutMs + limits.queryTimeoutMs });
  const reportsOn =
    (on: Kysely<Database>): RunReport =>
    (read) =>
      on.transaction().execute(async (transaction) => {
        // SET LOCAL, written as set_config to take a parameter: it ends with the transaction, so
        // the connection goes back to the pool without it (and it works behind a PgBouncer).
        await sql`select set_config('statement_timeout', ${String(limits.reportTimeoutMs)}, true)`.execute(
          transaction,
        );
        return read(transaction);
      });
  let closed: Promise<void> | undefined;
  const closePools = async () => {
    await Promise.all([main.end(), reports.end()]);
    for (const canceller of cancellers) canceller.destroy();
    await Promise.all([...cancellers].map((canceller) => canceller.settled));
  };
  return {
    db,
    engine: "postgres",
    unknownMigrations,
    runReport: reportsOn(reports.db),
    admin: {
      db: main.over(adminQueries),
      runReport: reportsOn(reports.over(adminQueries)),
      queries: adminQueries,
    },
    sharedReads: { db: main.over(sharedQueries), queries: sharedQueries },
    ping: () => pingDatabase(db as Kysely<unknown>),
    // Once, however often it is asked: pg's `end` throws when a pool is ended twice.
    close: () => (closed ??= closePools()),
  };
}

/**
 * pg reads int8 (the usage token columns, `count(*)`, a sum of integers) as a string, since a JS
 * number is exact only up to 2^53. Sluice stores token counts only as safe integers (the usage
 * meter records a larger count as unknown), so on its own pools int8 is read as a number; a value
 * beyond 2^53 fails the query rather than coming back rounded. Sums of int8 are numeric, read as
 * strings and converted where they are used.
 */
function int8AsNumber(text: string): number {
  const value = Number(text);
  if (!Number.isSafeInteger(value))
    throw new RangeError(`int8 value ${text} is beyond 2^53 and cannot be read exactly`);
  return value;
}

/**
 * The pool as Kysely sees it, except that a connection on which a query timed out is closed when
 * released instead of going back to the pool. pg gives up waiting but keeps the connection, and
 * its next query would queue behind the unanswered one: on a connection a network dropped without
 * a word, every query would time out until TCP gives up, minutes later, even with the server back.
 * The first query on a connection gets `queryTimeoutMs` less the wait for the connection, so the
 * two together take no longer than the query timeout; the others get it whole.
 *
 * Each transaction also tells the server to end it once it has waited `idleInTransactionMs` for the
 * client's next statement (`idle_in_transaction_session_timeout`, set local to the transaction, so
 * the connection goes back to the pool without it, behind a PgBouncer too). A connection lost
 * between two statements (the network failed as a usage batch's `commit` was sent) is closed on
 * this side, but the server keeps its transaction open, with the rows it inserted or updated
 * locked, until TCP keepalive finds the peer gone (two hours by default): the retried usage batch
 * waited for those locks until its query timeout, again and again, and no usage row was written
 * after it; an admin change to a project a lost transaction had locked failed the same way.
 *
 * With `queries` (the admin API's instances, the shared reads': the credential directory's and the
 * spend cap's), each query in flight is reported there with its backend (`cancelTargetOf`): when
 * the shutdown's deadline refuses the admin calls, or the gateway closes for the shared reads
 * (`queries.end`), it is cancelled on the server (a CancelRequest) and fails with the refusal once
 * the server has stopped it (a write not committed is then not made, nor its transaction half
 * made), and the queries after it fail with the refusal unsent, but for a transaction's rollback.
 * Without it (the usage recorder's writes), nothing is tracked. The pool is ended by the database's close,
 * not here.
 */
function closingTimedOut(
  pool: PgPool,
  openUnpooled: () => Promise<PgPoolClient>,
  queryTimeoutMs: number,
  idleInTransactionMs: number,
  queries?: CancellableQueries,
): PostgresPool {
  // Kysely opens a transaction with `begin` (its only form here: no isolation level is asked for).
  // One round trip: without parameters pg sends it as a simple query, which may hold two statements.
  const begin = `begin; set local idle_in_transaction_session_timeout = ${idleInTransactionMs}`;
  /** A connection, as `open` gives it; for the admin API and the shared reads, ended by `queries.end`. */
  const take = (open: () => Promise<PgPoolClient>) =>
    queries ? queries.taking(open(), (late) => late.release()) : open();
  return {
    async connect() {
      if (queries?.ended) throw queries.ended;
      const asked = performance.now();
      let client: PgPoolClient | undefined = await take(() => pool.connect());
      let backend = cancelTargetOf(client);
      // At least 1 ms: pg reads a query_timeout of 0 as "the pool's".
      let firstTimeoutMs: number | undefined = Math.max(
        1,
        Math.ceil(queryTimeoutMs - (performance.now() - asked)),
      );
      let timedOut = false;
      // A connection whose query was cancelled is closed, not pooled: a cancel that lands late (the
      // query had ended meanwhile) must not stop another call's query on it.
      let cancelled = false;
      /**
       * Sends `config` (`text`'s; `opens` a transaction) on `on`, tracked for `queries.end`. The
       * first statement on a connection the server had closed while it was pooled is sent once
       * more on another (`again`); a failure otherwise refuses the call once `queries` has ended.
       */
      const send = (
        on: PgPoolClient,
        config: PgQueryConfig,
        text: string,
        opens: boolean,
        first: boolean,
      ): Promise<unknown> => {
        // A rollback sent after the end is not tracked: the next refused call's end would cancel it.
        const settled =
          queries !== undefined && queries.ended === null && backend !== undefined
            ? queries.sent(backend, () => {
                cancelled = true;
              })
            : undefined;
        return on.query(config).then(
          // Two statements answer with a result each: Kysely is given the `begin`'s.
          (result: unknown) => {
            settled?.();
            return opens && Array.isArray(result) ? result[0] : result;
          },
          (error: unknown) => {
            settled?.();
            if (error instanceof Error && error.message === "Query read timeout") timedOut = true;
            if (first && queries?.ended == null && sentAgainOnLoss(text, opens, error))
              return again(on, config, text, opens, error);
            // Cancelled by the refusal (57014), or failed otherwise meanwhile: the call is refused.
            throw queries?.ended ?? error;
          },
        );
      };
      /**
       * Sends `config` again on a new connection in place of `dead`, within what is left of the
       * first statement's query timeout: not open by then, fails as it did (`lost`), the connection
       * closed once it comes; not opened at all, with the reason. Once `queries` has ended, fails
       * with the refusal, as any query does.
       */
      const again = async (
        dead: PgPoolClient,
        config: PgQueryConfig,
        text: string,
        opens: boolean,
        lost: unknown,
      ): Promise<unknown> => {
        // Closed, not pooled; and none is held until another is open.
        client = undefined;
        dead.release(lost instanceof Error ? lost : true);
        const deadline = asked + queryTimeoutMs;
        if (deadline - performance.now() < 1) throw lost;
        // A new connection, not one of the pool's: the server (or whatever closed this one) may
        // have closed those idle beside it too, unseen until a statement is sent on them.
        const fresh = await withinDeadline(take(openUnpooled), deadline, lost);
        if (queries?.ended) {
          fresh.release();
          throw queries.ended;
        }
        client = fresh;
        backend = cancelTargetOf(fresh);
        const timeoutMs = Math.max(1, Math.ceil(deadline - performance.now()));
        return send(fresh, { ...config, query_timeout: timeoutMs }, text, opens, false);
      };
      const query = (text: string, parameters: readonly unknown[]) => {
        if (queries?.ended && text !== "rollback") return Promise.reject(queries.ended);
        // pg takes a query_timeout in the query's config (its types do not list it); undefined
        // leaves the pool's.
        const opens = text === "begin" && parameters.length === 0;
        const config: PgQueryConfig = {
          text: opens ? begin : text,
          values: parameters as unknown[],
          query_timeout: firstTimeoutMs,
        };
        const first = firstTimeoutMs !== undefined;
        firstTimeoutMs = undefined;
        // None held: its first statement found the connection gone, and no other came in time.
        // (Kysely sends nothing more then, not even a rollback: the `begin` had failed.)
        if (client === undefined)
          return Promise.reject(new Error("Client has encountered a connection error and is not queryable"));
        return send(client, config, text, opens, first);
      };
      return {
        // Only the (sql, parameters) form: Kysely passes a cursor only when given one to stream with.
        query: query as unknown as PostgresPoolClient["query"],
        release: () => client?.release(timedOut || cancelled),
      };
    },
    end: async () => {},
  };
}

/** A query as `closingTimedOut` hands it to pg: pg reads `query_timeout`, which its types do not list. */
interface PgQueryConfig {
  text: string;
  values: unknown[];
  query_timeout: number | undefined;
}

/**
 * Whether a statement that failed as the first on a connection from the pool is sent again on
 * another: the connection was gone (`isConnectionLost`: the server ended the session while it was
 * pooled, a restart, a failover, `pg_terminate_backend`, or a pooler or network closed it), and
 * the statement changes nothing, so sending it twice cannot do anything twice: a `select` outside a
 * transaction, or a transaction's `begin` (nothing of the transaction has run yet). Any other
 * statement (an insert, an update, a delete, a `select` of a transaction begun) fails as it did:
 * whether the server ran it before the connection went cannot be known. Read only on a failure.
 */
function sentAgainOnLoss(text: string, opens: boolean, error: unknown): boolean {
  return (opens || /^select\s/i.test(text)) && isConnectionLost(error);
}

/**
 * The connection `taking` gives, if it comes before `deadline` (a `performance.now()` time); else
 * fails with `lost`, and the connection, once it comes, is released unused (an unpooled one closed).
 */
function withinDeadline(
  taking: Promise<PgPoolClient>,
  deadline: number,
  lost: unknown,
): Promise<PgPoolClient> {
  return new Promise((resolve, reject) => {
    let late = false;
    const timer = setTimeout(
      () => {
        late = true;
        reject(lost);
      },
      Math.max(0, deadline - performance.now()),
    );
    taking.then(
      (client) => {
        if (late) client.release();
        else {
          clearTimeout(timer);
          resolve(client);
        }
      },
      (error: unknown) => {
        clearTimeout(timer);
        if (!late) reject(error);
      },
    );
  });
}

/**
 * What a CancelRequest for `client`'s backend needs: the key its BackendKeyData gave (pg does not
 * type it), and where and how pg opened its connection (the pool's clients all read DATABASE_URL,
 * PG* variables for what it leaves out). Undefined before the key came (never, on a connection the
 * pool hands out).
 */
function cancelTargetOf(client: unknown): CancelTarget | undefined {
  const { processID, secretKey, host, port, connectionParameters } = client as {
    processID: number | null;
    secretKey: number | null;
    host: string;
    port: number;
    connectionParameters: Pick<CancelTarget, "ssl"> & { sslnegotiation?: CancelTarget["sslNegotiation"] };
  };
  if (processID === null || secretKey === null) return undefined;
  const { ssl, sslnegotiation } = connectionParameters;
  return { processID, secretKey, host, port, ssl: ssl ?? false, sslNegotiation: sslnegotiation };
}
