import type BetterSqlite3 from "better-sqlite3";
import type { CompiledQuery, DatabaseConnection, Driver, SqliteDatabase } from "kysely";
import { SqliteDialect } from "./kysely.js";

/**
 * Waiting for another process's lock on the embedded database without holding the event loop
 * (docs/decisions/0044). better-sqlite3 is synchronous: a statement that finds the file locked
 * (a `sqlite3` shell or a script holding `BEGIN IMMEDIATE`, a long CLI write) waited in SQLite's
 * busy handler, sleeping on the event loop for up to the 5 s busy timeout, and every request of
 * every client stalled meanwhile, proxied streams too. The connection's busy timeout is 0 instead:
 * a statement that finds the file locked fails at once with SQLITE_BUSY, and is tried again after
 * a timer, for as long as the busy timeout would have waited; then it fails with that error, as it
 * did before. In WAL mode readers never wait for the writer, so this is the writes' wait (a read
 * that meets a lock all the same, during another process's recovery of the file, waits alike).
 */

/** The pauses between tries: SQLite's own busy handler's steps, then 100 ms each. */
const pausesMs = [1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50];
const longestPauseMs = 100;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** SQLITE_BUSY and its extended codes: the file is locked by another connection. */
export function isSqliteBusy(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" && code.startsWith("SQLITE_BUSY");
}

/**
 * `attempt`'s value, tried again while it fails with SQLITE_BUSY, `waitMs` in all (a try each step
 * of SQLite's busy handler); past that, its last error. `pause` passes the time between two tries
 * (a timer: the event loop serves everything else meanwhile). With `ends`, a wait that `ends.end`
 * ended fails at once with the error it names, and is not tried again.
 */
export async function waitingOutLocks<T>(
  attempt: () => T | Promise<T>,
  waitMs: number,
  pause: (ms: number) => Promise<void> = sleep,
  ends?: LockWait,
): Promise<T> {
  const started = performance.now();
  /** Set at the first SQLITE_BUSY, when `ends` is given: a statement that never waits costs nothing. */
  let waiting: object | undefined;
  try {
    for (let tries = 0; ; tries++) {
      try {
        return await attempt();
      } catch (error) {
        const left = waitMs - (performance.now() - started);
        if (!isSqliteBusy(error) || left <= 0) throw error;
        if (ends !== undefined) waiting ??= ends.began();
        await pause(Math.min(pausesMs[tries] ?? longestPauseMs, left));
        // Ended during the pause (or before it began): the statement is not tried again, so a call
        // refused at the shutdown's deadline does not make its write once the lock is released.
        const ended = ends?.endedWith(error);
        if (ended !== undefined) throw ended;
      }
    }
  } finally {
    if (waiting !== undefined) ends?.finished(waiting);
  }
}

/** The error an ended wait fails with, from the SQLITE_BUSY its statement last met. */
export type LockWaitEnd = (busy: unknown) => Error;

/**
 * How long a statement waits for another process's lock (`ms`: one object, so a test can shorten
 * it), and the waits under way, which `end` ends: the shutdown's deadline refuses a call whose
 * statement waits (its route answers the refusal, 503, rather than having its connection cut, and
 * its write is not made later), and the database's close ends what still waits (its next try would
 * meet a closed handle: "The database connection is not open", a bare TypeError).
 */
export class LockWait {
  ms: number;
  #end: LockWaitEnd | undefined;
  /** The errors ended waits failed with (`gaveUp`). */
  readonly #ended = new WeakSet<object>();
  /** The waits under way and not ended yet, each from its first SQLITE_BUSY. */
  readonly #waits = new Set<object>();
  /** The pauses under way (`sleep`), each woken by `end`. */
  readonly #sleeping = new Set<() => void>();

  constructor(ms: number) {
    this.ms = ms;
  }

