import { readFileSync } from "node:fs";
import type { DatabaseIntrospector, PostgresPool, PostgresPoolClient, TableMetadata } from "kysely";
import type { Client as PgClient } from "pg";
import { fileNameShown, isFileContents, unreadableReason } from "../file-name-shown.js";
import { serviceUrlShown } from "../service-url-shown.js";
import { Kysely, PostgresAdapter, PostgresDialect, sql } from "./kysely.js";
import { type MigrationOutcome, migrateToLatest } from "./migrations.js";

/**
 * PostgreSQL could not be opened at start within `SLUICE_DATABASE_START_TIMEOUT_MS`. The message
 * names DATABASE_URL (never its password) and what the start was waiting for.
 */
export class DatabaseStartError extends Error {
  override name = "DatabaseStartError";
}

/** What the migration connection is doing: what a start that waits too long reports. */
interface Progress {
  connected: boolean;
  /** The statement sent and not answered yet. */
  pending: string | undefined;
  /** The migration running, once one has started. */
  migration: string | undefined;
}

/**
 * Runs the start's migrations on `client`, a connection of their own not yet connected, within
 * `timeoutMs`: connecting, waiting for the migration lock (an instance migrating the same database
 * holds it), and the migrations themselves. Past it the connection is ended and the start fails
 * with a `DatabaseStartError`, instead of waiting forever on a server that accepts connections but
 * does not answer, or on a lock another session never lets go. The transaction's statement timeout
 * is the same, so a statement given up on here does not go on waiting on the server: an ALTER
 * waiting for its table's lock would hold up every query on that table queued behind it, and a
 * server notices a client gone only when it next reads or writes.
 *
 * Everything runs in one transaction, which holds the migration lock (a transaction-level advisory
 * lock) and the connection's limits (set local): nothing is left on the session. Behind a pooler in
 * transaction mode (PgBouncer's), each transaction of a client may run on another server connection,
 * and one it is done with goes on to the pooler's other clients: Kysely's session-level lock, taken
 * and let go in transactions of their own, was let go on another session and stayed held on the
 * first (every later start waited for it), and session-wide limits reached other clients' queries
 * (docs/decisions/0051).
 */
