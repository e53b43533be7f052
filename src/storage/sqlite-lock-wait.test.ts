import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import BetterSqlite3 from "better-sqlite3";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { projectRow } from "../../test/support/project-row.js";
import { eventLoopMeter, holdWriteLock } from "../../test/support/sqlite-lock-holder.js";
import { usageRow } from "../../test/support/usage-row.js";
import { type OpenDatabase, openDatabase, sqliteBusyTimeoutMs, sqliteFileIn } from "./database.js";
import { isDatabaseUnavailable } from "./database-unavailable.js";
import { createKeyRepository } from "./key-repository.js";
import { createProjectRepository } from "./project-repository.js";
import { createUsageRepository } from "./usage-repository.js";

/** How long the other process holds the lock: well within the busy timeout, well beyond any bound below. */
const holdMs = 1000;
/**
 * The longest the event loop may be held while a statement waits, or a read may take beside it: a
 * third of the hold, far above a few timer turns on a loaded machine (172 ms seen with the suite
 * running beside it), far below the whole hold a wait on the event loop (busy_timeout) takes.
 */
const boundMs = holdMs / 3;

/** `run`'s outcome, how long it took, and the event loop meanwhile. */
async function measured(run: () => Promise<unknown>) {
  const meter = eventLoopMeter();
  const started = performance.now();
  const outcome = await run().then(
    () => "ok",
    (error: unknown) => (error as { code?: string }).code ?? String(error),
  );
  const tookMs = performance.now() - started;
  return { outcome, tookMs, ...meter.stop() };
}

