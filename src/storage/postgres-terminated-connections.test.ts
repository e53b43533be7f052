import { sql } from "kysely";
import { describe, expect, it } from "vitest";
import { createPostgresSchema, postgresAvailable } from "../../test/support/services.js";
import { startTcpProxy } from "../../test/support/tcp-proxy.js";
import { namedSessions, terminateBackendsHeld } from "../../test/support/terminate-backends.js";
import { usageRow } from "../../test/support/usage-row.js";
import { type OpenDatabase, openDatabase } from "./database.js";
import { isDatabaseUnavailable } from "./database-unavailable.js";
import { createKeyRepository } from "./key-repository.js";
import { createProjectRepository } from "./project-repository.js";
import { createUsageRepository } from "./usage-repository.js";

type Proxy = Awaited<ReturnType<typeof startTcpProxy>>;

/**
 * A database on a schema of its own whose sessions are named, so the test can terminate them alone;
 * reached through a TCP proxy the test can slow.
 */
async function namedDatabase(
  use: (database: OpenDatabase, applicationName: string, proxy: Proxy) => Promise<void>,
  queryTimeoutMs?: number,
) {
  const schema = await createPostgresSchema();
  const proxy = await startTcpProxy(5432);
  const { url, applicationName } = namedSessions(
    schema.url.replace("127.0.0.1:5432", `127.0.0.1:${proxy.port}`),
  );
  const database = await openDatabase({ databaseUrl: url, dataDir: "unused", queryTimeoutMs });
  try {
    await use(database, applicationName, proxy);
  } finally {
    await database.close();
    await proxy.close();
    await schema.drop();
  }
}

/** What each settled read came to: "answered", or its error. */
const outcomes = (reads: PromiseSettledResult<unknown>[]) =>
  reads.map((read) => (read.status === "rejected" ? String(read.reason) : "answered"));

/** `count` connections in the pool, each used once. */
const fillPool = (database: OpenDatabase, count: number) =>
  Promise.all(Array.from({ length: count }, () => createProjectRepository(database.db).get("none")));

/**
 * PostgreSQL restarting, failing over, or a pooler dropping idle connections (here
 * `pg_terminate_backend`) closes the pool's connections while the database still answers new ones.
 * A statement sent on one before the pool heard of it failed (57P01, or "Connection terminated
 * unexpectedly"), and every call waiting for that read with it (503).
 */
describe.skipIf(!postgresAvailable)("pooled PostgreSQL connections the server has closed", () => {
  it("answers the shared reads and the admin API's on fresh connections, not with the closed connection's error", async () => {
    await namedDatabase(async (database, applicationName) => {
      const projects = createProjectRepository(database.sharedReads.db);
      const keys = createKeyRepository(database.sharedReads.db);
      await fillPool(database, 5);
      expect(terminateBackendsHeld(applicationName)).toBeGreaterThanOrEqual(5);
      const reads = await Promise.allSettled([
        projects.get("none"),
        projects.get("none"),
        keys.getProviderKey("none"),
        keys.listTestKeys("none"),
        createProjectRepository(database.admin.db).list(),
      ]);
      expect(outcomes(reads)).toEqual(["answered", "answered", "answered", "answered", "answered"]);
    });
  });

  it("sends the read again on a new connection, not on another one the server closed", async () => {
    await namedDatabase(async (database, applicationName) => {
      await fillPool(database, 4);
      expect(terminateBackendsHeld(applicationName)).toBeGreaterThanOrEqual(4);
      // One read: three closed connections are left in the pool when it fails, until their closes are read.
      expect(await createProjectRepository(database.sharedReads.db).get("none")).toBeNull();
    });
  });

  it("writes a usage batch: its transaction's begin is sent again, its rows once", async () => {
    await namedDatabase(async (database, applicationName) => {
      const usage = createUsageRepository(database.db);
      await fillPool(database, 2);
      expect(terminateBackendsHeld(applicationName)).toBeGreaterThanOrEqual(2);
      await usage.insertBatch([usageRow("after-terminate-1"), usageRow("after-terminate-2")]);
      expect(await usage.count("p1")).toBe(2);
    });
  });

  it("does not send a write again: whether the server ran it cannot be known", async () => {
    await namedDatabase(async (database, applicationName) => {
      await fillPool(database, 2);
      expect(terminateBackendsHeld(applicationName)).toBeGreaterThanOrEqual(2);
      const error = await sql`delete from projects where id = 'none'`.execute(database.db).then(
        () => null,
        (caught: unknown) => caught,
      );
      expect(isDatabaseUnavailable(error)).toBe(true);
    });
  });

  it("gives the read up within its query timeout when no new connection comes in time", async () => {
    await namedDatabase(async (database, applicationName, proxy) => {
      await fillPool(database, 2);
      // A server slow to take connections: longer than the query timeout, and than pg's own wait
      // for one (the query timeout too).
      proxy.delayNew(5000);
      expect(terminateBackendsHeld(applicationName)).toBeGreaterThanOrEqual(2);
      const started = performance.now();
      const error = await createProjectRepository(database.sharedReads.db)
        .get("none")
        .then(
          () => null,
          (caught: unknown) => caught,
        );
      const ms = performance.now() - started;
      // The first failure, at the query timeout: not pg's wait for a connection, begun after it.
      expect(String(error)).toBe("error: terminating connection due to administrator command");
      expect(isDatabaseUnavailable(error)).toBe(true);
      expect(ms).toBeGreaterThan(400);
      expect(ms).toBeLessThan(900);
    }, 500);
  });

  it("does not send a read again once the gateway's close has ended the shared reads", async () => {
    await namedDatabase(async (database, applicationName) => {
      await fillPool(database, 2);
      expect(terminateBackendsHeld(applicationName)).toBeGreaterThanOrEqual(2);
      const read = createProjectRepository(database.sharedReads.db).get("none");
      await new Promise((resolve) => setImmediate(resolve));
      database.sharedReads.queries?.end(new Error("closing"));
      await expect(read).rejects.toThrow("closing");
    });
  });
});
