import type { Kysely, Selectable } from "kysely";
import type { ProviderId } from "../providers/provider-id.js";
import type { Database, ProviderKeysTable } from "./schema.js";

export interface ProviderKeyRecord {
  id: string;
  projectId: string;
  provider: ProviderId;
  label: string | null;
  sealedServerShare: string;
  clientShareDigest: string;
  createdAt: string;
  revokedAt: string | null;
}

export interface TestKeyRecord {
  id: string;
  projectId: string;
  digest: string;
  createdAt: string;
}

/** The row of test key `record`, stamped `createdAt` (by default the record's own time). */
export function testKeyRow(record: TestKeyRecord, createdAt = record.createdAt) {
  return { id: record.id, project_id: record.projectId, digest: record.digest, created_at: createdAt };
}

/**
 * Which of a project's test keys a rotation keeps besides the new one: the newest `newest` (the new
 * one counted), and every key issued at most `withinMs` before the new one.
 */
export interface TestKeysKept {
  newest: number;
  withinMs: number;
}

/** Provider key records and test-key digests. */
export interface KeyRepository {
  /** False when the project does not exist (it was deleted since it was checked): nothing is written. */
  insertProviderKey(record: ProviderKeyRecord): Promise<boolean>;
  getProviderKey(id: string): Promise<ProviderKeyRecord | null>;
  listProviderKeys(projectId: string): Promise<ProviderKeyRecord[]>;
  revokeProviderKey(projectId: string, id: string, at: string): Promise<boolean>;
  /**
   * Adds a test key and deletes the project's others but those `kept` names. False when the project
   * does not exist, as for `insertProviderKey`.
   */
  addTestKey(record: TestKeyRecord, kept: TestKeysKept): Promise<boolean>;
  listTestKeys(projectId: string): Promise<TestKeyRecord[]>;
  deleteTestKey(projectId: string, id: string): Promise<boolean>;
}

export function createKeyRepository(db: Kysely<Database>): KeyRepository {
  return {
    async insertProviderKey(record) {
      return db
        .insertInto("provider_keys")
        .values({
          id: record.id,
          project_id: record.projectId,
          provider: record.provider,
          label: record.label,
          server_share: record.sealedServerShare,
          client_share_digest: record.clientShareDigest,
          created_at: record.createdAt,
          revoked_at: record.revokedAt,
        })
        .execute()
        .then(() => true, projectMissing);
    },
    async getProviderKey(id) {
      const row = await db.selectFrom("provider_keys").selectAll().where("id", "=", id).executeTakeFirst();
      return row ? providerKeyFromRow(row) : null;
    },
    async listProviderKeys(projectId) {
      const rows = await db
        .selectFrom("provider_keys")
        .selectAll()
        .where("project_id", "=", projectId)
        .orderBy("created_at")
        .orderBy("id")
        .execute();
      return rows.map(providerKeyFromRow);
    },
    async revokeProviderKey(projectId, id, at) {
      const result = await db
        .updateTable("provider_keys")
        .set({ revoked_at: at })
        .where("project_id", "=", projectId)
        .where("id", "=", id)
        .where("revoked_at", "is", null)
        .executeTakeFirst();
      return Number(result.numUpdatedRows) > 0;
    },
    async addTestKey(record, kept) {
      const added = db.transaction().execute(async (transaction) => {
        // Locks the project row first (a write that changes nothing), so rotations of one project
        // run one after the other on PostgreSQL (SQLite has one writer): each stamps its key after
        // every stored one and prunes seeing them all, whichever instance it runs on.
        await transaction
          .updateTable("projects")
          .set((update) => ({ updated_at: update.ref("updated_at") }))
          .where("id", "=", record.projectId)
          .execute();
        // The new key is the newest, whatever the clock of the process issuing it says: stamped after
        // the newest stored one when that is later (another instance's clock ahead of this one's),
        // or the rotation below would delete the key it just issued and keep the oldest.
        const newest = await transaction
          .selectFrom("test_keys")
          .select("created_at")
          .where("project_id", "=", record.projectId)
          .orderBy("created_at", "desc")
          .limit(1)
          .executeTakeFirst();
        const createdAt =
          newest !== undefined && newest.created_at >= record.createdAt
            ? new Date(Date.parse(newest.created_at) + 1).toISOString()
            : record.createdAt;
        await transaction.insertInto("test_keys").values(testKeyRow(record, createdAt)).execute();
        const rows = await transaction
          .selectFrom("test_keys")
          .select(["id", "created_at"])
          .where("project_id", "=", record.projectId)
          .orderBy("created_at", "desc")
          .orderBy("id", "desc")
          .execute();
        // Keys issued just before this one stay: a rotation running at once may not have answered
        // yet, and the key it is about to show must work.
        const keptSince = Date.parse(createdAt) - kept.withinMs;
        const stale = rows
          .slice(kept.newest)
          .filter((row) => Date.parse(row.created_at) < keptSince)
          .map((row) => row.id);
        if (stale.length > 0) await transaction.deleteFrom("test_keys").where("id", "in", stale).execute();
      });
      return added.then(() => true, projectMissing);
    },
    async listTestKeys(projectId) {
      const rows = await db
        .selectFrom("test_keys")
        .selectAll()
        .where("project_id", "=", projectId)
        .orderBy("created_at", "desc")
        .orderBy("id", "desc")
        .execute();
      return rows.map((row) => ({
        id: row.id,
        projectId: row.project_id,
        digest: row.digest,
        createdAt: row.created_at,
      }));
    },
    async deleteTestKey(projectId, id) {
      const result = await db
        .deleteFrom("test_keys")
        .where("project_id", "=", projectId)
        .where("id", "=", id)
        .executeTakeFirst();
      return Number(result.numDeletedRows) > 0;
    },
  };
}

/**
 * False for the foreign-key violation of a key written for a project that no longer exists (SQLite
 * SQLITE_CONSTRAINT_FOREIGNKEY, PostgreSQL 23503); any other failure is thrown on.
 */
function projectMissing(error: unknown): false {
  const code = (error as { code?: unknown } | null)?.code;
  if (code === "SQLITE_CONSTRAINT_FOREIGNKEY" || code === "23503") return false;
  throw error;
}

function providerKeyFromRow(row: Selectable<ProviderKeysTable>): ProviderKeyRecord {
  return {
    id: row.id,
    projectId: row.project_id,
    provider: row.provider as ProviderId,
    label: row.label,
    sealedServerShare: row.server_share,
    clientShareDigest: row.client_share_digest,
    createdAt: row.created_at,
    revokedAt: row.revoked_at,
  };
}
