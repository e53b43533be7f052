import { someInChain } from "../error-chain.js";
import { GatewayError } from "../errors.js";

/** Socket errors of a database that cannot be reached. */
const unreachableCodes = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ETIMEDOUT",
  "EPIPE",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENETDOWN",
  "EHOSTDOWN",
  "ENETRESET",
  "ECONNABORTED",
]);
/**
 * System calls that only a connection makes. Whatever the code the operating system failed one
 * with, the database was not reached and refused nothing: a Unix socket's file is gone while the
 * server restarts (`connect ENOENT`), no local port is left (`connect EADDRNOTAVAIL`). Before, a
 * code not in the list above was no outage: a usage batch was written row by row, and every row
 * refused and dropped. (Not `read` or `write`, which a file's failures name too.)
 */
const connectionSyscalls = new Set(["connect", "bind", "getaddrinfo"]);
/**
 * PostgreSQL SQLSTATE classes of a server that cannot serve: 08 connection exception,
 * 53 insufficient resources, 57P01–57P03 shutting down or starting up, 58 system (I/O) error.
 * Also a statement the server gave up on for now, which the same statement can pass later:
 * 57014 cancelled (a `statement_timeout` an operator set on the role, or `pg_cancel_backend`),
 * 55P03 a lock not available (`lock_timeout`), 40001 and 40P01 a serialization failure or a
 * deadlock. Before, these were answered 500 and their usage rows refused for good. And 25006, a
 * write refused by a read-only server: a standby during a failover, which takes writes again once
 * promoted (or the primary's address points at the new one). And class 28, a connection refused
 * its role (a password rotated before DATABASE_URL, a login revoked for a while): no statement ran.
 */
const postgresDownState = /^(?:08|28|53|58)[0-9A-Z]{3}$|^57P0[1-3]$|^57014$|^55P03$|^40001$|^40P01$|^25006$/;
/** node-postgres and pg-pool errors for a lost or timed-out connection; they carry no code. */
const postgresDownMessage =
  /^(?:Connection terminated|timeout expired|timeout exceeded when trying to connect|Query read timeout|Client has encountered a connection error|Client was closed)/;
/** better-sqlite3 result codes (and their extended forms) for a file that is locked, failing or full. */
const sqliteDownCode = /^SQLITE_(?:BUSY|LOCKED|IOERR|FULL|CANTOPEN|PROTOCOL|READONLY|NOMEM)(?:_|$)/;

/**
 * True when a query failed because the database cannot serve right now (unreachable, restarting,
 * locked, out of disk), so a retry later can succeed. Constraint violations, bad SQL and other
 * bugs are false: they are not outages. Read along errorChain: an error that already carries its
 * answer (a GatewayError) keeps it, and is not turned into the generic outage answer.
 */
export function isDatabaseUnavailable(error: unknown): boolean {
  return someInChain(error, (each) => {
    const code = (each as { code?: unknown }).code;
    if (typeof code !== "string") return postgresDownMessage.test(each.message);
    if (unreachableCodes.has(code) || postgresDownState.test(code) || sqliteDownCode.test(code)) return true;
    const syscall = (each as { syscall?: unknown }).syscall;
    return typeof syscall === "string" && connectionSyscalls.has(syscall);
  });
}

/** SQLSTATEs of a session the server ended or never had: 08 connection exception, 57P01–57P03 shutting down. */
const connectionLostState = /^08[0-9A-Z]{3}$|^57P0[1-3]$/;
/** node-postgres errors of a connection closed under a query, or closed before it; they carry no code. */
const connectionLostMessage =
  /^(?:Connection terminated unexpectedly|Client has encountered a connection error)/;

/**
 * True when `error` (a query's own, as pg gave it) says the connection the query was sent on is
 * gone: the server ended the session (`pg_terminate_backend`, a restart, a failover: 57P01 to
 * 57P03), the connection failed (08xxx), or the socket was closed or reset under it (a pooler or a
 * network dropping an idle connection). The database itself may answer a new connection at once,
 * unlike the rest of `isDatabaseUnavailable`'s errors (a lock, a timeout, a refused login), so a
 * statement that changes nothing may be sent again on another connection (see `closingTimedOut` in
 * database.ts, docs/decisions/0059).
 */
export function isConnectionLost(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const code = (error as { code?: unknown }).code;
  if (typeof code !== "string") return connectionLostMessage.test(error.message);
  return connectionLostState.test(code) || code === "ECONNRESET" || code === "EPIPE";
}

/** The one answer while the database is down: 503 SERVICE_UNAVAILABLE with Retry-After. */
export function databaseUnavailable(cause: unknown): GatewayError {
  return new GatewayError("SERVICE_UNAVAILABLE", "The gateway's database is unavailable; retry shortly", {
    cause,
    headers: { "retry-after": "2" },
    details: { retryable: true },
  });
}

/**
 * How long a request waits for a stale cached read (a project's records, a month's spend) to be
 * read again before it is served what was known: a database that hangs (a stalled connection, a
 * failover) must not hold every request for the query timeout when what they need is in memory. A
 * healthy database answers well within it.
 */
export const reloadWaitMs = 250;

/**
 * `read`'s value if it settles within `reloadWaitMs`, else `known` (the read goes on; its timer is
 * cleared when it settles, and holds no process open). `read` must not reject. Its callers share
 * it; each bounds it further by its request's `ReloadWait`.
 */
export function withinReloadWait<T>(read: Promise<T>, known: T): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const waited = new Promise<T>((resolve) => {
    timer = setTimeout(() => resolve(known), reloadWaitMs);
    timer.unref();
  });
  return Promise.race([read.finally(() => clearTimeout(timer)), waited]);
}

/**
 * One request's waits for stale cached reads: its project, test keys, provider key and month's
 * spend may each be due, and each reload is waited for only until `reloadWaitMs` after the first
 * began, so the request waits that long in all, not that long for each. The same object goes to
 * every read of the request: admission passes its AuthRequest, which is one.
 */
export interface ReloadWait {
  /** Settles `reloadWaitMs` after the request's first wait began. */
  expiry?: Promise<void>;
}

/**
 * `waited` (a shared `withinReloadWait`, begun at most now), or `known` once `wait`'s request has
 * waited `reloadWaitMs` in all. Without a `wait`, `waited` as it is.
 */
export function withinRequestWait<T>(wait: ReloadWait | undefined, waited: Promise<T>, known: T): Promise<T> {
  if (wait === undefined) return waited;
  if (wait.expiry === undefined) {
    // The request's first wait: `waited` ends within reloadWaitMs of now on its own.
    wait.expiry = new Promise((resolve) => setTimeout(resolve, reloadWaitMs).unref());
    return waited;
  }
  return Promise.race([waited, wait.expiry.then(() => known)]);
}
