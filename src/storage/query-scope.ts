import { AsyncLocalStorage } from "node:async_hooks";

const current = new AsyncLocalStorage<QueryScope>();

/**
 * The PostgreSQL queries one call makes, which the shutdown's deadline ends when it refuses the
 * call (`end`): an admin write or report waiting for a lock another session holds (a row
 * `SELECT … FOR UPDATE`, a `LOCK TABLE`, a long transaction by hand) would otherwise go on waiting
 * on the server, its connection cut without an answer, the pool's close held until the shutdown's
 * margin ran out, and the write made once the lock went, after the gateway had gone. The pools
 * look the scope up when a connection is taken (`currentQueryScope`); SQLite's statements are ended
 * by `LockWait.end` instead. (docs/decisions/0049)
 */
export class QueryScope {
  #ended: Error | null = null;
  /** The cancel of each query in flight, until it settles. */
  readonly #inFlight = new Set<() => void>();

  /** Runs `work`: the queries it makes, however deep, are this scope's. */
  run<T>(work: () => Promise<T>): Promise<T> {
    return current.run(this, work);
  }

  /** The error the scope was ended with: a query not sent yet fails with it. */
  get ended(): Error | null {
    return this.#ended;
  }

  /**
   * A query is sent, which `cancel` cancels on the server; returns what to call once it settled.
   */
  sent(cancel: () => void): () => void {
    this.#inFlight.add(cancel);
    return () => this.#inFlight.delete(cancel);
  }

  /**
   * Ends the scope with `reason`: each query in flight is cancelled on the server (its transaction
   * rolled back, as a statement cancelled is), and fails with `reason` once it has settled, as
   * does every query the call would send after it (a transaction's rollback excepted). Returns how
   * many queries were in flight.
   */
  end(reason: Error): number {
    if (this.#ended === null) this.#ended = reason;
    const cancels = [...this.#inFlight];
    this.#inFlight.clear();
    for (const cancel of cancels) cancel();
    return cancels.length;
  }
}

/** The scope of the call whose work is running, if it has one. */
export function currentQueryScope(): QueryScope | undefined {
  return current.getStore();
}
