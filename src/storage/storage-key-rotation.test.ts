import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { projectRow } from "../../test/support/project-row.js";
import { storageEngines } from "../../test/support/storage-engines.js";
import type { OpenDatabase } from "./database.js";
import { createKeyRepository } from "./key-repository.js";

/** A project row with only what the test keys need. */
const testModeProject = (id: string, at: string) => projectRow(id, at, { test_mode: 1 });

/** As a rotation keeps them: the newest two, and every key issued in the minute before the new one. */
const kept = { newest: 2, withinMs: 60_000 };

for (const engine of storageEngines) {
  describe.skipIf(!engine.available)(`test-key rotation on ${engine.name}`, () => {
    let database: OpenDatabase;
    let cleanup: (() => Promise<void>) | undefined;

    beforeAll(async () => {
      ({ database, cleanup } = await engine.open());
    });
    afterAll(async () => {
      await database?.close();
      await cleanup?.();
    });

    it("keeps only the newest two test keys when several rotations run at once", async () => {
      const keys = createKeyRepository(database.db);
      const counts: number[] = [];
      for (let round = 0; round < 10; round++) {
        const projectId = `rotate${round}`;
        const at = "2026-11-01T00:00:00.000Z";
        await database.db.insertInto("projects").values(testModeProject(projectId, at)).execute();
        await Promise.all(
          Array.from({ length: 4 }, (_, index) =>
            keys.addTestKey(
              {
                id: `${projectId}-${index}`,
                projectId,
                digest: `d${index}`,
                createdAt: at.replace("01T", `0${index + 1}T`),
              },
              // No window: a key issued at once with another would stay by it.
              { newest: 2, withinMs: 0 },
            ),
          ),
        );
        counts.push((await keys.listTestKeys(projectId)).length);
      }
      expect(counts).toEqual(Array.from({ length: 10 }, () => 2));
    });

    it("keeps every key several rotations at once issue within the window, and prunes past it", async () => {
      const keys = createKeyRepository(database.db);
      const projectId = "burst";
      await database.db
        .insertInto("projects")
        .values(testModeProject(projectId, "2026-11-01T00:00:00.000Z"))
        .execute();
      const add = (id: string, createdAt: string) =>
        keys.addTestKey({ id, projectId, digest: id, createdAt }, kept);
      await add("old", "2026-11-01T00:00:00.000Z");
      await add("first", "2026-11-02T00:00:00.000Z");
      // Five rotations at once, each stamped a millisecond after the one before it took the lock:
      // every answer's key must still work once all five have answered.
      const burst = ["burst0", "burst1", "burst2", "burst3", "burst4"];
      await Promise.all(burst.map((id) => add(id, "2026-11-03T00:00:00.000Z")));
      const stored = await keys.listTestKeys(projectId);
      // "first" is the key before the burst's oldest, a day older: gone, as is "old".
      expect(stored.map((key) => key.id).sort()).toEqual(burst);
      expect(stored.map((key) => key.createdAt).sort()).toEqual(
        [0, 1, 2, 3, 4].map((ms) => `2026-11-03T00:00:00.00${ms}Z`),
      );
      // A rotation a minute after the third: the burst's keys issued within the minute before it stay.
      await add("later", "2026-11-03T00:01:00.002Z");
      expect((await keys.listTestKeys(projectId)).map((key) => key.id)).toEqual([
        "later",
        ...stored.slice(0, 3).map((key) => key.id),
      ]);
      // One more than a minute after those keeps only the newest two again.
      await add("latest", "2026-11-03T00:02:00.000Z");
      expect((await keys.listTestKeys(projectId)).map((key) => key.id)).toEqual(["latest", "later"]);
    });

    it("adds no test key to a project that does not exist", async () => {
      const keys = createKeyRepository(database.db);
      const record = {
        id: "orphan",
        projectId: "missing",
        digest: "d",
        createdAt: "2026-11-01T00:00:00.000Z",
      };
      expect(await keys.addTestKey(record, kept)).toBe(false);
      expect(await keys.listTestKeys("missing")).toEqual([]);
    });
  });
}
