import { randomBytes } from "node:crypto";
import { closeSync, mkdtempSync, openSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import BetterSqlite3 from "better-sqlite3";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { formerProviderKeyAad } from "../../src/admin/project-admin.js";
import { deviceCheckKeyAad } from "../../src/admin/project-rules.js";
import { newKeyId, splitProviderKey } from "../../src/auth/partial-key.js";
import { createSecretBox } from "../../src/auth/secret-box.js";
import { generateTestKey, testKeyDigest } from "../../src/auth/test-key.js";
import { type Engine, sqliteFileIn } from "../../src/storage/database.js";
import { Kysely, Migrator, PostgresDialect, SqliteDialect, sql } from "../../src/storage/kysely.js";
import { migrations } from "../../src/storage/migrations.js";
import { createProjectRepository } from "../../src/storage/project-repository.js";
import { generateAppleKeyPair } from "../fakes/fake-apple.js";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import { clockAwayFromMonthEnd } from "../support/away-from-month-end.js";
import { proxiedChat } from "../support/proxied-chat.js";
import { createPostgresSchema, postgresAvailable } from "../support/services.js";
import { startTestGateway, usageRowOf } from "../support/test-gateway.js";

/**
 * An operator upgrading from any earlier release: a database only the migrations up to that
 * release's last have run on, holding rows as that release wrote them (only the columns it knew),
 * is opened by this build, and every row is still there and works: the project serves, its partial
 * key and test key open, the DeviceCheck key unseals, the usage report counts the old rows, the
 * spend cap sees their cost, and a project with every setting away from its default reads back as
 * stored and serves structured analysis on its provider.
 */
type Rows = Record<string, Record<string, unknown>>;

/** A database of one engine that outlives its connections, and what reaches it raw. */
interface Durable {
  engine: Engine;
  /** The gateway's settings for it. */
  settings: { dataDir: string } | { databaseUrl: string };
  /** A raw connection, as an earlier release's process had. */
  connect(): Kysely<Rows>;
  /** The schema the migration tables go in (PostgreSQL), as `migrateToLatest` gives it. */
  schema: string | undefined;
  drop(): Promise<void>;
}

const engines = [
  {
    name: "SQLite",
    available: true,
    async create(): Promise<Durable> {
      const dataDir = mkdtempSync(join(tmpdir(), "sluice-upgrade-"));
      const file = sqliteFileIn(dataDir);
      closeSync(openSync(file, "a", 0o600));
      return {
        engine: "sqlite",
        settings: { dataDir },
        schema: undefined,
        connect() {
          const database = new BetterSqlite3(file);
          database.pragma("journal_mode = WAL");
          database.pragma("foreign_keys = ON");
          return new Kysely<Rows>({ dialect: new SqliteDialect({ database }) });
        },
        // The gateway's close removes the data dir.
        drop: async () => {},
      };
    },
  },
  {
    name: "PostgreSQL",
    available: postgresAvailable,
    async create(): Promise<Durable> {
      const created = await createPostgresSchema();
      const schema = new URL(created.url).searchParams.get("options")?.replace("-c search_path=", "");
      return {
        engine: "postgres",
        settings: { databaseUrl: created.url },
        schema,
        connect() {
          const dialect = new PostgresDialect({
            pool: new pg.Pool({ connectionString: created.url, max: 1 }),
          });
          // Kysely's own table list spans every schema of the shared test database, some of which
          // other test files drop meanwhile: the migration tables are looked for in this one only.
          dialect.createIntrospector = (db) => ({
            getSchemas: async () => [],
            getMetadata: async () => ({ tables: [] }),
            async getTables() {
              const { rows } = await sql<{ name: string }>`
                select table_name as name from information_schema.tables
                where table_schema = current_schema()`.execute(db);
              return rows.map(({ name }) => ({ name, schema, isView: false, columns: [] }));
            },
          });
          return new Kysely<Rows>({ dialect });
        },
        drop: created.drop,
      };
    },
  },
];

/** Runs the first `count` migrations, as the release whose last migration that was left the database. */
async function migrateThrough(database: Durable, db: Kysely<Rows>, count: number): Promise<void> {
  const earlier = Object.fromEntries(Object.entries(migrations(database.engine)).slice(0, count));
  const migrator = new Migrator({
    db: db as Kysely<unknown>,
    provider: { getMigrations: async () => earlier },
    migrationTableName: "sluice_migrations",
    migrationLockTableName: "sluice_migrations_lock",
    ...(database.schema ? { migrationTableSchema: database.schema } : {}),
  });
  const { error, results } = await migrator.migrateToLatest();
  if (error) throw error;
  expect(results?.map((result) => result.status)).toEqual(Array.from({ length: count }, () => "Success"));
}

const levels = Object.keys(migrations("sqlite")).slice(0, -1);

/** The output schema the project of every setting held (one /v1/text accepts on provider B). */
const summarySchema = {
  type: "object",
  properties: { summary: { type: "string" } },
  required: ["summary"],
  additionalProperties: false,
};

for (const engine of engines) {
  describe.skipIf(!engine.available)(`upgrading ${engine.name} from an earlier release`, () => {
    let fake: FakeUpstream;
    const masterKey = randomBytes(32);
    const secretBox = createSecretBox(masterKey);
    const now = clockAwayFromMonthEnd();

    beforeAll(async () => {
      fake = await startFakeUpstream();
    });
    afterAll(async () => {
      await fake.close();
    });

    it.each(levels.map((name, index) => [name, index + 1]))(
      "keeps every row a release whose last migration was %s wrote, and serves with it",
      async (_name, level) => {
        const database = await engine.create();
        // Within this month (the spend cap's), and before the gateway's now.
        const monthStart = Date.UTC(now().getUTCFullYear(), now().getUTCMonth(), 1);
        const at = new Date(Math.max(monthStart, now().getTime() - 1000)).toISOString();
        const served = { id: "served", providerKey: `real-key-${randomBytes(8).toString("hex")}` };
        const capped = { id: "capped", providerKey: `real-key-${randomBytes(8).toString("hex")}` };
        const settings = { providerKey: `real-key-${randomBytes(8).toString("hex")}` };
        const apple = generateAppleKeyPair();
        const testKeys: Record<string, string> = {};
        const partialKeys: Record<string, string> = {};
        const db = database.connect();
        try {
          await migrateThrough(database, db, level);
          // The rows that release wrote: only the columns it knew.
          const since = (migration: number, values: Record<string, unknown>) =>
            level >= migration ? values : {};
          for (const project of [served, capped]) {
            await db
              .insertInto("projects")
              .values({
                id: project.id,
                name: `Project ${project.id}`,
                team_id: null,
                provider: "provider-a",
                model: null,
                test_mode: 1,
                device_check_enabled: project === served ? 1 : 0,
                device_check_team_id: project === served ? "TEAM123456" : null,
                device_check_key_id: project === served ? "KEY1234567" : null,
                device_check_private_key:
                  project === served
                    ? secretBox.seal(Buffer.from(apple.privateKeyPem), deviceCheckKeyAad(project.id))
                    : null,
                device_check_environment: "production",
                device_token_mode: "cached",
                output_schema: null,
                save_images_to_vault: 0,
                rate_limit_per_minute: null,
                device_rate_limit_per_minute: null,
                monthly_spend_cap_usd: project === capped ? 1 : null,
                disabled: 0,
                created_at: at,
                updated_at: at,
                ...since(3, { proxy_allow_list: null }),
              })
              .execute();
            const keyId = newKeyId();
            const split = splitProviderKey(keyId, project.providerKey);
            partialKeys[project.id] = split.partialKey;
            await db
              .insertInto("provider_keys")
              .values({
                id: keyId,
                project_id: project.id,
                provider: "provider-a",
                label: "old",
                server_share: secretBox.seal(split.serverShare, formerProviderKeyAad(project.id, keyId)),
                client_share_digest: split.clientShareDigest,
                created_at: at,
                revoked_at: null,
              })
              .execute();
            const testKey = generateTestKey();
            testKeys[project.id] = testKey;
            await db
              .insertInto("test_keys")
              .values({
                id: `tk${randomBytes(8).toString("hex")}`,
                project_id: project.id,
                digest: testKeyDigest(testKey),
                created_at: at,
              })
              .execute();
          }
          // A project with every setting away from its default, as that release stored it.
          await db
            .insertInto("projects")
            .values({
              id: "settings",
              name: "Every setting",
              team_id: "team_1",
              provider: "provider-b",
              model: "claude-sonnet-4-5",
              test_mode: 1,
              device_check_enabled: 1,
              device_check_team_id: "TEAM654321",
              device_check_key_id: "KEY7654321",
              device_check_private_key: secretBox.seal(
                Buffer.from(apple.privateKeyPem),
                deviceCheckKeyAad("settings"),
              ),
              device_check_environment: "development",
              device_token_mode: "single-use",
              output_schema: JSON.stringify(summarySchema),
              save_images_to_vault: 1,
              rate_limit_per_minute: 120,
              device_rate_limit_per_minute: 7,
              monthly_spend_cap_usd: 250.5,
              disabled: 0,
              created_at: at,
              updated_at: at,
              ...since(3, { proxy_allow_list: JSON.stringify({ "provider-b": ["POST messages"] }) }),
            })
            .execute();
          const settingsKeyId = newKeyId();
          const settingsSplit = splitProviderKey(settingsKeyId, settings.providerKey);
          partialKeys.settings = settingsSplit.partialKey;
          await db
            .insertInto("provider_keys")
            .values({
              id: settingsKeyId,
              project_id: "settings",
              provider: "provider-b",
              label: null,
              server_share: secretBox.seal(
                settingsSplit.serverShare,
                formerProviderKeyAad("settings", settingsKeyId),
              ),
              client_share_digest: settingsSplit.clientShareDigest,
              created_at: at,
              revoked_at: null,
            })
            .execute();
          testKeys.settings = generateTestKey();
          await db
            .insertInto("test_keys")
            .values({
              id: `tk${randomBytes(8).toString("hex")}`,
              project_id: "settings",
              digest: testKeyDigest(testKeys.settings),
              created_at: at,
            })
            .execute();
          const usage = (projectId: string, index: number, costUsd: number) => ({
            request_id: `old-${projectId}-${index}`,
            project_id: projectId,
            key_id: null,
            endpoint: "proxy",
            provider: "provider-a",
            model: "gpt-4o",
            status: 200,
            error_code: null,
            input_tokens: 1000,
            output_tokens: 500,
            cached_tokens: 0,
            reasoning_tokens: 0,
            cost_usd: costUsd,
            latency_ms: 12.5,
            ttfb_ms: 3.5,
            streamed: 0,
            outcome: "ok",
            auth_method: "test-key",
            client_ip: "203.0.113.7",
            // After the project's creation by more than the call's length: a call begun before it
            // would be a project's deleted under the id, in neither the report nor the cap.
            created_at: new Date(Date.parse(at) + 100).toISOString(),
            ...since(4, { requests: 1 }),
          });
          await db
            .insertInto("usage_records")
            .values([usage("served", 1, 0.25), usage("served", 2, 0.5), usage("capped", 1, 2)])
            .execute();
        } finally {
          await db.destroy();
        }

        const sluice = await startTestGateway(
          { ...database.settings, masterKey: masterKey.toString("base64"), ...providerBaseUrls(fake) },
          { now },
        );
        try {
          // Migrated to the end, the old rows kept.
          const { rows } = await sql<{
            name: string;
          }>`select name from sluice_migrations order by name`.execute(sluice.gateway.database.db);
          expect(rows.map((row) => row.name)).toEqual(Object.keys(migrations(database.engine)));
          const project = await createProjectRepository(sluice.gateway.database.db).get("served");
          expect(project).toMatchObject({
            proxyAllowList: null,
            deviceCheck: { enabled: true, teamId: "TEAM123456", keyId: "KEY1234567", changedAt: null },
          });
          const sealed = project?.deviceCheck.sealedPrivateKey ?? "";
          expect(secretBox.open(sealed, deviceCheckKeyAad("served")).toString()).toBe(apple.privateKeyPem);

          // The project serves: its partial key opens to the provider key, its test key is taken.
          const requestsBefore = fake.requests.length;
          const answer = await proxiedChat(sluice.url, {
            projectId: "served",
            bearer: `${partialKeys.served}.${testKeys.served}`,
          });
          expect(answer.status).toBe(200);
          expect(fake.requests[requestsBefore]?.headers.authorization).toBe(`Bearer ${served.providerKey}`);
          const fresh = await usageRowOf(sluice.gateway, answer);

          // The usage report counts the old rows and their cost beside the new one.
          const report = await sluice.gateway.admin.usageReport("served", { groupBy: "model" });
          const gpt4o = report.rows.filter((row) => row.group === "gpt-4o");
          expect(gpt4o.map((row) => row.requests)).toEqual([2]);
          expect(gpt4o.map((row) => row.inputTokens)).toEqual([2000]);
          expect(gpt4o.map((row) => row.costUsd)).toEqual([0.75]);
          expect(report.rows.reduce((sum, row) => sum + row.requests, 0)).toBe(3);
          expect(fresh.requests).toBe(1);

          // The spend cap sees the old row's cost: the capped project is refused before any call.
          const refused = await proxiedChat(sluice.url, {
            projectId: "capped",
            bearer: `${partialKeys.capped}.${testKeys.capped}`,
          });
          expect(refused.status).toBe(403);
          expect(((await refused.json()) as { error: { message: string } }).error.message).toContain(
            "monthly spend cap of 1 USD",
          );
          expect(fake.requests).toHaveLength(requestsBefore + 1);

          // Every setting reads back as stored, and the project serves structured analysis on its
          // provider with its schema.
          expect(await sluice.gateway.admin.getProject("settings")).toEqual({
            id: "settings",
            name: "Every setting",
            teamId: "team_1",
            provider: "provider-b",
            model: "claude-sonnet-4-5",
            testMode: true,
            deviceCheck: {
              enabled: true,
              teamId: "TEAM654321",
              keyId: "KEY7654321",
              hasPrivateKey: true,
              environment: "development",
              tokenMode: "single-use",
              changedAt: null,
            },
            outputSchema: summarySchema,
            saveImagesToVault: true,
            rateLimits: { perMinute: 120, devicePerMinute: 7 },
            monthlySpendCapUsd: 250.5,
            proxyAllowList: level >= 3 ? { "provider-b": ["POST messages"] } : null,
            disabled: false,
            createdAt: at,
            updatedAt: at,
          });
          fake.setStructuredOutput({ summary: "kept" });
          const structuredBefore = fake.requests.length;
          const structured = await fetch(`${sluice.url}/v1/text/settings`, {
            method: "POST",
            headers: {
              authorization: `Bearer ${partialKeys.settings}.${testKeys.settings}`,
              "content-type": "application/json",
            },
            body: JSON.stringify({ text: "Sluice is a gateway." }),
          });
          expect(structured.status).toBe(200);
          expect(await structured.json()).toEqual({ summary: "kept" });
          expect(fake.requests[structuredBefore]?.headers["x-api-key"]).toBe(settings.providerKey);
          expect(structured.headers.get("ratelimit-policy")).toContain('"project";q=120;w=60');
        } finally {
          await sluice.close();
          await database.drop();
        }
      },
    );
  });
}
