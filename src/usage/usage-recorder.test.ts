import { setImmediate as nextTurn } from "node:timers/promises";
import BetterSqlite3 from "better-sqlite3";
import { afterEach, describe, expect, it, vi } from "vitest";
import { connectionRefused, fakeUsageRepository } from "../../test/support/fake-usage-repository.js";
import { usageRow } from "../../test/support/usage-row.js";
import type { UsageRecord, UsageRepository } from "../storage/usage-repository.js";
import { createUsageRecorder } from "./usage-recorder.js";

function row(index: number): UsageRecord {
  return usageRow(`req_${String(index).padStart(32, "0")}`);
}

function recordingRepository(): UsageRepository & { batches: number[]; rows: string[] } {
  const batches: number[] = [];
  const rows: string[] = [];
  return {
    batches,
    rows,
    ...fakeUsageRepository({
      async insertBatch(batch) {
        await nextTurn();
        batches.push(batch.length);
        rows.push(...batch.map((written) => written.request_id));
      },
      count: async () => rows.length,
    }),
  };
}

/** A recorder that writes only when flushed, and the drops it reported, as [count, reason]. */
function droppingRecorder(repository: UsageRepository, queueMax: number) {
  const dropped: Array<[number, string]> = [];
  const recorder = createUsageRecorder({
    repository,
    flushIntervalMs: 60_000,
    queueMax,
    onDropped: (count, reason) => dropped.push([count, reason]),
  });
  return { recorder, dropped };
}

describe("usage recorder", () => {
  it("writes full batches at once and leaves rows that trickle in for the next tick", async () => {
    const repository = recordingRepository();
    const recorder = createUsageRecorder({ repository, flushIntervalMs: 60_000, queueMax: 10_000 });
    for (let index = 0; index < 200; index++) recorder.record(row(index));
    for (let index = 200; index < 205; index++) recorder.record(row(index));
    for (let turn = 0; turn < 10; turn++) await nextTurn();
    // A transaction of a few rows per turn of the event loop is what made SQLite slow.
    expect(repository.batches).toEqual([200]);
    expect(recorder.depth()).toBe(5);
    await recorder.flush();
    expect(repository.batches).toEqual([200, 5]);
    expect(new Set(repository.rows).size).toBe(205);
    await recorder.stop();
  });

  it("writes what is queued on each tick, in batches", async () => {
    const repository = recordingRepository();
    const recorder = createUsageRecorder({
      repository,
      flushIntervalMs: 20,
      queueMax: 10_000,
      batchSize: 50,
    });
    // Waited for, not timed: on a busy machine a tick can come after any fixed wait.
    const ticked = { timeout: 5000, interval: 5 };
    for (let index = 0; index < 30; index++) recorder.record(row(index));
    await vi.waitFor(() => expect(repository.batches).toEqual([30]), ticked);
    for (let index = 30; index < 150; index++) recorder.record(row(index));
    await vi.waitFor(() => expect(repository.batches.reduce((sum, size) => sum + size, 0)).toBe(150), ticked);
    expect(Math.max(...repository.batches)).toBe(50);
    await recorder.stop();
  });
});

