import { describe, expect, it } from "vitest";
import { MemoryWindows } from "./memory-windows.js";

describe("MemoryWindows", () => {
  it("opens a window at a key's first request and counts until it ends", () => {
    let now = 1_000;
    const windows = new MemoryWindows(() => now);
    expect(windows.count("a", 60_000)).toEqual({ count: 1, msLeft: 60_000 });
    now += 59_999;
    expect(windows.count("a", 60_000)).toEqual({ count: 2, msLeft: 1 });
    now += 1;
    expect(windows.count("a", 60_000)).toEqual({ count: 1, msLeft: 60_000 });
  });

  it("does not count a request over the limit, and takes back a counted one until the window ends", () => {
    let now = 0;
    const windows = new MemoryWindows(() => now);
    expect(windows.count("a", 1_000, 2).count).toBe(1);
    expect(windows.count("a", 1_000, 2).count).toBe(2);
    expect(windows.count("a", 1_000, 2).count).toBe(3);
    expect(windows.count("a", 1_000, 2).count).toBe(3);
    windows.uncount("a");
    expect(windows.count("a", 1_000, 2).count).toBe(2);
    now = 1_000;
    windows.uncount("a");
    expect(windows.count("a", 1_000, 2).count).toBe(1);
  });

  it("drops ended windows as it counts, so memory follows the keys seen lately", () => {
    let now = 0;
    const windows = new MemoryWindows(() => now);
    for (let index = 0; index < 1_000; index++) windows.count(`old-${index}`, 1_000);
    expect(windows.size()).toBe(1_000);
    now = 2_000;
    for (let index = 0; index < 1_000; index++) windows.count("live", 1_000);
    expect(windows.size()).toBe(1);
    expect(windows.count("live", 1_000).count).toBe(1_001);
  });

  it("drops every ended window at once when asked, keeping the open ones", () => {
    let now = 0;
    const windows = new MemoryWindows(() => now);
    for (let index = 0; index < 1_000; index++) windows.count(`burst-${index}`, 1_000);
    now = 500;
    windows.count("late", 1_000);
    now = 1_000;
    windows.dropEnded();
    expect(windows.size()).toBe(1);
    expect(windows.count("late", 1_000).count).toBe(2);
  });
});
