import { describe, expect, it } from "vitest";
import { collectGarbage } from "../../test/support/garbage-collection.js";
import { MemoryWindows } from "./memory-windows.js";

describe("MemoryWindows", () => {
  it("opens a window at a key's first counted request and counts until it ends", () => {
    const windows = new MemoryWindows(() => 0);
    expect(windows.add("a", 60_000, 1_000)).toMatchObject({ count: 1, endsAt: 61_000 });
    expect(windows.add("a", 60_000, 60_999)).toMatchObject({ count: 2, endsAt: 61_000 });
    expect(windows.add("a", 60_000, 61_000)).toMatchObject({ count: 1, endsAt: 121_000 });
  });

  it("finds a key's open window without counting or opening one", () => {
    const windows = new MemoryWindows(() => 0);
    expect(windows.find("a", 0)).toBeUndefined();
    expect(windows.size()).toBe(0);
    windows.add("a", 1_000, 0);
    expect(windows.find("a", 999)).toMatchObject({ count: 1, endsAt: 1_000 });
    expect(windows.find("a", 1_000)).toBeUndefined();
    expect(windows.add("a", 1_000, 1_000).count).toBe(1);
  });

  it("drops ended windows as it counts, so memory follows the keys seen lately", () => {
    const windows = new MemoryWindows(() => 0);
    for (let index = 0; index < 1_000; index++) windows.add(`old-${index}`, 1_000, 0);
    expect(windows.size()).toBe(1_000);
    for (let index = 0; index < 1_000; index++) windows.add("live", 1_000, 2_000);
    expect(windows.size()).toBe(1);
    expect(windows.add("live", 1_000, 2_000).count).toBe(1_001);
  });

  it("drops every ended window at once when asked, keeping the open ones", () => {
    let now = 0;
    const windows = new MemoryWindows(() => now);
    for (let index = 0; index < 1_000; index++) windows.add(`burst-${index}`, 1_000, now);
    now = 500;
    windows.add("late", 1_000, now);
    now = 1_000;
    windows.dropEnded();
    expect(windows.size()).toBe(1);
    expect(windows.add("late", 1_000, now).count).toBe(2);
  });

  it("keeps at most maxKeys windows, dropping the oldest for a new key", () => {
    const windows = new MemoryWindows(() => 0, 3);
    for (const key of ["a", "b", "c", "d"]) windows.add(key, 60_000, 0);
    expect(windows.size()).toBe(3);
    expect(windows.find("a", 0)).toBeUndefined();
    expect(windows.find("d", 0)).toMatchObject({ count: 1 });
    // An open window counts on without dropping anything.
    windows.add("d", 60_000, 1);
    expect(windows.size()).toBe(3);
    expect(windows.find("b", 1)).toMatchObject({ count: 1 });
  });

  // The sweep's iterator is a Map iterator: V8 keeps the table it was made on, entries and all, for
  // it (a table that grew or shrank points on to its successor). Before, a burst's windows, all
  // dropped by the timer once ended, stayed in memory through that table until the next count.
  it("holds none of a burst's windows once dropEnded dropped them, though no count follows", async () => {
    let now = 0;
    const windows = new MemoryWindows(() => now);
    const burst: WeakRef<object>[] = [];
    for (let index = 0; index < 5000; index++)
      burst.push(new WeakRef(windows.add(`ip:${index}`, 60_000, now) as object));
    now = 60_000;
    windows.dropEnded();
    expect(windows.size()).toBe(0);
    await new Promise((resolve) => setImmediate(resolve)); // WeakRefs hold their targets for a job
    collectGarbage();
    expect(burst.filter((window) => window.deref() !== undefined).length).toBe(0);
  });
});
