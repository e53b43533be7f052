import { describe, expect, it } from "vitest";
import { newRequestId } from "./request-id.js";

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
});
