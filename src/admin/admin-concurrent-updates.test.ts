import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { storageEngines } from "../../test/support/storage-engines.js";
import { createSecretBox } from "../auth/secret-box.js";
import type { OpenDatabase } from "../storage/database.js";
import { createKeyRepository, type KeyRepository } from "../storage/key-repository.js";
import { createProjectRepository, type ProjectRepository } from "../storage/project-repository.js";
import { createUsageRepository } from "../storage/usage-repository.js";
import { createProjectAdmin } from "./project-admin.js";

/** Concurrent changes to one project, on both engines: none may undo another or fail as a bug. */
for (const engine of storageEngines) {
  describe.skipIf(!engine.available)(`concurrent project updates on ${engine.name}`, () => {
    let database: OpenDatabase;
    let cleanup: () => Promise<void>;
    const secretBox = createSecretBox(randomBytes(32));

    beforeAll(async () => {
      ({ database, cleanup } = await engine.open());
    });
    afterAll(async () => {
      await database?.close();
      await cleanup?.();
    });

    // A fixed clock: updates within one millisecond must still not undo each other.
    function admin(projects: Partial<ProjectRepository> = {}, keys: Partial<KeyRepository> = {}) {
      return createProjectAdmin({
        projects: { ...createProjectRepository(database.db), ...projects },
        keys: { ...createKeyRepository(database.db), ...keys },
        usage: createUsageRepository(database.db, database.sqlite),
        secretBox,
        now: () => new Date("2026-11-02T10:00:00.000Z"),
        onProjectChanged: () => {},
        testModeAllowed: true,
      });
    }

    /** Holds the first `count` reads of a project until all of them have read it. */
    function readsTogether(count: number): Partial<ProjectRepository> {
      const repository = createProjectRepository(database.db);
      let arrived = 0;
      let release: () => void = () => {};
      const allRead = new Promise<void>((resolve) => {
        release = resolve;
      });
      return {
        async get(id) {
          const project = await repository.get(id);
          arrived++;
          if (arrived === count) release();
          if (arrived <= count) await allRead;
          return project;
        },
      };
    }

    it("keeps both of two updates that read the project before either wrote it", async () => {
      await admin().createProject({ id: "both", name: "Both", provider: "provider-a" });
      const racing = admin(readsTogether(2));
      await Promise.all([
        racing.updateProject("both", { name: "Renamed" }),
        racing.updateProject("both", { testMode: true }),
      ]);
      expect(await admin().getProject("both")).toMatchObject({ name: "Renamed", testMode: true });
    });

    it("keeps every one of many concurrent updates to different fields", async () => {
      await admin().createProject({ id: "many", name: "Many", provider: "provider-a" });
      const changes = [
        { name: "Renamed" },
        { model: "gpt-4.1-mini" },
        { testMode: true },
        { teamId: "team-1" },
        { monthlySpendCapUsd: 25 },
        { rateLimits: { perMinute: 60 } },
        { rateLimits: { devicePerMinute: 6 } },
        { disabled: true },
      ];
      await Promise.all(changes.map((change) => admin().updateProject("many", change)));
      expect(await admin().getProject("many")).toMatchObject({
        name: "Renamed",
        model: "gpt-4.1-mini",
        testMode: true,
        teamId: "team-1",
        monthlySpendCapUsd: 25,
        rateLimits: { perMinute: 60, devicePerMinute: 6 },
        disabled: true,
      });
    });

    it("checks a rule that spans fields against the other update's result", async () => {
      await admin().createProject({ id: "vault", name: "Vault", provider: "provider-a", teamId: "team-1" });
      const racing = admin(readsTogether(2));
      const results = await Promise.allSettled([
        racing.updateProject("vault", { teamId: null }),
        racing.updateProject("vault", { saveImagesToVault: true }),
      ]);
      // Whichever wrote second saw the other's change: never a vault without a team id.
      const stored = await admin().getProject("vault");
      expect(stored.saveImagesToVault && stored.teamId === null).toBe(false);
      expect(results.filter((result) => result.status === "rejected")).toHaveLength(1);
    });

    it("answers PROJECT_NOT_FOUND to an update that read the project before it was deleted", async () => {
      await admin().createProject({ id: "gone", name: "Gone", provider: "provider-a" });
      const repository = createProjectRepository(database.db);
      let deleted = false;
      const racing = admin({
        async get(id) {
          const project = await repository.get(id);
          if (!deleted) {
            deleted = true;
            await repository.delete(id);
          }
          return project;
        },
      });
      await expect(racing.updateProject("gone", { name: "Back" })).rejects.toMatchObject({
        code: "PROJECT_NOT_FOUND",
        status: 404,
      });
      expect(await repository.get("gone")).toBeNull();
    });

    it.each([
      [
        "adds a provider key",
        (racing: ReturnType<typeof admin>, id: string) =>
          racing.addProviderKey(id, { provider: "provider-a", apiKey: "sk-1234567890" }),
      ],
      ["rotates the test key", (racing: ReturnType<typeof admin>, id: string) => racing.rotateTestKey(id)],
    ])("answers PROJECT_NOT_FOUND when it %s of a project deleted meanwhile", async (what, change) => {
      const id = `deleted-${what.length}`;
      await admin().createProject({ id, name: "Deleted", provider: "provider-a" });
      const keys = createKeyRepository(database.db);
      const deleteFirst = async () => {
        await createProjectRepository(database.db).delete(id);
      };
      const racing = admin(
        {},
        {
          insertProviderKey: async (record) => {
            await deleteFirst();
            return keys.insertProviderKey(record);
          },
          addTestKey: async (record, kept) => {
            await deleteFirst();
            return keys.addTestKey(record, kept);
          },
        },
      );
      await expect(change(racing, id)).rejects.toMatchObject({ code: "PROJECT_NOT_FOUND", status: 404 });
      expect(await keys.listProviderKeys(id)).toEqual([]);
      expect(await keys.listTestKeys(id)).toEqual([]);
    });
  });
}