describe("usage recorder, a row the database refuses", () => {
  /** Refuses any batch holding a row whose project id has a NUL, as PostgreSQL does (22021). */
  function refusingRepository(outageAfter = Number.POSITIVE_INFINITY) {
    const rows: string[] = [];
    let calls = 0;
    const repository = fakeUsageRepository({
      async insertBatch(batch) {
        await nextTurn();
        if (++calls > outageAfter) throw connectionRefused();
        if (batch.some((each) => each.project_id.includes("\u0000")))
          throw Object.assign(new Error('invalid byte sequence for encoding "UTF8": 0x00'), {
            code: "22021",
          });
        rows.push(...batch.map((each) => each.request_id));
      },
      count: async () => rows.length,
    });
    return { repository, rows };
  }

  it("drops only that row, and keeps writing every row before and after it", async () => {
    const { repository, rows } = refusingRepository();
    const refused: string[] = [];
    const written: string[] = [];
    const recorder = createUsageRecorder({
      repository,
      flushIntervalMs: 60_000,
      queueMax: 10_000,
      onRefused: (refusedRow) => refused.push(refusedRow.request_id),
      // The spend guard stops counting a row as queued once told it is written.
      onWritten: (writtenRows) => written.push(...writtenRows.map((each) => each.request_id)),
    });
    recorder.record(row(1));
    recorder.record({ ...row(2), project_id: "bad\u0000id" });
    recorder.record(row(3));
    await recorder.flush(2000);
    recorder.record(row(4));
    await recorder.flush(2000);
    expect(rows).toEqual([row(1), row(3), row(4)].map((each) => each.request_id));
    expect(refused).toEqual([row(2).request_id]);
    expect(written).toEqual(rows);
    expect(recorder.depth()).toBe(0);
    await recorder.stop();
  });

  it("keeps the rest queued when the database goes down while it writes row by row", async () => {
    // The batch is refused (call 1), row 1 is written (call 2), then the database is down.
    const { repository, rows } = refusingRepository(2);
    const failures: unknown[] = [];
    const recorder = createUsageRecorder({
      repository,
      flushIntervalMs: 60_000,
      queueMax: 10_000,
      onWriteFailure: (error) => failures.push(error),
    });
    recorder.record(row(1));
    recorder.record({ ...row(2), project_id: "bad\u0000id" });
    recorder.record(row(3));
    await recorder.flush(50);
    expect(rows).toEqual([row(1).request_id]);
    expect(recorder.depth()).toBe(2);
    expect(failures.length).toBeGreaterThan(0);
    await recorder.stop();
  });
});

describe("usage recorder, a refusal of every row (the table's, the role's, not a row's)", () => {
  const postgresError = (code: string, message: string) => Object.assign(new Error(message), { code });
  /** Refuses every batch with `refusal` while it is set, as the database does whatever the rows hold. */
  function tableRefusingRepository(refusal: Error) {
    const written: string[] = [];
    const state = { refusing: true as boolean, attempts: 0 };
    const repository = fakeUsageRepository({
      async insertBatch(batch) {
        await nextTurn();
        state.attempts++;
        if (state.refusing) throw refusal;
        written.push(...batch.map((each) => each.request_id));
      },
    });
    return { repository, written, state };
  }

  it.each([
    ["the INSERT grant revoked (42501)", postgresError("42501", "permission denied for table usage_records")],
    ["the table missing (42P01)", postgresError("42P01", 'relation "usage_records" does not exist')],
    [
      "a column missing, a build against another schema (42703)",
      postgresError("42703", 'column "requests" of relation "usage_records" does not exist'),
    ],
    [
      "a transaction already aborted (25P02)",
      postgresError(
        "25P02",
        "current transaction is aborted, commands ignored until end of transaction block",
      ),
    ],
    [
      "SQLite's table missing (SQLITE_ERROR)",
      new BetterSqlite3.SqliteError("no such table: usage_records", "SQLITE_ERROR"),
    ],
  ])(
    "keeps every row queued while the database refuses them all for %s, and writes each once after",
    async (_name, refusal) => {
      const { repository, written, state } = tableRefusingRepository(refusal);
      const refused: string[] = [];
      const failures: unknown[] = [];
      const recorder = createUsageRecorder({
        repository,
        flushIntervalMs: 60_000,
        queueMax: 10_000,
        batchSize: 4,
        onRefused: (refusedRow) => refused.push(refusedRow.request_id),
        onWriteFailure: (error) => failures.push(error),
      });
      for (let index = 0; index < 10; index++) recorder.record(row(index));
      await recorder.flush(50);
      // Before, each row was tried on its own, refused and dropped: the whole queue, within the flush.
      expect(refused).toEqual([]);
      expect(recorder.depth()).toBe(10);
      expect(recorder.writesFailing()).toBe(true);
      expect(failures.length).toBeGreaterThan(0);
      expect(failures.every((failure) => failure === refusal)).toBe(true);
      // Two statements a try, not one a row: the batch, and one of its rows on its own, which a
      // policy refusing only some rows would take (no row was written before to try again).
      expect(state.attempts).toBe(2 * failures.length);
      state.refusing = false;
      await recorder.flush(2000);
      expect(written).toEqual(Array.from({ length: 10 }, (_, index) => row(index).request_id));
      expect(recorder.depth()).toBe(0);
      expect(recorder.writesFailing()).toBe(false);
      expect(refused).toEqual([]);
      await recorder.stop();
    },
  );

  it("bounds the queue at queueMax meanwhile, counting the rows beyond it as dropped", async () => {
    const { repository, written, state } = tableRefusingRepository(
      postgresError("42501", "permission denied for table usage_records"),
    );
    const { recorder, dropped } = droppingRecorder(repository, 3);
    for (let index = 0; index < 3; index++) recorder.record(row(index));
    await recorder.flush(20);
    recorder.record(row(3));
    recorder.record(row(4));
    expect(dropped).toEqual([
      [1, "queue-full"],
      [1, "queue-full"],
    ]);
    state.refusing = false;
    await recorder.flush(1000);
    expect(written).toEqual([0, 1, 2].map((index) => row(index).request_id));
    await recorder.stop();
  });

  it("keeps the rest queued when the table starts refusing every row while a refused batch is written row by row", async () => {
    const written: string[] = [];
    const refused: string[] = [];
    let revoked = false;
    let revokeAfterRow = true;
    const repository = fakeUsageRepository({
      async insertBatch(batch) {
        await nextTurn();
        if (revoked) throw postgresError("42501", "permission denied for table usage_records");
        if (batch.some((each) => each.project_id.includes("\u0000")))
          throw postgresError("22021", 'invalid byte sequence for encoding "UTF8": 0x00');
        // As the table does (on conflict do nothing): a probe's row that the pass writes again
        // (tableTakesRows) is there once. A probe still under way when the grant comes back, on a
        // loaded machine, wrote row 3 before its pass did.
        written.push(...batch.map((each) => each.request_id).filter((id) => !written.includes(id)));
        // The grant is revoked once the first row of the pass is in.
        if (batch.length === 1 && revokeAfterRow) {
          revoked = true;
          revokeAfterRow = false;
        }
      },
    });
    const recorder = createUsageRecorder({
      repository,
      flushIntervalMs: 60_000,
      queueMax: 10_000,
      onRefused: (refusedRow) => refused.push(refusedRow.request_id),
    });
    recorder.record(row(1));
    recorder.record({ ...row(2), project_id: "bad\u0000id" });
    recorder.record(row(3));
    recorder.record(row(4));
    await recorder.flush(50);
    expect(written).toEqual([row(1).request_id]);
    expect(refused).toEqual([]);
    expect(recorder.depth()).toBe(3);
    expect(recorder.writesFailing()).toBe(true);
    revoked = false;
    await recorder.flush(2000);
    // The bad row is still refused for what it holds once the table takes rows again.
    expect(refused).toEqual([row(2).request_id]);
    expect(written).toEqual([row(1), row(3), row(4)].map((each) => each.request_id));
    expect(recorder.writesFailing()).toBe(false);
    await recorder.stop();
  });
});

