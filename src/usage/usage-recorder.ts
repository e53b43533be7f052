import { isDatabaseUnavailable } from "../storage/database-unavailable.js";
import { refusesEveryRow } from "../storage/refuses-every-row.js";
import type { UsageRecord, UsageRepository } from "../storage/usage-repository.js";
import { createRefusalCoalescer } from "./refusal-coalescer.js";

export interface UsageRecorderDeps {
  repository: UsageRepository;
  flushIntervalMs: number;
  /** Rows held while the database is down; rows beyond it are dropped and counted. */
  queueMax: number;
  batchSize?: number;
  onQueueDepth?: (depth: number) => void;
  /** Rows now in the database (the spend guard stops counting them as queued once it reads them back). */
  onWritten?: (rows: readonly UsageRecord[]) => void;
  /**
   * Rows lost: the queue was full (an outage longer than it holds), or the recorder had stopped;
   * `refusals-evicted`: rows of refused requests taken off a full queue to make room for a call's.
   * `rows`: the rows themselves (`count` of them), for the log to hold what the table will not.
   */
  onDropped?: (
    count: number,
    reason: "queue-full" | "refusals-evicted" | "shutdown",
    rows: readonly UsageRecord[],
  ) => void;
  /**
   * A row the database refuses for what it holds (not an outage, nor a refusal of every row; a
   * policy's or a trigger's refusal of that row with a code that names no value, the table taking
   * other rows): dropped, so it cannot block the rest.
   */
  onRefused?: (row: UsageRecord, error: unknown) => void;
  onWriteFailure?: (error: unknown) => void;
  onRecovered?: () => void;
  /**
   * An authenticated client's refusals (`authenticated-refusal`) of one key written as rows of their
   * own each minute; the rest are coalesced into one row (default 10; see refusal-coalescer.ts).
   */
  refusalRowsPerMinute?: number;
  /** A refusal held for its key's coalesced row, not written as a row of its own. */
  onCoalesced?: (row: UsageRecord) => void;
  /** Epoch ms, to tell when a minute of coalesced refusals ended (default Date.now). */
  now?: () => number;
}

export interface UsageRecorder {
  /**
   * Queues a row; never blocks and never throws on the request path. `refusal`: the row of a request
   * refused before it was admitted (failed authentication, an unknown project, a limit): the first
   * to go when the queue is full. `authenticated-refusal`: a refusal of a client whose credentials
   * passed (a rate limit's 429, a 403), which it may repeat as fast as it sends: past the first of a
   * minute for its key, held and written as one row counting them all (docs/decisions/0015).
   */
  record(row: UsageRecord, kind?: "call" | "refusal" | "authenticated-refusal"): void;
  /**
   * Writes everything queued, and the refusals held for a coalesced row (retrying until
   * `deadlineMs` passes); used at shutdown and in tests. Returns by the deadline even when a write
   * never answers (a database that hangs).
   */
  flush(deadlineMs?: number): Promise<void>;
  depth(): number;
  /**
   * True from a write the database could not take (an outage: unreachable, read-only, out of disk;
   * or a refusal of every row: the table or a column missing, the INSERT grant revoked) until one it
   * takes: what `onWriteFailure` and `onRecovered` tell, for /health to ask.
   */
  writesFailing(): boolean;
  /**
   * Stops the timer, waits up to `deadlineMs` for a write in progress (and, when refusals were held
   * for a coalesced row, for their rows and those queued to be written), and counts the rows still
   * queued, and any recorded afterwards, as dropped: they are lost, and must not be lost silently.
   */
  stop(deadlineMs?: number): Promise<void>;
}

