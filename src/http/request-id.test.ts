import { describe, expect, it } from "vitest";
import { hex48, newRequestId } from "./request-id.js";

describe("newRequestId", () => {
  it("is req_ and 32 hex digits", () => {
    expect(newRequestId()).toMatch(/^req_[0-9a-f]{32}$/);
  });

  it("sorts by the millisecond it was made in", () => {
    const ids = [3, 1_700_000_000_000, 1_700_000_000_001, 1_800_000_000_000].map((ms) => newRequestId(ms));
    expect([...ids].sort()).toEqual(ids);
  });

  it("differs within one millisecond", () => {
    const ids = new Set(Array.from({ length: 10_000 }, () => newRequestId(1_700_000_000_000)));
    expect(ids.size).toBe(10_000);
  });

  it("writes the millisecond as toString(16) padded to 12 digits does", () => {
    const samples = [
      0,
      1,
      0xffffff,
      0x1000000,
      0x1000001,
      2 ** 31,
      2 ** 32 + 5,
      1_764_000_000_123,
      2 ** 48 - 1,
    ];
    for (let at = 1_700_000_000_000; at < 1_900_000_000_000; at += 7_777_777_777) samples.push(at);
    for (const value of samples)
      expect(hex48(value), String(value)).toBe(value.toString(16).padStart(12, "0"));
    expect(newRequestId(1_764_000_000_123).slice(4, 16)).toBe(
      (1_764_000_000_123).toString(16).padStart(12, "0"),
    );
  });
});
