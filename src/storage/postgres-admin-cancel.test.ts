import pg from "pg";
import { describe, expect, it, vi } from "vitest";
import {
  cancelRequestCode,
  type PoolerConnection,
  startKeyMappingPooler,
} from "../../test/support/key-mapping-pooler.js";
import { createPostgresSchema, postgresAvailable } from "../../test/support/services.js";
import { startTcpProxy } from "../../test/support/tcp-proxy.js";
import { type OpenDatabase, openDatabase } from "./database.js";
import { cancelGraceMs } from "./postgres-cancel-request.js";

/**
 * The admin API's queries cancelled at the shutdown's deadline (`OpenDatabase.admin.queries`,
 * decision 0049): the cancel goes out on a connection of its own, which the database's close must
 * not leave behind.
 */
/**
 * The server's backends waiting for a lock `holder` holds: this test's queries alone, where a look
 * for any query on a `projects` table waiting for a lock also saw other files' (each on a schema of
 * its own, on the same database), and took one of theirs for this test's read while it was not sent.
 */
async function waitingBehind(observer: pg.Client, holder: pg.Client): Promise<number[]> {
  // The holder's backend, as its BackendKeyData gave it (connected directly, not through a pooler).
  const { processID } = holder as unknown as { processID: number };
  const { rows } = await observer.query<{ pid: number }>(
    "select pid from pg_stat_activity where $1 = any(pg_blocking_pids(pid))",
    [processID],
  );
  return rows.map((row) => row.pid);
}

/** A schema of its own, and the database opened on it through a TCP proxy the test can slow. */
async function behindProxy() {
  const schema = await createPostgresSchema();
  const proxy = await startTcpProxy(5432);
  const database = await openDatabase({
    databaseUrl: schema.url.replace("127.0.0.1:5432", `127.0.0.1:${proxy.port}`),
    dataDir: "unused",
    queryTimeoutMs: 5000,
  });
  return { schema, proxy, database };
}

/** A schema of its own, and the database opened on it through a stand-in for a pooler (its own keys). */
async function behindPooler() {
  const schema = await createPostgresSchema();
  const pooler = await startKeyMappingPooler(5432);
  const database = await openDatabase({
    databaseUrl: schema.url.replace("127.0.0.1:5432", `127.0.0.1:${pooler.port}`),
    dataDir: "unused",
    queryTimeoutMs: 5000,
  });
  return { schema, pooler, database };
}

/**
 * The database opened through a stand-in for a pooler, an admin read waiting for a lock ended
 * (`queries.end`) with its cancel held by the pooler (`holdCancels`), and the lock then released so
 * that the read answers on its own: the cancel, its 16 bytes sent, is still the pooler's when `run`
 * closes the database. `release` has the pooler close it, as it does once done with one.
 */
async function withCancelHeldByPooler(
  run: (held: {
    database: OpenDatabase;
    pooler: Awaited<ReturnType<typeof startKeyMappingPooler>>;
    release: () => void;
    cancel: () => PoolerConnection | undefined;
  }) => Promise<void>,
): Promise<void> {
  const { schema, pooler, database } = await behindPooler();
  const holder = new pg.Client({ connectionString: schema.url });
  const observer = new pg.Client({ connectionString: schema.url });
  let release = () => {};
  try {
    await Promise.all([holder.connect(), observer.connect()]);
    await holder.query("begin");
    await holder.query("lock table projects in access exclusive mode");
    const read = database.admin.db
      .selectFrom("projects")
      .select("id")
      .execute()
      .catch((error: unknown) => error);
    await expect.poll(async () => (await waitingBehind(observer, holder)).length, { timeout: 5000 }).toBe(1);
    const before = pooler.connections().length;
    release = pooler.holdCancels();
    database.admin.queries?.end(new Error("refused at the deadline"));
    await expect.poll(() => pooler.connections().length, { timeout: 2000 }).toBe(before + 1);
    await holder.query("rollback");
    await read;
    await run({ database, pooler, release, cancel: () => pooler.connections()[before] });
  } finally {
    release();
    await holder.query("rollback").catch(() => {});
    await Promise.all([holder.end(), observer.end()]);
    await database.close();
    await pooler.close();
    await schema.drop();
  }
}

