import { randomBytes } from "node:crypto";
import { afterAll, describe, expect, it } from "vitest";
import { createProjectAdmin } from "../admin/project-admin.js";
import { createAuthThrottle } from "../rate-limit/auth-throttle.js";
import { openDatabase } from "../storage/database.js";
import { createKeyRepository, type KeyRepository } from "../storage/key-repository.js";
import { createProjectRepository, type ProjectRepository } from "../storage/project-repository.js";
import { createUsageRepository } from "../storage/usage-repository.js";
import { type AuthRequest, createAuthenticator } from "./authenticate.js";
import { createCredentialDirectory } from "./credential-directory.js";
import { createSecretBox } from "./secret-box.js";

/**
 * A client that sends many requests at once from one address (a server, or an app's users behind
 * one NAT) while its project's records are being read again (every SLUICE_PROJECT_CACHE_TTL_MS):
 * on PostgreSQL that read takes a round trip, during which every request of the burst is in flight.
 * Requests for a project this instance holds, with a credential it verified, are no attempts that
 * may fail, and must not fill the failed-authentication throttle's slots.
 */
describe("a burst of good credentials while the records are read again", () => {
  const opening = openDatabase({ dataDir: "unused", sqliteFile: ":memory:" });
  afterAll(async () => (await opening).close());

  it("is admitted whole: a project held and a credential verified take no throttle slot", async () => {
    const database = await opening;
    const secretBox = createSecretBox(randomBytes(32));
    const projects = createProjectRepository(database.db);
    const keys = createKeyRepository(database.db);
    // While `gate` is set, the directory's reads wait for it (a database round trip in progress).
    let gate: Promise<void> | null = null;
    const gated =
      <A extends unknown[], R>(read: (...args: A) => Promise<R>) =>
      async (...args: A): Promise<R> => {
        if (gate) await gate;
        return read(...args);
      };
    let clock = Date.now();
    const directory = createCredentialDirectory({
      projects: { ...projects, get: gated(projects.get) } satisfies ProjectRepository,
      keys: {
        ...keys,
        listTestKeys: gated(keys.listTestKeys),
        getProviderKey: gated(keys.getProviderKey),
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
    const created = await admin.createProject({ name: "Busy", provider: "provider-a", testMode: true });
    const { partialKey } = await admin.addProviderKey(created.project.id, {
      provider: "provider-a",
      apiKey: "sk-busy-12345678",
    });
    const limit = 5;
    const authenticate = createAuthenticator({
      directory,
      deviceTokens: { verify: async () => ({ kind: "invalid", reason: "not used here" }) },
      throttle: createAuthThrottle({ failuresPerMinute: limit }),
      testModeAllowed: true,
    });
    const request: AuthRequest = {
      projectId: created.project.id,
      headers: { authorization: `Bearer ${partialKey}.${created.testKey}` },
      clientIp: "192.0.2.1",
      provider: "provider-a",
    };
    expect(await authenticate(request)).toMatchObject({ ok: true, method: "bearer-test-key" });

    // Past the TTL the records are read again; the burst arrives while that read is out.
    clock += 2000;
    let answer = () => {};
    gate = new Promise<void>((resolve) => {
      answer = resolve;
    });
    const burst = Array.from({ length: 4 * limit }, () => authenticate({ ...request }));
    await new Promise((resolve) => setTimeout(resolve, 20));
    gate = null;
    answer();
    const results = await Promise.all(burst);
    expect(results.map((result) => (result.ok ? "ok" : result.error.code))).toEqual(
      Array(4 * limit).fill("ok"),
    );

    // A wrong token is still an attempt that may fail: the throttle counts it as before.
    const wrong = { ...request, headers: { authorization: `Bearer ${partialKey}.wrong-token` } };
    const failures = [];
    for (let index = 0; index <= limit; index++) {
      const result = await authenticate({ ...wrong });
      failures.push(result.ok ? "ok" : result.error.code);
    }
    expect(failures).toEqual([...Array(limit).fill("UNAUTHORIZED"), "TOO_MANY_REQUESTS"]);
  });
});
