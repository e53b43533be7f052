import { randomBytes } from "node:crypto";
import type { Socket } from "node:net";
import pg from "pg";
import { describe, expect, it } from "vitest";
import { startLocalTcpServer } from "../../test/support/local-server.js";
import { createPostgresSchema, postgresAvailable, postgresBaseUrl } from "../../test/support/services.js";
import { startTransactionPooler } from "../../test/support/transaction-pooler.js";
import { openDatabase } from "./database.js";
import { DatabaseStartError } from "./postgres-start.js";

/** The settings the start's migration connection limits itself with, as a session sees them. */
async function sessionSettings(url: string): Promise<Record<string, string>> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<Record<string, string>>(`select
      current_setting('statement_timeout') as statement_timeout,
      current_setting('idle_in_transaction_session_timeout') as idle_in_transaction_session_timeout,
      current_setting('idle_session_timeout', true) as idle_session_timeout,
      current_setting('lock_timeout') as lock_timeout`);
    return rows[0] ?? {};
  } finally {
    await client.end();
  }
}

const through = (url: string, port: number) => url.replace("127.0.0.1:5432", `127.0.0.1:${port}`);

/** The message of the DatabaseStartError opening `databaseUrl` fails with (it must fail so). */
async function startFailure(databaseUrl: string, startTimeoutMs: number): Promise<string> {
  const error = await openDatabase({ databaseUrl, dataDir: "unused", startTimeoutMs }).then(
    async (database) => {
      await database.close();
      return null;
    },
    (caught: unknown) => caught,
  );
  expect(error).toBeInstanceOf(DatabaseStartError);
  return (error as Error).message;
}

// Behind a pooler in transaction mode (PgBouncer's), each transaction of a client may run on another
// server connection, and what one leaves on its session reaches the pooler's other clients
// (docs/decisions/0051).
describe.skipIf(!postgresAvailable)("opening PostgreSQL behind a pooler in transaction mode", () => {
  it("leaves the pooler's server connection with the server's own settings for the next client", async () => {
    const schema = await createPostgresSchema();
    // One server connection: the start's transactions and the next client's all run on it.
    const pooler = await startTransactionPooler(5432, 1);
    try {
      const own = await sessionSettings(schema.url);
      const database = await openDatabase({
        databaseUrl: through(schema.url, pooler.port),
        dataDir: "unused",
      });
      await database.close();
      expect(await sessionSettings(through(schema.url, pooler.port))).toEqual(own);
    } finally {
      await pooler.close();
      await schema.drop();
    }
  });

  it("leaves no migration lock on the pooler's server connections, so the next start does not wait for it", async () => {
    const schema = await createPostgresSchema();
    // Three server connections taken in turn: a lock taken in one transaction and let go in another
    // would be let go on another session, and stay on the first.
    const pooler = await startTransactionPooler(5432, 3);
    const watcher = new pg.Client({ connectionString: schema.url });
    await watcher.connect();
    try {
      const database = await openDatabase({
        databaseUrl: through(schema.url, pooler.port),
        dataDir: "unused",
      });
      await database.close();
      const { rows } = await watcher.query<{ held: number }>(
        "select count(*)::int as held from pg_locks where locktype = 'advisory' and pid = any($1)",
        [pooler.serverProcessIDs()],
      );
      expect(rows[0]?.held).toBe(0);
      const next = await openDatabase({ databaseUrl: schema.url, dataDir: "unused", startTimeoutMs: 3000 });
      await next.close();
    } finally {
      await watcher.end();
      await pooler.close();
      await schema.drop();
    }
  }, 10_000);

  it("migrates a fresh schema once when three instances start at once through it", async () => {
    const schema = await createPostgresSchema();
    const pooler = await startTransactionPooler(5432, 3);
    try {
      const results = await Promise.allSettled(
        [1, 2, 3].map(() =>
          openDatabase({
            databaseUrl: through(schema.url, pooler.port),
            dataDir: "unused",
            startTimeoutMs: 5000,
          }),
        ),
      );
      for (const result of results) if (result.status === "fulfilled") await result.value.close();
      expect(
        results.map((result) => (result.status === "fulfilled" ? "opened" : String(result.reason))),
      ).toEqual(["opened", "opened", "opened"]);
    } finally {
      await pooler.close();
      await schema.drop();
    }
  }, 15_000);
});

/** A backend message: its type byte, then its length (itself included) and body. */
function message(type: string, body: Buffer): Buffer {
  const length = Buffer.alloc(4);
  length.writeInt32BE(body.length + 4);
  return Buffer.concat([Buffer.from(type), length, body]);
}

/**
 * PgBouncer with `pool_mode = statement`, as its clients see it (measured with PgBouncer 1.18): a
 * session set up, then a `begin` refused with a FATAL 08P01 and the connection closed.
 */
function statementPooler(socket: Socket): void {
  let startedUp = false;
  socket.on("error", () => socket.destroy());
  socket.on("data", (chunk: Buffer) => {
    if (!startedUp) {
      startedUp = true;
      const key = Buffer.alloc(8);
      key.writeInt32BE(4242);
      socket.write(
        Buffer.concat([message("R", Buffer.alloc(4)), message("K", key), message("Z", Buffer.from("I"))]),
      );
      return;
    }
    if (chunk.toString("latin1").includes("begin")) {
      const fields = [
        "SFATAL",
        "VFATAL",
        "C08P01",
        "Mtransaction blocks not allowed in statement pooling mode",
      ];
      socket.end(message("E", Buffer.from(`${fields.join("\0")}\0\0`, "latin1")));
    }
  });
}