describe.skipIf(!postgresAvailable)("the admin API's PostgreSQL cancels", () => {
  it("ends a cancel still opening its connection when the database closes, its query settled meanwhile", async () => {
    const { schema, proxy, database } = await behindProxy();
    const holder = new pg.Client({ connectionString: schema.url });
    const observer = new pg.Client({ connectionString: schema.url });
    try {
      await Promise.all([holder.connect(), observer.connect()]);
      await holder.query("begin");
      await holder.query("lock table projects in access exclusive mode");
      const read = database.admin.db.selectFrom("projects").select("id").execute();
      await expect
        .poll(async () => (await waitingBehind(observer, holder)).length, { timeout: 5000 })
        .toBe(1);
      // The server is slow to take new connections: the cancel's is still opening when the lock goes
      // and the read answers, and when the database closes after it.
      proxy.delayNew(10_000);
      const connections = proxy.connections();
      expect(database.admin.queries?.end(new Error("refused at the deadline"))).toBe(1);
      // The cancel's connection, held by the proxy.
      await expect.poll(() => proxy.connections(), { timeout: 2000 }).toBe(connections + 1);
      await holder.query("rollback");
      expect(await read).toEqual([]);
      const closing = performance.now();
      await database.close();
      // At once, not when the cancel's connection would have timed out (5 s).
      expect(performance.now() - closing).toBeLessThan(1000);
      // Nothing is left to cancel: the cancel's connection is gone with the pools, not kept open
      // (and holding the process) until the server takes it, to cancel a backend that has gone.
      await expect.poll(() => proxy.open(), { timeout: 1000 }).toBe(0);
    } finally {
      await Promise.all([holder.end(), observer.end()]);
      await proxy.close();
      await schema.drop();
    }
  }, 20_000);

  // The cancel is PostgreSQL's CancelRequest (16 bytes on a connection of its own, no session, no
  // authentication), sent where the pool connects with the backend key its connection was given: a
  // pooler in between (PgBouncer) hands out keys of its own and passes such a request on, where a
  // `select pg_cancel_backend(pid)` from a session of its own would name the pooler's id, not the
  // server's, and stop nothing (or another backend that happens to have that id).
  it("cancels with a CancelRequest, through a pooler whose backend keys are its own, opening no session", async () => {
    const { schema, pooler, database } = await behindPooler();
    const holder = new pg.Client({ connectionString: schema.url });
    const observer = new pg.Client({ connectionString: schema.url });
    const waitingPids = () => waitingBehind(observer, holder);
    try {
      await Promise.all([holder.connect(), observer.connect()]);
      await holder.query("begin");
      await holder.query("lock table projects in access exclusive mode");
      const read = database.admin.db
        .selectFrom("projects")
        .select("id")
        .execute()
        .then(
          () => "answered",
          (error: unknown) => error,
        );
      await expect.poll(async () => (await waitingPids()).length, { timeout: 5000 }).toBe(1);
      const [serverPid] = await waitingPids();
      const key = pooler.keyOf(serverPid as number);
      expect(key).toBeDefined();
      const before = pooler.connections().length;
      const refused = new Error("refused at the deadline");
      expect(database.admin.queries?.end(refused)).toBe(1);
      // Stopped on the server while the lock is still held: the cancel reached it.
      const first = await Promise.race([
        read,
        new Promise((resolve) => setTimeout(() => resolve("still waiting"), 2000)),
      ]);
      expect(first).toBe(refused);
      expect(await waitingPids()).toEqual([]);
      const expected = Buffer.alloc(16);
      expected.writeInt32BE(16, 0);
      expected.writeInt32BE(cancelRequestCode, 4);
      expected.writeInt32BE(key?.processID as number, 8);
      expected.writeInt32BE(key?.secretKey as number, 12);
      // One connection, the 16 bytes alone: no session was opened to cancel it.
      expect(pooler.connections().slice(before)).toEqual([
        {
          kind: "cancel",
          bytes: expected,
          processID: key?.processID,
          secretKey: key?.secretKey,
          reachedServer: true,
          cutByClient: false,
        },
      ]);
    } finally {
      await holder.query("rollback").catch(() => {});
      await Promise.all([holder.end(), observer.end()]);
      await database.close();
      await pooler.close();
      await schema.drop();
    }
  }, 20_000);

  // PgBouncer before 1.19.1 can close an unrelated client when a cancel's connection is closed by its
  // sender before PgBouncer has finished with it (pgbouncer#801). The database's close ends a cancel
  // still on its way once every query it could stop has settled: one whose 16 bytes are sent is left
  // `cancelGraceMs` for the pooler to close it, and cut only then.
  it("leaves a cancel sent its grace at the close, for the pooler to close it first", async () => {
    await withCancelHeldByPooler(async ({ database, pooler, release, cancel }) => {
      const closing = performance.now();
      const closed = database.close();
      // The pools have ended (their sessions closed): the close has come to the cancels.
      while (pooler.openSessions() > 0) await new Promise((resolve) => setTimeout(resolve, 1));
      // The pooler is done with it within the grace: it closes it, not the gateway.
      release();
      await closed;
      expect(cancel()).toMatchObject({ kind: "cancel", reachedServer: true, cutByClient: false });
      expect(performance.now() - closing).toBeLessThan(1000);
    });
  }, 20_000);

  it("cuts a cancel sent that the pooler does not close within its grace, the close bounded", async () => {
    await withCancelHeldByPooler(async ({ database, cancel }) => {
      const closing = performance.now();
      await database.close();
      // Its grace, not the cancel's timeout (5 s).
      expect(performance.now() - closing).toBeGreaterThanOrEqual(cancelGraceMs - 5);
      expect(performance.now() - closing).toBeLessThan(1000);
      expect(cancel()).toMatchObject({ kind: "cancel", cutByClient: true });
    });
  }, 20_000);

  // The credential directory's reads, and the spend cap's, are cancelled by the gateway's close alone
  // (`sharedReads`): one read may answer several app calls, and an admin call's refusal is none of theirs.
  it("cancels the credential reads on their own end, not on the admin API's", async () => {
    const schema = await createPostgresSchema();
    const database = await openDatabase({ databaseUrl: schema.url, dataDir: "unused" });
    const holder = new pg.Client({ connectionString: schema.url });
    const observer = new pg.Client({ connectionString: schema.url });
    const waiting = async () => (await waitingBehind(observer, holder)).length;
    try {
      await Promise.all([holder.connect(), observer.connect()]);
      await holder.query("begin");
      await holder.query("lock table projects in access exclusive mode");
      const outcome = (read: Promise<unknown>) =>
        read.then(
          () => "answered",
          (error: unknown) => error,
        );
      const credentialRead = outcome(database.sharedReads.db.selectFrom("projects").select("id").execute());
      const adminRead = outcome(database.admin.db.selectFrom("projects").select("id").execute());
      await expect.poll(waiting, { timeout: 5000 }).toBe(2);
      const refused = new Error("refused at the deadline");
      expect(database.admin.queries?.end(refused)).toBe(1);
      expect(await adminRead).toBe(refused);
      expect(await waiting()).toBe(1);
      const closed = new Error("the gateway closed");
      expect(database.sharedReads.queries?.end(closed)).toBe(1);
      expect(await credentialRead).toBe(closed);
      expect(await waiting()).toBe(0);
    } finally {
      await holder.query("rollback").catch(() => {});
      await Promise.all([holder.end(), observer.end()]);
      await database.close();
      await schema.drop();
    }
  }, 20_000);

  // As Kysely's destroy did before the pools were ended directly: pg's end throws when called twice.
  it("closes once however often it is asked, at once or later", async () => {
    const schema = await createPostgresSchema();
    try {
      const database = await openDatabase({ databaseUrl: schema.url, dataDir: "unused" });
      await database.admin.db.selectFrom("projects").select("id").execute();
      await Promise.all([database.close(), database.close()]);
      await database.close();
    } finally {
      await schema.drop();
    }
  });

  // Each admin call the deadline refuses ends the queries again: a rollback sent after the first end
  // is not one of them, to be cancelled and counted by the next.
  it("does not count a transaction's rollback sent after the end among the queries to cancel", async () => {
    const schema = await createPostgresSchema();
    const database = await openDatabase({ databaseUrl: schema.url, dataDir: "unused" });
    const queries = database.admin.queries;
    try {
      const refused = new Error("refused at the deadline");
      const sent = vi.spyOn(queries as NonNullable<typeof queries>, "sent");
      const transaction = database.admin.db.transaction().execute(async (trx) => {
        await trx.selectFrom("projects").select("id").execute();
        expect(queries?.end(refused)).toBe(0);
        sent.mockClear();
        await trx.selectFrom("projects").select("id").execute();
      });
      await expect(transaction).rejects.toBe(refused);
      // The rollback went out (the only query let through), untracked.
      expect(sent).not.toHaveBeenCalled();
      expect(queries?.end(refused)).toBe(0);
    } finally {
      await database.close();
      await schema.drop();
    }
  });

  // An admin call waiting for a connection (the pool's all taken, or the server slow to open one)
  // when the deadline refuses it fails with the refusal then, not with pg's connection timeout later:
  // the route answers the refusal before the drain cuts the connection.
  it("fails a query still waiting for its connection with the refusal at the end", async () => {
    const { schema, proxy, database } = await behindProxy();
    try {
      proxy.delayNew(3000);
      const read = database.admin.db.selectFrom("projects").select("id").execute();
      const outcome = read.then(
        () => "answered",
        (error: unknown) => error,
      );
      await new Promise((resolve) => setTimeout(resolve, 200));
      const refused = new Error("refused at the deadline");
      expect(database.admin.queries?.end(refused)).toBe(0);
      const first = await Promise.race([
        outcome,
        new Promise((resolve) => setTimeout(() => resolve("still waiting"), 1000)),
      ]);
      expect(first).toBe(refused);
    } finally {
      proxy.delayNew(0);
      await database.close();
      await proxy.close();
      await schema.drop();
    }
  }, 20_000);
});
