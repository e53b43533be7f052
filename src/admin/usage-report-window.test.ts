import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { storageEngines } from "../../test/support/storage-engines.js";
import { usageRow } from "../../test/support/usage-row.js";
import { createSecretBox } from "../auth/secret-box.js";
import type { OpenDatabase } from "../storage/database.js";
import { createKeyRepository } from "../storage/key-repository.js";
import { createProjectRepository } from "../storage/project-repository.js";
import { createUsageRepository } from "../storage/usage-repository.js";
import { createProjectAdmin } from "./project-admin.js";

/**
 * The usage report's window (docs/api.md): `from` inclusive, `to` exclusive, a date alone the
 * whole of that UTC day, an instant only with its zone. Rows one millisecond either side of each
 * end, and at it.
 */
for (const engine of storageEngines) {
  describe.skipIf(!engine.available)(`usage report window on ${engine.name}`, () => {
    let database: OpenDatabase;
    let cleanup: () => Promise<void>;
    const admin = () =>
      createProjectAdmin({
        projects: createProjectRepository(database.db),
        keys: createKeyRepository(database.db),
        usage: createUsageRepository(database.db, database.sqlite),
        secretBox: createSecretBox(randomBytes(32)),
        now: () => new Date("2026-11-01T00:00:00.000Z"),
        onProjectChanged: () => {},
        testModeAllowed: true,
      });
    const times = [
      "2026-11-04T23:59:59.999Z",
      "2026-11-05T00:00:00.000Z",
      "2026-11-05T00:00:00.001Z",
      "2026-11-06T23:59:59.999Z",
      "2026-11-07T00:00:00.000Z",
      "2026-11-07T00:00:00.001Z",
    ];
    /** The rows the report counts, by their time. */
    const counted = async (query: Record<string, string>) => {
      const report = await admin().usageReport("window", { ...query, groupBy: "endpoint" });
      return report.rows.flatMap((row) => (row.group ? [row.group] : [])).sort();
    };

    beforeAll(async () => {
      ({ database, cleanup } = await engine.open());
      await admin().createProject({ id: "window", name: "Window", provider: "provider-a" });
      // Each row's endpoint is its time, so a report grouped by endpoint says which rows it counted.
      await createUsageRepository(database.db, database.sqlite).insertBatch(
        times.map((time, index) =>
          usageRow(`w-${index}`, { project_id: "window", created_at: time, endpoint: time }),
        ),
      );
    });
    afterAll(async () => {
      await database.close();
      await cleanup();
    });

    it("counts a row at `from` and one a millisecond before `to`, not one at `to`", async () => {
      expect(await counted({ from: "2026-11-05T00:00:00.000Z", to: "2026-11-07T00:00:00.000Z" })).toEqual([
        "2026-11-05T00:00:00.000Z",
        "2026-11-05T00:00:00.001Z",
        "2026-11-06T23:59:59.999Z",
      ]);
    });

    it("reads a date alone as that whole UTC day, at either end", async () => {
      expect(await counted({ from: "2026-11-05", to: "2026-11-06" })).toEqual([
        "2026-11-05T00:00:00.000Z",
        "2026-11-05T00:00:00.001Z",
        "2026-11-06T23:59:59.999Z",
      ]);
      expect(await counted({ from: "2026-11-07", to: "2026-11-07" })).toEqual([
        "2026-11-07T00:00:00.000Z",
        "2026-11-07T00:00:00.001Z",
      ]);
    });

    it("reads an instant in its own zone, and refuses one without a zone", async () => {
      // 05:30 on the 5th in India is 00:00 UTC.
      expect(
        await counted({ from: "2026-11-05T05:30:00.000+05:30", to: "2026-11-07T05:30:00.001+05:30" }),
      ).toEqual([
        "2026-11-05T00:00:00.000Z",
        "2026-11-05T00:00:00.001Z",
        "2026-11-06T23:59:59.999Z",
        "2026-11-07T00:00:00.000Z",
      ]);
      await expect(admin().usageReport("window", { from: "2026-11-05T00:00:00" })).rejects.toMatchObject({
        code: "BAD_REQUEST",
        details: { problems: ["from: must be an ISO instant (2026-11-01T10:00:00Z) or date (2026-11-01)"] },
      });
    });

    // Rows are stamped to the millisecond; a client may send microseconds (Python's isoformat does).
    // Cut to the millisecond, `from` took in the row just before it and `to` left out the row just
    // before it.
    it("keeps to the ends as given finer than a millisecond", async () => {
      expect(
        await counted({ from: "2026-11-05T00:00:00.000500+00:00", to: "2026-11-07T00:00:00.000500+00:00" }),
      ).toEqual(["2026-11-05T00:00:00.001Z", "2026-11-06T23:59:59.999Z", "2026-11-07T00:00:00.000Z"]);
    });

    // Two ends within one millisecond hold no row's time between them: the window is empty, not
    // wrong, although both round up to the same millisecond. Ends the other way round are refused.
    it("reports nothing between two ends inside one millisecond, and refuses them reversed", async () => {
      expect(
        await counted({ from: "2026-11-05T00:00:00.000200Z", to: "2026-11-05T00:00:00.000700Z" }),
      ).toEqual([]);
      expect(await counted({ from: "2026-11-06T23:59:59.9995Z", to: "2026-11-06" })).toEqual([]);
      for (const [from, to] of [
        ["2026-11-05T00:00:00.000700Z", "2026-11-05T00:00:00.000200Z"],
        ["2026-11-05T00:00:00.0005Z", "2026-11-05T00:00:00.000500Z"],
        ["2026-11-07T00:00:00.0000Z", "2026-11-06"],
      ] as const)
        await expect(admin().usageReport("window", { from, to })).rejects.toMatchObject({
          code: "BAD_REQUEST",
          message: "`from` must be before `to`",
        });
    });
  });
}
