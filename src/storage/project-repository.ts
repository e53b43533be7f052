import type { Kysely, Selectable } from "kysely";
import type { DeviceCheckEnvironment } from "../auth/device-check-client.js";
import type { ProviderId } from "../providers/provider-id.js";
import { type TestKeyRecord, testKeyRow } from "./key-repository.js";
import { PostgresAdapter, sql } from "./kysely.js";
import type { Database, ProjectsTable } from "./schema.js";

type DeviceTokenMode = "cached" | "single-use";

/**
 * The proxied calls a project allows, by provider: each a list of rules `[METHOD ]pattern`
 * (src/proxy/proxy-allow-list.ts). A provider left out allows nothing.
 */
export type ProxyAllowListRules = Partial<Record<ProviderId, string[]>>;

/** A project as the rest of the gateway sees it. Secrets stay sealed here. */
export interface Project {
  id: string;
  name: string;
  teamId: string | null;
  provider: ProviderId;
  model: string | null;
  testMode: boolean;
  deviceCheck: {
    enabled: boolean;
    teamId: string | null;
    keyId: string | null;
    /** Sealed .p8 private key (secret-box); null when none is set. */
    sealedPrivateKey: string | null;
    environment: DeviceCheckEnvironment;
    tokenMode: DeviceTokenMode;
    /**
     * When `teamId`, `keyId`, the private key or `environment` last changed (ISO, as `updatedAt`):
     * Apple was asked about another app from then on, so no device token verified before it is
     * trusted from the ledger (docs/auth.md). Null: none changed since the project was created.
     */
    changedAt: string | null;
  };
  outputSchema: Record<string, unknown> | null;
  saveImagesToVault: boolean;
  rateLimits: { perMinute: number | null; devicePerMinute: number | null };
  monthlySpendCapUsd: number | null;
  /** Null: every proxied call passes (SPEC's ANY); else only those a rule allows. */
  proxyAllowList: ProxyAllowListRules | null;
  disabled: boolean;
  createdAt: string;
  updatedAt: string;
}

export interface ProjectRepository {
  /**
   * False when a project with this id already exists (nothing is written then). With `testKey`, the
   * project's first test key is written with it, in one transaction: the project exists with its
   * key or not at all, even when the transaction is stopped between the two (a database that fails,
   * an admin call refused at the shutdown's deadline, whose later writes are never sent).
   */
  insert(project: Project, testKey?: TestKeyRecord): Promise<boolean>;
  get(id: string): Promise<Project | null>;
  /**
   * The projects in creation order, ids by code points (UTF-8 bytes) in a tie, the same on both
   * engines: every one, or with `page` its first `limit` after the project `after` (where a page
   * before ended), read through the `projects_created_at_id` index.
   */
  list(page?: ProjectPage): Promise<Project[]>;
  /** The ids of the projects in Test Mode, in the list's order; nothing else of them is read. */
  idsInTestMode(): Promise<string[]>;
  /**
   * Writes every field of the project. With `ifUpdatedAt`, only while the stored row still has that
   * `updatedAt` (compare-and-set): false when nothing was written, because the project is gone or
   * another change was written since it was read.
   */
  update(project: Project, ifUpdatedAt?: string): Promise<boolean>;
  /** Deletes the project with its provider and test keys, all or none (one transaction). */
  delete(id: string): Promise<boolean>;
}

export interface ProjectPage {
  limit: number;
  after?: { createdAt: string; id: string };
}

/**
 * The statement of `list`: every project in order, or a page of them read through the index on
 * creation time and id (migration 0007). Exported for the plan test.
 */
export function projectListQuery(db: Kysely<Database>, page?: ProjectPage) {
  // PostgreSQL compares text in the database's collation, which may be any language's ("B" after
  // "ab"); "C" is code points, SQLite's own order, and the index's.
  const inCodePoints = (column: "created_at" | "id") =>
    db.getExecutor().adapter instanceof PostgresAdapter
      ? sql<string>`${sql.ref(column)} collate "C"`
      : sql<string>`${sql.ref(column)}`;
  const [createdAt, id] = [inCodePoints("created_at"), inCodePoints("id")];
  const query = db.selectFrom("projects").selectAll().orderBy(createdAt).orderBy(id);
  if (!page) return query;
  const { after, limit } = page;
  // The first condition starts the index's range; the second skips the tied projects up to `after`.
  return (
    after
      ? query
          .where(createdAt, ">=", after.createdAt)
          .where((where) => where.or([where(createdAt, ">", after.createdAt), where(id, ">", after.id)]))
      : query
  ).limit(limit);
}