/**
 * Writes usage rows in batches off the request path. A batch that fails because the database is
 * unavailable, or that it refuses for something no row holds (the table or a column missing, the
 * role's INSERT grant revoked: refuses-every-row.ts), stays at the head of the queue and is retried
 * with backoff; rows are keyed by request id and inserted with on-conflict-do-nothing, so a batch
 * that committed before its acknowledgement was lost is never written twice. A batch refused for
 * anything else is written row by row, and only the rows the database refuses are dropped: one bad
 * row must not stop every later one from being written. Before, a refusal of every row was taken
 * for one per row: the whole queue was dropped within seconds, a log line per row, and /health
 * never said the writes failed. A code that names no value may still be a policy's or a trigger's
 * refusal of some rows: the table is asked to take a row on its own first (tableTakesRows), and
 * when it does, the batch is written row by row as well.
 *
 * A full queue keeps its oldest rows, but not at the cost of a call's: refused requests cost an
 * anonymous client nothing to send (made-up project ids, wrong keys, throttled retries), and in an
 * outage their rows would otherwise fill the queue and push out the rows of admitted, billed calls.
 * A call's row that finds the queue full takes the place of the refusals' rows queued behind the
 * write in progress (all of them at once: one pass, however long the outage). Those the write holds
 * stay until it ends, as it may yet write them; calls' rows take their room meanwhile, so the queue
 * holds at most `queueMax` plus one batch, and when the write fails they go too.
 */
