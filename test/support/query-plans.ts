import pg from "pg";
import { afterAll, beforeAll } from "vitest";
import { type OpenDatabase, openDatabase } from "../../src/storage/database.js";
import { createPostgresSchema } from "./services.js";

/** A compiled statement, as Kysely's `compile()` gives it. */
export interface Compiled {
  sql: string;
  parameters: readonly unknown[];
}

/**
 * An embedded database in memory, filled by `fill` (SQL the database runs itself) before the
 * suite's tests and closed after them; `plan` answers SQLite's plan of a statement, line by line.
 */
export function sqlitePlanStage(fill: string): {
  database: () => OpenDatabase;
  plan: (compiled: Compiled) => string[];
} {
  let database: OpenDatabase;
  beforeAll(async () => {
    database = await openDatabase({ dataDir: "unused", sqliteFile: ":memory:" });
    database.sqlite?.exec(fill);
  });
  afterAll(() => database.close());
  return {
    database: () => database,
    plan: (compiled) =>
      (database.sqlite?.prepare(`explain query plan ${compiled.sql}`).all(...compiled.parameters) ?? []).map(
        (row) => (row as { detail: string }).detail,
      ),
  };
}

/**
 * A PostgreSQL schema of its own, filled by `fill` (SQL) and its tables analysed, before the
 * suite's tests, and dropped after them. A table this small is read whole more cheaply than through
 * any index: with sequential scans priced out, the planner shows whether an index can serve a query
 * at all (it still scans the table when none can). `plan` answers PostgreSQL's plan of a statement
 * as text.
 */
export function postgresPlanStage(fill: string): {
  database: () => OpenDatabase;
  plan: (compiled: Compiled) => Promise<string>;
} {
  let database: OpenDatabase;
  let client: pg.Client;
  let drop: () => Promise<void>;
  beforeAll(async () => {
    const schema = await createPostgresSchema();
    drop = schema.drop;
    database = await openDatabase({ databaseUrl: schema.url, dataDir: "unused" });
    client = new pg.Client({ connectionString: schema.url });
    await client.connect();
    await client.query(fill);
    // This schema's tables only: a bare ANALYZE takes every table of the shared database, and
    // waits for each one another test holds locked (listed meanwhile as a lock not granted there).
    const { rows } = await client.query<{ name: string }>(
      "select format('%I', tablename) as name from pg_tables where schemaname = current_schema()",
    );
    await client.query(`analyze ${rows.map((row) => row.name).join(", ")}`);
    await client.query("set enable_seqscan = off");
  });
  afterAll(async () => {
    await client?.end();
    await database?.close();
    await drop?.();
  });
  return {
    database: () => database,
    async plan(compiled) {
      const { rows } = await client.query(`explain ${compiled.sql}`, [...compiled.parameters]);
      return rows.map((row: { "QUERY PLAN": string }) => row["QUERY PLAN"]).join("\n");
    },
  };
}
