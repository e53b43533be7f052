import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import { storageEngines } from "../../test/support/storage-engines.js";
import { usageRow } from "../../test/support/usage-row.js";
import { type OpenDatabase, openDatabase } from "../storage/database.js";
import {
  createUsageRepository,
  reportSliceRows,
  spendSliceRows,
  type UsageRecord,
  type UsageRepository,
} from "../storage/usage-repository.js";
import { createSpendGuard } from "./spend-guard.js";
import { pruneUsage, retentionCutoff } from "./usage-retention.js";

/**
 * The spend guard over a real database: on SQLite a project's reads after its first of the month
 * add only the rows written since (`SpendMark`), and must answer what a full read of the month
 * answers, whatever was written or deleted in between.
 */

const november = "2026-11-01T00:00:00.000Z";

/** A clock the test moves: each step past the guard's 5 s refresh period. */
function clock(start: string) {
  let time = new Date(start).getTime();
  return {
    now: () => new Date(time),
    set: (at: string) => {
      time = new Date(at).getTime();
    },
    /** Past the refresh period, so the next `monthToDate` reads the database again. */
    tick: () => {
      time += 6000;
    },
  };
}

const row = (id: string, createdAt: string, cost: number | null, project = "capped"): UsageRecord =>
  usageRow(id, { project_id: project, created_at: createdAt, cost_usd: cost });

