import BetterSqlite3 from "better-sqlite3";
import { DatabaseError } from "pg";
import { describe, expect, it } from "vitest";
import { GatewayError } from "../errors.js";
import { isConnectionLost, isDatabaseUnavailable } from "./database-unavailable.js";

const systemError = (code: string, syscall = "connect") =>
  Object.assign(new Error(`${syscall} ${code} 127.0.0.1:5432`), { code, syscall });
const postgresError = (code: string, message = "server error") =>
  Object.assign(new DatabaseError(message, 0, "error"), { code });
const sqliteError = (code: string) => new BetterSqlite3.SqliteError("sqlite error", code);

describe("isDatabaseUnavailable", () => {
  it.each([
    ["a refused connection", systemError("ECONNREFUSED")],
    ["a reset connection", systemError("ECONNRESET")],
    ["a Unix socket whose file a restart removed (connect ENOENT)", systemError("ENOENT")],
    ["no local port left to connect from (connect EADDRNOTAVAIL)", systemError("EADDRNOTAVAIL")],
    ["an interface gone down under a connection (write ENETDOWN)", systemError("ENETDOWN", "write")],
    ["a connection node-postgres lost", new Error("Connection terminated unexpectedly")],
    ["pg-pool's connect timeout", new Error("timeout exceeded when trying to connect")],
    [
      "a server shutting down (57P01)",
      postgresError("57P01", "terminating connection due to administrator command"),
    ],
    ["too many connections (53300)", postgresError("53300", "sorry, too many clients already")],
    ["a connection exception (08006)", postgresError("08006")],
    ["a role not permitted to log in (28000)", postgresError("28000")],
    ["a password refused (28P01)", postgresError("28P01", "password authentication failed")],
    ["a statement cancelled by the role's statement_timeout (57014)", postgresError("57014")],
    ["a write refused by a read-only server, a standby during a failover (25006)", postgresError("25006")],
    ["a lock not available under lock_timeout (55P03)", postgresError("55P03")],
    ["a serialization failure (40001)", postgresError("40001")],
    ["a deadlock (40P01)", postgresError("40P01")],
    ["SQLITE_BUSY", sqliteError("SQLITE_BUSY")],
    ["SQLITE_IOERR_WRITE", sqliteError("SQLITE_IOERR_WRITE")],
    ["SQLITE_FULL", sqliteError("SQLITE_FULL")],
    [
      "an outage wrapped as a cause",
      new Error("Database migration failed", { cause: systemError("ECONNREFUSED") }),
    ],
    ["an AggregateError of refused addresses", new AggregateError([systemError("ECONNREFUSED")], "")],
  ])("is true for %s", (_name, error) => {
    expect(isDatabaseUnavailable(error)).toBe(true);
  });

  it.each([
    ["a unique violation (23505)", postgresError("23505", "duplicate key value violates unique constraint")],
    ["a foreign key violation (23503)", postgresError("23503")],
    ["a missing relation (42P01)", postgresError("42P01", 'relation "projects" does not exist')],
    ["SQLITE_CONSTRAINT_PRIMARYKEY", sqliteError("SQLITE_CONSTRAINT_PRIMARYKEY")],
    ["SQLITE_ERROR (bad SQL)", sqliteError("SQLITE_ERROR")],
    ["a file that cannot be opened (open ENOENT)", systemError("ENOENT", "open")],
    ["a file that cannot be read (read EISDIR)", systemError("EISDIR", "read")],
    ["a bug", new TypeError("Cannot read properties of undefined (reading 'id')")],
    ["something that is not an error", "ECONNREFUSED"],
    [
      "an error that already has its answer, caused by a cancellation",
      new GatewayError("SERVICE_UNAVAILABLE", "The usage report took too long", {
        cause: postgresError("57014"),
        details: { retryable: true },
      }),
    ],
  ])("is false for %s", (_name, error) => {
    expect(isDatabaseUnavailable(error)).toBe(false);
  });
});

describe("isConnectionLost", () => {
  it.each([
    [
      "a session the server ended (57P01)",
      postgresError("57P01", "terminating connection due to administrator command"),
    ],
    ["a server shutting down at once (57P02)", postgresError("57P02")],
    ["a connection exception (08006)", postgresError("08006")],
    ["a connection node-postgres lost", new Error("Connection terminated unexpectedly")],
    ["a reset connection", systemError("ECONNRESET", "read")],
    ["a write on a closed connection (EPIPE)", systemError("EPIPE", "write")],
  ])("is true for %s", (_name, error) => {
    expect(isConnectionLost(error)).toBe(true);
  });

  it.each([
    // The database itself refuses or does not answer: a new connection fares no better.
    ["a refused connection", systemError("ECONNREFUSED")],
    ["pg's query timeout", new Error("Query read timeout")],
    ["pg-pool's connect timeout", new Error("timeout exceeded when trying to connect")],
    ["a statement cancelled (57014)", postgresError("57014")],
    ["a lock not available (55P03)", postgresError("55P03")],
    ["too many connections (53300)", postgresError("53300")],
    ["a unique violation (23505)", postgresError("23505")],
    ["our own close (Connection terminated)", new Error("Connection terminated")],
    ["something that is not an error", "ECONNRESET"],
  ])("is false for %s", (_name, error) => {
    expect(isConnectionLost(error)).toBe(false);
  });
});
