import { randomBytes } from "node:crypto";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cli } from "../../test/support/cli-run.js";
import { createPostgresSchema, postgresAvailable } from "../../test/support/services.js";

describe.skipIf(!postgresAvailable)("sluice CLI on PostgreSQL", () => {
  const saved = { ...process.env };
  let drop: () => Promise<void> = async () => {};
  let url = "";
  const quietDataDir = mkdtempSync(join(tmpdir(), "sluice-cli-pg-"));

  beforeAll(async () => {
    const schema = await createPostgresSchema();
    drop = schema.drop;
    url = schema.url;
    process.env.DATABASE_URL = schema.url;
    process.env.SLUICE_MASTER_KEY = randomBytes(32).toString("base64");
    // Not the checkout's ./data, where a gateway started from the README keeps its master.key: the
    // CLI would warn that file is ignored, and this test asserts nothing on stderr.
    process.env.SLUICE_DATA_DIR = quietDataDir;
  });
  afterAll(async () => {
    process.env = saved;
    rmSync(quietDataDir, { recursive: true, force: true });
    await drop();
  });

  it("runs every project, key and test-key command with exit code 0 and no secret but the one shown once", async () => {
    const created = await cli(
      "projects",
      "create",
      "--id",
      "pg-cli",
      "--name",
      "PG",
      "--provider",
      "provider-c",
      "--test-mode",
      "true",
      "--team-id",
      "team-1",
    );
    expect(created).toMatchObject({ code: 0, err: "" });
    expect(created.json()).toMatchObject({ project: { id: "pg-cli", teamId: "team-1" } });
    const updated = await cli("projects", "update", "pg-cli", "--clear", "team-id", "--model", "m-1");
    expect(updated.code).toBe(0);
    expect(updated.json()).toMatchObject({ teamId: null, model: "m-1" });
    const added = await cli(
      "keys",
      "add",
      "pg-cli",
      "--provider",
      "provider-c",
      "--api-key",
      "AIza-secret-123",
    );
    expect(added.code).toBe(0);
    const { keyId, partialKey } = added.json() as { keyId: string; partialKey: string };
    const listed = await cli("keys", "list", "pg-cli");
    expect(listed.out).not.toContain(partialKey);
    expect(listed.out).not.toContain("AIza-secret-123");
    expect(await cli("keys", "revoke", "pg-cli", keyId)).toMatchObject({ code: 0 });
    const rotated = await cli("test-keys", "rotate", "pg-cli");
    const { testKey, testKeyId } = rotated.json() as { testKey: string; testKeyId: string };
    expect((await cli("test-keys", "list", "pg-cli")).out).not.toContain(testKey);
    expect(await cli("test-keys", "revoke", "pg-cli", testKeyId)).toMatchObject({ code: 0 });
    expect((await cli("usage", "pg-cli")).code).toBe(0);
    expect(await cli("projects", "delete", "pg-cli")).toMatchObject({ code: 0 });
    expect(await cli("projects", "show", "pg-cli")).toMatchObject({
      code: 1,
      err: 'error: Project "pg-cli" does not exist\n',
    });
  });

  it("refuses every command without SLUICE_MASTER_KEY in one line, before it migrates or writes anything", async () => {
    const key = process.env.SLUICE_MASTER_KEY;
    const dataDir = mkdtempSync(join(tmpdir(), "sluice-cli-pg-nokey-"));
    const fresh = await createPostgresSchema();
    process.env.DATABASE_URL = fresh.url;
    process.env.SLUICE_DATA_DIR = dataDir;
    delete process.env.SLUICE_MASTER_KEY;
    const client = new pg.Client({ connectionString: fresh.url });
    await client.connect();
    try {
      for (const argv of [
        ["projects", "create", "--name", "x", "--provider", "provider-a"],
        ["projects", "list"],
      ])
        expect(await cli(...argv)).toEqual({
          code: 1,
          out: "",
          err:
            `error: SLUICE_MASTER_KEY is required with DATABASE_URL (there is no ${dataDir}/master.key): ` +
            "set the key every instance and the CLI share (a new deployment makes one with `openssl rand -base64 32`)\n",
          json: expect.any(Function),
        });
      const tables = await client.query(
        "select 1 from information_schema.tables where table_schema = current_schema()",
      );
      expect(tables.rowCount, "the schema was migrated").toBe(0);
      expect(readdirSync(dataDir), "a master key was generated").toEqual([]);
    } finally {
      await client.end();
      await fresh.drop();
      rmSync(dataDir, { recursive: true, force: true });
      process.env.DATABASE_URL = url;
      process.env.SLUICE_MASTER_KEY = key;
      if (saved.SLUICE_DATA_DIR === undefined) delete process.env.SLUICE_DATA_DIR;
      else process.env.SLUICE_DATA_DIR = saved.SLUICE_DATA_DIR;
    }
  });

  it("runs usage reports within SLUICE_USAGE_REPORT_TIMEOUT_MS, as the gateway does", async () => {
    expect(
      (await cli("projects", "create", "--id", "pg-report", "--name", "R", "--provider", "provider-a")).code,
    ).toBe(0);
    process.env.SLUICE_DATABASE_QUERY_TIMEOUT_MS = "5000";
    process.env.SLUICE_USAGE_REPORT_TIMEOUT_MS = "300";
    // Another session holds the usage table: the report waits until PostgreSQL cancels it.
    const blocker = new pg.Client({ connectionString: url });
    await blocker.connect();
    try {
      await blocker.query("begin");
      await blocker.query("lock table usage_records in access exclusive mode");
      const started = Date.now();
      const report = await cli("usage", "pg-report");
      expect(Date.now() - started).toBeLessThan(4000);
      expect(report.code).toBe(1);
      expect(report.err).toContain("The usage report took too long and the database cancelled it");
    } finally {
      await blocker.query("rollback");
      await blocker.end();
      delete process.env.SLUICE_DATABASE_QUERY_TIMEOUT_MS;
      delete process.env.SLUICE_USAGE_REPORT_TIMEOUT_MS;
    }
  });
});
