import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import BetterSqlite3 from "better-sqlite3";
import { describe, expect, it } from "vitest";
import { openDatabase } from "./database.js";

const databaseModule = fileURLToPath(new URL("./database.ts", import.meta.url));
/**
 * Opens (and so migrates) the embedded database of the data dir given as the first argument, at
 * the instant (epoch ms) given as the second, so that two processes start their migrations together.
 */
const openOnce = `
import { openDatabase } from ${JSON.stringify(databaseModule)};
await new Promise((resolve) => setTimeout(resolve, Number(process.argv[2]) - Date.now()));
const database = await openDatabase({ dataDir: process.argv[1] });
await database.close();
`;

function start(dataDir: string, at: number): Promise<string> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ["--import", "tsx", "--input-type=module", "-e", openOnce, dataDir, String(at)],
      (error, _stdout, stderr) =>
        resolve(error ? (stderr.split("\n").find((line) => line.includes("Error")) ?? String(error)) : "ok"),
    );
  });
}

describe("embedded database", () => {
  it("migrates a fresh data dir when two processes start on it at once (the gateway and a CLI command)", async () => {
    const outcomes: string[] = [];
    for (let round = 0; round < 3; round++) {
      const dataDir = mkdtempSync(join(tmpdir(), "sluice-start-"));
      try {
        outcomes.push(
          ...(await Promise.all([start(dataDir, Date.now() + 3000), start(dataDir, Date.now() + 3000)])),
        );
      } finally {
        rmSync(dataDir, { recursive: true, force: true });
      }
    }
    expect(outcomes).toEqual(Array.from({ length: 6 }, () => "ok"));
  }, 60_000);

  it("upgrades a data dir an earlier release left when two processes start on it at once", async () => {
    const outcomes: string[] = [];
    const recorded: string[][] = [];
    for (let round = 0; round < 2; round++) {
      const dataDir = mkdtempSync(join(tmpdir(), "sluice-start-"));
      try {
        // As the release whose last migration was 0002 left it.
        const earlier = await openDatabase({ dataDir });
        earlier.sqlite?.exec(`alter table projects drop column proxy_allow_list;
          alter table projects drop column device_check_changed_at;
          alter table usage_records drop column requests;
          delete from sluice_migrations where name >= '0003'`);
        await earlier.close();
        outcomes.push(
          ...(await Promise.all([start(dataDir, Date.now() + 3000), start(dataDir, Date.now() + 3000)])),
        );
        const database = new BetterSqlite3(join(dataDir, "sluice.sqlite"));
        const rows = database.prepare("select name from sluice_migrations order by name").all();
        recorded.push(rows.map((row) => (row as { name: string }).name));
        database.close();
      } finally {
        rmSync(dataDir, { recursive: true, force: true });
      }
    }
    expect(outcomes).toEqual(Array.from({ length: 4 }, () => "ok"));
    const all = [
      "0001-initial",
      "0002-usage-token-counts-bigint",
      "0003-project-proxy-allow-list",
      "0004-usage-requests",
      "0005-project-device-check-changed-at",
      "0006-usage-created-at-index",
    ];
    expect(recorded).toEqual([all, all]);
  }, 60_000);

  it("waits for another process switching a fresh data dir to WAL, which SQLite's busy timeout does not cover", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "sluice-start-"));
    // What the other process holds while it switches the fresh file to WAL: the write lock of a
    // file still in rollback-journal mode. A second connection is locked against like a process.
    const other = new BetterSqlite3(join(dataDir, "sluice.sqlite"));
    other.exec("begin immediate");
    const released = new Promise((resolve) => setTimeout(resolve, 300)).then(() => other.exec("commit"));
    try {
      const started = Date.now();
      const database = await openDatabase({ dataDir });
      expect(Date.now() - started).toBeGreaterThanOrEqual(250);
      expect(database.sqlite?.pragma("journal_mode", { simple: true })).toBe("wal");
      await database.close();
    } finally {
      await released;
      other.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
