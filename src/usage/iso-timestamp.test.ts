import { describe, expect, it } from "vitest";
import { isoTimestamp } from "./iso-timestamp.js";

describe("isoTimestamp", () => {
  it("writes what toISOString writes, across minute, hour, day and year boundaries", () => {
    const times = [
      0,
      1,
      999,
      1000,
      59_999,
      60_000,
      60_001,
      3_599_999,
      3_600_000,
      86_399_999,
      86_400_000,
      Date.UTC(2026, 11, 31, 23, 59, 59, 999),
      Date.UTC(2027, 0, 1),
      Date.UTC(2024, 1, 29, 12, 0, 0, 7),
      253_402_300_799_999,
      253_402_300_800_000,
      -1,
      -60_001,
      -62_198_755_200_000,
    ];
    for (let index = 0; index < 20_000; index++) times.push(Math.floor(Math.random() * 4_102_444_800_000));
    // In order and out of order, so the cached minute is both reused and replaced.
    const walk = [...times, ...times.map((time) => time + 37), ...[...times].sort((a, b) => a - b)];
    for (const time of walk) expect(isoTimestamp(new Date(time))).toBe(new Date(time).toISOString());
  });

  it("passes an invalid date to toISOString, which refuses it", () => {
    expect(() => isoTimestamp(new Date(Number.NaN))).toThrow(RangeError);
  });
});