export function createUsageRecorder(deps: UsageRecorderDeps): UsageRecorder {
  // Small batches with a turn of the event loop between them: the embedded SQLite writes
  // synchronously, and one large batch would stall every request in flight meanwhile.
  const batchSize = deps.batchSize ?? 200;
  let queue: UsageRecord[] = [];
  /** The queue's rows of refused requests, and how many of them are queued. */
  const refusals = new WeakSet<UsageRecord>();
  let refusalsQueued = 0;
  /** The rows at the queue's head that the write in progress took (they stay there until it ends). */
  let inFlight = 0;
  /**
   * Refusals' rows the write in progress holds whose room calls' rows have taken: the queue holds
   * that many more than `queueMax` until the write ends (written, or evicted if it failed).
   */
  let overdrawn = 0;
  /**
   * Rows at the queue's head that the write in progress has reported (written or refused: a
   * row-by-row pass's); they leave the queue when it ends. A stop that gives up on the write counts
   * the rest as dropped, not these.
   */
  let reported = 0;
  /** Set by a stop that gave up waiting for the write in progress: nothing it does is reported after. */
  let givenUp = false;
  /**
   * The last row the database took. Written again (on conflict do nothing: a no-op), it asks
   * whether the table takes rows at all after a refusal that names no value (tableTakesRows).
   */
  let lastWritten: UsageRecord | null = null;
  /** Which row of a refused batch the next probe tries (each try another). */
  let probeTurn = 0;
  let writing: Promise<void> | null = null;
  let failing = false;
  let backoffMs = 0;
  /** When the last write failed, and when the next may be tried (the backoff after it). */
  let failedAt = 0;
  let retryAt = 0;
  let stopped = false;
  const coalescer = createRefusalCoalescer({
    write: (row) => enqueue(row, "refusal"),
    ...(deps.now ? { now: deps.now } : {}),
    ...(deps.refusalRowsPerMinute !== undefined ? { rowsPerMinute: deps.refusalRowsPerMinute } : {}),
    ...(deps.onCoalesced ? { onCoalesced: deps.onCoalesced } : {}),
  });

  const timer = setInterval(() => {
    coalescer.sweep();
    void drain(true);
  }, deps.flushIntervalMs);
  timer.unref();

  async function writeOnce(): Promise<boolean> {
    const batch = queue.slice(0, batchSize);
    if (batch.length === 0) return true;
    inFlight = batch.length;
    try {
      await deps.repository.insertBatch(batch);
    } catch (error) {
      // A single row of the batch is another statement: the batch of one is that row's.
      const kept = !givenUp && (await keepsRows(error, batch.length > 1 ? batch : []));
      if (givenUp) return false;
      if (!kept) return writeRowByRow(batch, error);
      writeEnded();
      return failed(error);
    }
    if (givenUp) return false;
    done(batch.length);
    lastWritten = batch[batch.length - 1] ?? null;
    deps.onWritten?.(batch);
    return true;
  }

  /**
   * Whether a failed write keeps its rows queued, to be retried: the database cannot serve now (an
   * outage), or it refuses every row alike, whatever it holds (refuses-every-row.ts), and still
   * does when asked for one row on its own (`tableTakesRows`). Either ends only when the database
   * (or its operator) changes; a row's own bad value never does, and only that row is dropped.
   */
  async function keepsRows(error: unknown, others: readonly UsageRecord[]): Promise<boolean> {
    if (isDatabaseUnavailable(error)) return true;
    if (!refusesEveryRow(error)) return false;
    return !(await tableTakesRows(others));
  }

  /**
   * Whether the table takes a row now, after a refusal whose code names the table, the role or the
   * statement, never a value: a policy or a trigger may refuse some rows with such a code too (a
   * row-level security policy's WITH CHECK, a trigger raising 42501 for one project's rows). It
   * writes again the last row the database took (a no-op, on conflict do nothing), which a revoked
   * grant or a missing table or column refuses as it refuses any; then, should that be refused too
   * (a policy that now refuses that row, or none written yet), one of `others`, another each try,
   * which stays in the table: the pass that follows writes it again, as a no-op, and reports it.
   * Before, a policy's refusal of some rows held the queue for good, the rows it takes never written.
   */
  async function tableTakesRows(others: readonly UsageRecord[]): Promise<boolean> {
    const probes: UsageRecord[] = [];
    if (lastWritten) probes.push(lastWritten);
    if (others.length > 0) probes.push(others[probeTurn++ % others.length] as UsageRecord);
    for (const probe of probes) {
      if (givenUp) return false;
      try {
        await deps.repository.insertBatch([probe]);
      } catch {
        continue;
      }
      lastWritten = probe;
      return true;
    }
    return false;
  }

  /**
   * The write in progress ended, its rows written or still queued. Refusals it held that calls'
   * rows were let in for, still queued (the write failed), make way now.
   */
  function writeEnded(): void {
    inFlight = 0;
    reported = 0;
    if (overdrawn === 0) return;
    overdrawn = 0;
    if (queue.length > deps.queueMax && refusalsQueued > 0) evictRefusals();
  }

  /** The first `count` rows of the queue are written (or refused for good): off the queue. */
  function done(count: number): void {
    if (refusalsQueued > 0)
      for (let index = 0; index < count; index++)
        if (refusals.has(queue[index] as UsageRecord)) refusalsQueued--;
    queue = queue.slice(count);
    writeEnded();
    deps.onQueueDepth?.(queue.length);
    if (failing) {
      failing = false;
      backoffMs = 0;
      deps.onRecovered?.();
    }
  }

  /**
   * Each row of a refused batch on its own; stops at an outage or a refusal of every row (the grant
   * revoked meanwhile, say), keeping the rest queued. A row refused with a code that names no value
   * is dropped when the table still takes rows (`tableTakesRows`): a policy's or a trigger's
   * refusal of that row; other rows refused for the same reason in the pass are dropped without
   * asking again (a project's rows, say, half the batch). Stops, reporting nothing more, once a stop
   * gave up on it.
   */
  async function writeRowByRow(batch: UsageRecord[], batchError: unknown): Promise<boolean> {
    /** Refusals naming no value that the table was found to take other rows after, this pass. */
    const rowsOwn = new Set<string>();
    if (refusesEveryRow(batchError)) rowsOwn.add(refusalKey(refusalReason(batchError)));
    for (const [index, row] of batch.entries()) {
      if (givenUp) return false;
      try {
        await deps.repository.insertBatch([row]);
      } catch (error) {
        const known = refusesEveryRow(error) && rowsOwn.has(refusalKey(refusalReason(error)));
        const kept = !known && !givenUp && (await keepsRows(error, batch.slice(index + 1)));
        if (givenUp) return false;
        if (kept) {
          if (index > 0) done(index);
          else writeEnded();
          return failed(error);
        }
        if (refusesEveryRow(error)) rowsOwn.add(refusalKey(refusalReason(error)));
        reported++;
        deps.onRefused?.(row, error);
        continue;
      }
      if (givenUp) return false;
      reported++;
      lastWritten = row;
      deps.onWritten?.([row]);
    }
    done(batch.length);
    return true;
  }

  function failed(error: unknown): false {
    failing = true;
    backoffMs = Math.min(Math.max(backoffMs * 2, 100), 5000);
    failedAt = Date.now();
    retryAt = failedAt + backoffMs;
    deps.onWriteFailure?.(error);
    return false;
  }

  /**
   * Writes full batches; with `everything`, also the rows queued when it was called. Rows that
   * arrive while it writes wait for a full batch or the next tick: draining them as they trickle
   * in would commit a transaction of a few rows per turn of the event loop, and on SQLite the
   * commit, not the row, is what costs.
   */
  async function drain(everything: boolean): Promise<void> {
    if (writing || queue.length === 0 || Date.now() < retryAt) return;
    let due = everything ? queue.length : 0;
    writing = (async () => {
      while (queue.length >= batchSize || (due > 0 && queue.length > 0)) {
        if (!(await writeOnce())) break;
        due -= batchSize;
        await new Promise((resolve) => setImmediate(resolve));
      }
    })();
    try {
      await writing;
    } finally {
      writing = null;
    }
  }

  /**
   * Takes the refusals' rows off the queue, but for those the write in progress holds (it may yet
   * write them); calls' rows may take their room meanwhile (`overdrawn`), and they go when it fails.
   */
  function evictRefusals(): void {
    const kept = queue.slice(0, inFlight);
    const evicted: UsageRecord[] = [];
    let held = 0;
    for (const row of kept) if (refusals.has(row)) held++;
    for (let index = inFlight; index < queue.length; index++) {
      const row = queue[index] as UsageRecord;
      (refusals.has(row) ? evicted : kept).push(row);
    }
    refusalsQueued -= evicted.length;
    overdrawn = held;
    queue = kept;
    deps.onQueueDepth?.(queue.length);
    if (evicted.length > 0) deps.onDropped?.(evicted.length, "refusals-evicted", evicted);
  }

  /**
   * A row was dropped from the full queue: while the writes fail, each row recorded until the next
   * try is lost, and a try costs a database that is still down one batch it cannot take (and one or
   * two rows on their own after a refusal of every row). The next comes `droppingRetryMs` after the
   * last failed one, not after the backoff (up to 5 s), and is started here rather than at the
   * next tick: a database that is back takes the rows within that time. Before, rows were dropped
   * for up to 5 s after it was back. Without a row dropped (no traffic, or room in the queue), a
   * wait loses nothing, and the backoff stays as it was.
   */
  function retrySoon(): void {
    if (!failing) return;
    retryAt = Math.min(retryAt, failedAt + droppingRetryMs);
    void drain(true);
  }

  /** Whether the queue has no room for a row of `kind`. */
  function full(kind: "call" | "refusal"): boolean {
    return queue.length >= deps.queueMax + (kind === "call" ? overdrawn : 0);
  }

  function enqueue(row: UsageRecord, kind: "call" | "refusal"): void {
    if (!stopped && kind === "call" && refusalsQueued > 0 && full(kind)) evictRefusals();
    if (stopped || full(kind)) {
      deps.onDropped?.(1, stopped ? "shutdown" : "queue-full", [row]);
      if (!stopped) retrySoon();
      return;
    }
    if (kind === "refusal") {
      refusals.add(row);
      refusalsQueued++;
    }
    queue.push(row);
    deps.onQueueDepth?.(queue.length);
    if (queue.length >= batchSize) void drain(false);
  }

  /** Queues the rows of every refusal held for a coalesced row; whether there were any. */
  function queueHeld(): boolean {
    const held = coalescer.takeAll();
    for (const row of held) enqueue(row, "refusal");
    return held.length > 0;
  }

  async function flush(deadlineMs = 10_000): Promise<void> {
    const deadline = Date.now() + deadlineMs;
    queueHeld();
    while (queue.length > 0 && Date.now() < deadline) {
      if (writing && !(await settlesBy(writing, deadline))) return;
      retryAt = 0;
      if (!(await settlesBy(drain(true), deadline))) return;
      if (queue.length > 0 && failing)
        await new Promise((resolve) =>
          setTimeout(resolve, Math.min(backoffMs, flushRetryMs, Math.max(0, deadline - Date.now()))),
        );
    }
  }

  return {
    record(row, kind = "call") {
      if (kind === "authenticated-refusal" && !stopped) coalescer.offer(row);
      else enqueue(row, kind === "authenticated-refusal" ? "refusal" : kind);
    },
    flush,
    depth: () => queue.length,
    writesFailing: () => failing,
    async stop(deadlineMs = 1000) {
      const deadline = Date.now() + deadlineMs;
      clearInterval(timer);
      // Refusals held for a coalesced row were never queued: they get their chance to be written
      // (with what is queued before them) rather than being dropped unwritten. Any recorded from
      // here on is dropped and counted, as every row is after stop.
      const held = queueHeld();
      stopped = true;
      if (held) await flush(deadlineMs);
      // A write still unanswered is given up on: its rows are counted dropped now (but those it
      // already reported written or refused), and whatever it does later is not reported, so no
      // row is counted twice. One it did write after all is in the table, counted as dropped.
      if (writing && !(await settlesBy(writing, deadline))) givenUp = true;
      const unreported = queue.slice(reported);
      if (queue.length > 0) {
        if (unreported.length > 0) deps.onDropped?.(unreported.length, "shutdown", unreported);
        queue = [];
        refusalsQueued = 0;
        overdrawn = 0;
        inFlight = 0;
        reported = 0;
        deps.onQueueDepth?.(0);
      }
    },
  };
}

