import { sql } from "kysely";
import pg from "pg";
import { describe, expect, it, vi } from "vitest";
import { beforeTimer, timerFiredFirst } from "../../test/support/before-timer.js";
import { countingRecorder, openAsOwnRole } from "../../test/support/counting-recorder.js";
import { createPostgresSchema, postgresAvailable } from "../../test/support/services.js";
import { startTcpProxy } from "../../test/support/tcp-proxy.js";
import { startUnixSocketPostgres } from "../../test/support/unix-socket-postgres.js";
import { usageRow } from "../../test/support/usage-row.js";
import { createUsageRecorder } from "../usage/usage-recorder.js";
import { type OpenDatabase, openDatabase } from "./database.js";
import { isDatabaseUnavailable } from "./database-unavailable.js";
import { createUsageRepository, type UsageRepository } from "./usage-repository.js";

/** A database on a fresh schema, reached through a TCP proxy the test can stall, delay or cut. */
async function behindProxy(
  use: (
    usage: UsageRepository,
    proxy: Awaited<ReturnType<typeof startTcpProxy>>,
    database: OpenDatabase,
  ) => Promise<void>,
  queryTimeoutMs = 300,
): Promise<void> {
  const schema = await createPostgresSchema();
  const proxy = await startTcpProxy(5432);
  const database = await openDatabase({
    databaseUrl: schema.url.replace("127.0.0.1:5432", `127.0.0.1:${proxy.port}`),
    dataDir: "unused",
    queryTimeoutMs,
  });
  try {
    await use(createUsageRepository(database.db), proxy, database);
  } finally {
    await database.close();
    await proxy.close();
    await schema.drop();
  }
}

