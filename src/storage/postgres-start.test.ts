import { randomBytes } from "node:crypto";
import pg from "pg";
import { describe, expect, it } from "vitest";
import { startLocalTcpServer } from "../../test/support/local-server.js";
import { createPostgresSchema, postgresAvailable, postgresBaseUrl } from "../../test/support/services.js";
import { startSilentPostgres } from "../../test/support/silent-postgres.js";
import { startFailureMessage } from "../start-failure.js";
import { openDatabase } from "./database.js";
import { DatabaseStartError } from "./postgres-start.js";

/** A server that accepts TCP connections and never sends a byte. */
const startMuteServer = () => startLocalTcpServer((socket) => socket.resume());

/** How `openDatabase` failed, and after how long. */
async function failedOpen(databaseUrl: string, startTimeoutMs: number) {
  const started = performance.now();
  const error = await openDatabase({ databaseUrl, dataDir: "unused", startTimeoutMs }).then(
    async (database) => {
      await database.close();
      return null;
    },
    (caught: unknown) => caught,
  );
  return { error, ms: performance.now() - started };
}

describe("opening PostgreSQL at start within SLUICE_DATABASE_START_TIMEOUT_MS", () => {
  it("fails naming DATABASE_URL, without its password, when the connection is refused", async () => {
    // A port that was free a moment ago: nothing listens on it.
    const closed = await startLocalTcpServer(() => {});
    const { port } = closed;
    await closed.close();
    const { error } = await failedOpen(`postgres://u:not-the-password@127.0.0.1:${port}/db`, 5000);
    expect(error).toBeInstanceOf(DatabaseStartError);
    expect(startFailureMessage(error)).toBe(
      `sluice failed to start: DATABASE_URL (postgres://u@127.0.0.1:${port}/db): PostgreSQL could not be reached or refused the connection: connect ECONNREFUSED 127.0.0.1:${port}\n`,
    );
  });

  it("fails naming DATABASE_URL, without its password, when the server accepts the connection but never answers", async () => {
    const mute = await startMuteServer();
    try {
      const { error, ms } = await failedOpen(
        `postgres://sluice:not-the-password@127.0.0.1:${mute.port}/test?sslpassword=nor-this`,
        500,
      );
      expect(error).toBeInstanceOf(DatabaseStartError);
      expect((error as Error).message).toBe(
        `DATABASE_URL (postgres://sluice@127.0.0.1:${mute.port}/test): PostgreSQL did not answer the connection within 500 ms (SLUICE_DATABASE_START_TIMEOUT_MS)`,
      );
      expect(ms).toBeGreaterThanOrEqual(450);
      expect(ms).toBeLessThan(2000);
    } finally {
      await mute.close();
    }
  });

  it("fails when the server sets a session up but never answers a query", async () => {
    const silent = await startSilentPostgres();
    try {
      const { error, ms } = await failedOpen(`postgres://sluice@127.0.0.1:${silent.port}/test`, 500);
      expect((error as Error).message).toBe(
        `DATABASE_URL (postgres://sluice@127.0.0.1:${silent.port}/test): PostgreSQL did not answer within 500 ms (SLUICE_DATABASE_START_TIMEOUT_MS)`,
      );
      expect(ms).toBeLessThan(2000);
      // The start's transaction was opened, and its first statement never answered.
      expect(silent.received()).toContain("begin");
    } finally {
      await silent.close();
    }
  });
});

describe.skipIf(!postgresAvailable)(
  "opening PostgreSQL at start with a search_path that names no schema",
  () => {
    it("fails naming DATABASE_URL, without its password, the search_path, and how to mend it", async () => {
      // Sluice makes its tables in the first existing schema of the search_path: none exists here.
      const missing = `sluice_no_such_schema_${randomBytes(6).toString("hex")}`;
      const url = new URL(postgresBaseUrl);
      url.password = "not-the-password";
      url.searchParams.set("options", `-c search_path=${missing}`);
      const { error } = await failedOpen(url.href, 5000);
      expect(error).toBeInstanceOf(DatabaseStartError);
      expect(startFailureMessage(error)).toBe(
        `sluice failed to start: DATABASE_URL (postgres://postgres@127.0.0.1:5432/test): its search_path (${missing}) ` +
          "names no schema that exists, and Sluice makes its tables in the first one that does: create the schema " +
          "(CREATE SCHEMA …), or name an existing one, in DATABASE_URL's options (-c search_path=…) or on its role " +
          "(ALTER ROLE … SET search_path = …)\n",
      );
    });

    it("fails naming the schemas its role lacks USAGE on, when they exist", async () => {
      // current_schema() is null as well when the role may not use any schema of its search_path.
      const suffix = randomBytes(6).toString("hex");
      const role = `sluice_no_usage_${suffix}`;
      const schema = `sluice_test_${suffix}`;
      const missing = `sluice_no_such_schema_${suffix}`;
      const admin = new pg.Client({ connectionString: postgresBaseUrl });
      await admin.connect();
      try {
        await admin.query(`create role ${role} login`);
        await admin.query(`create schema ${schema}`);
        const url = new URL(postgresBaseUrl);
        url.username = role;
        url.searchParams.set("options", `-c search_path="$user",${missing},${schema}`);
        const { error } = await failedOpen(url.href, 5000);
        expect(error).toBeInstanceOf(DatabaseStartError);
        expect(startFailureMessage(error)).toBe(
          `sluice failed to start: DATABASE_URL (postgres://${role}@127.0.0.1:5432/test): its search_path ` +
            `("$user",${missing},${schema}) names no schema its role (${role}) may use, and Sluice makes its tables in ` +
            `the first one it may: the role lacks the USAGE privilege on ${schema}: grant it (GRANT USAGE, CREATE ON ` +
            `SCHEMA ${schema} TO ${role}), or name another schema, in DATABASE_URL's options (-c search_path=…) or on its ` +
            "role (ALTER ROLE … SET search_path = …)\n",
        );
      } finally {
        await admin.query(`drop schema if exists ${schema}`);
        await admin.query(`drop role if exists ${role}`);
        await admin.end();
      }
    });
  },
);

