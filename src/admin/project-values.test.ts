import { describe, expect, it } from "vitest";
import { slowdownAtSixteenTimes } from "../../test/support/slowdown-at-sixteen-times.js";
import { usageReportWindow } from "./project-values.js";

describe("usage report window", () => {
  const window = (from: string, to: string) =>
    usageReportWindow({ from, to }, new Date("2026-11-01T00:00:00.000Z"), (field) => field);

  // The admin API's query string holds the ends (up to Node's 16 KiB of head), and an instant may
  // have any number of digits after the second. Two ends inside one millisecond are told apart by
  // those digits, their trailing zeros dropped by a pattern that, with a digit after the zeros,
  // was tried from each zero to the end: quadratic in their number (~155 ms of the event loop for
  // 16,000). The backtracking is inside V8's regular expressions, where only a clock sees it: 16
  // times the digits against itself (slowdown-at-sixteen-times.ts), linear reading ~16 times.
  it("tells apart ends inside one millisecond by their many digits in linear time", () => {
    const ends = (size: number) => [
      [`2026-11-05T00:00:00.000${"0".repeat(size)}1Z`, "2026-11-05T00:00:00.0002Z"],
      [`2026-11-05T00:00:00.000${"0".repeat(size)}1Z`, `2026-11-05T00:00:00.000${"0".repeat(size)}2Z`],
    ];
    const given = new Map([1000, 16_000].map((size) => [size, ends(size)]));
    const readAll = (size: number) => {
      for (const [from = "", to = ""] of given.get(size) ?? []) window(from, to);
    };
    const slowdown = slowdownAtSixteenTimes(readAll, 1000);
    expect(slowdown, `16 times the digits took ${slowdown.toFixed(1)} times as long`).toBeLessThan(64);
    // Still read as written: an empty window in order, refused reversed, trailing zeros dropped.
    const millisecond = new Date("2026-11-05T00:00:00.001Z");
    expect(window(`2026-11-05T00:00:00.000${"0".repeat(16_000)}1Z`, "2026-11-05T00:00:00.0002Z")).toEqual({
      from: millisecond,
      to: millisecond,
    });
    expect(() => window("2026-11-05T00:00:00.0002Z", `2026-11-05T00:00:00.000${"0".repeat(100)}1Z`)).toThrow(
      "`from` must be before `to`",
    );
    expect(() => window("2026-11-05T00:00:00.00050000Z", "2026-11-05T00:00:00.0005Z")).toThrow(
      "`from` must be before `to`",
    );
    expect(window("2026-11-05T00:00:00.0005Z", "2026-11-05T00:00:00.000500001Z")).toEqual({
      from: millisecond,
      to: millisecond,
    });
  });
});
