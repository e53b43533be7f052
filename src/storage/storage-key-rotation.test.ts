import type { Insertable } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { storageEngines } from "../../test/support/storage-engines.js";
import type { OpenDatabase } from "./database.js";
import { createKeyRepository } from "./key-repository.js";
import type { ProjectsTable } from "./schema.js";

/** A project row with only what the test keys need. */
const projectRow = (id: string, at: string): Insertable<ProjectsTable> => ({
  id,
  name: id,
  team_id: null,
  provider: "provider-a",
  model: null,
  test_mode: 1,
  device_check_enabled: 0,
  device_check_team_id: null,
  device_check_key_id: null,
  device_check_private_key: null,
  device_check_environment: "production",
  device_token_mode: "cached",
  output_schema: null,
  save_images_to_vault: 0,
  rate_limit_per_minute: null,
  device_rate_limit_per_minute: null,
  monthly_spend_cap_usd: null,
  disabled: 0,
  created_at: at,
  updated_at: at,
});

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
        await database.db.insertInto("projects").values(projectRow(projectId, at)).execute();
        await Promise.all(
          Array.from({ length: 4 }, (_, index) =>
            keys.addTestKey(
              {
                id: `${projectId}-${index}`,
                projectId,
                digest: `d${index}`,
                createdAt: at.replace("01T", `0${index + 1}T`),
              },
              2,
            ),
          ),
        );
        counts.push((await keys.listTestKeys(projectId)).length);
      }
      expect(counts).toEqual(Array.from({ length: 10 }, () => 2));
    });

    it("adds no test key to a project that does not exist", async () => {
      const keys = createKeyRepository(database.db);
      const record = {
        id: "orphan",
        projectId: "missing",
        digest: "d",
        createdAt: "2026-11-01T00:00:00.000Z",
      };
      expect(await keys.addTestKey(record, 2)).toBe(false);
      expect(await keys.listTestKeys("missing")).toEqual([]);
    });
  });
}
