import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { startTestGateway, type TestGateway } from "../support/test-gateway.js";

const run = promisify(execFile);
const bin = join(import.meta.dirname, "../../bin/sluice.js");

/**
 * The CLI as an operator runs it (a process of its own, bin/sluice.js) on the data dir of a gateway
 * that is serving: its writes go through beside the gateway's, and the gateway sees each change
 * within SLUICE_PROJECT_CACHE_TTL_MS (README, Quick start).
 */
describe("the sluice CLI beside a gateway serving the same SQLite data dir", () => {
  const dataDir = mkdtempSync(join(tmpdir(), "sluice-cli-beside-"));
  const masterKey = randomBytes(32).toString("base64");
  const ttlMs = 300;
  let fake: FakeUpstream;
  let sluice: TestGateway;
  const sluiceCli = async (...argv: string[]) => {
    const env: NodeJS.ProcessEnv = { ...process.env, SLUICE_DATA_DIR: dataDir, SLUICE_MASTER_KEY: masterKey };
    delete env.DATABASE_URL;
    const { stdout } = await run(process.execPath, [bin, ...argv], { env });
    return JSON.parse(stdout) as Record<string, unknown>;
  };

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway({
      dataDir,
      masterKey,
      projectCacheTtlMs: ttlMs,
      providerABaseUrl: `${fake.url}/a/v1`,
    });
  });
  afterAll(async () => {
    await sluice?.close();
    await fake?.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it("creates a project and a key the gateway serves, and revokes a test key it then refuses", async () => {
    const created = await sluiceCli(
      "projects",
      "create",
      "--id",
      "beside",
      "--name",
      "B",
      "--provider",
      "provider-a",
      "--test-mode",
      "true",
    );
    const added = await sluiceCli(
      "keys",
      "add",
      "beside",
      "--provider",
      "provider-a",
      "--api-key",
      `sk-${randomBytes(12).toString("hex")}`,
    );
    const call = () =>
      fetch(`${sluice.url}/v1/provider-a/beside/chat/completions`, {
        method: "POST",
        headers: {
          authorization: `Bearer ${added.partialKey}.${created.testKey}`,
          "content-type": "application/json",
        },
        body: JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] }),
      });
    expect((await call()).status).toBe(200);
    await sluiceCli("test-keys", "revoke", "beside", String(created.testKeyId));
    const revoked = Date.now();
    let status = 200;
    while (status !== 401 && Date.now() - revoked < ttlMs + 2000) {
      status = (await call()).status;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(status).toBe(401);
    // Within the cache's TTL, give or take a poll and a slow machine.
    expect(Date.now() - revoked).toBeLessThan(ttlMs + 1000);
  });
});