export async function migrateWithinStartTimeout(
  client: PgClient,
  options: { databaseUrl: string; timeoutMs: number },
): Promise<MigrationOutcome> {
  const progress: Progress = { connected: false, pending: undefined, migration: undefined };
  const dialect = new PostgresDialect({ pool: oneConnection(client, progress) });
  dialect.createIntrospector = (db) =>
    currentSchemaIntrospector(db, PostgresDialect.prototype.createIntrospector.call(dialect, db));
  // The migration lock is the start's transaction's, taken below: Kysely takes none of its own.
  dialect.createAdapter = () => new LockedByTheTransaction();
  const db = new Kysely<unknown>({ dialect });
  // Committing and ending the connection (gracefully, once migrated) are within the time limit too.
  const migrating = (async () => {
    await sql`begin`.execute(db);
    // Before the limits below are set: a setting set here is no longer the startup's.
    await requireOptionsArrived(db, options.databaseUrl);
    // The server ends the transaction, and lets the lock go, once it has waited a few seconds for
    // the next statement (its client lost: TCP keepalive would take hours to tell): this client
    // never waits between its statements.
    const idleMs = String(Math.min(options.timeoutMs, lostSessionMs));
    await sql`select set_config('statement_timeout', ${String(options.timeoutMs)}, true),
      set_config('idle_in_transaction_session_timeout', ${idleMs}, true)`.execute(db);
    await requireCurrentSchema(db, options.databaseUrl);
    // A statement of its own, under the statement timeout just set.
    await sql`select pg_advisory_xact_lock(${sql.raw(migrationLockKey)})`.execute(db);
    const outcome = await migrateToLatest(db, "postgres", {
      inTransaction: true,
      onMigration: (name) => {
        progress.migration = name;
      },
    });
    await sql`commit`.execute(db);
    await db.destroy();
    return outcome;
  })();
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<"timed out">((resolve) => {
    timer = setTimeout(() => resolve("timed out"), options.timeoutMs);
  });
  try {
    const outcome = await Promise.race([migrating, timedOut]);
    if (outcome === "timed out") {
      migrating.catch(() => {});
      throw new DatabaseStartError(startTimeoutMessage(options, progress));
    }
    return outcome;
  } catch (error) {
    // Ends the statement in flight too (pg destroys the socket under it); not waited for, as a
    // server that does not answer may never close its side.
    client.end().catch(() => {});
    // A refused connection, an unknown host, a refused login: pg's message names none of the
    // settings; the cause (printed after this message) says why.
    if (!progress.connected && !(error instanceof DatabaseStartError) && refusedTls(error))
      throw new DatabaseStartError(
        `DATABASE_URL (${serviceUrlShown(options.databaseUrl)}): its sslmode (${new URL(options.databaseUrl).searchParams.get("sslmode") ?? "set by its ssl parameters"}) asks for TLS, which this PostgreSQL server does not offer: set sslmode=disable, or enable TLS on the server`,
        { cause: error },
      );
    if (!progress.connected && !(error instanceof DatabaseStartError) && refusedCertificate(error))
      throw new DatabaseStartError(
        `DATABASE_URL (${serviceUrlShown(options.databaseUrl)}): PostgreSQL's TLS certificate was not accepted: node-postgres verifies the certificate and its host name with sslmode require, prefer and verify-ca too, as with verify-full (not as libpq does): give the CA that signed it with sslrootcert=/path/to/ca.pem, or add uselibpqcompat=true for libpq's meaning of sslmode (require: encrypted, not verified)`,
        { cause: error },
      );
    if (!progress.connected && refusedOptions(error))
      throw new DatabaseStartError(
        `DATABASE_URL (${serviceUrlShown(options.databaseUrl)}): a connection pooler in front of PostgreSQL refuses its options parameter (PgBouncer does): set the search_path on the role instead (ALTER ROLE … SET search_path = …) and leave options out of DATABASE_URL: adding options to the pooler's ignore_startup_parameters would drop it silently, which the start refuses too`,
        { cause: error },
      );
    if (!progress.connected && !(error instanceof DatabaseStartError))
      throw new DatabaseStartError(
        `DATABASE_URL (${serviceUrlShown(options.databaseUrl)}): PostgreSQL could not be reached or refused the connection`,
        { cause: error },
      );
    if (refusedTransactions(error))
      throw new DatabaseStartError(
        `DATABASE_URL (${serviceUrlShown(options.databaseUrl)}): a connection pooler in front of PostgreSQL pools by statement (PgBouncer's pool_mode = statement), and refuses the transactions Sluice needs: pool this database by transaction or by session`,
        { cause: error },
      );
    throw error;
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Sluice makes its tables in the connection's current schema, the first one of its search_path that
 * exists and its role has USAGE on: with none (a schema named in DATABASE_URL's options or on the
 * role, never created, or one the role was never granted), the start fails naming DATABASE_URL, the
 * search_path and where it is set, not inside the migrations. The schemas that exist but the role
 * may not use are named, with the grant that mends it.
 */
async function requireCurrentSchema(db: Kysely<unknown>, databaseUrl: string): Promise<void> {
  const { rows } = await sql<{
    schema: string | null;
    searchPath: string;
    role: string;
    roleName: string;
  }>`select
    current_schema() as schema, current_setting('search_path') as "searchPath", current_user as role,
    quote_ident(current_user) as "roleName"`.execute(db);
  const row = rows[0];
  if (!row || row.schema) return;
  const named = searchPathSchemas(row.searchPath, row.role);
  const { rows: unusable } = await sql<{ name: string }>`select quote_ident(nspname) as name
    from pg_namespace where nspname = any(${named}::text[]) and not has_schema_privilege(oid, 'USAGE')
    order by array_position(${named}::text[], nspname::text)`.execute(db);
  const shown = `DATABASE_URL (${serviceUrlShown(databaseUrl)}): its search_path (${row.searchPath})`;
  const where = `in DATABASE_URL's options (-c search_path=…) or on its role (ALTER ROLE … SET search_path = …)`;
  if (unusable.length === 0)
    throw new DatabaseStartError(
      `${shown} names no schema that exists, and Sluice makes its tables in the first one that does: create the schema (CREATE SCHEMA …), or name an existing one, ${where}`,
    );
  const names = unusable.map((schema) => schema.name).join(", ");
  throw new DatabaseStartError(
    `${shown} names no schema its role (${row.role}) may use, and Sluice makes its tables in the first one it may: the role lacks the USAGE privilege on ${names}: grant it (GRANT USAGE, CREATE ON SCHEMA ${unusable[0]?.name} TO ${row.roleName}), or name another schema, ${where}`,
  );
}

/**
 * The schema names a search_path lists, as PostgreSQL reads them: comma-separated, a double-quoted
 * name kept as written (`""` a quote), any other lower-cased, and `$user` the session's role.
 */
function searchPathSchemas(searchPath: string, role: string): string[] {
  const names: string[] = [];
  for (const match of searchPath.matchAll(/\s*(?:"((?:[^"]|"")*)"|([^,\s]+))\s*(?:,|$)/g)) {
    const quoted = match[1];
    if (quoted !== undefined) names.push(quoted === "$user" ? role : quoted.replace(/""/g, '"'));
    else if (match[2] !== undefined) names.push(match[2] === "$user" ? role : match[2].toLowerCase());
  }
  return names;
}

/**
 * The settings DATABASE_URL's `options` parameter sets (`-c name=value`, `--name=value`), by name as
 * the server knows them (a long option's dashes read as underscores, as PostgreSQL reads them).
 */
function settingsOfOptions(databaseUrl: string): string[] {
  let given: string | null;
  try {
    given = new URL(databaseUrl).searchParams.get("options");
  } catch {
    return [];
  }
  if (!given) return [];
  const names = new Set<string>();
  for (const match of given.matchAll(/(?:^|\s)(?:-c\s*|--)([A-Za-z0-9_.-]+)=/g))
    names.add((match[1] as string).replace(/-/g, "_").toLowerCase());
  return [...names];
}

/**
 * Fails the start when a setting DATABASE_URL's `options` parameter names is not the session's from
 * its startup (`pg_settings.source` other than `client`): a pooler in front dropped the parameter
 * (PgBouncer with `options` in its `ignore_startup_parameters`, a common recipe), and a
 * `search_path` given there (the usual way to give Sluice a schema of its own) would be the role's
 * default: Sluice would create and use its tables there, beside another deployment's, without a
 * word. A setting the server does not list (an extension's not loaded) is not checked.
 */
async function requireOptionsArrived(db: Kysely<unknown>, databaseUrl: string): Promise<void> {
  const names = settingsOfOptions(databaseUrl);
  if (names.length === 0) return;
  const { rows } = await sql<{ name: string; source: string }>`select name, source from pg_settings
    where name = any(${names})`.execute(db);
  const missing = rows.filter((row) => row.source !== "client").map((row) => row.name);
  if (missing.length === 0) return;
  const instead = missing.includes("search_path")
    ? "and Sluice's tables would go to the role's default schema: set the search_path on the role instead (ALTER ROLE … SET search_path = …)"
    : "so set it on the role instead (ALTER ROLE … SET …)";
  throw new DatabaseStartError(
    `DATABASE_URL (${serviceUrlShown(databaseUrl)}): its options parameter did not reach PostgreSQL (${missing.join(", ")} ${missing.length === 1 ? "is" : "are"} the server's own, not the URL's): a connection pooler in front drops it (PgBouncer's ignore_startup_parameters), ${instead} and leave options out of DATABASE_URL`,
  );
}

/**
 * PgBouncer's answer to a startup message with the `options` parameter (DATABASE_URL's
 * `options=-c search_path=…`), which it refuses unless told to ignore it.
 */
function refusedOptions(error: unknown): boolean {
  return error instanceof Error && error.message === "unsupported startup parameter: options";
}

/**
 * PgBouncer's answer to a transaction's `begin` when it pools by statement (a FATAL, the connection
 * closed): every start's first statement is one, and so are the gateway's writes.
 */
function refusedTransactions(error: unknown): boolean {
  return (
    error instanceof Error &&
    (error as { code?: unknown }).code === "08P01" &&
    error.message === "transaction blocks not allowed in statement pooling mode"
  );
}

/** pg's error when it asked for TLS (sslmode, sslcert…) and the server answered that it has none. */
function refusedTls(error: unknown): boolean {
  return error instanceof Error && error.message === "The server does not support SSL connections";
}

/**
 * Node's codes for a server certificate its TLS client did not accept: an issuer it does not trust
 * (a managed database's own CA, a self-signed one), another host name, or out of its dates.
 */
const certificateRefusals = new Set([
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "CERT_UNTRUSTED",
  "CERT_HAS_EXPIRED",
  "CERT_NOT_YET_VALID",
  "ERR_TLS_CERT_ALTNAME_INVALID",
]);

/**
 * pg's error when its TLS client refused the server's certificate. node-postgres (pg-connection-string
 * 2) reads sslmode require, prefer and verify-ca as verify-full, so a URL written for libpq, where
 * `require` encrypts without checking, fails here against a server whose CA Node does not know.
 */
function refusedCertificate(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" && certificateRefusals.has(code);
}

/** The DATABASE_URL parameters that name a file node-postgres reads, in the order it reads them. */
const sslFileParameters = ["sslcert", "sslkey", "sslrootcert"] as const;

/**
 * Reads the files DATABASE_URL's `sslcert`, `sslkey` and `sslrootcert` name, as node-postgres will
 * when it builds a client: one that cannot be read fails the start naming DATABASE_URL (never its
 * password) and the parameter, instead of the bare `ENOENT: … open '…'` pg throws. A value that
 * looks like a file's contents (a key pasted in) is shown by its start and length only.
 */
export function checkSslFiles(databaseUrl: string): void {
  if (!URL.canParse(databaseUrl)) return;
  const parameters = new URL(databaseUrl).searchParams;
  for (const parameter of sslFileParameters) {
    const file = parameters.get(parameter);
    if (!file) continue;
    try {
      readFileSync(file);
    } catch (error) {
      const problem = `DATABASE_URL (${serviceUrlShown(databaseUrl)}): its ${parameter} file ${fileNameShown(file)} cannot be read (${unreadableReason(error)})`;
      throw new DatabaseStartError(problem, isFileContents(file) ? undefined : { cause: error });
    }
  }
}

/**
 * The client `make` builds on DATABASE_URL. node-postgres reads the URL's parameters as it builds
 * one, and throws on some it cannot use together (`sslmode=verify-ca` with `uselibpqcompat=true`
 * and no `sslrootcert`); that message names neither the setting nor the URL, so the start's does.
 */
export function pgClientOf<T>(databaseUrl: string, make: () => T): T {
  try {
    return make();
  } catch (error) {
    throw new DatabaseStartError(
      `DATABASE_URL (${serviceUrlShown(databaseUrl)}): node-postgres cannot use its parameters`,
      { cause: error },
    );
  }
}

/** How long the migration's transaction may sit idle before the server ends it (its client is gone). */
const lostSessionMs = 10_000;

/**
 * The key of Kysely's migration lock on PostgreSQL (its `PostgresAdapter`'s): taken here by the
 * start's transaction, and still the same lock as the session-level one earlier builds take, so
 * that the two exclude each other during a rolling deploy.
 */
const migrationLockKey = "3853314791062309107";

/** Kysely's PostgreSQL adapter, whose migrator takes no lock: the start's transaction holds it. */
class LockedByTheTransaction extends PostgresAdapter {
  override async acquireMigrationLock(): Promise<void> {}
  override async releaseMigrationLock(): Promise<void> {}
}

/** `client` as Kysely's pool of one connection, telling `progress` what it waits for. */
function oneConnection(client: PgClient, progress: Progress): PostgresPool {
  const query = async (text: string, parameters: readonly unknown[]) => {
    progress.pending = text;
    try {
      return await client.query(text, parameters as unknown[]);
    } finally {
      progress.pending = undefined;
    }
  };
  let connected: Promise<void> | undefined;
  return {
    async connect() {
      connected ??= (async () => {
        await client.connect();
        progress.connected = true;
      })();
      await connected;
      // Only the (sql, parameters) form: Kysely passes a cursor only when given one to stream with.
      return { query: query as unknown as PostgresPoolClient["query"], release: () => {} };
    },
    end: () => client.end(),
  };
}

/**
 * Kysely's introspector, but its table list (all the migrator asks of it: whether its two tables
 * exist) is the current schema's, where the migration tables go (`migrateToLatest`). Kysely's own
 * lists every table of the database and calls has_schema_privilege on each schema's name: a schema
 * another session dropped meanwhile (another application's, another Sluice's) failed the start.
 */
function currentSchemaIntrospector(
  db: Kysely<unknown>,
  introspector: DatabaseIntrospector,
): DatabaseIntrospector {
  return {
    getSchemas: () => introspector.getSchemas(),
    getMetadata: (options) => introspector.getMetadata(options),
    async getTables() {
      const { rows } = await sql<{ name: string; schema: string; kind: string }>`
        select c.relname as name, n.nspname as schema, c.relkind as kind
        from pg_catalog.pg_class c join pg_catalog.pg_namespace n on n.oid = c.relnamespace
        where n.nspname = current_schema() and c.relkind in ('r', 'v', 'p')`.execute(db);
      return rows.map(
        ({ name, schema, kind }): TableMetadata => ({ name, schema, isView: kind === "v", columns: [] }),
      );
    },
  };
}

function startTimeoutMessage(
  { databaseUrl, timeoutMs }: { databaseUrl: string; timeoutMs: number },
  progress: Progress,
): string {
  const database = `DATABASE_URL (${serviceUrlShown(databaseUrl)})`;
  const within = `within ${timeoutMs} ms (SLUICE_DATABASE_START_TIMEOUT_MS)`;
  if (!progress.connected) return `${database}: PostgreSQL did not answer the connection ${within}`;
  // The start's transaction takes the migration lock, an advisory lock for the whole database.
  if (progress.pending?.includes("pg_advisory_xact_lock("))
    return (
      `${database}: the migration lock was not free ${within}; another session holds it (a Sluice ` +
      "instance or CLI command migrating the same database, or one stuck): see the advisory locks in pg_locks"
    );
  if (progress.migration)
    return (
      `${database}: migration ${progress.migration} did not finish ${within}: it waits for a lock ` +
      "another session holds on a table it changes (see pg_locks), or PostgreSQL stopped answering, " +
      "or it needs longer on a large table (then raise SLUICE_DATABASE_START_TIMEOUT_MS)"
    );
  return `${database}: PostgreSQL did not answer ${within}`;
}
