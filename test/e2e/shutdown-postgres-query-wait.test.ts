import { randomInt } from "node:crypto";
import { once } from "node:events";
import { rmSync } from "node:fs";
import pg from "pg";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { shutdownMarginMs } from "../../src/gateway-close.js";
import { shutDown } from "../../src/server.js";
import { proxiedChat } from "../support/proxied-chat.js";
import { createPostgresSchema, postgresAvailable } from "../support/services.js";
import { expectDeadlineRefusal } from "../support/shutdown-refusal.js";
import { adminToken, createTestProject, logLinesOf, startTestGateway } from "../support/test-gateway.js";

/**
 * SIGTERM's shutdown (src/server.ts's shutDown) while an admin call waits for PostgreSQL: its query
 * waits for a lock another session holds (a row `SELECT … FOR UPDATE`, a `LOCK TABLE`, a migration
 * or a long transaction by hand), and the shutdown's deadline comes first. Before, nothing listened
 * for the deadline's refusal: the connection was cut without an answer, the pool's close waited for
 * the query until the shutdown's margin ran out, and the write, left waiting on the server, was made
 * once the lock was released, after the gateway had gone.
 */
describe.skipIf(!postgresAvailable)(
  "the shutdown's deadline while an admin call waits for a PostgreSQL lock",
  () => {
    let schema: Awaited<ReturnType<typeof createPostgresSchema>>;
    // A schema each: the gateway stores its secrets under a master key of its own.
    beforeEach(async () => {
      schema = await createPostgresSchema();
    });
    afterEach(async () => {
      await schema?.drop();
    });

    /**
     * A session of its own holding `lock` (statements run in an open transaction) until `release`:
     * `blocked()` counts the sessions waiting for it.
     */
    async function holdLock(lock: string) {
      const holder = new pg.Client({ connectionString: schema.url });
      await holder.connect();
      await holder.query("begin");
      await holder.query(lock);
      const { rows } = await holder.query<{ pid: number }>("select pg_backend_pid() as pid");
      const pid = rows[0]?.pid;
      // Not the holder: a transaction sees pg_stat_activity as it was at its first look.
      const observer = new pg.Client({ connectionString: schema.url });
      await observer.connect();
      return {
        async blocked(): Promise<number> {
          const waiting = await observer.query<{ n: number }>(
            "select count(*)::int as n from pg_stat_activity where $1 = any(pg_blocking_pids(pid))",
            [pid],
          );
          return waiting.rows[0]?.n ?? 0;
        },
        async release(): Promise<void> {
          await holder.query("rollback");
          await Promise.all([holder.end(), observer.end()]);
        },
      };
    }

    /** The name of project `id` as stored, null when there is none. */
    async function storedName(id: string): Promise<string | null> {
      const reader = new pg.Client({ connectionString: schema.url });
      await reader.connect();
      try {
        const { rows } = await reader.query<{ name: string }>("select name from projects where id = $1", [
          id,
        ]);
        return rows[0]?.name ?? null;
      } finally {
        await reader.end();
      }
    }

    const cases: Array<{
      name: string;
      lock: (projectId: string) => string;
      request: (projectId: string) => [string, RequestInit];
      /** What else the refused call must have left as it was. */
      unchanged?: () => Promise<void>;
    }> = [
      {
        name: "a project update waiting for its row",
        lock: (projectId: string) => `select 1 from projects where id = '${projectId}' for update`,
        request: (projectId: string): [string, RequestInit] => [
          `/admin/v1/projects/${projectId}`,
          {
            method: "PATCH",
            headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
            body: JSON.stringify({ name: "Renamed while locked" }),
          },
        ],
      },
      {
        name: "a usage report waiting for its table",
        lock: () => "lock table usage_records in access exclusive mode",
        request: (projectId: string): [string, RequestInit] => [
          `/admin/v1/projects/${projectId}/usage`,
          { headers: { authorization: `Bearer ${adminToken}` } },
        ],
      },
      {
        // The project's row is written before its test key's: a creation refused between the two
        // must leave no project behind (without its key, the admin's retry would be refused 409).
        name: "a project creation waiting for the test keys' table",
        lock: () => "lock table test_keys in access exclusive mode",
        request: (): [string, RequestInit] => [
          "/admin/v1/projects",
          {
            method: "POST",
            headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
            body: JSON.stringify({
              id: "created-while-locked",
              name: "Created while locked",
              provider: "provider-a",
            }),
          },
        ],
        unchanged: async () => expect(await storedName("created-while-locked")).toBeNull(),
      },
    ];

    it.each(cases)(
      "refuses $name with the 503 envelope, cancels its query and makes no change once the lock goes",
      async ({ lock, request, unchanged }) => {
        const shutdownTimeoutMs = 500;
        const sluice = await startTestGateway({ databaseUrl: schema.url, shutdownTimeoutMs });
        let holder: Awaited<ReturnType<typeof holdLock>> | undefined;
        try {
          const project = await createTestProject(sluice.gateway);
          holder = await holdLock(lock(project.projectId));
          const from = sluice.logs.length;
          const [path, init] = request(project.projectId);
          const answered = fetch(`${sluice.url}${path}`, init).then(
            async (response) => ({
              status: response.status,
              requestId: response.headers.get("x-request-id"),
              retryAfter: response.headers.get("retry-after"),
              connection: response.headers.get("connection"),
              body: await response.json().catch(() => null),
            }),
            (error: unknown) => ({ failed: String((error as Error).cause ?? error) }),
          );
          await once(sluice.server, "request");
          // The call's query waits for the lock well before the deadline.
          const { blocked } = holder;
          await expect.poll(blocked, { timeout: 5000 }).toBe(1);
          const shutdownAt = performance.now();
          await shutDown(sluice.server, sluice.gateway);
          // The pools closed once the query was cancelled, not when the close's margin ran out.
          expect(performance.now() - shutdownAt).toBeLessThan(shutdownTimeoutMs + shutdownMarginMs);
          const answer = await answered;
          expect(answer).toEqual({
            status: 503,
            requestId: expect.any(String),
            retryAfter: "1",
            connection: "close",
            body: {
              error: {
                code: "SERVICE_UNAVAILABLE",
                message: expect.stringContaining("shutting down"),
                requestId: (answer as { requestId: string }).requestId,
                details: { retryable: true },
              },
            },
          });
          // Cancelled on the server, not left there waiting for the lock.
          expect(await blocked()).toBe(0);
          await holder.release();
          holder = undefined;
          // Refused, so not made once the lock was released.
          expect(await storedName(project.projectId)).toBe("Test project");
          await unchanged?.();
          const lines = logLinesOf(sluice, from);
          expect(lines.filter((line) => line.level === "error" || "err" in line)).toEqual([]);
          expect(lines).toContainEqual(
            expect.objectContaining({
              msg: "shutdown deadline reached: unanswered calls refused",
              refused: 1,
            }),
          );
          expect(lines).toContainEqual(
            expect.objectContaining({
              level: "warn",
              queries: 1,
              msg: "shutting down: admin API queries in flight on PostgreSQL cancelled, their calls refused (503)",
            }),
          );
          expect(lines).toContainEqual(expect.objectContaining({ status: 503, msg: "request" }));
        } finally {
          await holder?.release();
          rmSync(sluice.gateway.config.dataDir, { recursive: true, force: true });
        }
      },
      20_000,
    );

    /**
     * An app call whose project this instance holds no record of waits for its credentials' read
     * (here behind a `LOCK TABLE`). The deadline refuses the call (503) but not the read, which other
     * calls for the project may share: the gateway's close cancels it on the server. Before, it ran
     * on to its query timeout, and the close waited for the pool, whose connection it held, until the
     * shutdown's margin ran out (measured with this test, from the shutdown's start to its end: 1,501 to
     * 1,502 ms, three runs; 580 to 628 ms now).
     */
    it("refuses an app call waiting for its credentials' read, and the close cancels the read on the server", async () => {
      const shutdownTimeoutMs = 500;
      const sluice = await startTestGateway({
        databaseUrl: schema.url,
        shutdownTimeoutMs,
        // Never reached: the call is refused before its provider call.
        providerABaseUrl: "http://127.0.0.1:9/v1",
      });
      let holder: Awaited<ReturnType<typeof holdLock>> | undefined;
      try {
        const project = await createTestProject(sluice.gateway);
        holder = await holdLock("lock table projects in access exclusive mode");
        const from = sluice.logs.length;
        const answered = proxiedChat(sluice.url, project).catch((error: Error) => error);
        const { blocked } = holder;
        await expect.poll(blocked, { timeout: 5000 }).toBe(1);
        await shutDown(sluice.server, sluice.gateway);
        const requestId = await expectDeadlineRefusal(await answered);
        // The read is no longer waiting on the server once the close is over: cancelled, not left to
        // its query timeout (10 s).
        expect(await blocked()).toBe(0);
        await holder.release();
        holder = undefined;
        await expectRefusedAndReadCancelled(requestId, logLinesOf(sluice, from));
      } finally {
        await holder?.release();
        rmSync(sluice.gateway.config.dataDir, { recursive: true, force: true });
      }
    }, 20_000);

    /**
     * Holds the spend cap's reads of the month's spend until `release`, and those alone: the usage
     * table is renamed and a view takes its name, whose reads wait for an advisory lock a session of
     * the test's holds (under a key of its own: the database is shared), where its writes (the usage
     * rows, a refused call's among them) go to the table as before. A lock on the table would hold
     * the usage writes too, and they, not the read, would then hold the close. `blocked()` counts
     * the sessions waiting behind the holder.
     */
    async function holdSpendReads() {
      const key = randomInt(1, 2 ** 47);
      const setup = new pg.Client({ connectionString: schema.url });
      await setup.connect();
      try {
        await setup.query("alter table usage_records rename to usage_rows");
        // Stable, so that it is a one-time filter, waited for once whether or not rows match.
        await setup.query(
          `create function spend_gate() returns boolean language plpgsql stable as $$
             begin perform pg_advisory_xact_lock_shared(${key}); return true; end $$`,
        );
        await setup.query("create view usage_records as select * from usage_rows where spend_gate()");
      } finally {
        await setup.end();
      }
      const holder = new pg.Client({ connectionString: schema.url });
      await holder.connect();
      await holder.query("select pg_advisory_lock($1)", [key]);
      const observer = new pg.Client({ connectionString: schema.url });
      await observer.connect();
      const { processID } = holder as unknown as { processID: number };
      return {
        async blocked(): Promise<number> {
          const waiting = await observer.query<{ n: number }>(
            "select count(*)::int as n from pg_stat_activity where $1 = any(pg_blocking_pids(pid))",
            [processID],
          );
          return waiting.rows[0]?.n ?? 0;
        },
        async release(): Promise<void> {
          await Promise.all([holder.end(), observer.end()]);
        },
      };
    }

    /**
     * An app call on a capped project waits for the read of the month's spend (here behind a lock
     * that holds that read alone). The deadline refuses the call (503) but not the read, which the
     * project's other calls may share: the gateway's close cancels it on the server, as it does the
     * credential reads. Before, it ran on to its query timeout, and the close waited for the pool,
     * whose connection it held, until the shutdown's margin ran out.
     */
    it("refuses an app call waiting for its project's month spend, and the close cancels the read on the server", async () => {
      const shutdownTimeoutMs = 500;
      const sluice = await startTestGateway({
        databaseUrl: schema.url,
        shutdownTimeoutMs,
        // Never reached: the call is refused before its provider call.
        providerABaseUrl: "http://127.0.0.1:9/v1",
      });
      let holder: Awaited<ReturnType<typeof holdSpendReads>> | undefined;
      try {
        const project = await createTestProject(sluice.gateway, { monthlySpendCapUsd: 1 });
        holder = await holdSpendReads();
        const from = sluice.logs.length;
        const answered = proxiedChat(sluice.url, project).catch((error: Error) => error);
        const { blocked } = holder;
        await expect.poll(blocked, { timeout: 5000 }).toBe(1);
        const shutdownAt = performance.now();
        await shutDown(sluice.server, sluice.gateway);
        const took = performance.now() - shutdownAt;
        // The pool closed once the read was cancelled, not when the close's margin ran out.
        expect(took).toBeLessThan(shutdownTimeoutMs + shutdownMarginMs);
        const requestId = await expectDeadlineRefusal(await answered);
        // Cancelled, not left waiting on the server for its query timeout (10 s).
        expect(await blocked()).toBe(0);
        await holder.release();
        holder = undefined;
        await expectRefusedAndReadCancelled(requestId, logLinesOf(sluice, from));
      } finally {
        await holder?.release();
        rmSync(sluice.gateway.config.dataDir, { recursive: true, force: true });
      }
    }, 20_000);

    /**
     * What a call refused at the deadline while a shared read held it leaves: its row (503), no error
     * logged, the deadline's refusal and the close's cancel of the one read, each said once.
     */
    async function expectRefusedAndReadCancelled(requestId: string, lines: Array<Record<string, unknown>>) {
      expect(await usageRow(requestId)).toEqual({
        status: 503,
        outcome: "error",
        error_code: "SERVICE_UNAVAILABLE",
      });
      expect(lines.filter((line) => line.level === "error" || "err" in line)).toEqual([]);
      expect(lines).toContainEqual(
        expect.objectContaining({ msg: "shutdown deadline reached: unanswered calls refused", refused: 1 }),
      );
      expect(lines).toContainEqual(
        expect.objectContaining({
          level: "info",
          queries: 1,
          msg: "closing: credential and spend reads in flight on PostgreSQL cancelled",
        }),
      );
    }

    /** The usage row of `requestId`, read from the schema. */
    async function usageRow(requestId: string) {
      const reader = new pg.Client({ connectionString: schema.url });
      await reader.connect();
      try {
        const { rows } = await reader.query(
          "select status, outcome, error_code from usage_records where request_id = $1",
          [requestId],
        );
        return rows[0] ?? null;
      } finally {
        await reader.end();
      }
    }
  },
);
