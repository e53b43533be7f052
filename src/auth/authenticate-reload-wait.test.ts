import { randomBytes } from "node:crypto";
import { afterAll, describe, expect, it } from "vitest";
import { createProjectAdmin } from "../admin/project-admin.js";
import { openDatabase } from "../storage/database.js";
import { reloadWaitMs } from "../storage/database-unavailable.js";
import { createKeyRepository, type KeyRepository } from "../storage/key-repository.js";
import { createProjectRepository, type ProjectRepository } from "../storage/project-repository.js";
import { createUsageRepository } from "../storage/usage-repository.js";
import { type AuthRequest, createAuthenticator } from "./authenticate.js";
import { createCredentialDirectory } from "./credential-directory.js";
import { createSecretBox } from "./secret-box.js";

describe("authentication while the database hangs", () => {
  const opening = openDatabase({ dataDir: "unused", sqliteFile: ":memory:" });
  afterAll(async () => (await opening).close());

  it("waits reloadWaitMs in all for its stale project, test keys and provider key, not that long for each", async () => {
    const database = await opening;
    const secretBox = createSecretBox(randomBytes(32));
    const projects = createProjectRepository(database.db);
    const keys = createKeyRepository(database.db);
    // From `hung` on, the directory's reads never answer.
    let hung = false;
    const hanging =
      <A extends unknown[], R>(read: (...args: A) => Promise<R>) =>
      (...args: A): Promise<R> =>
        hung ? new Promise<R>(() => {}) : read(...args);
    let clock = Date.now();
    const directory = createCredentialDirectory({
      projects: { ...projects, get: hanging(projects.get) } satisfies ProjectRepository,
      keys: {
        ...keys,
        listTestKeys: hanging(keys.listTestKeys),
        getProviderKey: hanging(keys.getProviderKey),
      } satisfies KeyRepository,
      secretBox,
      ttlMs: 1000,
      now: () => clock,
    });
    const admin = createProjectAdmin({
      projects,
      keys,
      usage: createUsageRepository(database.db),
      secretBox,
      now: () => new Date(),
      onProjectChanged: directory.invalidate,
      testModeAllowed: true,
    });
    const created = await admin.createProject({ name: "Hung", provider: "provider-a", testMode: true });
    const { partialKey } = await admin.addProviderKey(created.project.id, {
      provider: "provider-a",
      apiKey: "sk-hung-12345678",
    });
    const authenticate = createAuthenticator({
      directory,
      deviceTokens: { verify: async () => ({ kind: "invalid", reason: "not used here" }) },
      throttle: {
        policy: { failuresPerWindow: 30, windowSeconds: 60 },
        retryAfter: () => 0,
        recordFailure: async () => {},
        begin: () => () => {},
      },
      testModeAllowed: true,
    });
    const request: AuthRequest = {
      projectId: created.project.id,
      headers: { authorization: `Bearer ${partialKey}.${created.testKey}` },
      clientIp: "192.0.2.1",
      provider: "provider-a",
    };
    expect(await authenticate(request)).toMatchObject({ ok: true, method: "bearer-test-key" });
    // Past the TTL, the three records are read again, and the database hangs.
    clock += 2000;
    hung = true;
    const started = performance.now();
    expect(await authenticate(request)).toMatchObject({ ok: true, method: "bearer-test-key" });
    expect(performance.now() - started).toBeLessThan(reloadWaitMs + 150);
  });
});