for (const engine of storageEngines) {
  describe.skipIf(!engine.available)(`the spend guard's month-to-date on ${engine.name}`, () => {
    let database: OpenDatabase;
    let cleanup: () => Promise<void>;
    let usage: UsageRepository;

    beforeAll(async () => {
      ({ database, cleanup } = await engine.open());
      usage = createUsageRepository(database.db, database.sqlite, database.runReport);
    });
    afterAll(async () => {
      await database.close();
      await cleanup();
    });
    beforeEach(async () => {
      await database.db.deleteFrom("usage_records").execute();
    });

    /** The month's spend of `project` as a guard just started reads it: one full read. */
    const fullRead = (at: Date, project = "capped") =>
      createSpendGuard({ usage, now: () => at }).monthToDate(project);

    it("counts rows written late (stamped earlier in the month) once, and late rows of another month not", async () => {
      const time = clock("2026-11-20T12:00:00.000Z");
      const guard = createSpendGuard({ usage, now: time.now });
      await usage.insertBatch([
        row("a", "2026-11-10T00:00:00.000Z", 0.1),
        row("other", "2026-11-10T00:00:00.000Z", 5, "other"),
      ]);
      expect(await guard.monthToDate("capped")).toBe(0.1);
      // Written after the read, stamped before it: a row held through an outage.
      await usage.insertBatch([
        row("late", "2026-11-02T00:00:00.000Z", 0.2),
        row("last-month", "2026-10-31T23:59:59.999Z", 7),
        row("other-late", "2026-11-03T00:00:00.000Z", 9, "other"),
      ]);
      time.tick();
      expect(await guard.monthToDate("capped")).toBe(0.3);
      time.tick();
      expect(await guard.monthToDate("capped")).toBe(0.3);
      expect(await fullRead(time.now())).toBe(0.3);
    });

    it("counts a batch written again (a retry: its request ids are stored already) once", async () => {
      const time = clock("2026-11-20T12:00:00.000Z");
      const guard = createSpendGuard({ usage, now: time.now });
      const batch = [row("d1", "2026-11-19T00:00:00.000Z", 0.25), row("d2", "2026-11-19T00:00:01.000Z", 0.5)];
      await usage.insertBatch(batch);
      expect(await guard.monthToDate("capped")).toBe(0.75);
      await usage.insertBatch([...batch, row("d3", "2026-11-20T00:00:00.000Z", 1)]);
      time.tick();
      expect(await guard.monthToDate("capped")).toBe(1.75);
      expect(await fullRead(time.now())).toBe(1.75);
    });

    it("starts the month again at its turn: the last month's rows, written before or after it, count in none", async () => {
      const time = clock("2026-11-30T23:59:50.000Z");
      const guard = createSpendGuard({ usage, now: time.now });
      await usage.insertBatch([row("n1", "2026-11-30T10:00:00.000Z", 3)]);
      expect(await guard.monthToDate("capped")).toBe(3);
      await usage.insertBatch([row("n2", "2026-11-30T23:59:55.000Z", 1)]);
      time.tick();
      expect(await guard.monthToDate("capped")).toBe(4);
      time.set("2026-12-01T00:00:10.000Z");
      await usage.insertBatch([
        row("n3", "2026-11-30T23:59:59.999Z", 2),
        row("d1", "2026-12-01T00:00:00.000Z", 0.5),
      ]);
      expect(await guard.monthToDate("capped")).toBe(0.5);
      await usage.insertBatch([
        row("n4", "2026-11-30T23:59:59.000Z", 2),
        row("d2", "2026-12-01T00:00:11.000Z", 1),
      ]);
      time.tick();
      expect(await guard.monthToDate("capped")).toBe(1.5);
      expect(await fullRead(time.now())).toBe(1.5);
    });

    // Retention deletes only months before the previous one: none of the figure's rows. The row it
    // deletes may be the table's last written (a row held through a long outage), whose rowid
    // SQLite gives again to the next row: that row must still count.
    it("keeps its figure through the retention's deletes, the table's last written row among them", async () => {
      const time = clock("2026-11-20T12:00:00.000Z");
      const guard = createSpendGuard({ usage, now: time.now });
      await usage.insertBatch([
        row("old-1", "2026-08-01T00:00:00.000Z", 50),
        row("m1", "2026-11-05T00:00:00.000Z", 1),
        row("old-2", "2026-08-02T00:00:00.000Z", 60),
      ]);
      expect(await guard.monthToDate("capped")).toBe(1);
      expect(await pruneUsage(usage, retentionCutoff(time.now(), 62).toISOString())).toBe(2);
      await usage.insertBatch([row("m2", "2026-11-20T00:00:00.000Z", 0.5)]);
      time.tick();
      expect(await guard.monthToDate("capped")).toBe(1.5);
      await usage.insertBatch([row("m3", "2026-11-20T00:00:01.000Z", 0.25)]);
      time.tick();
      expect(await guard.monthToDate("capped")).toBe(1.75);
      expect(await fullRead(time.now())).toBe(1.75);
    });

    it("reads the whole month again in a new process (a guard just started), and the largest row with it", async () => {
      const time = clock("2026-11-20T12:00:00.000Z");
      const first = createSpendGuard({ usage, now: time.now });
      await usage.insertBatch([row("r1", "2026-11-01T00:00:00.000Z", 0.1), row("r2", november, 2)]);
      expect(await first.monthToDate("capped")).toBe(2.1);
      await usage.insertBatch([row("r3", "2026-11-02T00:00:00.000Z", 0.2)]);
      const restarted = createSpendGuard({ usage, now: time.now });
      expect(await restarted.monthToDate("capped")).toBe(2.3);
      // The largest row counts each call in flight: one held, another would reach a cap of 4.3.
      const release = restarted.hold("capped", 4.3, 2.3);
      expect(release).toBeTypeOf("function");
      expect(restarted.hold("capped", 4.3, 2.3)).toBeUndefined();
      release?.();
    });

    // A call of unknown cost counts toward the cap at the largest known cost of one call of the
    // month (decision 0057): another instance's from its rows, this instance's at once, each once.
    it("counts the month's calls of unknown cost, another instance's too, at the largest known cost of one call", async () => {
      const time = clock("2026-11-20T12:00:00.000Z");
      const guard = createSpendGuard({ usage, now: time.now, unpricedCallUsd: 0.05 });
      await usage.insertBatch([
        row("k1", "2026-11-10T00:00:00.000Z", 0.1),
        row("k2", "2026-11-10T00:00:01.000Z", 2),
        row("u1", "2026-11-10T00:00:02.000Z", null),
        row("u2", "2026-11-11T00:00:00.000Z", null),
        row("u-last-month", "2026-10-31T23:59:59.999Z", null),
        row("u-other", "2026-11-10T00:00:00.000Z", null, "other"),
      ]);
      // 2.10 known, and two calls of unknown cost at 2 each.
      expect(await guard.monthToDate("capped")).toBe(6.1);
      // A call of unknown cost on this instance counts at once, its row not written yet.
      const mine = row("u3", "2026-11-20T12:00:00.000Z", null);
      guard.addUnpriced("capped", time.now());
      expect(await guard.monthToDate("capped")).toBe(8.1);
      // Written, then read back: counted once.
      await usage.insertBatch([mine]);
      guard.written([mine]);
      time.tick();
      expect(await guard.monthToDate("capped")).toBe(8.1);
      // Another instance's, read once the refresh period is past.
      await usage.insertBatch([row("u4", "2026-11-20T12:00:01.000Z", null)]);
      time.tick();
      expect(await guard.monthToDate("capped")).toBe(10.1);
      expect(await createSpendGuard({ usage, now: time.now }).monthToDate("capped")).toBe(10.1);
      // A project with no known cost this month: each at the floor (`unpricedCallUsd`).
      expect(await guard.monthToDate("other")).toBe(0.05);
    });

    it("sums costs as whole billionths on either engine, however many reads it took", async () => {
      const time = clock("2026-11-20T12:00:00.000Z");
      const guard = createSpendGuard({ usage, now: time.now });
      await usage.insertBatch([row("c1", "2026-11-10T00:00:00.000Z", 0.1)]);
      expect(await guard.monthToDate("capped")).toBe(0.1);
      await usage.insertBatch([
        row("c2", "2026-11-10T00:00:01.000Z", 0.2),
        // No known cost, and not a call of unknown cost (a refusal): counted at nothing.
        {
          ...row("c3", "2026-11-10T00:00:02.000Z", null),
          outcome: "error",
          input_tokens: null,
          output_tokens: null,
        },
      ]);
      time.tick();
      // Summed as dollars, 0.1 + 0.2 is 0.30000000000000004.
      expect(await guard.monthToDate("capped")).toBe(0.3);
      expect(await fullRead(time.now())).toBe(0.3);
    });
  });
}

