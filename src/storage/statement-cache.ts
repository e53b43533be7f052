import type BetterSqlite3 from "better-sqlite3";
import type { SqliteDatabase } from "kysely";

/** Distinct statements held: the gateway's own queries are a few dozen texts. */
const defaultMaxStatements = 256;

/**
 * The embedded database as Kysely's SQLite dialect sees it, each statement text prepared once.
 * Kysely's driver calls `prepare` for every query it runs: ~65,000 instructions of SQLite's parser
 * and planner, more than running the statement, for the reloads of project and key records every
 * few seconds, each admin call and each usage report (docs/decisions/0005). SQLite prepares a held
 * statement again by itself when the schema changes under it (a migration). A statement still
 * busy (an iteration not finished) is not handed out twice: that call gets a fresh one. The least
 * recently used text goes past `maxStatements`, so queries whose text varies (a list of values
 * spelled out) cannot grow it without bound.
 */
export function cachingStatements(
  database: BetterSqlite3.Database,
  maxStatements = defaultMaxStatements,
): SqliteDatabase {
  const statements = new Map<string, BetterSqlite3.Statement>();
  return {
    prepare(sql) {
      const held = statements.get(sql);
      if (held === undefined) {
        const statement = database.prepare(sql);
        statements.set(sql, statement);
        if (statements.size > maxStatements) statements.delete(statements.keys().next().value as string);
        return statement;
      }
      if (held.busy) return database.prepare(sql);
      // Map order is recency: the text moves to the end.
      statements.delete(sql);
      statements.set(sql, held);
      return held;
    },
    close() {
      statements.clear();
      database.close();
    },
  };
}