describe("opening PostgreSQL behind a pooler in statement mode", () => {
  it("fails naming the pooler's mode, which refuses the transactions Sluice needs", async () => {
    const pooler = await startLocalTcpServer(statementPooler);
    try {
      expect(
        await startFailure(`postgres://sluice:not-the-password@127.0.0.1:${pooler.port}/sluice`, 2000),
      ).toBe(
        `DATABASE_URL (postgres://sluice@127.0.0.1:${pooler.port}/sluice): a connection pooler in front of ` +
          "PostgreSQL pools by statement (PgBouncer's pool_mode = statement), and refuses the transactions " +
          "Sluice needs: pool this database by transaction or by session",
      );
    } finally {
      await pooler.close();
    }
  });
});

/** PgBouncer's answer to a startup message with a parameter it does not know (measured, 1.18). */
function refusingOptions(socket: Socket): void {
  socket.on("error", () => socket.destroy());
  socket.once("data", () => {
    const fields = ["SFATAL", "VFATAL", "C08P01", "Munsupported startup parameter: options"];
    socket.end(message("E", Buffer.from(`${fields.join("\0")}\0\0`, "latin1")));
  });
}

describe("opening PostgreSQL behind a pooler that refuses the URL's options parameter", () => {
  it("fails naming the parameter, and where the search_path goes instead", async () => {
    const pooler = await startLocalTcpServer(refusingOptions);
    try {
      expect(
        await startFailure(
          `postgres://sluice@127.0.0.1:${pooler.port}/sluice?options=${encodeURIComponent("-c search_path=sluice")}`,
          2000,
        ),
      ).toBe(
        `DATABASE_URL (postgres://sluice@127.0.0.1:${pooler.port}/sluice): a connection pooler in front of ` +
          "PostgreSQL refuses its options parameter (PgBouncer does): set the search_path on the role " +
          "instead (ALTER ROLE … SET search_path = …) and leave options out of DATABASE_URL: adding options " +
          "to the pooler's ignore_startup_parameters would drop it silently, which the start refuses too",
      );
    } finally {
      await pooler.close();
    }
  });
});

describe.skipIf(!postgresAvailable)(
  "opening PostgreSQL behind a pooler that drops the URL's options parameter",
  () => {
    it("fails naming the setting that did not arrive, before it creates any table", async () => {
      // A database of its own: other test files start gateways on the shared one's default schema.
      const name = `sluice_test_options_${randomBytes(6).toString("hex")}`;
      const admin = new pg.Client({ connectionString: postgresBaseUrl });
      await admin.connect();
      await admin.query(`create database ${name}`);
      // PgBouncer with `options` in its ignore_startup_parameters: the search_path never reaches the
      // server, and the tables would go to the role's default schema (public), another deployment's.
      const pooler = await startTransactionPooler(5432, 1, { droppingOptions: true });
      try {
        const url = `postgres://postgres@127.0.0.1:${pooler.port}/${name}?options=${encodeURIComponent("-c search_path=sluice")}`;
        expect(await startFailure(url, 5000)).toBe(
          `DATABASE_URL (postgres://postgres@127.0.0.1:${pooler.port}/${name}): its options parameter did not reach ` +
            "PostgreSQL (search_path is the server's own, not the URL's): a connection pooler in front drops it " +
            "(PgBouncer's ignore_startup_parameters), and Sluice's tables would go to the role's default schema: " +
            "set the search_path on the role instead (ALTER ROLE … SET search_path = …) and leave options out of DATABASE_URL",
        );
        const direct = new pg.Client({ connectionString: postgresBaseUrl.replace(/\/test$/, `/${name}`) });
        await direct.connect();
        try {
          const { rows } = await direct.query(
            "select count(*)::int as tables from information_schema.tables where table_schema = 'public'",
          );
          expect(rows[0]).toEqual({ tables: 0 });
        } finally {
          await direct.end();
        }
      } finally {
        await pooler.close();
        await admin.query(`drop database if exists ${name} with (force)`);
        await admin.end();
      }
    });

    it("names any other setting the options give that did not arrive", async () => {
      const pooler = await startTransactionPooler(5432, 1, { droppingOptions: true });
      try {
        const url = `postgres://postgres@127.0.0.1:${pooler.port}/test?options=${encodeURIComponent("--lock-timeout=1234")}`;
        expect(await startFailure(url, 5000)).toContain(
          "(lock_timeout is the server's own, not the URL's): a connection pooler in front drops it " +
            "(PgBouncer's ignore_startup_parameters), so set it on the role instead (ALTER ROLE … SET …)",
        );
      } finally {
        await pooler.close();
      }
    });

    it("opens through a pooler that passes the options on, the URL's search_path in force", async () => {
      const schema = await createPostgresSchema();
      const pooler = await startTransactionPooler(5432, 1);
      try {
        const database = await openDatabase({
          databaseUrl: through(schema.url, pooler.port),
          dataDir: "unused",
          startTimeoutMs: 5000,
        });
        await database.close();
      } finally {
        await pooler.close();
        await schema.drop();
      }
    });
  },
);
