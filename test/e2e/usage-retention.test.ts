import { describe, expect, it, vi } from "vitest";
import { createUsageRepository } from "../../src/storage/usage-repository.js";
import { keptMonthsStart } from "../../src/usage/usage-retention.js";
import { startTestGateway } from "../support/test-gateway.js";
import { usageRow } from "../support/usage-row.js";

const day = 86_400_000;

describe("SLUICE_USAGE_RETENTION_DAYS", () => {
  it("deletes the rows past the retention on the gateway's timer, and the timer ends with the gateway", async () => {
    const now = new Date();
    const kept = keptMonthsStart(now);
    const test = await startTestGateway(
      { usageRetentionDays: 100 },
      { now: () => now, usagePruning: { firstRunDelayMs: 10, intervalMs: 20, batchSize: 2 } },
    );
    const { database } = test.gateway;
    const usage = createUsageRepository(database.db, database.sqlite);
    await usage.insertBatch([
      usageRow("old-1", { created_at: new Date(now.getTime() - 400 * day).toISOString() }),
      usageRow("old-2", { created_at: new Date(now.getTime() - 200 * day).toISOString() }),
      usageRow("old-3", { created_at: new Date(now.getTime() - 101 * day).toISOString() }),
      usageRow("kept-1", { created_at: new Date(now.getTime() - 99 * day).toISOString() }),
      usageRow("kept-2", { created_at: kept.toISOString() }),
    ]);
    const ids = async () =>
      (
        await database.db.selectFrom("usage_records").select("request_id").orderBy("request_id").execute()
      ).map((row) => row.request_id);
    await vi.waitFor(async () => expect(await ids()).toEqual(["kept-1", "kept-2"]), { timeout: 5000 });
    expect(test.logs.some((line) => line.includes("usage rows past the retention deleted"))).toBe(true);

    await test.close();
    // A timer left running would prune again within 20 ms, on the closed database, and log that it failed.
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(test.logs.filter((line) => line.includes("retention failed"))).toEqual([]);
  });

  it("deletes nothing when unset", async () => {
    const test = await startTestGateway({}, { usagePruning: { firstRunDelayMs: 0, intervalMs: 10 } });
    try {
      const { database } = test.gateway;
      await createUsageRepository(database.db, database.sqlite).insertBatch([
        usageRow("ancient", { created_at: "2020-01-01T00:00:00.000Z" }),
      ]);
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(await database.db.selectFrom("usage_records").select("request_id").execute()).toEqual([
        { request_id: "ancient" },
      ]);
    } finally {
      await test.close();
    }
  });
});
