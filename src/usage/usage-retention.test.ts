import { afterEach, describe, expect, it, vi } from "vitest";
import {
  createUsagePruner,
  keptMonthsStart,
  minRetentionDays,
  prunedMonthsProblem,
  pruneUsage,
  retentionCutoff,
} from "./usage-retention.js";

/** Every hour's start and last millisecond from 2024 (a leap year) to the end of 2028. */
function* hoursOfFiveYears(): Generator<Date> {
  for (let at = Date.UTC(2024, 0, 1); at < Date.UTC(2029, 0, 1); at += 3_600_000) {
    yield new Date(at);
    yield new Date(at + 3_599_999);
  }
}

describe("usage retention's bound", () => {
  it("keeps the current and previous calendar month whole at the minimum retention, every hour of five years", () => {
    const cut: string[] = [];
    for (const now of hoursOfFiveYears()) {
      // The retention alone, before the cutoff is held to the kept months' start.
      const byDays = now.getTime() - minRetentionDays * 86_400_000;
      if (byDays > keptMonthsStart(now).getTime()) cut.push(now.toISOString());
    }
    expect(cut).toEqual([]);
  });

  it("needs the minimum: a day less would delete rows of the previous month on some days", () => {
    const cut = [...hoursOfFiveYears()].filter(
      (now) => now.getTime() - (minRetentionDays - 1) * 86_400_000 > keptMonthsStart(now).getTime(),
    );
    expect(cut.length).toBeGreaterThan(0);
  });

  it("holds the cutoff to the previous month's start, and takes the retention when it reaches further back", () => {
    const wrong: string[] = [];
    for (const now of hoursOfFiveYears()) {
      const kept = keptMonthsStart(now);
      if (
        retentionCutoff(now, 1).getTime() !== kept.getTime() ||
        retentionCutoff(now, 400).getTime() !== now.getTime() - 400 * 86_400_000 ||
        kept.getUTCDate() !== 1 ||
        kept.getUTCHours() !== 0 ||
        (now.getUTCMonth() - kept.getUTCMonth() + 12) % 12 !== 1
      )
        wrong.push(now.toISOString());
    }
    expect(wrong).toEqual([]);
  });

  it("refuses to prune before an instant inside the current or previous month", () => {
    const now = new Date(Date.UTC(2026, 2, 31, 23, 59, 59, 999));
    const kept = keptMonthsStart(now);
    expect(prunedMonthsProblem(kept, now)).toBeUndefined();
    expect(prunedMonthsProblem(new Date(kept.getTime() - 1), now)).toBeUndefined();
    expect(prunedMonthsProblem(new Date(kept.getTime() + 1), now)).toMatch(
      /inside the current or previous calendar month .*no later than 2026-02-01$/,
    );
    expect(prunedMonthsProblem(now, now)).toBeDefined();
  });
});

describe("pruneUsage", () => {
  it("deletes in batches of the size given until a batch finds fewer, and stops between batches when told", async () => {
    let left = 11;
    const asked: number[] = [];
    const repository = {
      deleteBefore: async (_before: string, limit: number) => {
        asked.push(limit);
        const deleted = Math.min(limit, left);
        left -= deleted;
        return deleted;
      },
    };
    expect(await pruneUsage(repository, "2026-01-01T00:00:00.000Z", { batchSize: 4 })).toBe(11);
    expect(asked).toEqual([4, 4, 4]);

    left = 11;
    let batches = 0;
    const stopping = {
      deleteBefore: async (before: string, limit: number) => {
        batches++;
        return repository.deleteBefore(before, limit);
      },
    };
    expect(
      await pruneUsage(stopping, "2026-01-01T00:00:00.000Z", { batchSize: 4, stopped: () => batches >= 2 }),
    ).toBe(8);
  });
});