describe("the embedded database while another process holds its write lock", () => {
  let dataDir: string;
  let database: OpenDatabase;
  beforeEach(async () => {
    dataDir = mkdtempSync(join(tmpdir(), "sluice-lock-wait-"));
    database = await openDatabase({ dataDir });
    await database.db.insertInto("projects").values(projectRow("p1", new Date().toISOString())).execute();
  });
  afterEach(async () => {
    await database.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  const projects = () => createProjectRepository(database.db);
  const keys = () => createKeyRepository(database.db);
  const usage = () => createUsageRepository(database.db, database.sqlite);
  const writes: Record<string, () => Promise<unknown>> = {
    "an admin write (a project's update)": async () => {
      const project = await projects().get("p1");
      if (!project) throw new Error("no project");
      if (!(await projects().update({ ...project, name: "Renamed" }))) throw new Error("not updated");
    },
    "an admin transaction (a test key's rotation)": () =>
      keys().addTestKey(
        { id: "tk_new", projectId: "p1", digest: "d", createdAt: new Date().toISOString() },
        { newest: 3, withinMs: 60_000 },
      ),
    "a prune of usage rows": () => usage().deleteBefore("2001-01-01T00:00:00.000Z", 1000),
  };

  for (const [name, write] of Object.entries(writes)) {
    it(`${name} waits for it off the event loop and goes through once it is released`, async () => {
      const lock = await holdWriteLock(sqliteFileIn(dataDir), holdMs);
      const result = await measured(write);
      await lock.released;
      expect(result.outcome).toBe("ok");
      // It did wait for the lock (the holder said `locked` some milliseconds into its hold).
      expect(result.tookMs).toBeGreaterThan(holdMs / 2);
      expect(result.longestGapMs).toBeLessThan(boundMs);
    });
  }

  for (const name of [
    "an admin write (a project's update)",
    "an admin transaction (a test key's rotation)",
  ]) {
    it(`${name} waiting for it does not hold the connection from reads (a project's reload)`, async () => {
      const lock = await holdWriteLock(sqliteFileIn(dataDir), holdMs);
      const waiting = measured(writes[name] as () => Promise<unknown>);
      await new Promise((resolve) => setTimeout(resolve, 50));
      const read = await measured(() => projects().get("p1"));
      const write = await waiting;
      await lock.released;
      expect({ read: read.outcome, write: write.outcome }).toEqual({ read: "ok", write: "ok" });
      expect(read.tookMs).toBeLessThan(boundMs);
      expect(write.tookMs).toBeGreaterThan(holdMs / 2);
    });
  }

  it("a write whose lock is never released fails after the busy timeout as before, the event loop free meanwhile", async () => {
    const other = new BetterSqlite3(sqliteFileIn(dataDir));
    try {
      other.exec("begin immediate");
      const result = await measured(writes["an admin write (a project's update)"] as () => Promise<unknown>);
      expect(result.outcome).toBe("SQLITE_BUSY");
      expect(result.tookMs).toBeGreaterThanOrEqual(sqliteBusyTimeoutMs - 50);
      expect(result.tookMs).toBeLessThan(sqliteBusyTimeoutMs + 1000);
      expect(result.longestGapMs).toBeLessThan(boundMs);
      other.exec("rollback");
      expect(
        (await measured(writes["an admin write (a project's update)"] as () => Promise<unknown>)).outcome,
      ).toBe("ok");
    } finally {
      other.close();
    }
  }, 15_000);

  /** A project's rename waiting for `other`'s lock (its first try met it, it waits for its next). */
  async function renameWaiting(other: BetterSqlite3.Database) {
    other.exec("begin immediate");
    const renamed = database.db
      .updateTable("projects")
      .set({ name: "Renamed" })
      .where("id", "=", "p1")
      .execute();
    const outcome = renamed.then(
      () => "renamed",
      (error: unknown) => error,
    );
    // Its first try meets the lock within a few turns; a second or so of waiting is left.
    await new Promise((resolve) => setTimeout(resolve, 50));
    return { outcome };
  }

  const nameOfP1 = (other: BetterSqlite3.Database) =>
    (other.prepare("select name from projects where id = 'p1'").get() as { name: string }).name;

  it("a write waiting for it when the shutdown ends the waits fails at once with the shutdown's error, and is not made once the lock is released", async () => {
    const other = new BetterSqlite3(sqliteFileIn(dataDir));
    try {
      const { outcome } = await renameWaiting(other);
      const refusal = new Error("refused at the shutdown's deadline");
      expect(database.sqliteLockWait?.end(() => refusal)).toBe(1);
      // Settled while the lock is still held: the wait did not run its course.
      expect(await outcome).toBe(refusal);
      // Told apart from a statement's own failure (a prune given up says so without a stack).
      expect(database.sqliteLockWait?.gaveUp(refusal)).toBe(true);
      expect(database.sqliteLockWait?.gaveUp(new Error("disk I/O error"))).toBe(false);
      // Ended for good: a later write that meets the lock fails at its first pause.
      expect(
        await database.db
          .updateTable("projects")
          .set({ name: "Later" })
          .execute()
          .catch((error: unknown) => error),
      ).toBe(refusal);
      other.exec("rollback");
      expect(nameOfP1(other)).not.toBe("Renamed");
      // A statement that meets no lock is not a wait, and runs.
      await database.db.updateTable("projects").set({ name: "Unlocked" }).where("id", "=", "p1").execute();
      expect(nameOfP1(other)).toBe("Unlocked");
    } finally {
      other.close();
    }
  });

  it("a write waiting for it when the database closes fails at once as a locked database, not on the closed handle", async () => {
    const other = new BetterSqlite3(sqliteFileIn(dataDir));
    try {
      const { outcome } = await renameWaiting(other);
      await database.close();
      const error = await outcome;
      // Before: its next try, on the closed handle, failed with a bare TypeError ("The database
      // connection is not open"), a 500 and a `request failed` stack for an admin call.
      expect(error).not.toBeInstanceOf(TypeError);
      expect(String(error)).toContain(
        "The database closed while this statement waited for another process's lock",
      );
      expect(isDatabaseUnavailable(error)).toBe(true);
      expect(database.sqliteLockWait?.gaveUp(error)).toBe(true);
      other.exec("rollback");
      expect(nameOfP1(other)).not.toBe("Renamed");
    } finally {
      other.close();
    }
  });

  it("a usage batch waits its 50 ms off the event loop, then fails as an outage (rows kept), and is written after", async () => {
    const lock = await holdWriteLock(sqliteFileIn(dataDir), holdMs);
    let error: unknown;
    const result = await measured(() =>
      usage()
        .insertBatch([usageRow("req_locked")])
        .catch((caught: unknown) => {
          error = caught;
          throw caught;
        }),
    );
    expect(isDatabaseUnavailable(error)).toBe(true);
    expect(result.tookMs).toBeGreaterThanOrEqual(45);
    expect(result.tookMs).toBeLessThan(holdMs / 2);
    // The timer turned while the batch waited: its wait was not one stretch of the event loop.
    expect(result.turns).toBeGreaterThan(0);
    await lock.released;
    await usage().insertBatch([usageRow("req_locked")]);
    expect(await usage().count()).toBe(1);
  });

  it("reads are answered at once (WAL: readers never wait for the writer)", async () => {
    const lock = await holdWriteLock(sqliteFileIn(dataDir), holdMs);
    const reads: Record<string, () => Promise<unknown>> = {
      "project (cache reload)": () => projects().get("p1"),
      "test keys (cache reload)": () => keys().listTestKeys("p1"),
      "provider keys (cache reload)": () => keys().listProviderKeys("p1"),
      "month's spend (spend guard)": () => usage().spendSince("p1", "2000-01-01T00:00:00.000Z"),
      ping: () => database.ping(),
    };
    const outcomes: Record<string, string> = {};
    for (const [name, read] of Object.entries(reads)) {
      const result = await measured(read);
      outcomes[name] = result.tookMs < boundMs ? result.outcome : `took ${Math.round(result.tookMs)} ms`;
    }
    await lock.released;
    expect(outcomes).toEqual(Object.fromEntries(Object.keys(reads).map((name) => [name, "ok"])));
  });

  it("a start (migrations, under BEGIN IMMEDIATE) waits for it off the event loop", async () => {
    await database.close();
    const lock = await holdWriteLock(sqliteFileIn(dataDir), holdMs);
    let reopened: OpenDatabase | undefined;
    const result = await measured(async () => {
      reopened = await openDatabase({ dataDir });
    });
    await lock.released;
    expect(result.outcome).toBe("ok");
    expect(result.tookMs).toBeGreaterThan(holdMs / 2);
    expect(result.longestGapMs).toBeLessThan(boundMs);
    database = reopened as OpenDatabase;
  });
});
