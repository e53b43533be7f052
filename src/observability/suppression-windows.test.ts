import { describe, expect, it } from "vitest";
import { createSuppressionWindows, createSuppressionWindowsRegistry } from "./suppression-windows.js";

/** Windows on a clock the test sets, whose timers run when the test says; `counts` is what they wrote. */
function windowsUnderTest(registry?: ReturnType<typeof createSuppressionWindowsRegistry>) {
  const counts: [string, number][] = [];
  const timers: (() => void)[] = [];
  const windows = createSuppressionWindows<string>({
    windowMs: 10_000,
    now: () => 0,
    schedule: (close) => void timers.push(close),
    onSuppressed: (context, count) => void counts.push([context, count]),
    ...(registry ? { registry } : {}),
  });
  return { windows, counts, timers };
}

describe("suppression windows", () => {
  it("flush writes each open window's count once, leaves out the windows that counted none, and its timer then writes nothing", () => {
    const { windows, counts, timers } = windowsUnderTest();
    expect(windows.open("a", "first a")).toBe(true);
    expect(windows.open("a", "second a")).toBe(false);
    expect(windows.open("a", "third a", 3)).toBe(false);
    expect(windows.open("b", "first b")).toBe(true);
    windows.flush();
    expect(counts).toEqual([["first a", 4]]);
    windows.flush();
    for (const close of timers) close();
    expect(counts).toEqual([["first a", 4]]);
    // A window opened after the flush is a new one.
    expect(windows.open("a", "after")).toBe(true);
  });

  it("a registry flushes every set of windows made with it, once", () => {
    const registry = createSuppressionWindowsRegistry();
    const one = windowsUnderTest(registry);
    const two = windowsUnderTest(registry);
    const outside = windowsUnderTest();
    for (const { windows } of [one, two, outside]) for (let n = 0; n < 3; n++) windows.open("k", `at ${n}`);
    registry.flush();
    registry.flush();
    expect(one.counts).toEqual([["at 0", 2]]);
    expect(two.counts).toEqual([["at 0", 2]]);
    expect(outside.counts).toEqual([]);
  });
});