describe("usage recorder, whether its writes fail", () => {
  it("says its writes fail from a write the database cannot take (a full disk) until one it takes", async () => {
    let full = true;
    const written: string[] = [];
    const repository = fakeUsageRepository({
      async insertBatch(batch) {
        if (full) throw Object.assign(new Error("database or disk is full"), { code: "SQLITE_FULL" });
        written.push(...batch.map((each) => each.request_id));
      },
    });
    const recorder = createUsageRecorder({ repository, flushIntervalMs: 60_000, queueMax: 10_000 });
    expect(recorder.writesFailing()).toBe(false);
    recorder.record(row(1));
    await recorder.flush(50);
    expect(recorder.writesFailing()).toBe(true);
    expect(recorder.depth()).toBe(1);
    full = false;
    await recorder.flush();
    expect(written).toEqual([row(1).request_id]);
    expect(recorder.writesFailing()).toBe(false);
    await recorder.stop();
  });

  it("does not call a row the database refuses for what it holds a failing write", async () => {
    const repository = fakeUsageRepository({
      insertBatch: async () => {
        throw Object.assign(new Error('invalid byte sequence for encoding "UTF8": 0x00'), { code: "22021" });
      },
    });
    const recorder = createUsageRecorder({ repository, flushIntervalMs: 60_000, queueMax: 10_000 });
    recorder.record(row(1));
    await recorder.flush(50);
    expect(recorder.depth()).toBe(0);
    expect(recorder.writesFailing()).toBe(false);
    await recorder.stop();
  });
});

