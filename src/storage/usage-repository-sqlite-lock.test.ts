import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import BetterSqlite3 from "better-sqlite3";
import { describe, expect, it } from "vitest";
import { usageRow } from "../../test/support/usage-row.js";
import { openDatabase } from "./database.js";
import { isDatabaseUnavailable } from "./database-unavailable.js";
import { createUsageRepository } from "./usage-repository.js";

describe("usage rows on a SQLite file another process holds locked", () => {
  it("fail at once as an outage instead of stalling the event loop for the busy timeout", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "sluice-sqlite-lock-"));
    const database = await openDatabase({ dataDir });
    const other = new BetterSqlite3(join(dataDir, "sluice.sqlite"));
    try {
      const repository = createUsageRepository(database.db, database.sqlite);
      other.exec("begin immediate");
      const started = performance.now();
      const error = await repository.insertBatch([usageRow("req_locked")]).catch((caught: unknown) => caught);
      expect(performance.now() - started).toBeLessThan(1000);
      expect(isDatabaseUnavailable(error)).toBe(true);
      // The connection's busy handler never sleeps on the event loop: every wait is a timer's.
      expect(database.sqlite?.pragma("busy_timeout", { simple: true })).toBe(0);
      other.exec("commit");
      await repository.insertBatch([usageRow("req_locked")]);
      expect(other.prepare("select count(*) as n from usage_records").get()).toEqual({ n: 1 });
    } finally {
      other.close();
      await database.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
