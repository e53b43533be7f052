import { randomBytes } from "node:crypto";
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { projectAdminOn } from "../../test/support/project-admin-on.js";
import { storageEngines } from "../../test/support/storage-engines.js";

import type { OpenDatabase } from "../storage/database.js";
import { createKeyRepository } from "../storage/key-repository.js";
import { createProjectRepository } from "../storage/project-repository.js";
import { createCredentialDirectory } from "./credential-directory.js";
import { checkMasterKeyOpensDatabase } from "./master-key-check.js";
import { resealSecrets } from "./master-key-reseal.js";
import { splitProviderKey } from "./partial-key.js";
import { createSecretBox } from "./secret-box.js";

const sqlite = storageEngines.find((engine) => engine.name === "SQLite");

/**
 * A provider key's sealed server share opens only in its own place: its project, its key id and the
 * provider the row names (decision 0053). A row's provider rewritten in the database (its owner's
 * write access, not the master key) would otherwise send that provider's key to another provider.
 */
describe.skipIf(!sqlite?.available)("a sealed server share bound to its place", () => {
  let database: OpenDatabase;
  let cleanup: () => Promise<void>;
  const masterKey = randomBytes(32);
  const secretBox = createSecretBox(masterKey);
  const source = {
    dataDir: "/srv/sluice",
    environment: "development",
    masterKey: masterKey.toString("base64"),
  };

  beforeAll(async () => {
    ({ database, cleanup } = await (sqlite as NonNullable<typeof sqlite>).open());
    for (const id of ["alpha", "beta"])
      await projectAdminOn(database, secretBox).createProject({
        id,
        name: id,
        provider: "provider-a",
        testMode: true,
      });
  });
  afterAll(async () => {
    await database.close();
    await cleanup();
  });

  const directory = () =>
    createCredentialDirectory({
      projects: createProjectRepository(database.db),
      keys: createKeyRepository(database.db),
      secretBox,
      ttlMs: 0,
    });
  const opens = async (keyId: string) => {
    const key = await directory().key(keyId);
    expect(key).toBeDefined();
    try {
      key?.serverShare();
      return true;
    } catch {
      return false;
    }
  };
  const add = (projectId: string, provider: string) =>
    projectAdminOn(database, secretBox).addProviderKey(projectId, {
      provider,
      apiKey: `sk-${provider}-0123456789`,
    });
  const share = async (keyId: string) =>
    (
      await sql<{ server_share: string }>`select server_share from provider_keys where id = ${keyId}`.execute(
        database.db,
      )
    ).rows[0]?.server_share ?? "";

  it("does not open once its row names another provider, nor in another row or project", async () => {
    const a = await add("alpha", "provider-a");
    const b = await add("alpha", "provider-b");
    const other = await add("beta", "provider-a");
    expect(await opens(a.keyId)).toBe(true);

    await sql`update provider_keys set provider = 'provider-b' where id = ${a.keyId}`.execute(database.db);
    expect(await opens(a.keyId)).toBe(false);
    await sql`update provider_keys set provider = 'provider-a' where id = ${a.keyId}`.execute(database.db);
    expect(await opens(a.keyId)).toBe(true);

    const sealedA = await share(a.keyId);
    await sql`update provider_keys set server_share = ${sealedA} where id = ${b.keyId}`.execute(database.db);
    expect(await opens(b.keyId)).toBe(false);
    await sql`update provider_keys set server_share = ${sealedA} where id = ${other.keyId}`.execute(
      database.db,
    );
    expect(await opens(other.keyId)).toBe(false);
  });

  it("opens a share sealed before the provider was bound, and the reseal binds it", async () => {
    await sql`delete from provider_keys`.execute(database.db);
    const keyId = "legacy000001";
    const split = splitProviderKey(keyId, "sk-legacy-0123456789");
    await sql`insert into provider_keys (id, project_id, provider, label, server_share, client_share_digest, created_at, revoked_at)
      values (${keyId}, 'alpha', 'provider-a', null, ${secretBox.seal(split.serverShare, `provider-key:alpha:${keyId}`)},
        ${split.clientShareDigest}, '2026-01-01T00:00:00.000Z', null)`.execute(database.db);
    expect(await opens(keyId)).toBe(true);
    await expect(checkMasterKeyOpensDatabase(database.db, secretBox, source)).resolves.toEqual({
      damaged: [],
      previousKeyUnneeded: false,
    });

    await expect(resealSecrets(database.db, secretBox, source)).resolves.toEqual({
      providerKeys: { resealed: 1, alreadyCurrent: 0, unopenedRevoked: 0 },
      deviceCheckKeys: { resealed: 0, alreadyCurrent: 0 },
    });
    const resealed = await share(keyId);
    expect(() => secretBox.open(resealed, `provider-key:alpha:${keyId}`)).toThrow();
    expect(await opens(keyId)).toBe(true);
    // Now bound: a rewritten provider no longer opens it.
    await sql`update provider_keys set provider = 'provider-b' where id = ${keyId}`.execute(database.db);
    expect(await opens(keyId)).toBe(false);
    await expect(resealSecrets(database.db, secretBox, source)).rejects.toThrow(/legacy000001/);
  });
});
