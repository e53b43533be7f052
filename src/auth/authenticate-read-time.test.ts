import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateAppleKeyPair } from "../../test/fakes/fake-apple.js";
import { openThrottle } from "../../test/support/authenticator-wiring.js";
import { createProjectAdmin } from "../admin/project-admin.js";
import { type OpenDatabase, openDatabase } from "../storage/database.js";
import { createKeyRepository, type KeyRepository } from "../storage/key-repository.js";
import { createProjectRepository, type ProjectRepository } from "../storage/project-repository.js";
import { createUsageRepository } from "../storage/usage-repository.js";
import { createAdmissionRecheck } from "./admission-recheck.js";
import {
  type AuthRequest,
  type AuthResult,
  createAuthenticator,
  type DeviceVerdict,
} from "./authenticate.js";
import { createCredentialDirectory } from "./credential-directory.js";
import { createSecretBox } from "./secret-box.js";

const ttlMs = 1000;

/**
 * An authenticator whose directory reads one database with a clock of its own, and an admin of
 * another instance (this one's directory is told nothing of its changes). Reads can be held
 * (`hold`, set before the read begins) until the test lets them answer; so can device tokens'
 * verification (`device.gate`).
 */
async function setUp(database: OpenDatabase, kind: "test key" | "device token") {
  const clock = { now: 0 };
  const realKeys = createKeyRepository(database.db);
  const realProjects = createProjectRepository(database.db);
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
  const projects: ProjectRepository = realProjects;
  const secretBox = createSecretBox(randomBytes(32));
  const directory = createCredentialDirectory({ projects, keys, secretBox, ttlMs, now: () => clock.now });
  const other = createProjectAdmin({
    projects: realProjects,
    keys: realKeys,
    usage: createUsageRepository(database.db),
    secretBox,
    now: () => new Date(),
    onProjectChanged: () => {},
    testModeAllowed: true,
  });
  const device: { gate: Promise<void> | null } = { gate: null };
  const ok: DeviceVerdict = { kind: "ok", digest: "device" };
  const authenticate = createAuthenticator({
    directory,
    deviceTokens: {
      verify: async () => {
        await device.gate;
        return ok;
      },
      verifyNow: () => ok,
    },
    throttle: openThrottle,
    testModeAllowed: true,
  });
  const isDevice = kind === "device token";
  const created = await other.createProject({
    name: `read time ${kind}`,
    provider: "provider-a",
    testMode: !isDevice,
    ...(isDevice
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
  const projectId = created.project.id;
  const key = await other.addProviderKey(projectId, { provider: "provider-a", apiKey: "sk-read-time-12345" });
  const token = isDevice ? Buffer.from("a-device-token").toString("base64") : created.testKey;
  const requests = {
    bearer: (partialKey = key.partialKey): AuthRequest => ({
      projectId,
      clientIp: "192.0.2.1",
      provider: "provider-a",
      headers: { authorization: `Bearer ${partialKey}.${token}` },
    }),
    header: (partialKey = key.partialKey): AuthRequest => ({
      projectId,
      clientIp: "192.0.2.1",
      provider: "provider-a",
      headers: isDevice
        ? { "x-device-token": token, "x-ai-key": partialKey }
        : { "x-sluice-test-key": token, "x-ai-key": partialKey },
    }),
  };
  return {
    clock,
    hold,
    held,
    device,
    directory,
    other,
    created,
    key,
    requests,
    authenticate,
    recheck: createAdmissionRecheck({ directory, testModeAllowed: true }),
  };
}

type Success = Extract<AuthResult, { ok: true }>;

function succeeded(result: AuthResult): Success {
  if (!result.ok) throw result.error;
  return result;
}

const tick = () => new Promise((resolve) => setTimeout(resolve, 5));

describe("the records a success was worked out from (generation, read time)", () => {
  let database: OpenDatabase;

  beforeAll(async () => {
    database = await openDatabase({ dataDir: "unused", sqliteFile: ":memory:" });
  });

  afterAll(async () => {
    await database.close();
  });

  it.each(["test key", "device token"] as const)(
    "are those read by the full path and the remembered one, for each %s method",
    async (kind) => {
      const { clock, directory, requests, authenticate } = await setUp(database, kind);
      const generation = directory.generation();
      clock.now = 100;
      const full = succeeded(await authenticate(requests.bearer()));
      expect(full.method).toBe(kind === "device token" ? "bearer-device-check" : "bearer-test-key");
      expect(full).toMatchObject({ generation, readAt: 100 });
      clock.now = 300;
      const header = succeeded(await authenticate(requests.header()));
      expect(header.method).toBe(kind === "device token" ? "device-token-header" : "test-key-header");
      expect(header).toMatchObject({ generation, readAt: 100 });
      // The warm path: answered without a promise, from what was remembered at 100.
      clock.now = 900;
      const warm = authenticate(requests.bearer());
      expect(warm).not.toBeInstanceOf(Promise);
      expect(succeeded(warm as AuthResult)).toMatchObject({ generation, readAt: 100 });
      // Records read again: no later than those read before (the reads may answer in any order),
      // then the time of the new reads.
      clock.now = 1200;
      expect(succeeded(await authenticate(requests.bearer()))).toMatchObject({ generation, readAt: 100 });
      expect(succeeded(await authenticate(requests.bearer()))).toMatchObject({ generation, readAt: 1200 });
    },
  );

  it("carry the generation read before an admin change made on this instance during authentication", async () => {
    const { hold, held, directory, created, requests, authenticate } = await setUp(database, "test key");
    const generation = directory.generation();
    hold.providerKey = true;
    const during = Promise.resolve(authenticate(requests.bearer()));
    while (held.providerKey === undefined) await tick();
    directory.invalidate(created.project.id);
    held.providerKey();
    const result = succeeded(await during);
    expect(result.generation).toBe(generation);
    expect(directory.generation()).not.toBe(generation);
  });

  it("are not those of a test-key reload that answered during authentication", async () => {
    const { clock, hold, held, other, created, requests, authenticate } = await setUp(database, "test key");
    const projectId = created.project.id;
    // A second key of the project, not read by this instance yet.
    const second = await other.addProviderKey(projectId, {
      provider: "provider-a",
      apiKey: "sk-second-12345",
    });
    succeeded(await authenticate(requests.bearer())); // the project and its test keys read at 0
    clock.now = 1100;
    // The test keys' reload is slow: the request is served those read at 0 after its wait, then
    // reads the second key record; the reload answers before that read does.
    hold.testKeys = true;
    hold.providerKey = true;
    const during = Promise.resolve(authenticate(requests.bearer(second.partialKey)));
    while (held.testKeys === undefined || held.providerKey === undefined) await tick();
    held.testKeys();
    await tick();
    held.providerKey();
    const result = succeeded(await during);
    expect(result.readAt).toBe(0);
  });

  it("are not those of a provider key's reload that answered while the device token was verified, and the recheck refuses its revocation", async () => {
    const { clock, hold, held, device, other, created, key, requests, authenticate, recheck, directory } =
      await setUp(database, "device token");
    const projectId = created.project.id;
    succeeded(await authenticate(requests.bearer())); // the project and the key read at 0
    // The project is read again at 1050 (by a request with another key of the project), the first
    // key's record is not.
    const second = await other.addProviderKey(projectId, {
      provider: "provider-a",
      apiKey: "sk-second-12345",
    });
    clock.now = 1050;
    succeeded(await authenticate(requests.bearer(second.partialKey)));
    await other.revokeProviderKey(projectId, key.keyId);
    clock.now = 1100;
    // The key's reload is slow: the request is served the record read at 0 after its wait, and
    // Apple is slow too; the reload (the key revoked) answers while Apple is asked.
    hold.providerKey = true;
    let letAppleAnswer = () => {};
    device.gate = new Promise((resolve) => {
      letAppleAnswer = resolve;
    });
    const request = requests.bearer();
    const during = Promise.resolve(authenticate(request));
    while (held.providerKey === undefined) await tick();
    // Past the request's wait for it.
    await new Promise((resolve) => setTimeout(resolve, 400));
    held.providerKey();
    await tick();
    letAppleAnswer();
    const result = succeeded(await during);
    expect(result.readAt).toBe(0);
    expect(result.generation).toBe(directory.generation());
    // This instance now holds the key as read at 1100, revoked: a call admitted so, whose body ends
    // at 1500, is checked again against it.
    const check = recheck.since(result, request);
    clock.now = 1500;
    await expect(check()).rejects.toMatchObject({ code: "FORBIDDEN" });
  });
});