/**
 * The migration lock on PostgreSQL: an advisory lock for the whole database, held by the start's
 * transaction (Kysely's key: earlier builds hold it for their session, as here).
 */
const kyselyMigrationLock = "3853314791062309107";

/** A session of its own that `hold`s a lock meanwhile `use` runs, and lets it go after. */
async function holding(url: string, hold: string[], use: () => Promise<void>): Promise<void> {
  const session = new pg.Client({ connectionString: url });
  await session.connect();
  try {
    for (const statement of hold) await session.query(statement);
    await use();
  } finally {
    await session.end();
  }
}

/**
 * These hold the migration lock, or make a migration hold it while it waits: other suites opening
 * a PostgreSQL database meanwhile wait for them, so the start timeout is short.
 */
describe.skipIf(!postgresAvailable)("opening PostgreSQL at start while another session holds a lock", () => {
  it("fails naming the migration lock when another session holds it", async () => {
    const schema = await createPostgresSchema();
    try {
      await holding(schema.url, [`select pg_advisory_lock(${kyselyMigrationLock})`], async () => {
        const { error, ms } = await failedOpen(schema.url, 500);
        expect((error as Error).message).toBe(
          "DATABASE_URL (postgres://postgres@127.0.0.1:5432/test): the migration lock was not free within 500 ms " +
            "(SLUICE_DATABASE_START_TIMEOUT_MS); another session holds it (a Sluice instance or CLI command " +
            "migrating the same database, or one stuck): see the advisory locks in pg_locks",
        );
        expect(ms).toBeLessThan(2000);
      });
    } finally {
      await schema.drop();
    }
  });

  it("fails naming the migration that waits for a table another session holds, and the server stops its wait too", async () => {
    const schema = await createPostgresSchema();
    try {
      // A database migrated up to 0001: 0002 changes the usage table's columns (0003 follows it).
      const migrated = await openDatabase({ databaseUrl: schema.url, dataDir: "unused" });
      await migrated.close();
      const session = new pg.Client({ connectionString: schema.url });
      await session.connect();
      await session.query("alter table projects drop column proxy_allow_list");
      await session.query("delete from sluice_migrations where name > '0001-initial'");
      await session.end();
      const waiting = `select count(*)::int as count from pg_locks
        where relation = to_regclass(current_schema() || '.usage_records') and not granted`;
      await holding(schema.url, ["begin", "lock table usage_records in access share mode"], async () => {
        const { error, ms } = await failedOpen(schema.url, 500);
        expect((error as Error).message).toBe(
          "DATABASE_URL (postgres://postgres@127.0.0.1:5432/test): migration 0002-usage-token-counts-bigint " +
            "did not finish within 500 ms (SLUICE_DATABASE_START_TIMEOUT_MS): it waits for a lock another " +
            "session holds on a table it changes (see pg_locks), or PostgreSQL stopped answering, or it " +
            "needs longer on a large table (then raise SLUICE_DATABASE_START_TIMEOUT_MS)",
        );
        expect(ms).toBeLessThan(2000);
        // The ALTER given up on no longer waits in the table's lock queue (where every later
        // query on the table would wait behind it), though the other session still holds its lock.
        const watcher = new pg.Client({ connectionString: schema.url });
        await watcher.connect();
        try {
          let count = -1;
          const deadline = Date.now() + 3000;
          while (count !== 0 && Date.now() < deadline) {
            count = (await watcher.query<{ count: number }>(waiting)).rows[0]?.count ?? -1;
            if (count !== 0) await new Promise((resolve) => setTimeout(resolve, 50));
          }
          expect(count).toBe(0);
        } finally {
          await watcher.end();
        }
      });
    } finally {
      await schema.drop();
    }
  });
});

// Kysely's migrator asks whether its tables exist by listing every table of the database, calling
// has_schema_privilege on each schema's name: a schema another session dropped meanwhile failed the
// start ("Database migration failed: schema … does not exist"), as a test file's schema dropped in
// its afterAll failed another file's gateway start on a loaded CI machine.
describe.skipIf(!postgresAvailable)("opening PostgreSQL at start while other schemas come and go", () => {
  it("migrates a fresh schema while another session creates and drops schemas of the same database", async () => {
    const churn = new pg.Client({ connectionString: postgresBaseUrl });
    await churn.connect();
    const churned = `sluice_test_churn_${randomBytes(6).toString("hex")}`;
    let stop = false;
    const churning = (async () => {
      for (let round = 0; !stop; round++) {
        const name = `${churned}_${round % 4}`;
        await churn.query(`create schema ${name}; create table ${name}.t (id serial primary key)`);
        await churn.query(`drop schema ${name} cascade`);
      }
    })();
    const outcomes: string[] = [];
    try {
      for (let index = 0; index < 12; index++) {
        const schema = await createPostgresSchema();
        try {
          const database = await openDatabase({ databaseUrl: schema.url, dataDir: "unused" });
          await database.close();
          outcomes.push("opened");
        } catch (error) {
          outcomes.push(String(error instanceof Error ? (error.cause ?? error) : error));
        } finally {
          await schema.drop();
        }
      }
    } finally {
      stop = true;
      await churning;
      await churn.end();
    }
    expect(outcomes).toEqual(Array(12).fill("opened"));
  }, 30_000);
});