/** Why the database refused a row: its error's code (a SQLSTATE, a SQLite code) and message. */
export interface RefusalReason {
  code: string | undefined;
  reason: string;
}

export function refusalReason(error: unknown): RefusalReason {
  const code = (error as { code?: unknown } | null)?.code;
  return {
    code: typeof code === "string" ? code : undefined,
    reason: error instanceof Error ? error.message : String(error),
  };
}

/**
 * A refusal's code and message as one key: a reason the database gives alike for whatever row it
 * refuses so (the recorder's pass, the reports' log windows).
 */
export function refusalKey(refusal: RefusalReason): string {
  return `${refusal.code} ${refusal.reason}`;
}

/**
 * The longest a flush waits between two tries of a database that failed. The backoff (up to 5 s)
 * spares a database that struggles while the gateway serves; a flush has a deadline (the
 * shutdown's), and sleeping out a long outage's 5 s there dropped the rows of a database that was
 * back 200 ms into a 3 s window.
 */
const flushRetryMs = 100;

/**
 * The longest the recorder waits between two tries of a database that failed while rows are being
 * dropped from a full queue (each one lost): at most four tries a second, each one batch, as a
 * healthy database under traffic is sent one each tick of the default 250 ms flush interval.
 */
const droppingRetryMs = 250;

/** Waits for `promise` until `deadline` (epoch ms): true when it settled by then. */
async function settlesBy(promise: Promise<unknown>, deadline: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), Math.max(0, deadline - Date.now()));
  });
  try {
    return await Promise.race([promise.then(() => true), timeout]);
  } finally {
    clearTimeout(timer);
  }
}
