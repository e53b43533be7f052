import { execFile } from "node:child_process";
import { once } from "node:events";
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
 * an instant (epoch ms) it is then sent on stdin, so that two processes start their migrations
 * together. It says `ready` once loaded: the instant is picked when both are, not a guess at how
 * long loading takes.
 */
const openOnce = `
import { once } from "node:events";
import { openDatabase } from ${JSON.stringify(databaseModule)};
process.stdout.write("ready\\n");
const [at] = await once(process.stdin, "data");
process.stdin.destroy();
await new Promise((resolve) => setTimeout(resolve, Number(String(at)) - Date.now()));
const database = await openDatabase({ dataDir: process.argv[1] });
await database.close();
`;

/** A process that opens the database of `dataDir` once it is loaded and told when (`go`). */
function start(dataDir: string) {
  const child = execFile(process.execPath, [
    "--import",
    "tsx",
    "--input-type=module",
    "-e",
    openOnce,
    dataDir,
  ]);
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    stderr += String(chunk);
  });
  const outcome = new Promise<string>((resolve) =>
    child.once("close", (code) =>
      resolve(
        code === 0 ? "ok" : (stderr.split("\n").find((line) => line.includes("Error")) ?? `exit ${code}`),
      ),
    ),
  );
  // Ready once it said so; an early exit settles it too (its outcome then says why).
  const ready = Promise.race([once(child.stdout as NonNullable<typeof child.stdout>, "data"), outcome]);
  return { ready, outcome, go: (at: number) => child.stdin?.end(String(at)) };
}

/** Two processes opening the database of `dataDir` at one instant, once both are loaded: their outcomes. */
async function startTogether(dataDir: string): Promise<string[]> {
  const both = [start(dataDir), start(dataDir)];
  await Promise.all(both.map((each) => each.ready));
  const at = Date.now() + 100;
  for (const each of both) each.go(at);
  return Promise.all(both.map((each) => each.outcome));
}

describe("embedded database", () => {
  it("migrates a fresh data dir when two processes start on it at once (the gateway and a CLI command)", async () => {
    const outcomes: string[] = [];
    for (let round = 0; round < 3; round++) {
      const dataDir = mkdtempSync(join(tmpdir(), "sluice-start-"));
      try {
        outcomes.push(...(await startTogether(dataDir)));
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
          alter table usage_records drop column provider_answered;
          delete from sluice_migrations where name >= '0003'`);
        await earlier.close();
        outcomes.push(...(await startTogether(dataDir)));
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
      "0007-projects-created-at-index",
      "0008-usage-provider-answered",
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