describe("usage recorder, a database that hangs or stays down at shutdown", () => {
  const hangingRepository = () => fakeUsageRepository({ insertBatch: () => new Promise<void>(() => {}) });
  const downRepository = () =>
    fakeUsageRepository({
      insertBatch: async () => {
        throw connectionRefused();
      },
    });

  it("returns from flush and stop by their deadline when a write never answers", async () => {
    const recorder = createUsageRecorder({
      repository: hangingRepository(),
      flushIntervalMs: 60_000,
      queueMax: 10_000,
    });
    recorder.record(row(1));
    const started = Date.now();
    await recorder.flush(100);
    await recorder.stop(100);
    expect(Date.now() - started).toBeLessThan(1000);
  });

  it("writes at a flush once the database is back, not only when a long outage's backoff ends", async () => {
    const written: string[] = [];
    const state = { down: true };
    const recorder = createUsageRecorder({
      repository: fakeUsageRepository({
        async insertBatch(batch) {
          if (state.down) throw connectionRefused();
          written.push(...batch.map((each) => each.request_id));
        },
      }),
      flushIntervalMs: 60_000,
      queueMax: 10_000,
    });
    recorder.record(row(1));
    // A long outage: each failed try doubles the wait before the next, up to its cap (5 s).
    for (let attempt = 0; attempt < 8; attempt++) await recorder.flush(5);
    // The shutdown's flush begins while the database is still down; it is back 200 ms later.
    setTimeout(() => {
      state.down = false;
    }, 200);
    const started = Date.now();
    await recorder.flush(1500);
    expect(written).toEqual([row(1).request_id]);
    expect(Date.now() - started).toBeLessThan(1000);
    await recorder.stop();
  });

  it("counts the rows still queued at stop as dropped, and a row recorded after stop", async () => {
    const { recorder, dropped } = droppingRecorder(downRepository(), 10_000);
    for (let index = 0; index < 3; index++) recorder.record(row(index));
    await recorder.flush(50);
    await recorder.stop();
    expect(dropped).toEqual([[3, "shutdown"]]);
    recorder.record(row(4));
    expect(dropped).toEqual([
      [3, "shutdown"],
      [1, "shutdown"],
    ]);
    expect(recorder.depth()).toBe(0);
  });

  /** A recorder over `repository` that writes only when flushed, and what it reported of its rows. */
  function accountingRecorder(repository: UsageRepository) {
    const seen = { written: [] as string[], refused: [] as string[], dropped: 0 };
    const recorder = createUsageRecorder({
      repository,
      flushIntervalMs: 60_000,
      queueMax: 10_000,
      onWritten: (rows) => seen.written.push(...rows.map((each) => each.request_id)),
      onRefused: (refused) => seen.refused.push(refused.request_id),
      onDropped: (count) => {
        seen.dropped += count;
      },
    });
    return { recorder, seen };
  }

  it("counts the rows of a batch stop gave up on once, as dropped, not as written too when it answers late", async () => {
    const answers: Array<() => void> = [];
    const { recorder, seen } = accountingRecorder(
      fakeUsageRepository({ insertBatch: () => new Promise<void>((resolve) => answers.push(resolve)) }),
    );
    for (let index = 0; index < 3; index++) recorder.record(row(index));
    await recorder.flush(20);
    await recorder.stop(20);
    expect(seen.dropped).toBe(3);
    // The database answers after the shutdown gave up on the write: before, its rows were counted
    // written as well (sluice_usage_rows_written_total and _dropped_total both).
    for (const answer of answers) answer();
    for (let turn = 0; turn < 5; turn++) await nextTurn();
    expect(seen).toEqual({ written: [], refused: [], dropped: 3 });
  });

  it("counts each row of a row-by-row pass stop gave up on once: written, refused or dropped", async () => {
    const answers: Array<() => void> = [];
    const tried: string[] = [];
    const repository = fakeUsageRepository({
      async insertBatch(batch) {
        await nextTurn();
        if (batch.some((each) => each.project_id.includes("\u0000")))
          throw Object.assign(new Error('invalid byte sequence for encoding "UTF8": 0x00'), {
            code: "22021",
          });
        tried.push(...batch.map((each) => each.request_id));
        // The database stops answering after the first row of the pass.
        if (tried.length > 1) await new Promise<void>((resolve) => answers.push(resolve));
      },
    });
    const { recorder, seen } = accountingRecorder(repository);
    recorder.record(row(1));
    recorder.record({ ...row(2), project_id: "bad\u0000id" });
    recorder.record(row(3));
    recorder.record(row(4));
    await recorder.flush(50);
    await recorder.stop(20);
    for (const answer of answers) answer();
    for (let turn = 0; turn < 10; turn++) await nextTurn();
    // Row 1 written, row 2 refused, rows 3 (its write given up on) and 4 dropped: before, the
    // shutdown counted all four dropped on top of row 1 written and row 2 refused, and the pass
    // went on to write rows 3 and 4 after it.
    expect(seen).toEqual({ written: [row(1).request_id], refused: [row(2).request_id], dropped: 2 });
    expect(tried).toEqual([row(1).request_id, row(3).request_id]);
  });
});

