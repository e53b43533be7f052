import { describe, expect, it } from "vitest";
import { usageRow } from "../../test/support/usage-row.js";
import { createUsageRecorder } from "../usage/usage-recorder.js";
import { openDatabase } from "./database.js";
import { createKeyRepository } from "./key-repository.js";
import { createUsageRepository } from "./usage-repository.js";

describe("SQLite usage writes beside a Kysely transaction", () => {
  it("never loses rows the recorder reported written when a concurrent transaction rolls back", async () => {
    const lostAt: number[] = [];
    // Runs in which the recorder reported both rows written: only those can show a row lost.
    let reported = 0;
    for (let ticks = 0; ticks < 40; ticks++) {
      const database = await openDatabase({ dataDir: "unused", sqliteFile: ":memory:" });
      const repository = createUsageRepository(database.db, database.sqlite, database.runReport);
      const keys = createKeyRepository(database.db);
      const written: string[] = [];
      const recorder = createUsageRecorder({
        repository,
        flushIntervalMs: 60_000,
        queueMax: 10_000,
        batchSize: 2,
        onWritten: (rows) => written.push(...rows.map((row) => row.request_id)),
      });
      // A test-key rotation for a project deleted meanwhile: its transaction rolls back (FK).
      const rotation = keys.addTestKey(
        { id: `tk${ticks}`, projectId: "gone", digest: "d", createdAt: "2026-11-02T10:00:00.000Z" },
        { newest: 2, withinMs: 60_000 },
      );
      // Meanwhile a request finishes (a promise continuation) and its row fills a batch.
      let chain = Promise.resolve();
      for (let tick = 0; tick < ticks; tick++) chain = chain.then(() => {});
      await chain.then(() => {
        recorder.record(usageRow(`a${ticks}`));
        recorder.record(usageRow(`b${ticks}`));
      });
      await rotation;
      await recorder.flush();
      const stored = await repository.count();
      if (written.length === 2) reported++;
      if (written.length === 2 && stored !== 2) lostAt.push(ticks);
      await recorder.stop();
      await database.close();
    }
    expect(reported).toBe(40);
    expect(lostAt).toEqual([]);
  });
});
