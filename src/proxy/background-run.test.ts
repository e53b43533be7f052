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
  it("derives one row id from the run and the project: bg_, its creation time in ms, a digest of both ids", () => {
    const digest = createHash("sha256").update("proj_1\nresp_abc").digest("hex").slice(0, 20);
    expect(backgroundRowId("proj_1", run)).toBe(
      `bg_${(1_763_000_000_000).toString(16).padStart(12, "0")}${digest}`,
    );
    expect(backgroundRowId("proj_1", { ...run, status: "incomplete" })).toBe(backgroundRowId("proj_1", run));
    expect(backgroundRowId("proj_1", { ...run, id: "resp_abd" })).not.toBe(backgroundRowId("proj_1", run));
  });

  // A run is reported to every project whose key reaches the provider account that ran it: each
  // records it on its own row, rather than the first to poll taking it for all.
  it("gives each project that sees a run a row id of its own, with the same creation prefix", () => {
    const ids = ["proj_1", "proj_2", "proj_1-x"].map((projectId) => backgroundRowId(projectId, run) ?? "");
    expect(new Set(ids).size).toBe(3);
    for (const id of ids)
      expect(id.slice(0, 15)).toBe(`bg_${(1_763_000_000_000).toString(16).padStart(12, "0")}`);
    expect(backgroundRowId("proj_2", run)).toBe(ids[1]);
  });

  it("sorts the ids of runs created later after the earlier ones", () => {
    const ids = [1_763_000_000, 1_763_000_001, 1_900_000_000].map(
      (createdAt, index) => backgroundRowId("proj_1", { ...run, id: `resp_${9 - index}`, createdAt }) ?? "",
    );
    expect([...ids].sort()).toEqual(ids);
  });

  it("gives a row id only to a finished background run whose id and creation time are known", () => {
    for (const status of ["completed", "incomplete", "failed", "cancelled"])
      expect(isFinishedBackgroundRun({ ...run, status })).toBe(true);
    for (const status of ["queued", "in_progress", null])
      expect(backgroundRowId("proj_1", { ...run, status })).toBeNull();
    expect(backgroundRowId("proj_1", { ...run, background: false })).toBeNull();
    expect(backgroundRowId("proj_1", { ...run, background: null })).toBeNull();
    expect(backgroundRowId("proj_1", { ...run, id: null })).toBeNull();
    expect(backgroundRowId("proj_1", { ...run, id: "" })).toBeNull();
    expect(backgroundRowId("proj_1", { ...run, createdAt: null })).toBeNull();
    expect(backgroundRowId("proj_1", { ...run, createdAt: 2 ** 48 })).toBeNull();
    expect(backgroundRowId("proj_1", null)).toBeNull();
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
    const digest = createHash("sha256").update("proj_1\nbatch_abc").digest("hex").slice(0, 20);
    expect(backgroundRowId("proj_1", batch)).toBe(
      `bg_${(1_763_000_000_000).toString(16).padStart(12, "0")}${digest}`,
    );
    // A foreground response is no run, whatever its status.
    expect(isFinishedBackgroundRun({ ...run, background: false, object: "response" })).toBe(false);
  });
});
