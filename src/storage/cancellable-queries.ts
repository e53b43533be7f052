import type { CancelTarget } from "./postgres-cancel-request.js";

/**
 * The admin API's PostgreSQL queries in flight, each with its backend (its key, and where its
 * session was opened, for a CancelRequest), which the shutdown's deadline ends (`end`) when it
 * refuses the admin calls: an admin write or report waiting for a lock another session holds (a row
 * `SELECT … FOR UPDATE`, a `LOCK TABLE`, a long transaction by hand) would otherwise go on waiting
 * on the server, its connection cut without an answer, the pools' close held until the shutdown's
 * margin ran out, and the write made once the lock went, after the gateway had gone. The admin API
 * has Kysely instances of its own over the gateway's pools whose connections report here
 * (`closingTimedOut`); the proxy's reads and the usage recorder's writes go through the plain ones,
 * and are never cancelled. SQLite's waits are ended by `LockWait.end` instead.
 * (docs/decisions/0049)
 *
 * One object for every admin call, as `LockWait` is, not a scope per call found through
 * `AsyncLocalStorage`: the deadline refuses every call not answered at once and the database
 * closes next, so there is nothing to tell apart; and on Node 20 the first `AsyncLocalStorage.run`
 * turns async hooks on for the whole process, which every promise made afterwards pays for, the
 * proxy's too (an async call and its await, measured: 115 ns without, about 290 ns with).
 */
export class CancellableQueries {
  #ended: Error | null = null;
  /** The queries in flight: each one's backend, and what to do when it is cancelled. */
  readonly #inFlight = new Map<object, { backend: CancelTarget; cancelled: () => void }>();
  readonly #cancelBackend: (backend: CancelTarget) => void;

  /** The takings of a connection under way (`taking`), each failed by `end`. */
  readonly #taking = new Set<(reason: Error) => void>();

  /** `cancelBackend` cancels what a backend is running, on the server (a CancelRequest). */
  constructor(cancelBackend: (backend: CancelTarget) => void) {
    this.#cancelBackend = cancelBackend;
  }

  /** The error `end` was given: a query not sent yet fails with it, and one in flight once settled. */
  get ended(): Error | null {
    return this.#ended;
  }

  /**
   * A query is sent on `backend`; `cancelled` is called if `end` cancels it (its connection is
   * then closed, not pooled: a cancel that lands late must not stop another query on it). Returns
   * what to call once the query has settled.
   */
  sent(backend: CancelTarget, cancelled: () => void): () => void {
    const query = {};
    this.#inFlight.set(query, { backend, cancelled });
    return () => this.#inFlight.delete(query);
  }

  /**
   * A connection being taken (`connecting`, from the pool: all its connections may be in use, or
   * the server slow to open one), failed with the reason of an `end` that comes first; the
   * connection, once it comes, is given back (`giveBack`).
   */
  taking<T>(connecting: Promise<T>, giveBack: (connection: T) => void): Promise<T> {
    return new Promise((resolve, reject) => {
      let ended = false;
      const fail = (reason: Error) => {
        ended = true;
        reject(reason);
      };
      this.#taking.add(fail);
      connecting.then(
        (connection) => {
          this.#taking.delete(fail);
          if (ended) giveBack(connection);
          else resolve(connection);
        },
        (error: unknown) => {
          this.#taking.delete(fail);
          reject(error);
        },
      );
    });
  }

  /**
   * Ends with `reason`: each query in flight is cancelled on the server (its transaction rolled
   * back, as a statement cancelled is) and fails with `reason` once it has settled, as does every
   * query sent after (a transaction's rollback excepted); a connection still being taken fails with
   * it at once (`taking`). Returns how many queries were in flight.
   */
  end(reason: Error): number {
    if (this.#ended === null) this.#ended = reason;
    const queries = [...this.#inFlight.values()];
    this.#inFlight.clear();
    const taking = [...this.#taking];
    this.#taking.clear();
    for (const fail of taking) fail(this.#ended);
    for (const { backend, cancelled } of queries) {
      cancelled();
      this.#cancelBackend(backend);
    }
    return queries.length;
  }
}
