import { randomUUID } from "node:crypto";
import { existsSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it, vi } from "vitest";
import { startTestGateway } from "../support/test-gateway.js";

const day = 86_400_000;

/** An image of the day `daysAgo` back from `now` in the gateway's local vault: its path. */
function image(dataDir: string, now: Date, daysAgo: number): string {
  const date = new Date(now.getTime() - daysAgo * day).toISOString().slice(0, 10);
  const directory = join(dataDir, "vault", "t1", "generated-images", "prj_a", ...date.split("-"));
  mkdirSync(directory, { recursive: true });
  const file = join(directory, `${randomUUID()}.png`);
  writeFileSync(file, "png");
  return file;
}

describe("SLUICE_VAULT_RETENTION_DAYS", () => {
  it("deletes the local vault's days past the retention on the gateway's timer, and the timer ends with the gateway", async () => {
    const now = new Date();
    const test = await startTestGateway(
      { vaultRetentionDays: 5 },
      { now: () => now, vaultPruning: { firstRunDelayMs: 10, intervalMs: 20 } },
    );
    const { dataDir } = test.gateway.config;
    const old = image(dataDir, now, 30);
    const kept = image(dataDir, now, 4);
    const today = image(dataDir, now, 0);
    await vi.waitFor(() => expect(existsSync(old)).toBe(false), { timeout: 5000 });
    expect([existsSync(kept), existsSync(today)]).toEqual([true, true]);
    expect(test.logs.some((line) => line.includes("vault images past the retention deleted"))).toBe(true);
    await test.close();
    // A timer left running would prune again within 20 ms: an old image put back stays.
    const putBack = image(dataDir, now, 30);
    try {
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(existsSync(putBack)).toBe(true);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
    expect(test.logs.filter((line) => line.includes("retention failed"))).toEqual([]);
  });

  it("deletes nothing when unset", async () => {
    const test = await startTestGateway({}, { vaultPruning: { firstRunDelayMs: 0, intervalMs: 10 } });
    try {
      const ancient = image(test.gateway.config.dataDir, new Date("2020-01-01T12:00:00Z"), 0);
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(existsSync(ancient)).toBe(true);
    } finally {
      await test.close();
    }
  });
});