describe.skipIf(!postgresAvailable)("PostgreSQL that hangs or starts twice", () => {
  it("fails a query on a connection that stops answering within the query timeout, as an outage, and recovers", async () => {
    await behindProxy(async (usage, proxy) => {
      await usage.insertBatch([usageRow("stall-1")]);
      proxy.stall();
      const started = Date.now();
      const error = await usage.insertBatch([usageRow("stall-2")]).then(
        () => null,
        (caught: unknown) => caught,
      );
      expect(Date.now() - started).toBeLessThan(3000);
      expect(isDatabaseUnavailable(error)).toBe(true);
      // The hung server is restarted: its connections drop, and the next query opens a new one.
      proxy.cut();
      proxy.restore();
      await new Promise((resolve) => setTimeout(resolve, 50));
      await usage.insertBatch([usageRow("stall-2")]);
      expect(await usage.count("p1")).toBe(2);
    });
  }, 10_000);

  it("closes a connection whose query timed out, so the next query does not wait behind it", async () => {
    await behindProxy(async (usage, proxy) => {
      await usage.insertBatch([usageRow("silent-1")]);
      // The network drops the open connections without a word; new ones get through.
      proxy.stall();
      await expect(usage.insertBatch([usageRow("silent-2")])).rejects.toThrow("Query read timeout");
      await usage.insertBatch([usageRow("silent-2")]);
      expect(await usage.count("p1")).toBe(2);
    });
  }, 10_000);

  it("writes a batch again once the connection that lost its commit is gone, without waiting for its rows' locks", async () => {
    await behindProxy(async (usage, proxy) => {
      // The network fails as the batch's commit is sent: the server keeps the transaction open, its
      // rows inserted and locked, for as long as it holds the connection (hours of TCP keepalive).
      proxy.stallOn("commit");
      await expect(usage.insertBatch([usageRow("unacknowledged")])).rejects.toThrow("Query read timeout");
      // Before, the retry waited for those row locks until its query timeout, and every later one
      // too: the usage queue stopped at that batch for good.
      await usage.insertBatch([usageRow("unacknowledged")]);
      expect(await usage.count("p1")).toBe(1);
    });
  }, 10_000);

  it("fails a query within the query timeout when the server takes connections and never answers, opening one included", async () => {
    await behindProxy(async (usage, proxy) => {
      await usage.insertBatch([usageRow("hung-1")]);
      proxy.stall({ newConnections: true });
      // The first times out on the pooled connection, which is closed; the next opens one. Each within
      // the query timeout (300 ms), not after pg's own connection timeout (5 s), which opening a
      // connection once waited for: told by the order of events, before a timer of half of those 5 s.
      for (const id of ["hung-2", "hung-3"]) {
        const error = await beforeTimer(
          usage.insertBatch([usageRow(id)]).then(
            () => null,
            (caught: unknown) => caught,
          ),
          5000 / 2,
        );
        expect(error).not.toBe(timerFiredFirst);
        expect(isDatabaseUnavailable(error)).toBe(true);
      }
    });
  }, 10_000);

  it("counts the wait for a new connection in the query timeout", async () => {
    // A connection 1 s in coming, a query timeout of 3 s: the query ends 3 s after it was asked, where
    // a timeout counted from the connection would end it at 4 s. Told by the order of events, before
    // a timer of 3.5 s set as it is asked: the query's timer, due 3 s after the ask, fires first on any
    // machine; one counted from the connection would be due after it, however early that came.
    const connectionMs = 1000;
    const queryTimeoutMs = 3000;
    await behindProxy(async (_usage, proxy, database) => {
      proxy.delayNew(connectionMs);
      const error = await beforeTimer(
        sql`select pg_sleep(10)`.execute(database.db).then(
          () => null,
          (caught: unknown) => caught,
        ),
        queryTimeoutMs + connectionMs / 2,
      );
      expect(error).toMatchObject({ message: "Query read timeout" });
    }, queryTimeoutMs);
  }, 20_000);

  it("migrates a fresh schema when two instances start at once", async () => {
    const schema = await createPostgresSchema();
    const opened: OpenDatabase[] = [];
    try {
      const results = await Promise.allSettled(
        [1, 2, 3].map(() => openDatabase({ databaseUrl: schema.url, dataDir: "unused" })),
      );
      for (const result of results) if (result.status === "fulfilled") opened.push(result.value);
      expect(results.map((result) => result.status)).toEqual(["fulfilled", "fulfilled", "fulfilled"]);
    } finally {
      for (const database of opened) await database.close();
      await schema.drop();
    }
  });

  it.each([
    {
      // The network fails as the first start commits its transaction, which holds the migration
      // lock (one for the whole database): the server keeps the transaction open, and the lock,
      // while the proxy keeps its connection open.
      when: "as it committed",
      stallOn: "commit",
      failure: /did not answer|did not finish/,
    },
    {
      // The network fails in the middle of a migration, inside the start's transaction: the server
      // holds it idle, and the lock with it.
      when: "in the middle of a migration",
      stallOn: 'create table "projects"',
      failure: /did not finish/,
    },
  ])(
    "frees the migration lock of a start whose connection was lost $when, so the next start is not blocked",
    async ({ stallOn, failure }) => {
      const schema = await createPostgresSchema();
      const proxy = await startTcpProxy(5432);
      try {
        proxy.stallOn(stallOn);
        await expect(
          openDatabase({
            databaseUrl: schema.url.replace("127.0.0.1:5432", `127.0.0.1:${proxy.port}`),
            dataDir: "unused",
            startTimeoutMs: 1000,
          }),
        ).rejects.toThrow(failure);
        expect(proxy.stalledText()).toContain(stallOn);
        const second = await openDatabase({
          databaseUrl: schema.url,
          dataDir: "unused",
          startTimeoutMs: 5000,
        });
        await second.close();
      } finally {
        await proxy.close();
        await schema.drop();
      }
    },
    15_000,
  );

  it("keeps usage rows queued, not refused, while the role's statement_timeout cancels their insert", async () => {
    const schema = await createPostgresSchema();
    // An operator's statement_timeout on the role, as the connection's option here.
    const url = schema.url.replace(
      /options=([^&]*)/,
      (_match, options: string) =>
        `options=${encodeURIComponent(`${decodeURIComponent(options)} -c statement_timeout=150`)}`,
    );
    const database = await openDatabase({ databaseUrl: url, dataDir: "unused" });
    const usage = createUsageRepository(database.db);
    const refused: unknown[] = [];
    const recorder = createUsageRecorder({
      repository: usage,
      flushIntervalMs: 20,
      queueMax: 100,
      onRefused: (_row, error) => refused.push(error),
    });
    const blocker = new pg.Client({ connectionString: schema.url });
    await blocker.connect();
    try {
      await blocker.query("begin");
      await blocker.query("lock table usage_records in access exclusive mode");
      recorder.record(usageRow("held-1"));
      await new Promise((resolve) => setTimeout(resolve, 600));
      expect(recorder.depth()).toBe(1);
      await blocker.query("commit");
      await recorder.flush(5000);
      expect(refused).toEqual([]);
      expect(await usage.count("p1")).toBe(1);
    } finally {
      await recorder.stop();
      await blocker.end();
      await database.close();
      await schema.drop();
    }
  }, 10_000);

  it("keeps usage rows queued, not refused, while a restart has removed PostgreSQL's Unix socket", async () => {
    const schema = await createPostgresSchema();
    const socket = await startUnixSocketPostgres();
    // The schema's URL, reaching the server through the socket in `dir` (as `host=/var/run/postgresql`).
    const url = `${schema.url}&host=${encodeURIComponent(socket.dir)}`;
    const database = await openDatabase({ databaseUrl: url, dataDir: "unused", queryTimeoutMs: 2000 });
    const usage = createUsageRepository(database.db);
    const { recorder, seen } = countingRecorder(usage);
    try {
      recorder.record(usageRow("before"));
      await recorder.flush(2000);
      await socket.restarting();
      for (let index = 0; index < 3; index++) recorder.record(usageRow(`restart-${index}`));
      seen.writes = 0;
      const flushed = recorder.flush(10_000);
      // The connection the pool held fails first (EPIPE, or reset); the next tries open new ones,
      // and find no socket file: connect ENOENT. Before, that was no outage: the batch was written
      // row by row, and each row refused and dropped.
      await vi.waitFor(() => expect(seen.writes).toBeGreaterThanOrEqual(3), { timeout: 5000, interval: 5 });
      expect(seen.refused).toEqual([]);
      expect(recorder.writesFailing()).toBe(true);
      expect(recorder.depth()).toBe(3);
      await socket.restarted();
      await flushed;
      expect(seen.refused).toEqual([]);
      expect(recorder.depth()).toBe(0);
      expect(await usage.count("p1")).toBe(4);
    } finally {
      await recorder.stop();
      await database.close();
      await socket.close();
      await schema.drop();
    }
  }, 15_000);

  it("keeps usage rows queued, not refused, while the server refuses the gateway's role its connections", async () => {
    // A password rotated before the gateway's DATABASE_URL, a login revoked for a while: the role
    // the gateway connects as (here, the schema's own) is refused new connections (28000, 28P01).
    const { database, admin, role, close } = await openAsOwnRole();
    const usage = createUsageRepository(database.db);
    const { recorder, seen } = countingRecorder(usage);
    try {
      recorder.record(usageRow("before"));
      await recorder.flush(2000);
      await admin.query(`alter role ${role} nologin`);
      await admin.query("select pg_terminate_backend(pid) from pg_stat_activity where usename = $1", [role]);
      for (let index = 0; index < 3; index++) recorder.record(usageRow(`refused-login-${index}`));
      seen.writes = 0;
      const flushed = recorder.flush(10_000);
      // The connection held fails first (57P01, or terminated); the next tries are refused their
      // new connection. Before, that was no outage: each row was refused and dropped.
      await vi.waitFor(() => expect(seen.writes).toBeGreaterThanOrEqual(3), { timeout: 5000, interval: 5 });
      expect(seen.refused).toEqual([]);
      expect(recorder.depth()).toBe(3);
      await admin.query(`alter role ${role} login`);
      await flushed;
      expect(seen.refused).toEqual([]);
      expect(await usage.count("p1")).toBe(4);
    } finally {
      await recorder.stop();
      await close();
    }
  }, 15_000);
});
