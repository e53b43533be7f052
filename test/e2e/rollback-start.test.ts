import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { sql } from "kysely";
import { afterEach, describe, expect, it } from "vitest";
import { openDatabase } from "../../src/storage/database.js";
import { runGatewayUntilExit } from "../support/spawned-gateway.js";
import { startTestGateway } from "../support/test-gateway.js";

const dataDirs: string[] = [];

/** A data dir whose SQLite database a later build migrated (0004), and lacking `deleted` if given. */
async function migratedByLaterBuild(deleted?: string): Promise<string> {
  const dataDir = mkdtempSync(join(tmpdir(), "sluice-rollback-"));
  dataDirs.push(dataDir);
  const database = await openDatabase({ dataDir });
  await sql`alter table projects add column added_by_a_later_build text`.execute(database.db);
  await sql`insert into sluice_migrations (name, timestamp)
    values ('0099-added-by-a-later-build', '2099-01-01T00:00:00.000Z')`.execute(database.db);
  if (deleted) await sql`delete from sluice_migrations where name = ${deleted}`.execute(database.db);
  await database.close();
  return dataDir;
}

describe("a start on a database a later build migrated (a rollback)", () => {
  afterEach(() => {
    for (const dir of dataDirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });

  it("serves, with a warning naming the migrations this build does not know", async () => {
    const sluice = await startTestGateway({ dataDir: await migratedByLaterBuild() });
    try {
      const response = await fetch(`${sluice.url}/health`);
      expect(response.status).toBe(200);
      const warnings = sluice.logs.map((line) => JSON.parse(line)).filter((line) => line.level === "warn");
      expect(warnings).toContainEqual(
        expect.objectContaining({
          migrations: ["0099-added-by-a-later-build"],
          msg: expect.stringMatching(
            /^The database was migrated by a newer Sluice \(migrations this build does not know: 0099-added-by-a-later-build\)/,
          ),
        }),
      );
    } finally {
      await sluice.close();
    }
  });

  it("fails with one line naming both when the database also lacks a migration this build knows", async () => {
    const dataDir = await migratedByLaterBuild("0002-usage-token-counts-bigint");
    const { code, stderr } = await runGatewayUntilExit({ SLUICE_DATA_DIR: dataDir });
    expect(code).toBe(1);
    expect(stderr).toBe(
      "sluice failed to start: The database has migrations this Sluice does not know " +
        "(0099-added-by-a-later-build: another build ran them) and lacks one it needs " +
        "(0002-usage-token-counts-bigint), so this build cannot run on it: start the Sluice build " +
        "that migrated it, or a newer one\n",
    );
  }, 20_000);
});