describe("usage recorder, a full queue", () => {
  /** A repository that refuses connections while `down`, and records what it writes. */
  function switchableRepository() {
    const written: string[] = [];
    const state = { down: true };
    const repository = fakeUsageRepository({
      async insertBatch(batch) {
        await nextTurn();
        if (state.down) throw connectionRefused();
        written.push(...batch.map((each) => each.request_id));
      },
    });
    return { repository, written, state };
  }

  it("gives a call's row the place of the refused requests' rows, never the other way round", async () => {
    const { repository, written, state } = switchableRepository();
    const { recorder, dropped } = droppingRecorder(repository, 10);
    for (let index = 0; index < 10; index++) recorder.record(row(index), "refusal");
    await recorder.flush(20); // the database is down: all ten stay queued
    expect(recorder.depth()).toBe(10);

    recorder.record(row(100)); // a call's row: the refusals make way
    expect(dropped).toEqual([[10, "refusals-evicted"]]);
    expect(recorder.depth()).toBe(1);
    for (let index = 10; index < 19; index++) recorder.record(row(index), "refusal");
    recorder.record(row(19), "refusal"); // full again, and a refusal does not evict a call
    expect(dropped.at(-1)).toEqual([1, "queue-full"]);
    recorder.record(row(101)); // a call again: the nine refusals go
    expect(dropped.at(-1)).toEqual([9, "refusals-evicted"]);

    state.down = false;
    await recorder.flush(1000);
    expect(written).toEqual([row(100).request_id, row(101).request_id]);
    await recorder.stop();
  });

  it("drops a call's row only when the queue holds nothing but calls", async () => {
    const { repository } = switchableRepository();
    const { recorder, dropped } = droppingRecorder(repository, 3);
    for (let index = 0; index < 3; index++) recorder.record(row(index));
    recorder.record(row(3));
    expect(dropped).toEqual([[1, "queue-full"]]);
    await recorder.stop(10);
  });

  it("leaves the refusals' rows a write in progress holds", async () => {
    const written: string[] = [];
    let release: (() => void) | undefined;
    const repository = fakeUsageRepository({
      async insertBatch(batch) {
        if (written.length === 0) await new Promise<void>((resolve) => (release = resolve));
        written.push(...batch.map((each) => each.request_id));
      },
    });
    const { recorder, dropped } = droppingRecorder(repository, 5);
    for (let index = 0; index < 3; index++) recorder.record(row(index), "refusal");
    const flushed = recorder.flush(5000); // takes the three refusals and waits for the database
    await nextTurn();
    recorder.record(row(3), "refusal");
    recorder.record(row(4), "refusal");
    recorder.record(row(100)); // only the two behind the write make way
    expect(dropped).toEqual([[2, "refusals-evicted"]]);
    release?.();
    await flushed;
    await recorder.flush(1000);
    expect(written).toEqual([row(0).request_id, row(1).request_id, row(2).request_id, row(100).request_id]);
    await recorder.stop(10);
  });

  it("keeps a call's row when the queue is full of refusals a write in progress holds", async () => {
    let fail: ((error: unknown) => void) | undefined;
    let down = true;
    let attempts = 0;
    const written: string[] = [];
    const repository = fakeUsageRepository({
      async insertBatch(batch) {
        // The first write waits until the test fails it; a retry while down fails at once (a timer
        // may end the flush's backoff a millisecond before its deadline, and retry).
        if (++attempts === 1) await new Promise<void>((_resolve, reject) => (fail = reject));
        else if (down) throw connectionRefused();
        written.push(...batch.map((each) => each.request_id));
      },
    });
    const { recorder, dropped } = droppingRecorder(repository, 3);
    for (let index = 0; index < 3; index++) recorder.record(row(index), "refusal");
    const flushed = recorder.flush(50); // takes all three refusals; the database does not answer yet
    await nextTurn();
    recorder.record(row(100)); // the queue is full, and only of refusals the write holds
    expect(dropped).toEqual([]);
    recorder.record(row(3), "refusal"); // a refusal still finds the queue full
    expect(dropped).toEqual([[1, "queue-full"]]);
    fail?.(connectionRefused());
    await flushed;
    // The write failed: the refusals it held make way for the call's row, as they would have.
    expect(dropped).toEqual([
      [1, "queue-full"],
      [3, "refusals-evicted"],
    ]);
    expect(recorder.depth()).toBe(1);
    down = false;
    await recorder.flush(1000);
    expect(written).toEqual([row(100).request_id]);
    await recorder.stop(10);
  });
});