/**
 * Past 2^53 billionths (some $9 million), a double no longer holds every whole billionth: a figure
 * carried on must add up exactly (cost-sums.ts), as a full read does. Added up plainly as doubles,
 * each walk's billionth was lost: 20 walks of a 1-billionth row left the figure 20 billionths under
 * a full read's.
 */
describe("a SQLite spend figure carried on past 2^53 billionths", () => {
  it("answers what a full read answers, however many walks it took", async () => {
    const database = await openDatabase({ dataDir: "unused", sqliteFile: ":memory:" });
    try {
      const usage = createUsageRepository(database.db, database.sqlite);
      const full = () => createUsageRepository(database.db, database.sqlite).spendSince("large", november);
      await usage.insertBatch([row("whole", november, 2 ** 53 / 1e9, "large")]);
      let last = await usage.spendSince("large", november);
      for (let walk = 0; walk < 20; walk++) {
        await usage.insertBatch([row(`nano-${walk}`, "2026-11-02T00:00:00.000Z", 1e-9, "large")]);
        last = await usage.spendSince("large", november, last.next);
        expect(last.totalUsd).toBe((await full()).totalUsd);
      }
      expect(Math.round(last.totalUsd * 1e9)).toBe(2 ** 53 + 20);
      // A cost past what 64-bit billionths hold (cost-sums.ts): summed apart, as a double, in a
      // figure carried on as in a full read.
      await usage.insertBatch([row("huge", november, 1e300, "large")]);
      last = await usage.spendSince("large", november, last.next);
      await usage.insertBatch([row("after-huge", november, 1, "large")]);
      last = await usage.spendSince("large", november, last.next);
      expect([last.totalUsd, (await full()).totalUsd]).toEqual([1e300, 1e300]);
    } finally {
      await database.close();
    }
  });
});

/**
 * A capped project's refresh on SQLite, whose statements run on the event loop: every other
 * request of the process waits for it. Before, each refresh (every 5 s) went over the month's rows
 * again: 200 to 390 ms at 900,000 of them. The work is counted here, not timed (the time is the
 * bench's): the rows the spend statements sum, and the statements that walk the table by rowid.
 */
