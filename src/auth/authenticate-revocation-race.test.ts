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

/**
 * A request may be served records due to be read again while their reload is on its way (it waits
 * `reloadWaitMs` at most). Its success is remembered no longer than the records it was verified
 * against: not stamped with the time of a reload that answered while the request went on (its
 * provider key read for the first time, say), which may have found the credential revoked.
 */
describe("a test key revoked by another instance while its records were being read again", () => {
  it("is not remembered as verified from the reload that found it revoked", async () => {
    const database = await openDatabase({ dataDir: "unused", sqliteFile: ":memory:" });
    try {
      let clock = 0;
      const realKeys = createKeyRepository(database.db);
      /** Reads to hold until the test lets them answer (set before the read begins). */
      const hold = { testKeys: false, providerKey: false };
      const held: { testKeys?: () => void; providerKey?: () => void } = {};
      const heldRead = <T>(which: "testKeys" | "providerKey", read: Promise<T>): Promise<T> =>
        hold[which]
          ? read.then((value) => {
              hold[which] = false;
              return new Promise<T>((resolve) => {
                held[which] = () => resolve(value);
              });
            })
          : read;
      const keys: KeyRepository = {
        ...realKeys,
        listTestKeys: (projectId) => heldRead("testKeys", realKeys.listTestKeys(projectId)),
        getProviderKey: (id) => heldRead("providerKey", realKeys.getProviderKey(id)),
      };
      const { admin: other, authenticate } = wire(
        database,
        keys,
        { ttlMs: 1000, now: () => clock },
        "another instance",
      );
      const created = await other.createProject({
        name: "slow reload",
        provider: "provider-a",
        testMode: true,
      });
      const projectId = created.project.id;
      const first = await other.addProviderKey(projectId, {
        provider: "provider-a",
        apiKey: "sk-first-123456",
      });
      // A second key of the project, not read by this instance yet (an app version just shipped).
      const second = await other.addProviderKey(projectId, {
        provider: "provider-a",
        apiKey: "sk-second-12345",
      });
      const request = (partialKey: string) => ({
        projectId,
        clientIp: "192.0.2.1",
        provider: "provider-a" as const,
        headers: { authorization: `Bearer ${partialKey}.${created.testKey}` },
      });
      const status = async (partialKey: string) => {
        const result: AuthResult = await authenticate(request(partialKey));
        return result.ok ? 200 : result.error.status;
      };

      expect(await status(first.partialKey)).toBe(200); // the project and its test keys read at 0
      await other.revokeTestKey(projectId, created.testKeyId);
      clock = 1100;
      // The test keys' reload is slow: the request is served those read at 0 after its wait, then
      // reads the second key record; the reload answers (the key revoked) before that read does.
      hold.testKeys = true;
      hold.providerKey = true;
      const during = Promise.resolve(authenticate(request(second.partialKey)));
      while (held.testKeys === undefined || held.providerKey === undefined)
        await new Promise((resolve) => setTimeout(resolve, 5));
      held.testKeys();
      await new Promise((resolve) => setTimeout(resolve, 5));
      held.providerKey();
      await during;

      // This instance now holds the test keys as read at 1100, without the revoked one.
      expect(await status(second.partialKey)).toBe(401);
      clock = 1500;
      expect(await status(second.partialKey)).toBe(401);
    } finally {
      await database.close();
    }
  });
});