describe("usage recorder, a full queue while the database is down", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  /**
   * A database down from the start, whose first try at `backAfterMs` or later fails and which is
   * back 1 ms after it: what a recorder whose backoff reached 5 s meets when it comes back just
   * after a try. `tries`: when each failed try came.
   */
  function comingBackRepository(backAfterMs: number) {
    const tries: number[] = [];
    const written: string[] = [];
    const state = { backAt: Number.POSITIVE_INFINITY };
    const repository = fakeUsageRepository({
      async insertBatch(batch) {
        if (Date.now() < state.backAt) {
          tries.push(Date.now());
          if (Date.now() >= backAfterMs && state.backAt === Number.POSITIVE_INFINITY)
            state.backAt = Date.now() + 1;
          throw connectionRefused();
        }
        written.push(...batch.map((each) => each.request_id));
      },
    });
    return { repository, tries, written, state };
  }

  /** A recorder ticking every 250 ms (the default) holding 100 rows, and when each row was dropped. */
  function fullQueueRecorder(repository: UsageRepository) {
    const droppedAt: number[] = [];
    const recorder = createUsageRecorder({
      repository,
      flushIntervalMs: 250,
      queueMax: 100,
      onDropped: (count, reason) => {
        if (reason === "queue-full") for (let each = 0; each < count; each++) droppedAt.push(Date.now());
      },
    });
    return { recorder, droppedAt };
  }

  it("tries the database again within 250 ms while rows are dropped, not after the outage's 5 s backoff", async () => {
    vi.useFakeTimers({ now: 0 });
    const { repository, tries, written, state } = comingBackRepository(60_000);
    const { recorder, droppedAt } = fullQueueRecorder(repository);
    // A call every 10 ms: the queue is full after a second, and a minute of outage grows the backoff.
    let recorded = 0;
    const callsUntil = async (until: () => number) => {
      while (Date.now() < until()) {
        recorder.record(row(recorded++));
        await vi.advanceTimersByTimeAsync(10);
      }
    };
    // Until the first try after a minute, which fails, and 2 s past the database's return 1 ms later.
    await callsUntil(() => state.backAt);
    await callsUntil(() => state.backAt + 2000);
    // Before, the rows of the next 5 s were dropped: the 2 s measured here, 200 rows.
    const droppedOnceBack = droppedAt.filter((at) => at >= state.backAt).length;
    expect(droppedOnceBack).toBeLessThanOrEqual(25);
    expect(recorder.depth()).toBeLessThan(100);
    expect(written.length + droppedAt.length + recorder.depth()).toBe(recorded);
    // The load meanwhile: one failed try each 250 ms at most (a batch, as a healthy database is
    // sent one each 250 ms tick), not one each 10 ms row dropped.
    const outageTries = tries.filter((at) => at >= 5000 && at < 60_000).length;
    expect(outageTries).toBeLessThanOrEqual(55_000 / 250);
    await recorder.stop();
  });

  it("keeps the backoff of up to 5 s while no row is dropped: a full queue with no traffic", async () => {
    vi.useFakeTimers({ now: 0 });
    const { repository, tries, written } = comingBackRepository(Number.POSITIVE_INFINITY);
    const { recorder, droppedAt } = fullQueueRecorder(repository);
    for (let index = 0; index < 101; index++) recorder.record(row(index));
    expect(droppedAt).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(60_000);
    // 100 ms doubling to 5 s: a try each 5 s once it is reached, whatever the tick.
    const lastMinute = tries.filter((at) => at >= 30_000 && at < 60_000).length;
    expect(lastMinute).toBeLessThanOrEqual(7);
    expect(written).toEqual([]);
    await recorder.stop(0);
  });
});

