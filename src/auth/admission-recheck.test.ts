import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import type { KeyRepository, ProviderKeyRecord } from "../storage/key-repository.js";
import type { Project, ProjectRepository } from "../storage/project-repository.js";
import { createAdmissionRecheck } from "./admission-recheck.js";
import type { AuthMethod, AuthRequest } from "./authenticate.js";
import { createCredentialDirectory } from "./credential-directory.js";
import { createSecretBox } from "./secret-box.js";
import { testKeyDigest } from "./test-key.js";

const ttlMs = 1000;
const testKey = "tk_recheck";

function project(changes: Partial<Project> = {}): Project {
  return {
    id: "p1",
    name: "P",
    teamId: null,
    provider: "provider-a",
    model: null,
    testMode: true,
    deviceCheck: {
      enabled: true,
      teamId: "TEAM123456",
      keyId: "KEY1234567",
      sealedPrivateKey: "sealed",
      environment: "development",
      tokenMode: "cached",
      changedAt: null,
    },
    outputSchema: null,
    saveImagesToVault: false,
    rateLimits: { perMinute: null, devicePerMinute: null },
    monthlySpendCapUsd: null,
    proxyAllowList: null,
    disabled: false,
    createdAt: "2026-11-01T00:00:00.000Z",
    updatedAt: "2026-11-01T00:00:00.000Z",
    ...changes,
  };
}

const key: ProviderKeyRecord = {
  id: "key000000001",
  projectId: "p1",
  provider: "provider-a",
  label: null,
  sealedServerShare: "unused",
  clientShareDigest: "ab".repeat(32),
  createdAt: "2026-11-01T00:00:00.000Z",
  revokedAt: null,
};

/** A recheck over a directory whose records `stored` holds, read from a database `down` can fail. */
function setUp() {
  let time = 1_000_000;
  const stored = { project: project(), key, digests: [testKeyDigest(testKey)] };
  const db = { down: false, reads: 0 };
  const read = <T>(value: () => T) => {
    db.reads++;
    if (db.down)
      return Promise.reject(Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" }));
    return Promise.resolve(value());
  };
  const directory = createCredentialDirectory({
    projects: { get: () => read(() => stored.project) } as unknown as ProjectRepository,
    keys: {
      getProviderKey: () => read(() => stored.key),
      listTestKeys: () => read(() => stored.digests.map((digest) => ({ digest }))),
    } as unknown as KeyRepository,
    secretBox: createSecretBox(randomBytes(32)),
    ttlMs,
    now: () => time,
  });
  const recheck = createAdmissionRecheck({ directory, testModeAllowed: true });
  /** The recheck of a call admitted now with `method`, its records read as authentication reads them. */
  const admit = async (method: AuthMethod) => {
    // As authentication reads them: the generation and the read time before the records are read.
    const generation = directory.generation();
    const readBefore = directory.readAt("p1", null);
    const admitted = (await directory.project("p1")) as Project;
    await directory.key(key.id);
    if (method === "test-key-header") await directory.testKeyDigests("p1");
    const request: AuthRequest = {
      projectId: "p1",
      headers: method === "test-key-header" ? { "x-sluice-test-key": testKey } : {},
      clientIp: "203.0.113.1",
      provider: "provider-a",
    };
    const result = {
      ok: true as const,
      method,
      project: admitted,
      keyId: key.id,
      provider: "provider-a" as const,
      providerKey: "sk-unused",
      deviceDigest: method === "test-key-header" ? null : "digest",
      generation,
      readAt: Math.min(readBefore, directory.readAt("p1", key.id)),
    };
    return recheck.since(result, request);
  };
  return {
    stored,
    db,
    directory,
    admit,
    advance: (ms: number) => {
      time += ms;
    },
  };
}

describe("admission recheck", () => {
  it("costs no promise and no read while nothing changed and the records are fresh", async () => {
    const { db, admit } = setUp();
    const check = await admit("test-key-header");
    const reads = db.reads;
    expect(check()).toBeUndefined();
    expect(db.reads).toBe(reads);
  });

  it("passes on the records it holds while the database cannot be read, as a new request would (stale-if-error)", async () => {
    const { db, admit, advance } = setUp();
    const check = await admit("test-key-header");
    advance(ttlMs + 1);
    db.down = true;
    await expect(check()).resolves.toBeUndefined();
  });

  it("refuses a DeviceCheck call once DeviceCheck is turned off elsewhere and the TTL passed, 401", async () => {
    const { stored, admit, advance } = setUp();
    const check = await admit("bearer-device-check");
    stored.project = project({ deviceCheck: { ...stored.project.deviceCheck, enabled: false } });
    advance(ttlMs + 1);
    await expect(check()).rejects.toMatchObject({ code: "UNAUTHORIZED" });
  });

  it("passes a DeviceCheck call whose project changed elsewhere in another way (Test Mode, token mode)", async () => {
    const { stored, admit, advance } = setUp();
    const check = await admit("bearer-device-check");
    stored.project = project({
      testMode: false,
      deviceCheck: { ...stored.project.deviceCheck, tokenMode: "single-use" },
    });
    advance(ttlMs + 1);
    await expect(check()).resolves.toBeUndefined();
  });

  it("passes a test-key call after a rotation elsewhere that keeps its key (the one before the new)", async () => {
    const { stored, admit, advance } = setUp();
    const check = await admit("test-key-header");
    stored.digests = [testKeyDigest("tk_new"), ...stored.digests];
    advance(ttlMs + 1);
    await expect(check()).resolves.toBeUndefined();
  });

  it("refuses a test-key call once its key is gone elsewhere (a second rotation), 401", async () => {
    const { stored, admit, advance } = setUp();
    const check = await admit("test-key-header");
    stored.digests = [testKeyDigest("tk_newer"), testKeyDigest("tk_new")];
    advance(ttlMs + 1);
    await expect(check()).rejects.toMatchObject({ code: "UNAUTHORIZED" });
  });

  // As authentication answers: 403 (a key revoked, the project disabled) only to credentials that
  // still pass; a caller whose credentials no longer do is told 401 and nothing of the project.
  it("refuses a call whose credentials no longer pass 401, though its key was revoked or its project disabled too", async () => {
    const { stored, admit, advance } = setUp();
    const deviceCall = await admit("bearer-device-check");
    const testKeyCall = await admit("test-key-header");
    stored.project = project({
      disabled: true,
      testMode: false,
      deviceCheck: { ...stored.project.deviceCheck, enabled: false },
    });
    stored.key = { ...key, revokedAt: "2026-11-02T00:00:00.000Z" };
    advance(ttlMs + 1);
    await expect(deviceCall()).rejects.toMatchObject({ code: "UNAUTHORIZED" });
    await expect(testKeyCall()).rejects.toMatchObject({ code: "UNAUTHORIZED" });
    // Its credentials passing, the key's revocation is said first, then the project's state.
    stored.project = project({ disabled: true });
    advance(ttlMs + 1);
    await expect(deviceCall()).rejects.toMatchObject({
      code: "FORBIDDEN",
      message: "This provider key was revoked",
    });
    stored.key = key;
    advance(ttlMs + 1);
    await expect(testKeyCall()).rejects.toMatchObject({
      code: "FORBIDDEN",
      message: "This project is disabled",
    });
  });
});
