import { once } from "node:events";
import { rmSync } from "node:fs";
import BetterSqlite3 from "better-sqlite3";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { shutdownMarginMs } from "../../src/gateway-close.js";
import { shutDown } from "../../src/server.js";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { proxiedChatStatus } from "../support/proxied-chat.js";
import { holdWriteLock } from "../support/sqlite-lock-holder.js";
import {
  adminToken,
  createTestProject,
  logLinesOf,
  startTestGateway,
  type TestGateway,
} from "../support/test-gateway.js";

/**
 * SIGTERM's shutdown (src/server.ts's shutDown) while an admin write waits for another process's
 * lock on the SQLite file (a `sqlite3` shell, a backup): the write waits on timers
 * (docs/decisions/0044), for up to 5 s, and the shutdown's deadline comes first. Before, its
 * connection was cut without an answer (the log said 499, as if the client had left), and once the
 * database closed, its next try failed with "The database connection is not open", logged as
 * `request failed` with a stack.
 */
describe("the shutdown's deadline while an admin write waits for another process's SQLite lock", () => {
  let fake: FakeUpstream;
  beforeAll(async () => {
    fake = await startFakeUpstream();
  });
  afterAll(async () => {
    await fake.close();
  });

  it("refuses the write with the 503 envelope, does not make it later, says so in the log, and keeps or reports the usage row queued", async () => {
    const shutdownTimeoutMs = 500;
    const sluice = await startTestGateway({ providerABaseUrl: `${fake.url}/a/v1`, shutdownTimeoutMs });
    const project = await createTestProject(sluice.gateway);
    const file = sluice.gateway.database.sqlite?.name;
    if (!file) throw new Error("the test gateway should run on SQLite");
    // Held through the deadline and the close's margin: the write's 5 s wait outlasts both.
    const lock = await holdWriteLock(file, shutdownTimeoutMs + 3000);
    // A call whose usage row the writer cannot write while the lock is held: it stays queued.
    expect(await proxiedChatStatus(sluice.url, project)).toBe(200);
    const from = sluice.logs.length;
    const received = once(sluice.server, "request");
    const patched = fetch(`${sluice.url}/admin/v1/projects/${project.projectId}`, {
      method: "PATCH",
      headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
      body: JSON.stringify({ name: "Renamed while locked" }),
    }).then(
      async (response) => ({
        status: response.status,
        requestId: response.headers.get("x-request-id"),
        retryAfter: response.headers.get("retry-after"),
        body: await response.json().catch(() => null),
      }),
      (error: unknown) => ({ failed: String((error as Error).cause ?? error) }),
    );
    // The PATCH has reached the gateway: it waits for the lock well before the deadline.
    await received;
    await shutDown(sluice.server, sluice.gateway);
    const answer = await patched;
    await lock.released;
    const database = new BetterSqlite3(file, { readonly: true });
    try {
      expect(answer).toEqual({
        status: 503,
        requestId: expect.any(String),
        retryAfter: expect.any(String),
        body: {
          error: {
            code: "SERVICE_UNAVAILABLE",
            message: expect.stringContaining("shutting down"),
            requestId: (answer as { requestId: string }).requestId,
            details: { retryable: true },
          },
        },
      });
      // Refused, so not made once the lock was released.
      const { name } = database.prepare("select name from projects where id = ?").get(project.projectId) as {
        name: string;
      };
      expect(name).not.toBe("Renamed while locked");
      const lines = logLinesOf(sluice, from);
      expect(
        lines.filter(
          (line) =>
            line.level === "error" &&
            line.msg !== "usage rows not written before shutdown: dropped" &&
            line.msg !== "usage rows dropped: their contents",
        ),
      ).toEqual([]);
      expect(lines).toContainEqual(
        expect.objectContaining({ msg: "shutdown deadline reached: unanswered calls refused", refused: 1 }),
      );
      expect(lines).toContainEqual(
        expect.objectContaining({
          level: "warn",
          statements: 1,
          msg: expect.stringContaining("waiting for another process's lock on the SQLite file"),
        }),
      );
      expect(lines).toContainEqual(
        expect.objectContaining({ route: "/admin/v1/projects/:projectId", status: 503, msg: "request" }),
      );
      // The call's usage row: written, or dropped with a word, never lost silently.
      const written = (
        database
          .prepare("select count(*) as n from usage_records where project_id = ?")
          .get(project.projectId) as {
          n: number;
        }
      ).n;
      const dropped = lines
        .filter((line) => line.msg === "usage rows not written before shutdown: dropped")
        .reduce((sum, line) => sum + Number(line.count), 0);
      expect(written + dropped).toBe(1);
    } finally {
      database.close();
      rmSync(sluice.gateway.config.dataDir, { recursive: true, force: true });
    }
  }, 20_000);
});

