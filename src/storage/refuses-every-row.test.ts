import BetterSqlite3 from "better-sqlite3";
import { DatabaseError } from "pg";
import { describe, expect, it } from "vitest";
import { GatewayError } from "../errors.js";
import { refusesEveryRow } from "./refuses-every-row.js";

const postgresError = (code: string, message = "server error") =>
  Object.assign(new DatabaseError(message, 0, "error"), { code });
const sqliteError = (code: string, message = "sqlite error") => new BetterSqlite3.SqliteError(message, code);

describe("refusesEveryRow", () => {
  it.each([
    ["the INSERT grant revoked (42501)", postgresError("42501", "permission denied for table usage_records")],
    ["the table missing (42P01)", postgresError("42P01", 'relation "usage_records" does not exist')],
    ["a column missing (42703)", postgresError("42703")],
    ["a column whose type changed (42804)", postgresError("42804")],
    ["no unique index for on conflict (42P10)", postgresError("42P10")],
    ["a transaction already aborted (25P02)", postgresError("25P02")],
    ["a feature not supported (0A000)", postgresError("0A000")],
    ["a prepared statement gone (26000)", postgresError("26000")],
    ["the schema missing (3F000)", postgresError("3F000")],
    ["the database missing (3D000)", postgresError("3D000")],
    ["the database dropped (57P04)", postgresError("57P04")],
    ["a corrupted index (XX002)", postgresError("XX002")],
    ["SQLite's table missing", sqliteError("SQLITE_ERROR", "no such table: usage_records")],
    [
      "SQLite's column missing",
      sqliteError("SQLITE_ERROR", "table usage_records has no column named requests"),
    ],
    ["a corrupted SQLite file", sqliteError("SQLITE_CORRUPT")],
    ["SQLite's schema changed", sqliteError("SQLITE_SCHEMA")],
    ["SQLite's authorizer", sqliteError("SQLITE_AUTH")],
    ["a refusal wrapped as a cause", new Error("insert failed", { cause: postgresError("42501") })],
    [
      "a refusal among an AggregateError's errors",
      new AggregateError([new Error("another"), postgresError("42P01")], "every insert failed"),
    ],
  ])("is true for %s", (_name, error) => {
    expect(refusesEveryRow(error)).toBe(true);
  });

  it.each([
    ["a NUL in a text value (22021)", postgresError("22021")],
    ["a number out of range (22003)", postgresError("22003")],
    ["a not-null violation (23502)", postgresError("23502")],
    ["a check violation (23514)", postgresError("23514")],
    ["a unique violation (23505)", postgresError("23505")],
    ["a row affected twice (21000)", postgresError("21000")],
    ["a trigger's own error (P0001)", postgresError("P0001")],
    ["an index row too large (54000)", postgresError("54000")],
    ["SQLITE_CONSTRAINT_NOTNULL", sqliteError("SQLITE_CONSTRAINT_NOTNULL")],
    ["SQLITE_CONSTRAINT_CHECK", sqliteError("SQLITE_CONSTRAINT_CHECK")],
    ["SQLITE_TOOBIG", sqliteError("SQLITE_TOOBIG")],
    ["SQLITE_MISMATCH", sqliteError("SQLITE_MISMATCH")],
    // Outages are isDatabaseUnavailable's, not these.
    ["SQLITE_READONLY", sqliteError("SQLITE_READONLY")],
    ["SQLITE_FULL", sqliteError("SQLITE_FULL")],
    ["a refused connection", Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" })],
    ["a value better-sqlite3 cannot bind", new TypeError("SQLite3 can only bind numbers, strings, bigints")],
    ["something that is not an error", "42501"],
    [
      "an error that already has its answer, caused by a refusal",
      new GatewayError("INTERNAL_ERROR", "The write failed", { cause: postgresError("42501") }),
    ],
  ])("is false for %s", (_name, error) => {
    expect(refusesEveryRow(error)).toBe(false);
  });
});