describe("usage recorder, an authenticated client's repeated refusals", () => {
  const minute = Date.parse("2026-11-02T10:00:00.000Z");
  const refusal = (index: number) =>
    usageRow(`req_${String(index).padStart(32, "0")}`, {
      status: 429,
      error_code: "TOO_MANY_REQUESTS",
      outcome: "error",
      cost_usd: null,
      created_at: new Date(minute + index).toISOString(),
    });

  /** A repository that keeps the rows it was given, whole. */
  function keepingRepository(): UsageRepository & { stored: UsageRecord[] } {
    const stored: UsageRecord[] = [];
    return {
      stored,
      ...fakeUsageRepository({
        async insertBatch(batch) {
          await nextTurn();
          stored.push(...batch);
        },
      }),
    };
  }

  /** Waits for `condition`, up to 5 s (the recorder's timer runs late on a busy machine). */
  async function until(condition: () => boolean): Promise<void> {
    const deadline = Date.now() + 5000;
    while (!condition() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 5));
  }

  const requestsIn = (rows: readonly UsageRecord[]) => rows.reduce((sum, each) => sum + each.requests, 0);

  it("writes the first of a minute as rows, the rest as one row when the minute ends, counting each", async () => {
    const repository = keepingRepository();
    let now = minute + 100;
    const coalesced: string[] = [];
    const recorder = createUsageRecorder({
      repository,
      flushIntervalMs: 10,
      queueMax: 10_000,
      now: () => now,
      refusalRowsPerMinute: 10,
      onCoalesced: (held) => coalesced.push(held.request_id),
    });
    for (let index = 0; index < 50; index++) recorder.record(refusal(index), "authenticated-refusal");
    // A call's row and an anonymous refusal's are never held.
    for (let index = 50; index < 70; index++) recorder.record(row(index));
    for (let index = 70; index < 90; index++) recorder.record(refusal(index), "refusal");
    await until(() => repository.stored.length === 10 + 20 + 20);
    // Ticks go by within the minute: the held refusals stay held.
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(repository.stored).toHaveLength(50);
    expect(coalesced).toHaveLength(40);
    now = minute + 60_000;
    await until(() => repository.stored.length > 50);
    expect(repository.stored).toHaveLength(51);
    const last = repository.stored.at(-1);
    expect(last).toEqual({ ...refusal(49), requests: 40 });
    expect(requestsIn(repository.stored)).toBe(90);
    await recorder.stop();
  });

  it("writes the held refusals at a flush, and at stop, never dropping them", async () => {
    const repository = keepingRepository();
    const dropped: number[] = [];
    const recorder = createUsageRecorder({
      repository,
      flushIntervalMs: 60_000,
      queueMax: 10_000,
      now: () => minute + 100,
      refusalRowsPerMinute: 2,
      onDropped: (count) => dropped.push(count),
    });
    for (let index = 0; index < 7; index++) recorder.record(refusal(index), "authenticated-refusal");
    await recorder.flush();
    expect(repository.stored.map((each) => each.requests)).toEqual([1, 1, 5]);
    // Still the same minute: the next are held again, and stop writes them.
    for (let index = 7; index < 10; index++) recorder.record(refusal(index), "authenticated-refusal");
    await recorder.stop();
    expect(repository.stored.map((each) => each.requests)).toEqual([1, 1, 5, 3]);
    expect(repository.stored.at(-1)?.request_id).toBe(refusal(9).request_id);
    expect(dropped).toEqual([]);
    // After stop nothing is held: a refusal is dropped, counted, as any row.
    recorder.record(refusal(10), "authenticated-refusal");
    expect(dropped).toEqual([1]);
  });

  it("drops and counts a refusal recorded while stop writes the held ones: none is left held, unseen", async () => {
    const repository = keepingRepository();
    const dropped: Array<[number, string]> = [];
    const recorder = createUsageRecorder({
      repository,
      flushIntervalMs: 60_000,
      queueMax: 10_000,
      now: () => minute + 100,
      refusalRowsPerMinute: 1,
      onDropped: (count, reason) => dropped.push([count, reason]),
    });
    for (let index = 0; index < 3; index++) recorder.record(refusal(index), "authenticated-refusal");
    const stopping = recorder.stop();
    recorder.record(refusal(3), "authenticated-refusal");
    await stopping;
    expect(repository.stored.map((each) => each.requests)).toEqual([1, 2]);
    expect(dropped).toEqual([[1, "shutdown"]]);
  });

  it("counts the held refusals as dropped when stop cannot write them (the database is down)", async () => {
    const dropped: Array<[number, string]> = [];
    const recorder = createUsageRecorder({
      repository: fakeUsageRepository({
        insertBatch: async () => {
          throw connectionRefused();
        },
      }),
      flushIntervalMs: 60_000,
      queueMax: 10_000,
      now: () => minute + 100,
      refusalRowsPerMinute: 1,
      onDropped: (count, reason) => dropped.push([count, reason]),
    });
    for (let index = 0; index < 4; index++) recorder.record(refusal(index), "authenticated-refusal");
    await recorder.stop(50);
    // The first refusal's row and the coalesced row of the other three.
    expect(dropped).toEqual([[2, "shutdown"]]);
  });
});

