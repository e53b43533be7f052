import { once } from "node:events";
import { rmSync } from "node:fs";
import BetterSqlite3 from "better-sqlite3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { shutDown } from "../../src/server.js";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { proxiedChatStatus } from "../support/proxied-chat.js";
import { holdWriteLock } from "../support/sqlite-lock-holder.js";
import { adminToken, createTestProject, logLinesOf, startTestGateway } from "../support/test-gateway.js";

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
          (line) => line.level === "error" && line.msg !== "usage rows not written before shutdown: dropped",
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
