import { generateKeyPairSync, randomBytes } from "node:crypto";
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { projectAdminOn } from "../../test/support/project-admin-on.js";
import { storageEngines } from "../../test/support/storage-engines.js";
import { providerKeyAad } from "../admin/project-admin.js";
import { deviceCheckKeyAad } from "../admin/project-rules.js";
import type { OpenDatabase } from "../storage/database.js";
import { checkMasterKeyOpensDatabase, MasterKeyMismatchError } from "./master-key-check.js";
import { resealSecrets } from "./master-key-reseal.js";
import { createSecretBox, type SecretBox } from "./secret-box.js";

/** An Apple .p8 key's form: an EC P-256 private key in PKCS #8 PEM. */
const pem = generateKeyPairSync("ec", { namedCurve: "prime256v1" })
  .privateKey.export({ type: "pkcs8", format: "pem" })
  .toString();

for (const engine of storageEngines) {
  describe.skipIf(!engine.available)(`sluice master-key reseal on ${engine.name}`, () => {
    let database: OpenDatabase;
    let cleanup: () => Promise<void>;
    const oldKey = randomBytes(32);
    const newKey = randomBytes(32);
    const before = createSecretBox(oldKey);
    const rotating = createSecretBox(newKey, oldKey);
    const after = createSecretBox(newKey);
    const source = (box: "rotating" | "after") => ({
      dataDir: "/srv/sluice",
      environment: "development",
      masterKey: newKey.toString("base64"),
      ...(box === "rotating" ? { masterKeyPrevious: oldKey.toString("base64") } : {}),
    });

    beforeAll(async () => {
      ({ database, cleanup } = await engine.open());
    });
    afterAll(async () => {
      await database.close();
      await cleanup();
    });

    const admin = (secretBox: SecretBox) => projectAdminOn(database, secretBox);
    const rows = async () => ({
      shares: (
        await sql<{
          id: string;
          server_share: string;
        }>`select id, server_share from provider_keys order by id`.execute(database.db)
      ).rows,
      projects: (
        await sql<{
          id: string;
          device_check_private_key: string | null;
          updated_at: string;
        }>`select id, device_check_private_key, updated_at from projects order by id`.execute(database.db)
      ).rows,
    });
    const keyIds: Record<string, string> = {};

    it("moves every secret sealed under the old key, revoked shares too, and keeps each bound to its row", async () => {
      // Before the rotation: two projects, one with a DeviceCheck key, sealed under the old key alone.
      for (const id of ["alpha", "beta"]) {
        await admin(before).createProject({ id, name: id, provider: "provider-a", testMode: true });
        const added = await admin(before).addProviderKey(id, {
          provider: "provider-a",
          apiKey: `sk-${id}-0123456789`,
        });
        keyIds[id] = added.keyId;
      }
      const revoked = await admin(before).addProviderKey("beta", {
        provider: "provider-b",
        apiKey: "sk-revoked-01234",
      });
      await admin(before).revokeProviderKey("beta", revoked.keyId);
      await admin(before).updateProject("alpha", {
        deviceCheck: { enabled: true, teamId: "TEAM123456", keyId: "KEY1234567", privateKey: pem },
      });
      // During it: a key added by an instance that already runs with the new key (and the old as previous).
      const fresh = await admin(rotating).addProviderKey("alpha", {
        provider: "provider-b",
        apiKey: "sk-fresh-0123456",
      });
      const stored = await rows();

      await expect(resealSecrets(database.db, rotating, source("rotating"))).resolves.toEqual({
        providerKeys: { resealed: 3, alreadyCurrent: 1, unopenedRevoked: 0 },
        deviceCheckKeys: { resealed: 1, alreadyCurrent: 0 },
      });

      const moved = await rows();
      const share = (id: string) => moved.shares.find((row) => row.id === id)?.server_share ?? "";
      for (const [projectId, provider, keyId] of [
        ["alpha", "provider-a", keyIds.alpha ?? ""],
        ["beta", "provider-a", keyIds.beta ?? ""],
        ["beta", "provider-b", revoked.keyId],
        ["alpha", "provider-b", fresh.keyId],
      ] as const) {
        // Opens with the new key alone, under its own row's AAD and no other.
        expect(after.open(share(keyId), providerKeyAad(projectId, provider, keyId)).length).toBeGreaterThan(
          0,
        );
        expect(() =>
          after.open(share(keyId), providerKeyAad(projectId === "alpha" ? "beta" : "alpha", provider, keyId)),
        ).toThrow();
      }
      // The key the new instance sealed was already under the new key: left as it was.
      expect(share(fresh.keyId)).toBe(stored.shares.find((row) => row.id === fresh.keyId)?.server_share);
      const alpha = moved.projects.find((row) => row.id === "alpha");
      expect(after.open(alpha?.device_check_private_key ?? "", deviceCheckKeyAad("alpha")).toString()).toBe(
        pem,
      );
      // Every write moves updated_at forward: a concurrent update's compare-and-set retries, rather
      // than writing back the old sealed value it read.
      const alphaBefore = stored.projects.find((row) => row.id === "alpha");
      expect(Date.parse(alpha?.updated_at ?? "")).toBeGreaterThan(Date.parse(alphaBefore?.updated_at ?? ""));
      // Nothing opens with the old key alone any more.
      expect(() =>
        before.open(share(keyIds.alpha ?? ""), providerKeyAad("alpha", "provider-a", keyIds.alpha ?? "")),
      ).toThrow();
    });

    it("leaves a store that needs nothing as it is (a second run), and then works without the previous key", async () => {
      const stored = await rows();
      await expect(resealSecrets(database.db, rotating, source("rotating"))).resolves.toEqual({
        providerKeys: { resealed: 0, alreadyCurrent: 4, unopenedRevoked: 0 },
        deviceCheckKeys: { resealed: 0, alreadyCurrent: 1 },
      });
      expect(await rows()).toEqual(stored);
      await expect(checkMasterKeyOpensDatabase(database.db, after, source("after"))).resolves.toEqual({
        damaged: [],
        previousKeyUnneeded: false,
      });
      await expect(resealSecrets(database.db, after, source("after"))).resolves.toEqual({
        providerKeys: { resealed: 0, alreadyCurrent: 4, unopenedRevoked: 0 },
        deviceCheckKeys: { resealed: 0, alreadyCurrent: 1 },
      });
    });

    it("writes nothing when one secret opens under neither key, and names it", async () => {
      await admin(before).createProject({
        id: "gamma",
        name: "gamma",
        provider: "provider-a",
        testMode: true,
      });
      const oldShare = await admin(before).addProviderKey("gamma", {
        provider: "provider-a",
        apiKey: "sk-gamma-0123456",
      });
      const stray = await admin(createSecretBox(randomBytes(32))).addProviderKey("gamma", {
        provider: "provider-a",
        apiKey: "sk-stray-0123456",
        label: "stray",
      });
      const stored = await rows();
      const refused = await resealSecrets(database.db, rotating, source("rotating")).catch(
        (error: unknown) => error,
      );
      expect(refused).toBeInstanceOf(MasterKeyMismatchError);
      expect((refused as Error).message).toBe(
        `provider key ${stray.keyId} of project gamma opens under neither SLUICE_MASTER_KEY nor ` +
          "SLUICE_MASTER_KEY_PREVIOUS: nothing was re-sealed (revoke that key, or set the key it was sealed under)",
      );
      for (const key of [oldKey, newKey])
        expect((refused as Error).message).not.toContain(key.toString("base64"));
      // gamma's other key, sealed under the old key, was not moved either: all or nothing.
      expect(await rows()).toEqual(stored);
      expect(() =>
        after.open(
          stored.shares.find((row) => row.id === oldShare.keyId)?.server_share ?? "",
          providerKeyAad("gamma", "provider-a", oldShare.keyId),
        ),
      ).toThrow();
    });

    it("names only SLUICE_MASTER_KEY when no previous key is set", async () => {
      await expect(resealSecrets(database.db, after, source("after"))).rejects.toThrow(
        /^provider key \w+ of project gamma does not open under SLUICE_MASTER_KEY \(SLUICE_MASTER_KEY_PREVIOUS is unset\): nothing was re-sealed/,
      );
    });

    it("leaves a revoked key's share that opens under neither (it is never opened again), and moves the rest", async () => {
      const stray = (await admin(after).listProviderKeys("gamma")).find((key) => key.label === "stray");
      await admin(after).revokeProviderKey("gamma", stray?.keyId ?? "");
      await expect(resealSecrets(database.db, rotating, source("rotating"))).resolves.toEqual({
        providerKeys: { resealed: 1, alreadyCurrent: 4, unopenedRevoked: 1 },
        deviceCheckKeys: { resealed: 0, alreadyCurrent: 1 },
      });
      await expect(checkMasterKeyOpensDatabase(database.db, after, source("after"))).resolves.toEqual({
        damaged: [],
        previousKeyUnneeded: false,
      });
    });
  });
}

describe("an instance still on the old key alone during the rollout", () => {
  it("cannot open a secret an instance on the new key sealed (so every instance moves to the new key before reseal)", () => {
    const [oldKey, newKey] = [randomBytes(32), randomBytes(32)];
    const sealed = createSecretBox(newKey, oldKey).seal(
      Buffer.from("share"),
      providerKeyAad("p", "provider-a", "k"),
    );
    expect(() => createSecretBox(oldKey).open(sealed, providerKeyAad("p", "provider-a", "k"))).toThrow();
  });
});
