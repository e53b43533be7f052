import pg from "pg";
import type { OpenDatabase } from "../../src/storage/database.js";
import { openDatabase } from "../../src/storage/database.js";
import type { UsageRepository } from "../../src/storage/usage-repository.js";
import { createUsageRecorder } from "../../src/usage/usage-recorder.js";
import { createPostgresSchema } from "./services.js";

/**
 * A usage recorder over `usage` that writes only when flushed, counting its writes (`writes`, which
 * a test may reset) and keeping the errors of the rows it refused and of the writes that failed.
 */
export function countingRecorder(usage: UsageRepository, queueMax = 100) {
  const seen = { writes: 0, refused: [] as unknown[], failures: [] as unknown[] };
  const recorder = createUsageRecorder({
    repository: {
      ...usage,
      insertBatch: (rows) => {
        seen.writes++;
        return usage.insertBatch(rows);
      },
    },
    flushIntervalMs: 60_000,
    queueMax,
    onRefused: (_row, error) => seen.refused.push(error),
    onWriteFailure: (error) => seen.failures.push(error),
  });
  return { recorder, seen };
}

/**
 * A fresh PostgreSQL schema opened as a login role of its own (which migrates, and so owns, its
 * tables), and `admin`, a client as the server's superuser, to change that role's rights: a login
 * refused, a grant revoked. `close` drops the schema and the role.
 */
export async function openAsOwnRole(): Promise<{
  database: OpenDatabase;
  admin: pg.Client;
  role: string;
  close(): Promise<void>;
}> {
  const schema = await createPostgresSchema();
  const name = decodeURIComponent(schema.url).match(/search_path=(\w+)/)?.[1] ?? "";
  const role = `${name}_writer`;
  const admin = new pg.Client({ connectionString: schema.url });
  await admin.connect();
  await admin.query(`create role ${role} login`);
  await admin.query(`grant all on schema ${name} to ${role}`);
  const database = await openDatabase({
    databaseUrl: schema.url.replace("postgres@", `${role}@`),
    dataDir: "unused",
  });
  return {
    database,
    admin,
    role,
    async close() {
      await database.close();
      await schema.drop();
      await admin.query(`drop role ${role}`);
      await admin.end();
    },
  };
}