describe("the spend guard's refresh on SQLite", () => {
  const rows = 300_000;
  let database: OpenDatabase;
  let usage: UsageRepository;

  beforeAll(async () => {
    database = await openDatabase({ dataDir: "unused", sqliteFile: ":memory:" });
    usage = createUsageRepository(database.db, database.sqlite);
    // 300,000 rows of the project in November, written by the database itself, and some of another.
    database.sqlite?.exec(`
      with recursive n(i) as (select 1 union all select i + 1 from n where i < ${rows})
      insert into usage_records (request_id, project_id, endpoint, status, cost_usd, latency_ms, outcome, created_at, requests)
      select 'r' || i, case when i % 100 = 0 then 'other' else 'busy' end, 'proxy', 200, 0.001, 10, 'ok',
        strftime('%Y-%m-%dT%H:%M:%fZ', 1793491200 + i * 5.0, 'unixepoch'), 1 from n`);
    // Every row a spend statement sums has its cost through `abs` (cost-sums.ts), as many times for
    // each row: this connection's `abs` counts them, answering what SQLite's does.
    database.sqlite?.function("abs", (value: unknown) => {
      costsEvaluated++;
      return typeof value === "number" ? Math.abs(value) : value;
    });
  }, 60_000);
  afterAll(() => database.close());

  /** The costs the spend statements evaluated so far: `abs` calls, a few for each row summed. */
  let costsEvaluated = 0;
  /** Rows of `project` in November, as a read of its month sums them. */
  const monthRows = (project: string) =>
    Number(
      database.sqlite
        ?.prepare<[string, string], { n: number }>(
          "select count(*) as n from usage_records where project_id = ? and created_at >= ?",
        )
        .get(project, november)?.n,
    );
  /**
   * The costs evaluated for each row summed, as a full read of `project`'s month evaluates them:
   * every row of the month once, at the least (which says the count sees the reads).
   */
  async function fullReadCostsPerRow(project: string): Promise<number> {
    const before = costsEvaluated;
    await createSpendGuard({ usage, now: () => at }).monthToDate(project);
    const perRow = (costsEvaluated - before) / monthRows(project);
    expect(perRow).toBeGreaterThanOrEqual(1);
    return perRow;
  }

  const at = new Date("2026-11-30T12:00:00.000Z");
  const newRows = (round: number) =>
    Array.from({ length: 100 }, (_, index) =>
      row(`new-${round}-${index}`, "2026-11-30T11:00:00.000Z", 0.002, index % 2 ? "busy" : "other"),
    );

  // A refresh after 100 rows written sums those rows at most (50 of the project, and those of the
  // other projects whose figures the repository carries), where reading the month again sums its
  // some 300,000 rows: the budget, in a full read's work for each row, is passed 3,000 times over.
  it("reads only the rows written since its last read, not the month again", async () => {
    const perRow = await fullReadCostsPerRow("busy");
    const time = clock(at.toISOString());
    const guard = createSpendGuard({ usage, now: time.now });
    const first = await guard.monthToDate("busy");
    for (let round = 0; round < 5; round++) {
      await usage.insertBatch(newRows(round));
      time.tick();
      const before = costsEvaluated;
      const spent = await guard.monthToDate("busy");
      expect(Math.round(spent * 1e9)).toBe(Math.round((first + (round + 1) * 50 * 0.002) * 1e9));
      expect(costsEvaluated - before).toBeLessThanOrEqual(newRows(round).length * perRow);
    }
  });

  it("does not go over the month's earlier rows again (rows never change once written: changed here, they tell)", async () => {
    const time = clock(at.toISOString());
    const guard = createSpendGuard({ usage, now: time.now });
    const before = await guard.monthToDate("busy");
    // No usage row is ever updated: a read that goes over the month's rows again sees this.
    database.sqlite?.exec("update usage_records set cost_usd = 1 where project_id = 'busy'");
    await usage.insertBatch(newRows(9));
    time.tick();
    expect(Math.round((await guard.monthToDate("busy")) * 1e9)).toBe(Math.round((before + 50 * 0.002) * 1e9));
  });

  const nanos = (usd: number) => Math.round(usd * 1e9);

  // Each capped project's refresh walked the rows written since its own last read, of every
  // project: with 100 capped projects, each row was walked 100 times.
  it("walks the rows written since once for all capped projects, not once for each (changed after, they tell)", async () => {
    const time = clock(at.toISOString());
    const guard = createSpendGuard({ usage, now: time.now });
    const busy = await guard.monthToDate("busy");
    const other = await guard.monthToDate("other");
    await usage.insertBatch(newRows(20));
    time.tick();
    expect(nanos(await guard.monthToDate("busy"))).toBe(nanos(busy + 50 * 0.002));
    // Walked with "busy"'s refresh, "other"'s rows written since are in its figure already: a read
    // that walks them again sees this.
    database.sqlite?.exec("update usage_records set cost_usd = 1 where request_id like 'new-20-%'");
    expect(nanos(await guard.monthToDate("other"))).toBe(nanos(other + 50 * 0.002));
  });

  // The rows written since are walked by rowid (`not indexed`), in statements of 5,000 rowids at
  // most (`spendSliceRows`): walked once for all 100 capped projects, 50,000 rows take 10 such
  // statements, and each other refresh one finding nothing new. Each walking them again for itself
  // takes 10 each: 1,000. (The rows summed do not tell: each project's walk sums only its own.)
  it("refreshes 100 capped projects with one walk of the rows written since, not 100 of them", async () => {
    const time = clock(at.toISOString());
    const guard = createSpendGuard({ usage, now: time.now });
    const capped = Array.from({ length: 100 }, (_, index) => `capped-${index}`);
    for (const project of capped) expect(await guard.monthToDate(project)).toBe(0);
    // 50,000 rows of 1,000 projects (the capped ones among them), 0.001 USD each.
    const written = 50_000;
    for (let batch = 0; batch < written / 1000; batch++) {
      await usage.insertBatch(
        Array.from({ length: 1000 }, (_, index) =>
          row(`many-${batch}-${index}`, "2026-11-30T11:00:00.000Z", 0.001, `capped-${index}`),
        ),
      );
    }
    time.tick();
    const statements = vi.spyOn(database.db.getExecutor(), "executeQuery");
    let walks = 0;
    try {
      for (const project of capped) expect(nanos(await guard.monthToDate(project))).toBe(nanos(0.05));
      walks = statements.mock.calls.filter(([query]) => query.sql.includes("not indexed")).length;
    } finally {
      statements.mockRestore();
    }
    expect(walks).toBeGreaterThanOrEqual(written / spendSliceRows);
    expect(walks).toBeLessThanOrEqual(written / spendSliceRows + capped.length);
  });

  // A capped project's first read after a start (or at the month's turn) summed its month in one
  // statement: 350 to 500 ms of the event loop at 900,000 rows, every request in flight held. Now
  // each turn of the loop sums one slice of 5,000 rows at most (~60 slices here), counted between
  // the turns of a ticker that runs whenever the loop turns: one statement, or the slices without
  // the loop given back between them, sum the whole month (~300,000 rows) in one turn.
  it("reads a project's month the first time in slices, giving the event loop back between them", async () => {
    const rowsOfMonth = monthRows("busy");
    let turns = 0;
    let most = 0;
    let since = costsEvaluated;
    let running = true;
    const turn = () => {
      most = Math.max(most, costsEvaluated - since);
      since = costsEvaluated;
      turns++;
      if (running) setImmediate(turn);
    };
    const before = costsEvaluated;
    setImmediate(turn);
    await createSpendGuard({ usage, now: () => at }).monthToDate("busy");
    running = false;
    most = Math.max(most, costsEvaluated - since);
    const perRow = (costsEvaluated - before) / rowsOfMonth;
    expect(perRow).toBeGreaterThanOrEqual(1);
    expect(most).toBeLessThanOrEqual(reportSliceRows * perRow);
    expect(turns).toBeGreaterThan(rowsOfMonth / reportSliceRows / 2);
  });

  // Rows written between the slices: stamped in a slice read already (a late row), or in one not
  // read yet. Each must count once: in the first read's figure or in the next read's, not both.
  it("counts the rows written while it reads the month in slices once, whichever slice their time is in", async () => {
    const time = clock(at.toISOString());
    const guard = createSpendGuard({ usage, now: time.now });
    const stamps = ["2026-11-01T00:00:01.000Z", "2026-11-15T00:00:00.000Z", "2026-11-30T11:59:00.000Z"];
    let written = 0;
    let running = true;
    const write = async () => {
      if (!running) return;
      const stamp = stamps[written % stamps.length] as string;
      await usage.insertBatch([row(`during-${written}`, stamp, 0.004, "busy")]);
      written++;
      setImmediate(write);
    };
    setImmediate(write);
    await guard.monthToDate("busy");
    running = false;
    expect(written).toBeGreaterThan(10);
    time.tick();
    const carried = await guard.monthToDate("busy");
    expect(nanos(carried)).toBe(nanos(await createSpendGuard({ usage, now: time.now }).monthToDate("busy")));
  });
});