export function createProjectRepository(db: Kysely<Database>): ProjectRepository {
  return {
    async insert(project, testKey) {
      const inserted = async (on: Kysely<Database>) => {
        const result = await on
          .insertInto("projects")
          .values(toRow(project))
          .onConflict((conflict) => conflict.column("id").doNothing())
          .executeTakeFirst();
        return Number(result.numInsertedOrUpdatedRows ?? 0n) > 0;
      };
      if (testKey === undefined) return inserted(db);
      return db.transaction().execute(async (transaction) => {
        if (!(await inserted(transaction))) return false;
        await transaction.insertInto("test_keys").values(testKeyRow(testKey)).execute();
        return true;
      });
    },
    async get(id) {
      const row = await db.selectFrom("projects").selectAll().where("id", "=", id).executeTakeFirst();
      return row ? fromRow(row) : null;
    },
    async list(page) {
      return (await projectListQuery(db, page).execute()).map(fromRow);
    },
    async idsInTestMode() {
      const rows = await projectListQuery(db).clearSelect().select("id").where("test_mode", "=", 1).execute();
      return rows.map((row) => row.id);
    },
    async update(project, ifUpdatedAt) {
      const { id, created_at: _createdAt, ...rest } = toRow(project);
      let query = db.updateTable("projects").set(rest).where("id", "=", id);
      if (ifUpdatedAt !== undefined) query = query.where("updated_at", "=", ifUpdatedAt);
      const result = await query.executeTakeFirst();
      return Number(result.numUpdatedRows) > 0;
    },
    async delete(id) {
      // One transaction: a delete that fails part way (a database blip, another process's lock past
      // its wait) left the project without its keys, its calls refused, though the delete had failed.
      return db.transaction().execute(async (transaction) => {
        await transaction.deleteFrom("provider_keys").where("project_id", "=", id).execute();
        await transaction.deleteFrom("test_keys").where("project_id", "=", id).execute();
        const result = await transaction.deleteFrom("projects").where("id", "=", id).executeTakeFirst();
        return Number(result.numDeletedRows) > 0;
      });
    },
  };
}

function toRow(project: Project): ProjectsTable {
  return {
    id: project.id,
    name: project.name,
    team_id: project.teamId,
    provider: project.provider,
    model: project.model,
    test_mode: project.testMode ? 1 : 0,
    device_check_enabled: project.deviceCheck.enabled ? 1 : 0,
    device_check_team_id: project.deviceCheck.teamId,
    device_check_key_id: project.deviceCheck.keyId,
    device_check_private_key: project.deviceCheck.sealedPrivateKey,
    device_check_environment: project.deviceCheck.environment,
    device_token_mode: project.deviceCheck.tokenMode,
    device_check_changed_at: project.deviceCheck.changedAt,
    output_schema: project.outputSchema ? JSON.stringify(project.outputSchema) : null,
    save_images_to_vault: project.saveImagesToVault ? 1 : 0,
    rate_limit_per_minute: project.rateLimits.perMinute,
    device_rate_limit_per_minute: project.rateLimits.devicePerMinute,
    monthly_spend_cap_usd: project.monthlySpendCapUsd,
    proxy_allow_list: project.proxyAllowList ? JSON.stringify(project.proxyAllowList) : null,
    disabled: project.disabled ? 1 : 0,
    created_at: project.createdAt,
    updated_at: project.updatedAt,
  };
}

function fromRow(row: Selectable<ProjectsTable>): Project {
  return {
    id: row.id,
    name: row.name,
    teamId: row.team_id,
    provider: row.provider as ProviderId,
    model: row.model,
    testMode: Number(row.test_mode) === 1,
    deviceCheck: {
      enabled: Number(row.device_check_enabled) === 1,
      teamId: row.device_check_team_id,
      keyId: row.device_check_key_id,
      sealedPrivateKey: row.device_check_private_key,
      environment: row.device_check_environment as DeviceCheckEnvironment,
      tokenMode: row.device_token_mode as DeviceTokenMode,
      changedAt: row.device_check_changed_at,
    },
    outputSchema: row.output_schema ? outputSchemaOf(row.output_schema) : null,
    saveImagesToVault: Number(row.save_images_to_vault) === 1,
    rateLimits: { perMinute: row.rate_limit_per_minute, devicePerMinute: row.device_rate_limit_per_minute },
    monthlySpendCapUsd: row.monthly_spend_cap_usd === null ? null : Number(row.monthly_spend_cap_usd),
    // A list that does not read back as an object allows nothing (an empty list), never everything.
    proxyAllowList: row.proxy_allow_list === null ? null : proxyAllowListOf(row.proxy_allow_list),
    disabled: Number(row.disabled) === 1,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

/**
 * A stored output schema. Text that does not parse (written into the table by hand) is read as that
 * text, as a JSON string is: every check refuses it (a call's 422, `sluice projects check`'s line),
 * where a parse error thrown here failed every read of the project, the project list and that check
 * included, and left no way to replace it but SQL.
 */
function outputSchemaOf(text: string): Record<string, unknown> {
  try {
    return JSON.parse(text) as Record<string, unknown>;
  } catch {
    return text as unknown as Record<string, unknown>;
  }
}

/** The empty lists read for stored allow-lists that are no JSON object: see `unreadableAllowList`. */
const unreadableAllowLists = new WeakSet<object>();

/**
 * Whether `list` is the empty list read for a stored allow-list that is no JSON object (text written
 * by hand): it allows no proxied call, which `sluice projects check` reports, where an empty list
 * saved on purpose is no problem.
 */
export function unreadableAllowList(list: ProxyAllowListRules): boolean {
  return unreadableAllowLists.has(list);
}

function proxyAllowListOf(text: string): ProxyAllowListRules {
  let rules: unknown;
  try {
    rules = JSON.parse(text);
  } catch {}
  if (typeof rules === "object" && rules !== null && !Array.isArray(rules))
    return rules as ProxyAllowListRules;
  const none: ProxyAllowListRules = {};
  unreadableAllowLists.add(none);
  return none;
}