/**
 * SIGTERM's shutdown while a batch of the usage prune (SLUICE_USAGE_RETENTION_DAYS) waits for
 * another process's lock on the SQLite file. The close awaited the prune before closing the
 * database, and the prune's wait went on until the lock was released or the shutdown's margin ran
 * out, whichever came first. A prune is safe to skip (it runs again after the next start): the
 * close gives its wait up at once.
 */
describe("the shutdown while a usage prune waits for another process's SQLite lock", () => {
  /** A gateway on SQLite that runs its usage prune again and again, 20 ms apart. */
  function startPruning(shutdownTimeoutMs: number) {
    return startTestGateway(
      { usageRetentionDays: 100, shutdownTimeoutMs },
      { usagePruning: { firstRunDelayMs: 0, intervalMs: 20 } },
    );
  }

  /**
   * Another process holds `sluice`'s SQLite file's lock for `holdMs`: settled once a prune waits
   * for it, a wait longer than the whole shutdown may take, so only the shutdown ends it.
   */
  async function lockMetByPrune(sluice: TestGateway, holdMs: number) {
    const file = sluice.gateway.database.sqlite?.name;
    const lockWait = sluice.gateway.database.sqliteLockWait;
    if (!file || !lockWait) throw new Error("the test gateway should run on SQLite");
    lockWait.ms = 60_000;
    const began = vi.spyOn(lockWait, "began");
    const lock = await holdWriteLock(file, holdMs);
    await vi.waitFor(() => expect(began).toHaveBeenCalled(), { timeout: 5000 });
    return lock;
  }

  /** The prune's lines: one at `info` per prune given up, none with an error's stack. */
  function expectPruneGivenUp(lines: Record<string, unknown>[]) {
    expect(lines.filter((line) => "err" in line)).toEqual([]);
    const pruneLines = lines.filter((line) => /retention/.test(String(line.msg)));
    expect(pruneLines.length).toBeGreaterThan(0);
    for (const line of pruneLines)
      expect(line).toEqual(
        expect.objectContaining({
          level: "info",
          msg: "deleting usage rows past the retention given up by the shutdown while it waited for another process's lock on the SQLite file: it runs again after the next start",
        }),
      );
    return pruneLines;
  }

  it("gives the prune's wait up at once, not at the margin's end, with one line and no stack", async () => {
    const shutdownTimeoutMs = 1000;
    const sluice = await startPruning(shutdownTimeoutMs);
    // Held past the deadline and the margin: before, the close waited for the prune that long.
    const lock = await lockMetByPrune(sluice, shutdownTimeoutMs + shutdownMarginMs + 1000);
    const from = sluice.logs.length;
    try {
      const startedAt = performance.now();
      await shutDown(sluice.server, sluice.gateway);
      // Nothing else is open: the shutdown ends before its deadline, let alone the margin's end.
      expect(performance.now() - startedAt).toBeLessThan(shutdownTimeoutMs);
      // One prune met the lock, and the close stopped the timer: no other ran.
      expect(expectPruneGivenUp(logLinesOf(sluice, from))).toHaveLength(1);
      // Closed, not left to the prune once the margin ran out.
      expect(sluice.gateway.database.sqlite?.open).toBe(false);
    } finally {
      await lock.released;
      rmSync(sluice.gateway.config.dataDir, { recursive: true, force: true });
    }
  }, 20_000);

  it("says the same, without a stack, when an admin write refused at the deadline ends the prune's wait", async () => {
    const shutdownTimeoutMs = 500;
    const sluice = await startPruning(shutdownTimeoutMs);
    const project = await createTestProject(sluice.gateway);
    const lock = await lockMetByPrune(sluice, shutdownTimeoutMs + 2000);
    const from = sluice.logs.length;
    try {
      const received = once(sluice.server, "request");
      const patched = fetch(`${sluice.url}/admin/v1/projects/${project.projectId}`, {
        method: "PATCH",
        headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
        body: JSON.stringify({ name: "Renamed while locked" }),
      });
      await received;
      await shutDown(sluice.server, sluice.gateway);
      expect((await patched).status).toBe(503);
      expectPruneGivenUp(logLinesOf(sluice, from));
    } finally {
      await lock.released;
      rmSync(sluice.gateway.config.dataDir, { recursive: true, force: true });
    }
  }, 20_000);
});
