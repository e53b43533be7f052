import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { backgroundRowId, isFinishedBackgroundRun } from "./background-run.js";

const run = {
  id: "resp_abc",
  object: "response",
  status: "completed",
  background: true,
  createdAt: 1_763_000_000,
};

describe("background run", () => {
  it("derives one row id from the run: bg_, its creation time in ms, a digest of its id", () => {
    const digest = createHash("sha256").update("resp_abc").digest("hex").slice(0, 20);
    expect(backgroundRowId(run)).toBe(`bg_${(1_763_000_000_000).toString(16).padStart(12, "0")}${digest}`);
    expect(backgroundRowId({ ...run, status: "incomplete" })).toBe(backgroundRowId(run));
    expect(backgroundRowId({ ...run, id: "resp_abd" })).not.toBe(backgroundRowId(run));
  });

  it("sorts the ids of runs created later after the earlier ones", () => {
    const ids = [1_763_000_000, 1_763_000_001, 1_900_000_000].map(
      (createdAt, index) => backgroundRowId({ ...run, id: `resp_${9 - index}`, createdAt }) ?? "",
    );
    expect([...ids].sort()).toEqual(ids);
  });

  it("gives a row id only to a finished background run whose id and creation time are known", () => {
    for (const status of ["completed", "incomplete", "failed", "cancelled"])
      expect(isFinishedBackgroundRun({ ...run, status })).toBe(true);
    for (const status of ["queued", "in_progress", null])
      expect(backgroundRowId({ ...run, status })).toBeNull();
    expect(backgroundRowId({ ...run, background: false })).toBeNull();
    expect(backgroundRowId({ ...run, background: null })).toBeNull();
    expect(backgroundRowId({ ...run, id: null })).toBeNull();
    expect(backgroundRowId({ ...run, id: "" })).toBeNull();
    expect(backgroundRowId({ ...run, createdAt: null })).toBeNull();
    expect(backgroundRowId({ ...run, createdAt: 2 ** 48 })).toBeNull();
    expect(backgroundRowId(null)).toBeNull();
  });

  it("takes a finished batch (provider A's Batch API) for a finished run: its tokens come to its polls", () => {
    const batch = {
      id: "batch_abc",
      object: "batch",
      status: "completed",
      background: null,
      createdAt: 1_763_000_000,
    };
    for (const status of ["completed", "failed", "expired", "cancelled"])
      expect(isFinishedBackgroundRun({ ...batch, status })).toBe(true);
    for (const status of ["validating", "in_progress", "finalizing", "cancelling", null])
      expect(isFinishedBackgroundRun({ ...batch, status })).toBe(false);
    expect(isFinishedBackgroundRun({ ...batch, object: "list" })).toBe(false);
    const digest = createHash("sha256").update("batch_abc").digest("hex").slice(0, 20);
    expect(backgroundRowId(batch)).toBe(`bg_${(1_763_000_000_000).toString(16).padStart(12, "0")}${digest}`);
    // A foreground response is no run, whatever its status.
    expect(isFinishedBackgroundRun({ ...run, background: false, object: "response" })).toBe(false);
  });
});
