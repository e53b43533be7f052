import { describe, expect, it } from "vitest";
import { connectionRefused, fakeUsageRepository } from "../../test/support/fake-usage-repository.js";
import { createSpendGuard } from "./spend-guard.js";

/** A repository whose spend reads wait until the test answers them. */
function pendingSpend() {
  const reads: Array<(spend: number) => void> = [];
  const usage = fakeUsageRepository({
    spendSince: () => new Promise<number>((resolve) => reads.push(resolve)),
  });
  return { usage, reads };
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

describe("spend guard", () => {
  it("asks the database once when several requests find the figure stale at the same time", async () => {
    const { usage, reads } = pendingSpend();
    const guard = createSpendGuard({ usage, now: () => new Date("2026-11-15T00:00:00.000Z") });
    const answers = Promise.all([1, 2, 3, 4].map(() => guard.monthToDate("p1")));
    await settle();
    expect(reads).toHaveLength(1);
    for (const read of reads) read(3);
    expect(await answers).toEqual([3, 3, 3, 3]);
  });

  it("keeps a cost added on this instance while the figure was being read", async () => {
    const { usage, reads } = pendingSpend();
    let now = new Date("2026-11-15T00:00:00.000Z");
    const guard = createSpendGuard({ usage, now: () => now, refreshMs: 1000 });
    const first = guard.monthToDate("p1");
    await settle();
    reads[0]?.(5);
    expect(await first).toBe(5);
    now = new Date("2026-11-15T00:00:02.000Z");
    const second = guard.monthToDate("p1");
    await settle();
    // Its row is still queued, so the read below cannot see it.
    guard.add("p1", 2);
    reads[1]?.(5);
    expect(await second).toBe(7);
  });

  it("judges on the last known figure while the database is down, and fails without one", async () => {
    let down = false;
    const usage = fakeUsageRepository({
      spendSince: async () => {
        if (down) throw connectionRefused();
        return 4;
      },
    });
    let now = new Date("2026-11-15T00:00:00.000Z");
    const guard = createSpendGuard({ usage, now: () => now, refreshMs: 1000 });
    expect(await guard.monthToDate("p1")).toBe(4);
    guard.add("p1", 1);
    down = true;
    now = new Date("2026-11-15T00:00:05.000Z");
    expect(await guard.monthToDate("p1")).toBe(5);
    await expect(guard.monthToDate("p2")).rejects.toThrow("ECONNREFUSED");
    now = new Date("2026-12-01T00:00:00.000Z");
    await expect(guard.monthToDate("p1")).rejects.toThrow("ECONNREFUSED");
  });
});
