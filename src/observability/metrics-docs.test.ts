import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { createMetrics } from "./metrics.js";

/**
 * docs/api.md's table of the metrics (`GET /metrics`) against what the registry renders: every
 * metric Sluice exports is listed with its type and labels, and nothing listed is missing. The
 * process defaults (`sluice_process_*`, `sluice_nodejs_*`) are prom-client's and not listed.
 */
describe("the metrics' documentation", () => {
  function documented(): Map<string, { type: string; labels: string[] }> {
    const api = readFileSync(new URL("../../docs/api.md", import.meta.url), "utf8");
    const section = api.slice(api.indexOf("### `GET /metrics`"), api.indexOf("## Authenticated endpoints"));
    const rows = new Map<string, { type: string; labels: string[] }>();
    for (const match of section.matchAll(/^\| `(sluice_[a-z_]+)` \| (\w+) \|([^|]*)\|/gm)) {
      const [, name, type, labels] = match as unknown as [string, string, string, string];
      rows.set(name, { type, labels: [...labels.matchAll(/`(\w+)`/g)].map((label) => label[1] as string) });
    }
    return rows;
  }

  /** Every metric with a sample, so that its label names show. */
  async function rendered(): Promise<Map<string, { type: string; labels: string[] }>> {
    const metrics = createMetrics();
    metrics.observeRequest("/health", "GET", 200, 0.001);
    metrics.observeOverhead("provider-a", 0.001);
    metrics.observeTimeToFirstByte("provider-a", 0.1);
    metrics.countTokens("provider-a", "input", 1);
    metrics.countCost("provider-a", 0.1);
    metrics.countLimitDecision("project", "allowed");
    metrics.countAuthResult("none", "UNAUTHORIZED");
    metrics.countDeviceCheckResult("production", "valid");
    metrics.setUsageQueueDepth(1);
    metrics.countUsageRowsWritten(1);
    metrics.countUsageRowsDropped(1);
    metrics.countUsageWriteFailure();
    metrics.countRefusalCoalesced("FORBIDDEN");
    metrics.countLogLinesDropped(1);
    metrics.countConnectionRefused();
    metrics.countConnectionRefusedFull();
    metrics.setDegraded("database", false);
    const { body } = await metrics.render();
    const found = new Map<string, { type: string; labels: string[] }>();
    for (const [, name, type] of body.matchAll(/^# TYPE (\S+) (\S+)$/gm) as Iterable<
      [string, string, string]
    >) {
      const sample = body
        .split("\n")
        .find((line) => line.startsWith(`${name}{`) || line.startsWith(`${name}_sum{`));
      const labels = sample
        ? [...(sample.match(/\{(.*)\}/)?.[1] ?? "").matchAll(/(\w+)="/g)].map((label) => label[1] as string)
        : [];
      found.set(name, { type, labels: labels.filter((label) => label !== "le") });
    }
    return found;
  }

  it("lists every metric /metrics renders, with its type and labels", async () => {
    const table = documented();
    const exported = await rendered();
    expect(exported.size).toBeGreaterThan(15);
    expect(Object.fromEntries(table)).toEqual(Object.fromEntries(exported));
  });
});