  /**
   * Ends every wait under way, and every one after, each failing with `end`'s error once its pause
   * is over, at once; returns how many were under way and not ended yet.
   */
  end(end: LockWaitEnd): number {
    this.#end = end;
    const ended = this.#waits.size;
    this.#waits.clear();
    for (const wake of this.#sleeping) wake();
    return ended;
  }

  /** A timer's pause of `ms`, which `end` cuts short. */
  sleep(ms: number): Promise<void> {
    if (this.#end !== undefined) return Promise.resolve();
    return new Promise((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        this.#sleeping.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.#sleeping.add(wake);
    });
  }

  /** `waitingOutLocks`'s: a wait begins (its statement met a lock); the token `finished` takes. */
  began(): object {
    const waiting = {};
    if (this.#end === undefined) this.#waits.add(waiting);
    return waiting;
  }

  /** `waitingOutLocks`'s: the error a wait whose statement met `busy` ends with, once ended. */
  endedWith(busy: unknown): Error | undefined {
    const error = this.#end?.(busy);
    if (error !== undefined) this.#ended.add(error);
    return error;
  }

  /**
   * Whether `error` is what a wait `end` ended failed with: the statement was given up by the
   * shutdown, not failed (a usage prune says so in one line, without the error's stack).
   */
  gaveUp(error: unknown): boolean {
    return typeof error === "object" && error !== null && this.#ended.has(error);
  }

  /** `waitingOutLocks`'s: a wait is over. */
  finished(waiting: object): void {
    this.#waits.delete(waiting);
  }
}

/**
 * Kysely's SQLite dialect whose statements wait out other processes' locks with `waitingOutLocks`
 * (the connection's busy timeout must be 0). Transactions begin with `BEGIN IMMEDIATE`, which
 * takes the write lock first (waited for the same way) and then holds it: with Kysely's `BEGIN`
 * (deferred) a transaction that reads and then writes gets SQLITE_BUSY at its first write, at
 * once, without the busy handler, and SQLite's advice then is to roll it back, not to try the
 * statement again. So a statement inside a transaction is never tried again; it holds the lock.
 */
export class LockWaitingSqliteDialect extends SqliteDialect {
  readonly #sqlite: BetterSqlite3.Database;
  readonly #wait: LockWait;

  constructor(sqlite: BetterSqlite3.Database, database: SqliteDatabase, wait: LockWait) {
    super({ database });
    this.#sqlite = sqlite;
    this.#wait = wait;
  }

  override createDriver(): Driver {
    return new LockWaitingDriver(super.createDriver(), this.#sqlite, this.#wait);
  }
}

/**
 * SQLite's driver (one connection, behind a lock Kysely's driver keeps) with each statement
 * outside a transaction, and each `BEGIN IMMEDIATE`, waiting for other processes' locks. While a
 * statement waits, the connection is lent to the queries queued for it (the project and key
 * reloads, the spend guard's reads: they do not wait for another process's writer), but only when
 * that statement is the first of its hold on the connection: a `db.connection()` that has run
 * statements keeps it to itself.
 */
class LockWaitingDriver implements Driver {
  readonly #driver: Driver;
  readonly #sqlite: BetterSqlite3.Database;
  readonly #wait: LockWait;
  readonly #wrapped = new WeakMap<DatabaseConnection, DatabaseConnection>();
  readonly #unwrapped = new WeakMap<DatabaseConnection, DatabaseConnection>();
  /** True from acquiring the connection until its first statement. */
  #fresh = false;

  constructor(driver: Driver, sqlite: BetterSqlite3.Database, wait: LockWait) {
    this.#driver = driver;
    this.#sqlite = sqlite;
    this.#wait = wait;
  }

  init(): Promise<void> {
    return this.#driver.init();
  }

  async acquireConnection(): Promise<DatabaseConnection> {
    const connection = await this.#driver.acquireConnection();
    this.#fresh = true;
    let wrapped = this.#wrapped.get(connection);
    if (wrapped === undefined) {
      wrapped = {
        executeQuery: <R>(compiled: CompiledQuery) =>
          this.#waiting(connection, () => connection.executeQuery<R>(compiled)),
        // Kysely streams only when asked to (`.stream()`), which Sluice never does.
        streamQuery: <R>(compiled: CompiledQuery, chunkSize?: number) =>
          connection.streamQuery<R>(compiled, chunkSize),
      };
      this.#wrapped.set(connection, wrapped);
      this.#unwrapped.set(wrapped, connection);
    }
    return wrapped;
  }

  async beginTransaction(connection: DatabaseConnection): Promise<void> {
    await this.#waiting(this.#unwrap(connection), () => {
      this.#sqlite.exec("begin immediate");
    });
  }

  commitTransaction(connection: DatabaseConnection): Promise<void> {
    // A COMMIT that meets a lock may be tried again (SQLite's advice); in WAL mode, with the write
    // lock held since BEGIN IMMEDIATE, none does.
    return waitingOutLocks(() => this.#driver.commitTransaction(this.#unwrap(connection)), this.#wait.ms);
  }

  rollbackTransaction(connection: DatabaseConnection): Promise<void> {
    return this.#driver.rollbackTransaction(this.#unwrap(connection));
  }

  async savepoint(...[connection, ...rest]: Parameters<NonNullable<Driver["savepoint"]>>): Promise<void> {
    await this.#driver.savepoint?.(this.#unwrap(connection), ...rest);
  }

  async rollbackToSavepoint(
    ...[connection, ...rest]: Parameters<NonNullable<Driver["rollbackToSavepoint"]>>
  ): Promise<void> {
    await this.#driver.rollbackToSavepoint?.(this.#unwrap(connection), ...rest);
  }

  async releaseSavepoint(
    ...[connection, ...rest]: Parameters<NonNullable<Driver["releaseSavepoint"]>>
  ): Promise<void> {
    await this.#driver.releaseSavepoint?.(this.#unwrap(connection), ...rest);
  }

  releaseConnection(connection: DatabaseConnection): Promise<void> {
    this.#fresh = false;
    return this.#driver.releaseConnection(this.#unwrap(connection));
  }

  destroy(): Promise<void> {
    return this.#driver.destroy();
  }

  #unwrap(connection: DatabaseConnection): DatabaseConnection {
    return this.#unwrapped.get(connection) ?? connection;
  }

  /**
   * `attempt` (a statement on `connection`), waiting out other processes' locks unless a
   * transaction is open; between tries the connection is lent when `attempt` is the first
   * statement of its hold.
   */
  #waiting<T>(connection: DatabaseConnection, attempt: () => T | Promise<T>): Promise<T> {
    const lends = this.#fresh;
    this.#fresh = false;
    if (this.#sqlite.inTransaction) return waitingOutLocks(attempt, 0);
    const wait = this.#wait;
    const lending = async (ms: number) => {
      await this.#driver.releaseConnection(connection);
      try {
        await wait.sleep(ms);
      } finally {
        await this.#driver.acquireConnection();
        this.#fresh = false;
      }
    };
    return waitingOutLocks(attempt, wait.ms, lends ? lending : (ms) => wait.sleep(ms), wait);
  }
}
