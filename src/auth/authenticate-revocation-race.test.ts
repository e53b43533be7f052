import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateAppleKeyPair } from "../../test/fakes/fake-apple.js";
import { openThrottle } from "../../test/support/authenticator-wiring.js";
import { createProjectAdmin } from "../admin/project-admin.js";
import { type OpenDatabase, openDatabase } from "../storage/database.js";
import { createKeyRepository, type KeyRepository } from "../storage/key-repository.js";
import { createProjectRepository } from "../storage/project-repository.js";
import { createUsageRepository } from "../storage/usage-repository.js";
import { type AuthResult, createAuthenticator } from "./authenticate.js";
import { createCredentialDirectory } from "./credential-directory.js";
import { createSecretBox } from "./secret-box.js";

/**
 * The admin use cases and an authenticator over one database, as the composition root wires them;
 * the admin's changes reach the authenticator's directory at once only when it runs on `this
 * instance`.
 */
function wire(
  database: OpenDatabase,
  keys: KeyRepository,
  cache: { ttlMs: number; now?: () => number },
  admin: "this instance" | "another instance",
) {
  const projects = createProjectRepository(database.db);
  const secretBox = createSecretBox(randomBytes(32));
  const directory = createCredentialDirectory({ projects, keys, secretBox, ...cache });
  return {
    admin: createProjectAdmin({
      projects,
      keys,
      usage: createUsageRepository(database.db),
      secretBox,
      now: () => new Date(),
      onProjectChanged: admin === "this instance" ? directory.invalidate : () => {},
      testModeAllowed: true,
    }),
    authenticate: createAuthenticator({
      directory,
      deviceTokens: { verify: async () => ({ kind: "ok", digest: "device" }) },
      throttle: openThrottle,
      testModeAllowed: true,
    }),
  };
}

/**
 * A key record read before an admin revoked the key can arrive after the revocation was applied
 * (a slow read on PostgreSQL, say). The request that read it may pass, but what it learned must
 * not be remembered past the revocation: "takes effect at once on the instance that handled it".
 */
describe("authentication racing a revocation", () => {
  let database: OpenDatabase;

  beforeAll(async () => {
    database = await openDatabase({ dataDir: "unused", sqliteFile: ":memory:" });
  });

  afterAll(async () => {
    await database.close();
  });

  it.each(["test key", "device token"])(
    "does not keep a %s credential that was verified while the key was being revoked",
    async (kind) => {
      const realKeys = createKeyRepository(database.db);
      let heldRead: (() => void) | null = null;
      let holdNextRead = false;
      // Holds one key-record read until the test lets it finish.
      const keys: KeyRepository = {
        ...realKeys,
        async getProviderKey(id) {
          const record = await realKeys.getProviderKey(id);
          if (!holdNextRead) return record;
          holdNextRead = false;
          await new Promise<void>((resolve) => {
            heldRead = resolve;
          });
          return record;
        },
      };
      const { admin, authenticate } = wire(database, keys, { ttlMs: 60_000 }, "this instance");
      const device = kind === "device token";
      const created = await admin.createProject({
        name: `race ${kind}`,
        provider: "provider-a",
        testMode: !device,
        ...(device
          ? {
              deviceCheck: {
                enabled: true,
                teamId: "TEAM123456",
                keyId: "KEY1234567",
                privateKey: generateAppleKeyPair().privateKeyPem,
                environment: "production" as const,
              },
            }
          : {}),
      });
      const key = await admin.addProviderKey(created.project.id, {
        provider: "provider-a",
        apiKey: "sk-race-key-123456",
      });
      const token = device ? Buffer.from("a-device-token").toString("base64") : created.testKey;
      const request = {
        projectId: created.project.id,
        headers: { authorization: `Bearer ${key.partialKey}.${token}` },
        clientIp: "192.0.2.1",
        provider: "provider-a" as const,
      };

      holdNextRead = true;
      const during = Promise.resolve(authenticate(request));
      while (heldRead === null) await new Promise((resolve) => setTimeout(resolve, 1));
      await admin.revokeProviderKey(created.project.id, key.keyId);
      (heldRead as () => void)();
      await during;

      const after: AuthResult = await authenticate(request);
      expect(after.ok ? 200 : after.error.status).toBe(403);
    },
  );
});

/**
 * Another instance revoked the key: this one learns of it when its records (read at most
 * SLUICE_PROJECT_CACHE_TTL_MS ago) are read again. A credential verified late from records already
 * in memory must not be trusted for a whole TTL from then.
 */
describe("a revocation made by another instance", () => {
  it("takes effect within the TTL of the records the credentials were checked against", async () => {
    const database = await openDatabase({ dataDir: "unused", sqliteFile: ":memory:" });
    try {
      let clock = 0;
      // The admin is another instance's: this one's directory is told nothing of its changes.
      const { admin: other, authenticate } = wire(
        database,
        createKeyRepository(database.db),
        { ttlMs: 1000, now: () => clock },
        "another instance",
      );
      const created = await other.createProject({
        name: "revoked elsewhere",
        provider: "provider-a",
        testMode: true,
      });
      const key = await other.addProviderKey(created.project.id, {
        provider: "provider-a",
        apiKey: "sk-elsewhere-123456",
      });
      const base = { projectId: created.project.id, clientIp: "192.0.2.1", provider: "provider-a" as const };
      const bearer = { ...base, headers: { authorization: `Bearer ${key.partialKey}.${created.testKey}` } };
      const header = {
        ...base,
        headers: { "x-sluice-test-key": created.testKey, "x-ai-key": key.partialKey },
      };
      const status = async (request: typeof bearer | typeof header) => {
        const result: AuthResult = await authenticate(request);
        return result.ok ? 200 : result.error.status;
      };

      expect(await status(bearer)).toBe(200); // the records are read at 0
      await other.revokeProviderKey(created.project.id, key.keyId);
      clock = 900;
      // Verified now from the records read at 0: still within their TTL.
      expect(await status(header)).toBe(200);
      expect(await status(bearer)).toBe(200);
      clock = 1100;
      expect(await status(header)).toBe(403);
      expect(await status(bearer)).toBe(403);
    } finally {
      await database.close();
    }
  });
});
