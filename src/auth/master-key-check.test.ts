import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { projectAdminOn } from "../../test/support/project-admin-on.js";
import { storageEngines } from "../../test/support/storage-engines.js";
import { deviceCheckKeyAad } from "../admin/project-rules.js";
import type { OpenDatabase } from "../storage/database.js";
import { checkMasterKeyOpensDatabase, MasterKeyMismatchError } from "./master-key-check.js";
import { resealSecrets } from "./master-key-reseal.js";
import { createSecretBox, type SecretBox } from "./secret-box.js";

for (const engine of storageEngines) {
  describe.skipIf(!engine.available)(`the master key checked against ${engine.name} at start`, () => {
    let database: OpenDatabase;
    let cleanup: () => Promise<void>;
    const stored = randomBytes(32);
    const other = randomBytes(32);
    const box = createSecretBox(stored);
    /** The check at a start with `key` as SLUICE_MASTER_KEY (`source` may say otherwise). */
    const check = (key: Buffer, source: { masterKey?: string } = { masterKey: key.toString("base64") }) =>
      checkMasterKeyOpensDatabase(database.db, createSecretBox(key), {
        dataDir: "/srv/sluice",
        environment: "development",
        ...source,
      });

    beforeAll(async () => {
      ({ database, cleanup } = await engine.open());
    });
    afterAll(async () => {
      await database.close();
      await cleanup();
    });

    const admin = (secretBox: SecretBox) => projectAdminOn(database, secretBox);

    it("passes any key on a database that holds no secret (a new one)", async () => {
      await expect(check(other)).resolves.toEqual({ damaged: [], previousKeyUnneeded: false });
    });

    it("refuses a project's DeviceCheck key sealed under another key when no provider key is stored", async () => {
      await admin(box).createProject({ id: "with-p8", name: "p8", provider: "provider-a" });
      await sql`update projects set device_check_private_key = ${box.seal(Buffer.from("pem"), deviceCheckKeyAad("with-p8"))}
        where id = 'with-p8'`.execute(database.db);
      await expect(check(stored)).resolves.toEqual({ damaged: [], previousKeyUnneeded: false });
      await expect(check(other)).rejects.toThrow(
        new MasterKeyMismatchError(
          "SLUICE_MASTER_KEY does not open the secrets stored in the database (the DeviceCheck key of " +
            "project with-p8 was sealed under another master key): set SLUICE_MASTER_KEY to the key " +
            "the database's secrets were stored under",
        ),
      );
    });

    it("refuses another valid key, naming SLUICE_MASTER_KEY and the newest provider key it does not open", async () => {
      await admin(box).createProject({ id: "with-key", name: "key", provider: "provider-a" });
      const { keyId } = await admin(box).addProviderKey("with-key", {
        provider: "provider-a",
        apiKey: "sk-upstream-0123456789",
      });
      await expect(check(stored)).resolves.toEqual({ damaged: [], previousKeyUnneeded: false });
      const refused = await check(other).catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(MasterKeyMismatchError);
      expect((refused as Error).message).toBe(
        `SLUICE_MASTER_KEY does not open the secrets stored in the database (provider key ${keyId} of ` +
          "project with-key was sealed under another master key): set SLUICE_MASTER_KEY to the key " +
          "the database's secrets were stored under",
      );
    });

    it("names the data dir's key file when SLUICE_MASTER_KEY is unset", async () => {
      const file = join("/srv/sluice", "master.key");
      await expect(check(other, { masterKey: undefined })).rejects.toThrow(
        new RegExp(
          `^The master key file ${file} \\(SLUICE_MASTER_KEY is unset\\) does not open the secrets stored ` +
            `in the database \\(provider key \\w+ of project with-key was sealed under another master key\\): ` +
            `set SLUICE_MASTER_KEY to the key the database's secrets were stored under, or put that key back in ${file}$`,
        ),
      );
    });

    it("takes one damaged row for a damaged row, not for the wrong key: the others open", async () => {
      await admin(box).createProject({ id: "damaged", name: "damaged", provider: "provider-a" });
      const { keyId } = await admin(box).addProviderKey("damaged", {
        provider: "provider-a",
        apiKey: "sk-upstream-damaged-0123",
      });
      const [row] = await sql<{
        server_share: string;
      }>`select server_share from provider_keys where id = ${keyId}`
        .execute(database.db)
        .then((result) => result.rows);
      const share = Buffer.from(row?.server_share ?? "", "base64");
      share[share.length - 1] = (share[share.length - 1] ?? 0) ^ 1;
      await sql`update provider_keys set server_share = ${share.toString("base64")} where id = ${keyId}`.execute(
        database.db,
      );
      await expect(check(stored)).resolves.toEqual({
        damaged: [`provider key ${keyId} of project damaged`],
        previousKeyUnneeded: false,
      });
      await expect(check(other)).rejects.toThrow(MasterKeyMismatchError);
      await admin(box).revokeProviderKey("damaged", keyId);
    });

    it("passes, during a rotation, a store sealed under the previous key (SLUICE_MASTER_KEY_PREVIOUS)", async () => {
      const rotated = randomBytes(32);
      const rotating = createSecretBox(rotated, stored);
      const source = {
        dataDir: "/srv/sluice",
        environment: "development",
        masterKey: rotated.toString("base64"),
        masterKeyPrevious: stored.toString("base64"),
      };
      await expect(checkMasterKeyOpensDatabase(database.db, rotating, source)).resolves.toEqual({
        damaged: [],
        previousKeyUnneeded: false,
      });
      // A secret added during the rotation is sealed under the new key: the store opens under each.
      await admin(rotating).addProviderKey("with-key", {
        provider: "provider-a",
        apiKey: "sk-upstream-rotation-1",
      });
      await expect(checkMasterKeyOpensDatabase(database.db, rotating, source)).resolves.toEqual({
        damaged: [],
        previousKeyUnneeded: false,
      });
    });

    it("refuses, during a rotation, a store neither key opens, naming both settings", async () => {
      const [current, previous] = [randomBytes(32), randomBytes(32)];
      const refused = await checkMasterKeyOpensDatabase(database.db, createSecretBox(current, previous), {
        dataDir: "/srv/sluice",
        environment: "development",
        masterKey: current.toString("base64"),
        masterKeyPrevious: previous.toString("base64"),
      }).catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(MasterKeyMismatchError);
      const message = (refused as Error).message;
      expect(message).toMatch(
        /^Neither SLUICE_MASTER_KEY nor SLUICE_MASTER_KEY_PREVIOUS opens the secrets stored in the database \(provider key \w+ of project with-key was sealed under another master key\): set SLUICE_MASTER_KEY to the key the database's secrets were stored under, or SLUICE_MASTER_KEY_PREVIOUS to it during a rotation$/,
      );
      for (const key of [current, previous]) expect(message).not.toContain(key.toString("base64"));
    });

    it("looks past revoked provider keys, whose shares are never opened again", async () => {
      const keys = await admin(box).listProviderKeys("with-key");
      for (const key of keys) await admin(box).revokeProviderKey("with-key", key.keyId);
      // Only the DeviceCheck key is left to open: sealed under `stored` too.
      await expect(check(stored)).resolves.toEqual({ damaged: [], previousKeyUnneeded: false });
      await expect(check(other)).rejects.toThrow(/the DeviceCheck key of project with-p8/);
    });
  });

  describe.skipIf(!engine.available)(
    `whether SLUICE_MASTER_KEY_PREVIOUS is still needed, told by the start check on ${engine.name}`,
    () => {
      let database: OpenDatabase;
      let cleanup: () => Promise<void>;
      const oldKey = randomBytes(32);
      const newKey = randomBytes(32);
      const before = createSecretBox(oldKey);
      const rotating = createSecretBox(newKey, oldKey);
      const source = (previous: boolean) => ({
        dataDir: "/srv/sluice",
        environment: "development",
        masterKey: newKey.toString("base64"),
        ...(previous ? { masterKeyPrevious: oldKey.toString("base64") } : {}),
      });
      const check = (previous = true) =>
        checkMasterKeyOpensDatabase(
          database.db,
          previous ? rotating : createSecretBox(newKey),
          source(previous),
        );

      beforeAll(async () => {
        ({ database, cleanup } = await engine.open());
      });
      afterAll(async () => {
        await database.close();
        await cleanup();
      });

      const admin = (secretBox: SecretBox) => projectAdminOn(database, secretBox);
      const addKeys = async (secretBox: SecretBox, project: string, count: number) => {
        const ids: string[] = [];
        for (let index = 0; index < count; index++)
          ids.push(
            (
              await admin(secretBox).addProviderKey(project, {
                provider: "provider-a",
                apiKey: `sk-upstream-${project}-${index}-0123456789`,
              })
            ).keyId,
          );
        return ids;
      };

      it("says it is not needed on a store that holds no secret", async () => {
        await expect(check()).resolves.toEqual({ damaged: [], previousKeyUnneeded: true });
        // Without SLUICE_MASTER_KEY_PREVIOUS there is nothing to remove.
        await expect(check(false)).resolves.toEqual({ damaged: [], previousKeyUnneeded: false });
      });

      it("says it is needed while an older secret opens under it alone, though the newest open under SLUICE_MASTER_KEY", async () => {
        await admin(before).createProject({ id: "older", name: "older", provider: "provider-a" });
        await addKeys(before, "older", 1);
        // Added during the rotation, so the newest secrets (the ones a start samples) are all under
        // the new key: the older one still needs the previous key all the same.
        await admin(rotating).createProject({ id: "newer", name: "newer", provider: "provider-a" });
        await addKeys(rotating, "newer", 4);
        await expect(check()).resolves.toEqual({ damaged: [], previousKeyUnneeded: false });
      });

      it("says it is not needed once every secret is re-sealed under SLUICE_MASTER_KEY", async () => {
        await resealSecrets(database.db, rotating, source(true));
        await expect(check()).resolves.toEqual({ damaged: [], previousKeyUnneeded: true });
        await expect(check(false)).resolves.toEqual({ damaged: [], previousKeyUnneeded: false });
      });

      it("says it is needed while a revoked provider key's share opens under it alone (the reseal moves those too)", async () => {
        const [revoked] = await addKeys(before, "older", 1);
        await admin(rotating).revokeProviderKey("older", revoked ?? "");
        await expect(check()).resolves.toEqual({ damaged: [], previousKeyUnneeded: false });
        await resealSecrets(database.db, rotating, source(true));
        await expect(check()).resolves.toEqual({ damaged: [], previousKeyUnneeded: true });
      });

      it("says it is needed while a project's DeviceCheck key opens under it alone", async () => {
        await sql`update projects set device_check_private_key = ${before.seal(Buffer.from("pem"), deviceCheckKeyAad("older"))}
          where id = 'older'`.execute(database.db);
        await expect(check()).resolves.toEqual({ damaged: [], previousKeyUnneeded: false });
        await resealSecrets(database.db, rotating, source(true));
        await expect(check()).resolves.toEqual({ damaged: [], previousKeyUnneeded: true });
      });
    },
  );
}
