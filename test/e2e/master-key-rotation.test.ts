import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MasterKeyMismatchError } from "../../src/auth/master-key-check.js";
import { runCli } from "../../src/cli/main.js";
import { loadConfig } from "../../src/config.js";
import { createGateway } from "../../src/deps.js";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import { proxiedChat } from "../support/proxied-chat.js";
import { createPostgresSchema, postgresAvailable } from "../support/services.js";
import { createTestProject, startTestGateway, type TestGateway } from "../support/test-gateway.js";

/**
 * A master key rotation as README's "Rotating the master key" orders it, on instances sharing one
 * PostgreSQL: 1. every instance restarted with the new key as SLUICE_MASTER_KEY and the old one as
 * SLUICE_MASTER_KEY_PREVIOUS; 2. `sluice master-key reseal`; 3. SLUICE_MASTER_KEY_PREVIOUS dropped.
 */
describe.skipIf(!postgresAvailable)("rotating the master key across instances on one PostgreSQL", () => {
  const oldKey = randomBytes(32).toString("base64");
  const newKey = randomBytes(32).toString("base64");
  let fake: FakeUpstream;
  let schema: Awaited<ReturnType<typeof createPostgresSchema>>;
  const running: TestGateway[] = [];
  const instance = async (keys: { masterKey: string; masterKeyPrevious?: string }) => {
    const gateway = await startTestGateway({ ...providerBaseUrls(fake), databaseUrl: schema.url, ...keys });
    running.push(gateway);
    return gateway;
  };
  /** What an instance's start with `keys` throws (it starts no server: it is refused before). */
  const refusedStart = async (keys: { masterKey: string }) => {
    const dataDir = mkdtempSync(join(tmpdir(), "sluice-rotation-"));
    try {
      const gateway = await createGateway(loadConfig({}, { dataDir, databaseUrl: schema.url, ...keys }));
      await gateway.close();
      return undefined;
    } catch (error) {
      return error;
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  };
  const saved = { ...process.env };

  beforeAll(async () => {
    fake = await startFakeUpstream();
    schema = await createPostgresSchema();
  });
  afterAll(async () => {
    process.env = saved;
    for (const gateway of running) await gateway.close();
    await fake.close();
    await schema.drop();
  });

  const upstreamKeys = () => fake.requests.map((request) => request.headers.authorization);
  /** The start's log lines that say SLUICE_MASTER_KEY_PREVIOUS can go (parsed). */
  const previousKeyUnneeded = (gateway: TestGateway) =>
    gateway.logs
      .flatMap((chunk) => chunk.split("\n"))
      .filter((line) => line.includes("every stored secret opens under SLUICE_MASTER_KEY"));

  it("serves a project whose key was sealed under the old key, from an instance on the new key with the old as previous, through reseal and after", async () => {
    const before = await instance({ masterKey: oldKey });
    const project = await createTestProject(before.gateway, { id: "sealed-before" });

    // Step 1. The new key alone opens nothing stored: an instance started so is refused.
    expect(await refusedStart({ masterKey: newKey })).toBeInstanceOf(MasterKeyMismatchError);
    const rotating = await instance({ masterKey: newKey, masterKeyPrevious: oldKey });
    // Every stored secret still needs the old key: the start does not say it can go.
    expect(previousKeyUnneeded(rotating)).toEqual([]);
    fake.clear();
    expect((await proxiedChat(rotating.url, project)).status).toBe(200);
    expect(upstreamKeys()).toEqual([`Bearer ${project.providerKeys["provider-a"]}`]);

    // During the rollout: a key added through an instance on the new key is sealed under it, so the
    // instance still on the old key alone cannot open it (its calls fail there until it is restarted).
    const added = await createTestProject(rotating.gateway, { id: "sealed-during" });
    expect((await proxiedChat(rotating.url, added)).status).toBe(200);
    const onOldInstance = await proxiedChat(before.url, added);
    await onOldInstance.arrayBuffer();
    expect(onOldInstance.status).toBe(500);
    expect(before.logs.join("")).toContain(
      `The server share of provider key ${added.keyIds["provider-a"]} does not open with this master key`,
    );
    for (const key of [oldKey, newKey])
      expect([...before.logs, ...rotating.logs].join("")).not.toContain(key);
    // The newest secrets (those added meanwhile) open under the new key, the older ones need the
    // old key still: an instance starting now does not say the old key can go either.
    const restarted = await instance({ masterKey: newKey, masterKeyPrevious: oldKey });
    expect(previousKeyUnneeded(restarted)).toEqual([]);

    // Step 2, once every instance runs on the new key: reseal, through the CLI.
    process.env.DATABASE_URL = schema.url;
    process.env.SLUICE_MASTER_KEY = newKey;
    process.env.SLUICE_MASTER_KEY_PREVIOUS = oldKey;
    let out = "";
    const code = await runCli(["master-key", "reseal"], {
      out: new Writable({
        write(chunk, _encoding, done) {
          out += String(chunk);
          done();
        },
      }),
      err: process.stderr,
      stdin: 0,
    });
    expect(code).toBe(0);
    expect(JSON.parse(out)).toEqual({
      providerKeys: { resealed: 3, alreadyCurrent: 3, unopenedRevoked: 0 },
      deviceCheckKeys: { resealed: 0, alreadyCurrent: 0 },
    });

    // Once resealed, an instance started with the old key still beside the new one says it can go,
    // once, at warn level, without either key in any form.
    const lingering = await instance({ masterKey: newKey, masterKeyPrevious: oldKey });
    const [line, ...more] = previousKeyUnneeded(lingering);
    expect(more).toEqual([]);
    expect(JSON.parse(line ?? "{}")).toMatchObject({
      level: "warn",
      msg: expect.stringMatching(/remove SLUICE_MASTER_KEY_PREVIOUS from the environment/),
    });
    for (const key of [oldKey, newKey]) {
      const raw = Buffer.from(key, "base64");
      for (const form of [key, raw.toString("base64url"), raw.toString("hex")]) {
        expect(line).not.toContain(form);
        expect(lingering.logs.join("")).not.toContain(form);
      }
    }

    // Step 3. The new key alone now starts and serves both projects; the old key alone is refused.
    const after = await instance({ masterKey: newKey });
    expect(previousKeyUnneeded(after)).toEqual([]);
    fake.clear();
    for (const served of [project, added]) expect((await proxiedChat(after.url, served)).status).toBe(200);
    expect(upstreamKeys()).toEqual([
      `Bearer ${project.providerKeys["provider-a"]}`,
      `Bearer ${added.providerKeys["provider-a"]}`,
    ]);
    expect(await refusedStart({ masterKey: oldKey })).toBeInstanceOf(MasterKeyMismatchError);
  });
});