describe("the usage pruner's timer", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  const timeoutsKeepingAlive = () =>
    process.getActiveResourcesInfo().filter((resource) => resource === "Timeout").length;

  it("does not keep the process alive", async () => {
    const before = timeoutsKeepingAlive();
    const pruner = createUsagePruner({
      repository: { deleteBefore: async () => 0 },
      retentionDays: 90,
      now: () => new Date(),
      onPruned: () => {},
      onFailed: () => {},
    });
    expect(timeoutsKeepingAlive()).toBe(before);
    await pruner.stop();
  });

  it("prunes at its first delay and every interval after, with the retention's cutoff, and never after stop", async () => {
    vi.useFakeTimers();
    const now = new Date(Date.UTC(2026, 10, 30, 12));
    const cutoffs: string[] = [];
    const pruned: number[] = [];
    const pruner = createUsagePruner({
      repository: {
        deleteBefore: async (before) => {
          cutoffs.push(before);
          return 1;
        },
      },
      retentionDays: 90,
      now: () => now,
      firstRunDelayMs: 1000,
      intervalMs: 10_000,
      batchSize: 5,
      onPruned: (deleted) => pruned.push(deleted),
      onFailed: (error) => {
        throw error;
      },
    });
    await vi.advanceTimersByTimeAsync(999);
    expect(cutoffs).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(cutoffs).toEqual([new Date(now.getTime() - 90 * 86_400_000).toISOString()]);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(cutoffs).toHaveLength(2);
    expect(pruned).toEqual([1, 1]);
    await pruner.stop();
    expect(vi.getTimerCount()).toBe(0);
    await vi.advanceTimersByTimeAsync(100_000);
    expect(cutoffs).toHaveLength(2);
  });

  it("keeps its timer with a retention reaching back past any date: the year 0 is its cutoff, no RangeError", async () => {
    vi.useFakeTimers();
    const cutoffs: string[] = [];
    const failures: unknown[] = [];
    const pruner = createUsagePruner({
      repository: {
        deleteBefore: async (before) => {
          cutoffs.push(before);
          return 0;
        },
      },
      // The setting has no upper bound: 200,000,000 days is past what a Date holds.
      retentionDays: 200_000_000,
      now: () => new Date(Date.UTC(2026, 10, 30, 12)),
      firstRunDelayMs: 1000,
      intervalMs: 10_000,
      onPruned: () => {},
      onFailed: (error) => failures.push(error),
    });
    await vi.advanceTimersByTimeAsync(11_000);
    expect(failures).toEqual([]);
    expect(cutoffs).toEqual(["0000-01-01T00:00:00.000Z", "0000-01-01T00:00:00.000Z"]);
    await pruner.stop();
    expect(retentionCutoff(new Date(Date.UTC(2026, 10, 30)), 1_000_000).toISOString()).toBe(
      "0000-01-01T00:00:00.000Z",
    );
  });

  it("ends a prune under way after its current batch when stopped, and stop waits for it", async () => {
    vi.useFakeTimers();
    let release: () => void = () => {};
    let batches = 0;
    const pruner = createUsagePruner({
      repository: {
        deleteBefore: async (_before, limit) => {
          batches++;
          await new Promise<void>((resolve) => {
            release = resolve;
          });
          return limit;
        },
      },
      retentionDays: 90,
      now: () => new Date(),
      firstRunDelayMs: 0,
      batchSize: 2,
      onPruned: () => {},
      onFailed: () => {},
    });
    await vi.advanceTimersByTimeAsync(0);
    expect(batches).toBe(1);
    let stopped = false;
    const stopping = pruner.stop().then(() => {
      stopped = true;
    });
    await vi.advanceTimersByTimeAsync(0);
    expect(stopped).toBe(false);
    release();
    await stopping;
    expect(batches).toBe(1);
    expect(vi.getTimerCount()).toBe(0);
  });

  it("reports a failed prune and tries again an interval later", async () => {
    vi.useFakeTimers();
    const failures: unknown[] = [];
    let calls = 0;
    const pruner = createUsagePruner({
      repository: {
        deleteBefore: async () => {
          calls++;
          if (calls === 1) throw new Error("connect ECONNREFUSED");
          return 0;
        },
      },
      retentionDays: 90,
      now: () => new Date(),
      firstRunDelayMs: 0,
      intervalMs: 1000,
      onPruned: () => {},
      onFailed: (error) => failures.push(error),
    });
    await vi.advanceTimersByTimeAsync(0);
    expect(failures).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(1000);
    expect(calls).toBe(2);
    await pruner.stop();
  });
});
