import { someInChain } from "../error-chain.js";

/**
 * PostgreSQL SQLSTATE classes that name the statement, the table, the role, the transaction or the
 * server, never a value: the same INSERT fails whatever its rows hold. 42 (syntax error or access
 * rule violation: 42501 the INSERT grant revoked, or a file the server may not write, 42P01 the
 * table missing, 42703 a column missing, 42804 a column's type changed: a build against another
 * schema), 25 (a transaction in the wrong state: 25P02 one already aborted), 0A (a feature not
 * supported), 0B and 2D (a transaction begun or ended wrongly), 26 (a prepared statement gone),
 * 3B (a savepoint), 3D and 3F (the database or the schema missing), 55 (an object not in the
 * state the statement needs), 57 (an operator's intervention: a database dropped, a session timed
 * out), XX (the server's internal errors: a corrupted table or index fails every insert). Not 21,
 * 22 or 23 (a value's cardinality, a data exception, an integrity violation: one row's content),
 * nor anything else (a trigger's own error, P0001, is whatever the trigger was written to refuse).
 */
const postgresTableState = /^(?:0A|0B|25|26|2D|3B|3D|3F|42|55|57|XX)[0-9A-Z]{3}$/;
/**
 * better-sqlite3 result codes (and their extended forms) that no value causes: SQLITE_ERROR (the
 * statement cannot be prepared: "no such table", "table … has no column named …"), SQLITE_SCHEMA,
 * SQLITE_PERM, SQLITE_AUTH, SQLITE_CORRUPT, SQLITE_NOTADB, SQLITE_FORMAT, SQLITE_NOLFS,
 * SQLITE_INTERNAL, SQLITE_NOTFOUND, SQLITE_ABORT, SQLITE_INTERRUPT, SQLITE_MISUSE and SQLITE_RANGE.
 * Not SQLITE_CONSTRAINT_*, SQLITE_TOOBIG or SQLITE_MISMATCH (a row's value). A read-only, locked,
 * full or failing file (SQLITE_READONLY, BUSY, FULL, IOERR…) is an outage: database-unavailable.ts.
 */
const sqliteTableState =
  /^SQLITE_(?:ERROR|SCHEMA|PERM|AUTH|CORRUPT|NOTADB|FORMAT|NOLFS|INTERNAL|NOTFOUND|ABORT|INTERRUPT|MISUSE|RANGE)(?:_|$)/;

/**
 * True when the database refused a write for something no row holds (the table, its columns, the
 * role's grants, the transaction), so it refuses every row alike until an operator (or a deploy)
 * changes that: the usage recorder keeps its rows queued, as in an outage, instead of dropping them
 * one by one, once a row written on its own is refused too (a trigger or a row-level security
 * policy may refuse only some rows with such a code: usage-recorder.ts, tableTakesRows). Not an
 * outage (isDatabaseUnavailable): a request or an admin call that meets one is answered 500, the
 * fault logged, not 503 asking to retry shortly. Read along errorChain, as isDatabaseUnavailable
 * is: a refusal among an AggregateError's errors counts, one under a GatewayError (which already
 * carries its answer) does not.
 */
export function refusesEveryRow(error: unknown): boolean {
  return someInChain(error, (each) => {
    const code = (each as { code?: unknown }).code;
    return typeof code === "string" && (postgresTableState.test(code) || sqliteTableState.test(code));
  });
}