describe("usage recorder, the rows it drops", () => {
  const ids = (rows: readonly UsageRecord[]) => rows.map((each) => each.request_id);

  /** A recorder that writes only when flushed, and each drop it reported: its reason and its rows. */
  function rowDroppingRecorder(repository: UsageRepository, queueMax: number) {
    const dropped: Array<[string, string[]]> = [];
    const recorder = createUsageRecorder({
      repository,
      flushIntervalMs: 60_000,
      queueMax,
      onDropped: (count, reason, rows) => {
        expect(rows).toHaveLength(count);
        dropped.push([reason, ids(rows)]);
      },
    });
    return { recorder, dropped };
  }
  const down = () =>
    fakeUsageRepository({
      insertBatch: async () => {
        throw connectionRefused();
      },
    });

  it("hands over each row it drops, whole, whatever the path: the log can then say which calls lost theirs", async () => {
    const { recorder, dropped } = rowDroppingRecorder(down(), 3);
    for (let index = 0; index < 3; index++) recorder.record(row(index), "refusal");
    await recorder.flush(20);
    recorder.record(row(10)); // the refusals make way
    recorder.record(row(11));
    recorder.record(row(12));
    recorder.record(row(13)); // the queue is full of calls' rows
    await recorder.stop(10);
    recorder.record(row(14)); // after stop
    expect(dropped).toEqual([
      ["refusals-evicted", ids([row(0), row(1), row(2)])],
      ["queue-full", ids([row(13)])],
      ["shutdown", ids([row(10), row(11), row(12)])],
      ["shutdown", ids([row(14)])],
    ]);
  });

  it("hands over, of a write stop gave up on, the rows it did not report written or refused", async () => {
    const answers: Array<() => void> = [];
    let tries = 0;
    const repository = fakeUsageRepository({
      async insertBatch(batch) {
        await nextTurn();
        if (batch.some((each) => each.project_id.includes("\u0000")))
          throw Object.assign(new Error('invalid byte sequence for encoding "UTF8": 0x00'), {
            code: "22021",
          });
        // The database stops answering after the first row of the pass.
        if (++tries > 1) await new Promise<void>((resolve) => answers.push(resolve));
      },
    });
    const { recorder, dropped } = rowDroppingRecorder(repository, 10_000);
    recorder.record(row(1));
    recorder.record({ ...row(2), project_id: "bad\u0000id" });
    recorder.record(row(3));
    recorder.record(row(4));
    await recorder.flush(50);
    await recorder.stop(20);
    for (const answer of answers) answer();
    expect(dropped).toEqual([["shutdown", ids([row(3), row(4)])]]);
  });
});
