import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { storageEngines } from "../../test/support/storage-engines.js";
import { usageRow } from "../../test/support/usage-row.js";
import { storedModelName } from "../usage/stored-model-name.js";
import { type OpenDatabase, sqliteCacheKiB } from "./database.js";
import { createKeyRepository } from "./key-repository.js";
import { sql } from "./kysely.js";
import { createProjectRepository, type Project } from "./project-repository.js";
import {
  countsAsUnpriced,
  createUsageRepository,
  type SpendSince,
  type UsageRecord,
} from "./usage-repository.js";

const project = (id: string): Project => ({
  id,
  name: `Project ${id}`,
  teamId: "TEAM1",
  provider: "provider-a",
  model: null,
  testMode: true,
  deviceCheck: {
    enabled: false,
    teamId: null,
    keyId: null,
    sealedPrivateKey: null,
    environment: "development",
    tokenMode: "cached",
    changedAt: "2026-11-01T00:00:01.000Z",
  },
  outputSchema: { type: "object", properties: { a: { type: "string" } }, required: ["a"] },
  saveImagesToVault: false,
  rateLimits: { perMinute: 10, devicePerMinute: null },
  monthlySpendCapUsd: 12.5,
  proxyAllowList: { "provider-a": ["POST chat/completions", "GET responses/*"], "provider-c": [] },
  disabled: false,
  createdAt: "2026-11-01T00:00:00.000Z",
  updatedAt: "2026-11-01T00:00:00.000Z",
});

const usage = usageRow;

/** Rotations keeping the newest two keys and no others (no window): the order of the keys alone. */
const newestTwo = { newest: 2, withinMs: 0 };

for (const engine of storageEngines) {
  describe.skipIf(!engine.available)(`storage contract on ${engine.name}`, () => {
    let database: OpenDatabase;
    let cleanup: () => Promise<void>;

    beforeAll(async () => {
      ({ database, cleanup } = await engine.open());
    });
    afterAll(async () => {
      await database.close();
      await cleanup();
    });

    it("applies migrations idempotently and answers a ping", async () => {
      await expect(database.ping()).resolves.toBeUndefined();
    });

    it("stores, reads, updates, lists and deletes projects with every field intact", async () => {
      const projects = createProjectRepository(database.db);
      await projects.insert(project("p1"));
      await projects.insert(project("p2"));
      expect(await projects.get("p1")).toEqual(project("p1"));
      expect(await projects.get("missing")).toBeNull();
      const changed = {
        ...project("p2"),
        testMode: false,
        outputSchema: null,
        monthlySpendCapUsd: null,
        proxyAllowList: null,
        deviceCheck: { ...project("p2").deviceCheck, changedAt: null },
      };
      await projects.update(changed);
      expect(await projects.get("p2")).toEqual(changed);
      expect((await projects.list()).map((p) => p.id)).toEqual(["p1", "p2"]);
      expect(await projects.delete("p2")).toBe(true);
      expect(await projects.delete("p2")).toBe(false);
    });

    it("stores a proxy allow-list as saved: its rules in order, an empty list of a provider, an empty list, none", async () => {
      const projects = createProjectRepository(database.db);
      const rules = {
        "provider-b": ["POST messages", "POST messages/count_tokens"],
        "provider-c": ["POST models/*:generateContent", "POST models/*:streamGenerateContent"],
        "provider-a": [],
      };
      await projects.insert({ ...project("allow-list"), proxyAllowList: rules });
      expect((await projects.get("allow-list"))?.proxyAllowList).toEqual(rules);
      for (const proxyAllowList of [{}, null, rules]) {
        const stored = await projects.get("allow-list");
        await projects.update({ ...stored!, proxyAllowList });
        expect((await projects.get("allow-list"))?.proxyAllowList).toEqual(proxyAllowList);
      }
      expect(await projects.delete("allow-list")).toBe(true);
    });

    it("bounds the embedded engine's page cache to SQLite's stock 2 MiB (RSS budget; nothing to do on Postgres)", () => {
      // By the engine, not by the handle: a SQLite database without its handle would check nothing.
      if (engine.name === "PostgreSQL") {
        expect(database.sqlite).toBeUndefined();
        return;
      }
      expect(database.sqlite?.pragma("cache_size", { simple: true })).toBe(-sqliteCacheKiB);
    });

    it("refuses a second project with the same id and leaves the first as it was", async () => {
      const projects = createProjectRepository(database.db);
      const before = await projects.get("p1");
      expect(await projects.insert({ ...project("p1"), name: "impostor" })).toBe(false);
      expect(await projects.get("p1")).toEqual(before);
      expect(await projects.insert(project("p3"))).toBe(true);
    });

    // The admin API's project list answers pages (docs/decisions/0029): the first `limit` projects
    // in creation order, ids in code points breaking a tie, and `after` a project the ones after it.
    // The order must be one on both engines (a database's own collation may put `B` after `ab`).
    it("lists `limit` projects at most, and `after` a project the ones after it, in one order on both engines", async () => {
      const projects = createProjectRepository(database.db);
      const tied = "2031-01-01T00:00:00.000Z";
      const ids = ["ab", "B", "a_b", "a", "a-b", "Z9"];
      for (const id of ids)
        await projects.insert({ ...project(`page-${id}`), createdAt: tied, updatedAt: tied });
      await projects.insert({
        ...project("page-0-earlier"),
        createdAt: "2030-12-31T23:59:59.999Z",
        updatedAt: "2030-12-31T23:59:59.999Z",
      });
      await projects.insert({
        ...project("page-0-later"),
        createdAt: "2031-01-01T00:00:00.001Z",
        updatedAt: "2031-01-01T00:00:00.001Z",
      });
      const after = { createdAt: "2030-12-31T23:59:59.998Z", id: "zzz" };
      const expected = [
        "page-0-earlier",
        ...["page-B", "page-Z9", "page-a", "page-a-b", "page-a_b", "page-ab"],
        "page-0-later",
      ];
      const all = await projects.list({ limit: 100, after });
      expect(all.map((stored) => stored.id)).toEqual(expected);
      // Each project whole, as `get` reads it.
      expect(all[0]).toEqual(await projects.get("page-0-earlier"));
      const pages: string[][] = [];
      let position = after;
      for (;;) {
        const page = await projects.list({ limit: 3, after: position });
        expect(page.length).toBeLessThanOrEqual(3);
        if (page.length === 0) break;
        pages.push(page.map((stored) => stored.id));
        const last = page[page.length - 1] as Project;
        position = { createdAt: last.createdAt, id: last.id };
      }
      expect(pages).toEqual([expected.slice(0, 3), expected.slice(3, 6), expected.slice(6)]);
      expect((await projects.list({ limit: 2 })).map((stored) => stored.id)).toEqual(
        (await projects.list()).slice(0, 2).map((stored) => stored.id),
      );
      for (const id of expected) await projects.delete(id);
    });

    // A production start names the projects still in Test Mode: their ids alone, not every project
    // read whole (20,000 projects of 4 KB schemas: 960 ms and 220 MB more at each start).
    it("answers the ids of the projects in Test Mode, in the list's order", async () => {
      const projects = createProjectRepository(database.db);
      const at = (second: number) => `2032-01-01T00:00:0${second}.000Z`;
      const created = [
        { id: "tm-b", testMode: true, createdAt: at(1) },
        { id: "tm-off", testMode: false, createdAt: at(1) },
        { id: "tm-a", testMode: true, createdAt: at(2) },
        { id: "tm-c", testMode: true, createdAt: at(0) },
      ];
      for (const { id, testMode, createdAt } of created)
        await projects.insert({ ...project(id), testMode, createdAt, updatedAt: createdAt });
      const ids = await projects.idsInTestMode();
      expect(ids.filter((id) => id.startsWith("tm-"))).toEqual(["tm-c", "tm-b", "tm-a"]);
      const listed = (await projects.list()).filter((stored) => stored.testMode).map((stored) => stored.id);
      expect(ids).toEqual(listed);
      for (const { id } of created) await projects.delete(id);
    });

    it("stores provider keys, lists them and revokes one once", async () => {
      const keys = createKeyRepository(database.db);
      const record = {
        id: "key000000001",
        projectId: "p1",
        provider: "provider-a" as const,
        label: "main",
        sealedServerShare: "v1.sealed",
        clientShareDigest: "ab".repeat(32),
        createdAt: "2026-11-01T00:00:00.000Z",
        revokedAt: null,
      };
      await keys.insertProviderKey(record);
      expect(await keys.getProviderKey(record.id)).toEqual(record);
      expect(await keys.listProviderKeys("p1")).toEqual([record]);
      expect(await keys.revokeProviderKey("p1", record.id, "2026-11-03T00:00:00.000Z")).toBe(true);
      expect(await keys.revokeProviderKey("p1", record.id, "2026-11-04T00:00:00.000Z")).toBe(false);
      expect((await keys.getProviderKey(record.id))?.revokedAt).toBe("2026-11-03T00:00:00.000Z");
    });

    // A delete that fails part way (a database blip, another process's lock past its wait, here a
    // trigger that refuses the project's row) deleted the keys and kept the project: a project left
    // with no keys, its calls refused, though its delete had failed.
    it("deletes a project with its keys in one transaction: a delete that fails leaves both", async () => {
      const projects = createProjectRepository(database.db);
      const keys = createKeyRepository(database.db);
      const id = "delete-whole";
      await projects.insert(project(id));
      await keys.insertProviderKey({
        id: "keydelwhole1",
        projectId: id,
        provider: "provider-a",
        label: "main",
        sealedServerShare: "v1.sealed",
        clientShareDigest: "cd".repeat(32),
        createdAt: "2026-11-01T00:00:00.000Z",
        revokedAt: null,
      });
      await keys.addTestKey(
        { id: "tdelwhole", projectId: id, digest: "dw", createdAt: "2026-11-01T00:00:00.000Z" },
        newestTwo,
      );
      const refuse =
        database.engine === "sqlite"
          ? [
              sql`create trigger refuse_delete before delete on projects when old.id = ${sql.lit(id)} begin select raise(abort, 'refused'); end`,
            ]
          : [
              sql`create function refuse_delete() returns trigger language plpgsql as $$ begin if old.id = ${sql.lit(id)} then raise exception 'refused'; end if; return old; end $$`,
              sql`create trigger refuse_delete before delete on projects for each row execute function refuse_delete()`,
            ];
      for (const statement of refuse) await statement.execute(database.db);
      try {
        await expect(projects.delete(id)).rejects.toThrow(/refused/);
        expect(await projects.get(id)).not.toBeNull();
        expect((await keys.listProviderKeys(id)).map((key) => key.id)).toEqual(["keydelwhole1"]);
        expect((await keys.listTestKeys(id)).map((key) => key.id)).toEqual(["tdelwhole"]);
      } finally {
        await sql`drop trigger refuse_delete${database.engine === "sqlite" ? sql`` : sql` on projects`}`.execute(
          database.db,
        );
        if (database.engine === "postgres") await sql`drop function refuse_delete()`.execute(database.db);
      }
      expect(await projects.delete(id)).toBe(true);
      expect(await keys.listProviderKeys(id)).toEqual([]);
      expect(await keys.listTestKeys(id)).toEqual([]);
    });

    it("keeps only the newest two test keys on rotation", async () => {
      const keys = createKeyRepository(database.db);
      for (const [index, id] of ["t1", "t2", "t3"].entries()) {
        await keys.addTestKey(
          { id, projectId: "p1", digest: `d${index}`, createdAt: `2026-11-0${index + 1}T00:00:00.000Z` },
          newestTwo,
        );
      }
      expect((await keys.listTestKeys("p1")).map((key) => key.id)).toEqual(["t3", "t2"]);
      expect(await keys.deleteTestKey("p1", "t2")).toBe(true);
      expect((await keys.listTestKeys("p1")).map((key) => key.id)).toEqual(["t3"]);
    });

    it("keeps the key a rotation issues though its clock is behind the stored keys' (another instance's)", async () => {
      const keys = createKeyRepository(database.db);
      const add = (id: string, createdAt: string) =>
        keys.addTestKey({ id, projectId: "p1", digest: id, createdAt }, newestTwo);
      for (const key of await keys.listTestKeys("p1")) await keys.deleteTestKey("p1", key.id);
      await add("ahead1", "2026-11-05T00:00:02.000Z");
      await add("ahead2", "2026-11-05T00:00:03.000Z");
      await add("behind", "2026-11-05T00:00:01.000Z");
      // Before, "behind" sorted last and was deleted by its own rotation, which kept the oldest.
      expect((await keys.listTestKeys("p1")).map((key) => key.id)).toEqual(["behind", "ahead2"]);
    });

    it("keeps the newest two test keys when rotations are stamped in the same millisecond", async () => {
      const keys = createKeyRepository(database.db);
      for (const key of await keys.listTestKeys("p1")) await keys.deleteTestKey("p1", key.id);
      // Ids that sort against the order of issue: the one kept must be the later issued, not the larger id.
      for (const id of ["z1", "y2", "x3"])
        await keys.addTestKey(
          { id, projectId: "p1", digest: id, createdAt: "2026-11-05T00:00:00.000Z" },
          newestTwo,
        );
      expect((await keys.listTestKeys("p1")).map((key) => key.id)).toEqual(["x3", "y2"]);
    });

    it("writes usage batches without duplicating a request id and reports by day, model and endpoint", async () => {
      const records = createUsageRepository(database.db, database.sqlite);
      const batch = [
        usage("r1"),
        usage("r2", {
          model: "gpt-4o",
          endpoint: "text",
          cost_usd: null,
          outcome: "error",
          status: 502,
          input_tokens: null,
          output_tokens: null,
          cached_tokens: null,
          reasoning_tokens: null,
        }),
        usage("r3", { created_at: "2026-11-03T08:00:00.000Z", input_tokens: 100, cost_usd: 0.5 }),
      ];
      await records.insertBatch(batch);
      await records.insertBatch(batch);
      expect(await records.count("p1")).toBe(3);
      const window = { projectId: "p1", from: "2026-11-01T00:00:00.000Z", to: "2026-12-01T00:00:00.000Z" };
      const byDay = await records.report({ limit: 100, ...window, groupBy: "day" });
      expect(byDay).toEqual([
        {
          group: "2026-11-02",
          requests: 2,
          errors: 1,
          inputTokens: 10,
          outputTokens: 5,
          cachedTokens: 2,
          reasoningTokens: 0,
          costUsd: 0.001,
          // r2's error cost nothing (no tokens): it is not a call whose cost is unknown.
          unpricedRequests: 0,
        },
        {
          group: "2026-11-03",
          requests: 1,
          errors: 0,
          inputTokens: 100,
          outputTokens: 5,
          cachedTokens: 2,
          reasoningTokens: 0,
          costUsd: 0.5,
          unpricedRequests: 0,
        },
      ]);
      const byModel = await records.report({ limit: 100, ...window, groupBy: "model" });
      expect(byModel.map((row) => [row.group, row.requests, row.costUsd])).toEqual([
        ["gpt-4o", 1, null],
        ["gpt-4o-mini", 2, 0.501],
      ]);
      const byEndpoint = await records.report({ limit: 100, ...window, groupBy: "endpoint" });
      expect(byEndpoint.map((row) => [row.group, row.requests])).toEqual([
        ["proxy", 2],
        ["text", 1],
      ]);
      expect((await records.spendSince("p1", "2026-11-03T00:00:00.000Z")).totalUsd).toBeCloseTo(0.5, 9);
    });

    it("reports from `from` included to `to` excluded, and counts spend from `from` included", async () => {
      const records = createUsageRepository(database.db, database.sqlite);
      const from = "2026-11-01T00:00:00.000Z";
      const to = "2026-12-01T00:00:00.000Z";
      await records.insertBatch([
        usage("b-before", { project_id: "bounds", created_at: "2026-10-31T23:59:59.999Z", cost_usd: 10 }),
        usage("b-from", { project_id: "bounds", created_at: from, cost_usd: 1 }),
        usage("b-inside", { project_id: "bounds", created_at: "2026-11-15T00:00:00.000Z", cost_usd: 2 }),
        usage("b-to", { project_id: "bounds", created_at: to, cost_usd: 100 }),
      ]);
      const report = await records.report({ limit: 100, projectId: "bounds", from, to, groupBy: "endpoint" });
      expect(report.map((row) => [row.requests, row.costUsd])).toEqual([[2, 3]]);
      expect((await records.spendSince("bounds", from)).totalUsd).toBeCloseTo(103, 9);
    });

    // A project deleted and created again under its id: a call of the deleted one that ended after
    // the creation has its row stamped then, but began before (its `latency_ms` before its time).
    it("leaves out, read from a project's creation, the rows of calls begun before it", async () => {
      const records = createUsageRepository(database.db, database.sqlite);
      const created = "2026-11-10T12:00:00.000Z";
      const to = "2026-12-01T00:00:00.000Z";
      const row = (id: string, createdAt: string, latencyMs: number, costUsd: number | null) =>
        usage(id, {
          project_id: "begun",
          created_at: createdAt,
          latency_ms: latencyMs,
          cost_usd: costUsd,
          output_tokens: 1,
        });
      await records.insertBatch([
        // Began 9.95 s before the creation, ended 50 ms after: the deleted project's call.
        row("g-old", "2026-11-10T12:00:00.050Z", 10_000, 7),
        // Began 1 ms before it: still the deleted project's (a row's time is cut to the millisecond).
        row("g-old-close", "2026-11-10T12:00:00.100Z", 101, 5),
        row("g-old-unpriced", "2026-11-10T12:00:00.200Z", 60_000, null),
        // Began at the creation and after: the new project's.
        row("g-new-at", "2026-11-10T12:00:00.100Z", 100, 0.25),
        row("g-new", "2026-11-10T12:00:05.000Z", 2_000.5, 1.5),
        row("g-new-unpriced", "2026-11-11T00:00:00.000Z", 30_000, null),
      ]);
      const read = await records.spendSince("begun", created, undefined, true);
      expect(read).toMatchObject({ totalUsd: 1.75, largestUsd: 1.5, unpricedCalls: 1 });
      // From the month's start (not a creation), every row counts.
      expect(await records.spendSince("begun", "2026-11-01T00:00:00.000Z")).toMatchObject({
        totalUsd: 13.75,
        largestUsd: 7,
        unpricedCalls: 2,
      });
      const report = await records.report({
        limit: 100,
        projectId: "begun",
        from: created,
        to,
        begunFrom: created,
        groupBy: "endpoint",
      });
      expect(report.map((group) => [group.requests, group.costUsd, group.unpricedRequests])).toEqual([
        [3, 1.75, 1],
      ]);
      // A window that starts after the creation leaves them out as well.
      const later = await records.report({
        limit: 100,
        projectId: "begun",
        from: "2026-11-10T12:00:00.150Z",
        to,
        begunFrom: created,
        groupBy: "endpoint",
      });
      expect(later.map((group) => [group.requests, group.costUsd, group.unpricedRequests])).toEqual([
        [2, 1.5, 1],
      ]);
      // Carried on from the last read (SQLite's walk), as a full read leaves them out.
      await records.insertBatch([
        row("g-old-later", "2026-11-10T12:10:00.000Z", 3_600_000, 20),
        row("g-new-later", "2026-11-10T12:10:00.000Z", 1_000, 0.5),
      ]);
      const carried = await records.spendSince("begun", created, read.next, true);
      const full = await createUsageRepository(database.db, database.sqlite).spendSince(
        "begun",
        created,
        undefined,
        true,
      );
      expect(carried).toMatchObject({ totalUsd: 2.25, largestUsd: 1.5, unpricedCalls: 1 });
      expect(full).toMatchObject({ totalUsd: 2.25, largestUsd: 1.5, unpricedCalls: 1 });
    });

    // The spend cap counts each call in flight at the largest cost of one call of the month: a
    // gateway just started reads it with the month's spend, in the same statement.
    it("reads with the spend the largest cost of one of the project's rows since `from`", async () => {
      const records = createUsageRepository(database.db, database.sqlite);
      const from = "2026-11-01T00:00:00.000Z";
      expect(await records.spendSince("largest", from)).toMatchObject({ totalUsd: 0, largestUsd: 0 });
      await records.insertBatch([
        usage("l-before", { project_id: "largest", created_at: "2026-10-31T23:59:59.999Z", cost_usd: 50 }),
        usage("l-other", {
          project_id: "largest-other",
          created_at: "2026-11-10T00:00:00.000Z",
          cost_usd: 40,
        }),
        usage("l-unpriced", {
          project_id: "largest",
          created_at: "2026-11-12T00:00:00.000Z",
          cost_usd: null,
        }),
      ]);
      // Rows, but no known cost: none.
      expect(await records.spendSince("largest", from)).toMatchObject({ totalUsd: 0, largestUsd: 0 });
      await records.insertBatch([
        usage("l-small", { project_id: "largest", created_at: from, cost_usd: 0.25 }),
        usage("l-large", { project_id: "largest", created_at: "2026-11-15T00:00:00.000Z", cost_usd: 12.5 }),
        usage("l-middle", { project_id: "largest", created_at: "2026-11-20T00:00:00.000Z", cost_usd: 3 }),
      ]);
      const read = await records.spendSince("largest", from);
      expect(read.totalUsd).toBeCloseTo(15.75, 9);
      expect(read.largestUsd).toBe(12.5);
    });

    // The spend cap counts each call of unknown cost at an estimate (decision 0057): the read counts
    // them with the spend, in the same statement, as the usage report's `unpricedRequests` does.
    it("reads with the spend the calls of unknown cost the usage report counts as unpriced", async () => {
      const records = createUsageRepository(database.db, database.sqlite);
      const from = "2026-11-01T00:00:00.000Z";
      const to = "2026-12-01T00:00:00.000Z";
      const none = { input_tokens: null, output_tokens: null, cached_tokens: null, reasoning_tokens: null };
      const at = "2026-11-12T00:00:00.000Z";
      const row = (id: string, overrides: Partial<UsageRecord>) =>
        usage(id, { project_id: "unknown-cost", created_at: at, cost_usd: null, ...overrides });
      expect(await records.spendSince("unknown-cost", from)).toMatchObject({ totalUsd: 0, unpricedCalls: 0 });
      await records.insertBatch([
        // Counted: went through without a price (ok, cut short), or failed but reports billed tokens.
        row("n-ok", {}),
        row("n-aborted", { outcome: "aborted", status: 499, ...none }),
        row("n-failed-billed", { outcome: "error", status: 502, input_tokens: null, output_tokens: 7 }),
        row("n-coalesced-ok", { requests: 3 }),
        // Not counted: a refusal or failure without tokens, a known cost (0 included), another
        // project's, or one before `from`.
        row("n-refused", { outcome: "error", status: 429, requests: 41, ...none }),
        row("n-priced", { cost_usd: 0.5 }),
        row("n-free", { cost_usd: 0 }),
        row("n-other", { project_id: "unknown-cost-other" }),
        row("n-before", { created_at: "2026-10-31T23:59:59.999Z" }),
      ]);
      const read = await records.spendSince("unknown-cost", from);
      expect(read).toMatchObject({ totalUsd: 0.5, largestUsd: 0.5, unpricedCalls: 6 });
      const report = await records.report({
        limit: 100,
        projectId: "unknown-cost",
        from,
        to,
        groupBy: "day",
      });
      expect(report.map((day) => day.unpricedRequests)).toEqual([read.unpricedCalls]);
      // Carried on from the last read (SQLite's walk), as a full read counts them.
      await records.insertBatch([
        row("n-later", { created_at: "2026-11-20T00:00:00.000Z" }),
        row("n-late", {}),
      ]);
      const carried = await records.spendSince("unknown-cost", from, read.next);
      const full = await createUsageRepository(database.db, database.sqlite).spendSince("unknown-cost", from);
      expect(carried).toMatchObject({ totalUsd: 0.5, unpricedCalls: 8 });
      expect(full).toMatchObject({ totalUsd: 0.5, unpricedCalls: 8 });
      // A project's walk counts only its own, from its own span's start.
      const other = await records.spendSince("unknown-cost-other", from);
      expect(other).toMatchObject({ totalUsd: 0, unpricedCalls: 1 });
      expect(
        await records.spendSince("unknown-cost", "2026-11-15T00:00:00.000Z", carried.next),
      ).toMatchObject({
        unpricedCalls: 1,
      });
    });

    // SQLite carries a read on from the last one's mark (the rows written since, by rowid);
    // PostgreSQL reads the span whole. Either way, the figures a full read gives, exactly.
    it("answers a spend read carried on from the last one as a full read does, whatever was written since", async () => {
      const records = createUsageRepository(database.db, database.sqlite);
      const from = "2026-11-01T00:00:00.000Z";
      const rows: UsageRecord[] = [];
      const write = async (...batch: UsageRecord[]) => {
        rows.push(...batch);
        await records.insertBatch(batch);
      };
      let last = await records.spendSince("carried", from);
      expect(last).toMatchObject({ totalUsd: 0, largestUsd: 0 });
      const step = async (totalUsd: number, largestUsd: number) => {
        const carried = await records.spendSince("carried", from, last.next);
        const full = await records.spendSince("carried", from);
        expect([carried.totalUsd, carried.largestUsd]).toEqual([totalUsd, largestUsd]);
        expect([full.totalUsd, full.largestUsd]).toEqual([totalUsd, largestUsd]);
        last = carried;
      };
      await write(
        usage("c-1", { project_id: "carried", created_at: "2026-11-10T00:00:00.000Z", cost_usd: 0.1 }),
      );
      await step(0.1, 0.1);
      await write(
        usage("c-2", { project_id: "carried", created_at: "2026-11-09T00:00:00.000Z", cost_usd: 0.2 }),
        usage("c-before", { project_id: "carried", created_at: "2026-10-31T23:59:59.999Z", cost_usd: 30 }),
        usage("c-other", {
          project_id: "carried-other",
          created_at: "2026-11-10T00:00:00.000Z",
          cost_usd: 40,
        }),
        usage("c-unpriced", {
          project_id: "carried",
          created_at: "2026-11-10T00:00:00.000Z",
          cost_usd: null,
        }),
      );
      await step(0.3, 0.2);
      // A batch written again: its rows are stored already, and one new.
      await records.insertBatch([
        ...rows.slice(0, 2),
        usage("c-3", { project_id: "carried", created_at: from, cost_usd: 0.000000001 }),
      ]);
      await step(0.300000001, 0.2);
      await step(0.300000001, 0.2);
      // The table's last written row deleted (an old one: retention), its rowid given again.
      await write(
        usage("c-old", { project_id: "carried", created_at: "2026-07-01T00:00:00.000Z", cost_usd: 9 }),
      );
      await step(0.300000001, 0.2);
      await database.db.deleteFrom("usage_records").where("request_id", "=", "c-old").execute();
      await write(
        usage("c-4", { project_id: "carried", created_at: "2026-11-11T00:00:00.000Z", cost_usd: 2.5 }),
      );
      await step(2.800000001, 2.5);
      // A mark of another span or project is not carried on from.
      const other = await records.spendSince("carried-other", from);
      expect(await records.spendSince("carried", from, other.next)).toMatchObject({
        totalUsd: 2.800000001,
        largestUsd: 2.5,
      });
      const later = await records.spendSince("carried", "2026-11-10T00:00:00.000Z", last.next);
      expect([later.totalUsd, later.largestUsd]).toEqual([2.6, 2.5]);
    });

    // SQLite walks the rows written since once for every project it carries a figure on for; each
    // project's read must still answer what a full read of its own span answers.
    it("answers several projects' spend reads carried on from their last ones as full reads do, whichever read walked the rows", async () => {
      const records = createUsageRepository(database.db, database.sqlite);
      const from = "2026-11-01T00:00:00.000Z";
      // Created again mid-month: rows of the id from before then are the old project's.
      const bFrom = "2026-11-15T00:00:00.000Z";
      const cost = (id: string, project: string, createdAt: string, usd: number | null) =>
        usage(id, { project_id: project, created_at: createdAt, cost_usd: usd });
      let a = await records.spendSince("walk-a", from);
      let b = await records.spendSince("walk-b", bFrom);
      /** A read carried on from the last, the same as another repository's full read, and `expected`. */
      const carried = async (
        project: string,
        since: string,
        last: SpendSince,
        expected: [number, number],
      ) => {
        const read = await records.spendSince(project, since, last.next);
        const full = await createUsageRepository(database.db, database.sqlite).spendSince(project, since);
        expect([read.totalUsd, read.largestUsd], project).toEqual(expected);
        expect([full.totalUsd, full.largestUsd], project).toEqual(expected);
        return read;
      };
      const batch = [
        cost("w-a1", "walk-a", "2026-11-10T00:00:00.000Z", 0.1),
        cost("w-a-last-month", "walk-a", "2026-10-31T23:59:59.999Z", 7),
        cost("w-b1", "walk-b", "2026-11-16T00:00:00.000Z", 0.2),
        cost("w-b-old", "walk-b", "2026-11-14T23:59:59.999Z", 5),
        cost("w-c1", "walk-c", "2026-11-10T00:00:00.000Z", 3),
      ];
      await records.insertBatch(batch);
      a = await carried("walk-a", from, a, [0.1, 0.1]);
      // Its rows walked with walk-a's read, and written since: a late row, one at its span's start.
      await records.insertBatch([
        ...batch,
        cost("w-b2", "walk-b", bFrom, 0.000000001),
        cost("w-b-late", "walk-b", "2026-11-15T00:00:00.001Z", 1),
        cost("w-b-unpriced", "walk-b", "2026-11-20T00:00:00.000Z", null),
      ]);
      b = await carried("walk-b", bFrom, b, [1.200000001, 1]);
      // A project read first now, while the others are carried on.
      let c = await records.spendSince("walk-c", from);
      expect([c.totalUsd, c.largestUsd]).toEqual([3, 3]);
      await records.insertBatch([
        cost("w-c2", "walk-c", "2026-11-02T00:00:00.000Z", 0.5),
        cost("w-a2", "walk-a", "2026-11-21T00:00:00.000Z", 2),
      ]);
      c = await carried("walk-c", from, c, [3.5, 3]);
      b = await carried("walk-b", bFrom, b, [1.200000001, 1]);
      a = await carried("walk-a", from, a, [2.1, 2]);
      // The table's last written row deleted (an old one: retention), its rowid given again.
      await records.insertBatch([cost("w-old", "walk-a", "2026-07-01T00:00:00.000Z", 9)]);
      a = await carried("walk-a", from, a, [2.1, 2]);
      await database.db.deleteFrom("usage_records").where("request_id", "=", "w-old").execute();
      await records.insertBatch([
        cost("w-a3", "walk-a", "2026-11-22T00:00:00.000Z", 0.25),
        cost("w-b3", "walk-b", "2026-11-22T00:00:00.000Z", 0.5),
      ]);
      a = await carried("walk-a", from, a, [2.35, 2]);
      b = await carried("walk-b", bFrom, b, [1.700000001, 1]);
      c = await carried("walk-c", from, c, [3.5, 3]);
      // The month's turn: another span, read whole, and carried on from there.
      const december = "2026-12-01T00:00:00.000Z";
      let next = await records.spendSince("walk-a", december, a.next);
      expect([next.totalUsd, next.largestUsd]).toEqual([0, 0]);
      await records.insertBatch([
        cost("w-a4", "walk-a", "2026-12-01T00:00:00.000Z", 4),
        cost("w-a-november", "walk-a", "2026-11-30T23:59:59.999Z", 8),
      ]);
      next = await carried("walk-a", december, next, [4, 4]);
      c = await carried("walk-c", from, c, [3.5, 3]);
    });

    it("counts as unpriced the calls that went through (ok or cut short) without a known cost, not errors", async () => {
      const records = createUsageRepository(database.db, database.sqlite);
      const none = { input_tokens: null, output_tokens: null, cached_tokens: null, reasoning_tokens: null };
      await records.insertBatch([
        usage("u1", { project_id: "unpriced", cost_usd: null }),
        usage("u2", { project_id: "unpriced", cost_usd: null, outcome: "aborted", status: 499, ...none }),
        usage("u3", { project_id: "unpriced", cost_usd: null, outcome: "error", status: 401, ...none }),
        usage("u4", { project_id: "unpriced", cost_usd: 0.25 }),
      ]);
      const [day] = await records.report({
        limit: 100,
        projectId: "unpriced",
        from: "2026-11-01T00:00:00.000Z",
        to: "2026-12-01T00:00:00.000Z",
        groupBy: "day",
      });
      expect(day).toMatchObject({ requests: 4, errors: 2, costUsd: 0.25, unpricedRequests: 2 });
    });

    // A failed call that reports tokens was billed for them: a structured call whose repair failed
    // too (502), on a model the catalogue has no price for. Before, it was left out as an error that
    // cost nothing, and the report passed its tokens off as free.
    it("counts as unpriced a failed call that reports tokens without a known cost", async () => {
      const records = createUsageRepository(database.db, database.sqlite);
      await records.insertBatch([
        usage("f1", {
          project_id: "failed-billed",
          endpoint: "text",
          cost_usd: null,
          outcome: "error",
          status: 502,
        }),
        usage("f2", {
          project_id: "failed-billed",
          cost_usd: null,
          outcome: "error",
          status: 502,
          input_tokens: null,
          output_tokens: 7,
          cached_tokens: null,
          reasoning_tokens: null,
        }),
        usage("f3", { project_id: "failed-billed", cost_usd: 0.002, outcome: "error", status: 502 }),
      ]);
      const [day] = await records.report({
        limit: 100,
        projectId: "failed-billed",
        from: "2026-11-01T00:00:00.000Z",
        to: "2026-12-01T00:00:00.000Z",
        groupBy: "day",
      });
      expect(day).toMatchObject({ requests: 3, errors: 3, costUsd: 0.002, unpricedRequests: 2 });
    });

    // A failed call the provider answered with a success (2xx) was billed, though Sluice could not
    // read the answer (past SLUICE_MAX_PROVIDER_RESPONSE_BYTES, cut short): its row has no tokens,
    // as a refusal's has not, and only `provider_answered` tells the two apart. Before, it counted
    // nothing toward the cap.
    it("counts as unpriced a failed call without tokens that the provider answered with a success", async () => {
      const records = createUsageRepository(database.db, database.sqlite);
      const none = { input_tokens: null, output_tokens: null, cached_tokens: null, reasoning_tokens: null };
      const failed = { project_id: "answered", cost_usd: null, outcome: "error", status: 502, ...none };
      const rows = [
        usage("a1", { ...failed, endpoint: "image", provider_answered: 1 }),
        usage("a2", { ...failed, endpoint: "proxy", status: 200, provider_answered: 1 }),
        // A refusal, a failure the provider answered otherwise, a build before 0008's row: nothing.
        usage("a3", { ...failed, status: 401, provider_answered: null }),
        usage("a4", { ...failed, endpoint: "image" }),
        // Its cost known: counted at it, not as unpriced.
        usage("a5", { ...failed, cost_usd: 0.04, provider_answered: 1 }),
      ];
      const from = "2026-11-01T00:00:00.000Z";
      // On SQLite, a read carried on from one before the rows were written adds them by its walk.
      const before = await records.spendSince("answered", from);
      await records.insertBatch(rows);
      const [day] = await records.report({
        limit: 100,
        projectId: "answered",
        from,
        to: "2026-12-01T00:00:00.000Z",
        groupBy: "day",
      });
      expect(day).toMatchObject({ requests: 5, errors: 5, costUsd: 0.04, unpricedRequests: 2 });
      expect(await records.spendSince("answered", from)).toMatchObject({ totalUsd: 0.04, unpricedCalls: 2 });
      expect(await records.spendSince("answered", from, before.next)).toMatchObject({
        totalUsd: 0.04,
        unpricedCalls: 2,
      });
      expect(rows.filter(countsAsUnpriced).map((row) => row.request_id)).toEqual(["a1", "a2"]);
    });

    // A structured call whose repair's answer was not read: its row keeps the first attempt's tokens
    // and cost, and says by `provider_answered` 2 that a billed part of it is of unknown cost. Both
    // count: the cost as known, the row as a call of unknown cost (decision 0057, amended).
    it("counts a row of a known cost and a part unknown at its cost and as unpriced both", async () => {
      const records = createUsageRepository(database.db, database.sqlite);
      const failed = { project_id: "partly", outcome: "error", status: 502, endpoint: "text" };
      const rows = [
        usage("p1", {
          ...failed,
          cost_usd: 0.3,
          input_tokens: 400_000,
          output_tokens: 0,
          provider_answered: 2,
        }),
        // Its first attempt's cost unknown too: counted once, as unpriced.
        usage("p2", { ...failed, cost_usd: null, input_tokens: 10, output_tokens: 5, provider_answered: 2 }),
        usage("p3", { ...failed, cost_usd: 0.04, provider_answered: 1 }),
      ];
      const from = "2026-11-01T00:00:00.000Z";
      const before = await records.spendSince("partly", from);
      await records.insertBatch(rows);
      const [day] = await records.report({
        limit: 100,
        projectId: "partly",
        from,
        to: "2026-12-01T00:00:00.000Z",
        groupBy: "day",
      });
      expect(day).toMatchObject({ requests: 3, costUsd: 0.34, unpricedRequests: 2 });
      const read = { totalUsd: 0.34, largestUsd: 0.3, unpricedCalls: 2 };
      expect(await records.spendSince("partly", from)).toMatchObject(read);
      expect(await records.spendSince("partly", from, before.next)).toMatchObject(read);
      expect(rows.filter(countsAsUnpriced).map((row) => row.request_id)).toEqual(["p1", "p2"]);
    });

    // The row of an authenticated client's repeated refusals coalesced within a minute stands for
    // them all: every figure of the report that counts requests counts them, as one row each would.
    it("counts a row's requests in the report's requests, errors and unpriced calls, and in count", async () => {
      const records = createUsageRepository(database.db, database.sqlite);
      const none = { input_tokens: null, output_tokens: null, cached_tokens: null, reasoning_tokens: null };
      const refusal = { outcome: "error", cost_usd: null, ...none };
      await records.insertBatch([
        usage("c1", { project_id: "coalesced" }),
        usage("c2", { project_id: "coalesced", ...refusal, status: 429, error_code: "TOO_MANY_REQUESTS" }),
        usage("c3", {
          project_id: "coalesced",
          ...refusal,
          status: 429,
          error_code: "TOO_MANY_REQUESTS",
          requests: 41,
        }),
        usage("c4", {
          project_id: "coalesced",
          ...refusal,
          status: 403,
          error_code: "FORBIDDEN",
          requests: 5,
        }),
        // Not a refusal, but a row counting several must count them as unpriced too.
        usage("c5", { project_id: "coalesced", cost_usd: null, requests: 3 }),
      ]);
      const window = {
        projectId: "coalesced",
        from: "2026-11-01T00:00:00.000Z",
        to: "2026-12-01T00:00:00.000Z",
      };
      const [day] = await records.report({ limit: 100, ...window, groupBy: "day" });
      expect(day).toMatchObject({ requests: 51, errors: 47, costUsd: 0.001, unpricedRequests: 3 });
      const byEndpoint = await records.report({ limit: 100, ...window, groupBy: "endpoint" });
      expect(byEndpoint.map((row) => [row.group, row.requests, row.errors])).toEqual([["proxy", 51, 47]]);
      expect(await records.count("coalesced")).toBe(51);
    });

    // A client names the models its calls record, so a report may have any number of groups: it
    // answers the first `limit` in its order, and `after` the last of them reads on. The order is
    // the statement's on both engines, code points (UTF-8 bytes): a page cut in one order and read
    // on in another would skip groups or repeat them.
    it("answers `limit` groups at most, and `after` a group the ones after it, in one order on both engines", async () => {
      const records = createUsageRepository(database.db, database.sqlite);
      const models = [
        "B-model",
        "a-model",
        "a-model-2",
        "b-model",
        "é-model",
        "\uff5e-model",
        "\u{1f600}-model",
        "\u{1f600}",
        ...Array.from({ length: 20 }, (_, index) => `made-up-${index}`),
      ];
      await records.insertBatch([
        usage("page-null", { project_id: "pages", model: null, outcome: "error", status: 401 }),
        ...models.flatMap((model, index) => [
          usage(`page-${index}-a`, { project_id: "pages", model, created_at: "2026-11-02T10:00:00.000Z" }),
          usage(`page-${index}-b`, { project_id: "pages", model, created_at: "2026-11-03T10:00:00.000Z" }),
        ]),
      ]);
      const window = { projectId: "pages", from: "2026-11-01T00:00:00.000Z", to: "2026-12-01T00:00:00.000Z" };
      const all = await records.report({ ...window, groupBy: "model", limit: 1000 });
      // Code points: U+FF5E before U+1F600, whose surrogates come first as code units.
      const byCodePoint = [...models].sort((left, right) =>
        Buffer.compare(Buffer.from(left), Buffer.from(right)),
      );
      expect(all.map((row) => row.group)).toEqual([...byCodePoint, null]);
      expect(all.every((row) => row.group === null || row.requests === 2)).toBe(true);
      const pages: (string | null)[][] = [];
      let after: string | undefined;
      for (;;) {
        const page = await records.report({ ...window, groupBy: "model", limit: 4, after });
        expect(page.length).toBeLessThanOrEqual(4);
        pages.push(page.map((row) => row.group));
        const last = page[page.length - 1];
        if (page.length < 4 || last === undefined || last.group === null) break;
        after = last.group;
      }
      expect(pages.flat()).toEqual(all.map((row) => row.group));
      expect(pages).toHaveLength(Math.ceil(all.length / 4));
      // Days and endpoints page the same way.
      expect(
        (await records.report({ ...window, groupBy: "day", limit: 1 })).map((row) => [
          row.group,
          row.requests,
        ]),
      ).toEqual([["2026-11-02", models.length + 1]]);
      expect(
        (await records.report({ ...window, groupBy: "day", limit: 1, after: "2026-11-02" })).map(
          (row) => row.group,
        ),
      ).toEqual(["2026-11-03"]);
      expect(await records.report({ ...window, groupBy: "endpoint", limit: 5, after: "proxy" })).toEqual([]);
    });

    // A model name is the client's: JSON may name a lone surrogate (`"\ud800"`), and a name cut at
    // 200 code units may end in half of a pair. SQLite stored one as bytes no UTF-8 has (ED A0 80),
    // sorted before U+E000 there but read back as U+FFFD, after it: a report paged one group at a
    // time skipped a group its full answer held (13 groups, 12 paged).
    it("pages a report of models named with lone surrogates as it answers it whole, on both engines", async () => {
      const records = createUsageRepository(database.db, database.sqlite);
      const names = [
        "Z",
        "a",
        "x\ud800",
        "\udc00y",
        "\ud801",
        "\ufffd",
        "\ue000",
        "\uffff",
        "\u{10000}",
        `a${"\u{1f600}".repeat(100)}`,
      ];
      await records.insertBatch(
        names.map((name, index) =>
          usage(`lone-${index}`, { project_id: "lone", model: storedModelName(name) }),
        ),
      );
      const window = { projectId: "lone", from: "2026-11-01T00:00:00.000Z", to: "2026-12-01T00:00:00.000Z" };
      const all = (await records.report({ ...window, groupBy: "model", limit: 100 })).map((row) => row.group);
      const paged: (string | null)[] = [];
      let after: string | undefined;
      for (let page = 0; page < names.length + 1; page++) {
        const [row] = await records.report({ ...window, groupBy: "model", limit: 1, after });
        if (!row) break;
        paged.push(row.group);
        if (row.group === null) break;
        after = row.group;
      }
      expect(paged).toEqual(all);
      // Each name's row is its own group, in code-point order (UTF-8 bytes), the cut pair's half included.
      expect(all).toHaveLength(names.length - 1);
      expect(all).toEqual(
        [...all].sort((left, right) => Buffer.compare(Buffer.from(left ?? ""), Buffer.from(right ?? ""))),
      );
    });

    it("orders report groups the same on both engines: code-point order, a null group last", async () => {
      const records = createUsageRepository(database.db, database.sqlite);
      await records.insertBatch([
        usage("o1", { project_id: "order", model: null, outcome: "error", status: 401 }),
        usage("o2", { project_id: "order", model: "b-model" }),
        usage("o3", { project_id: "order", model: "B-model" }),
        usage("o4", { project_id: "order", model: "a-model" }),
      ]);
      const report = await records.report({
        limit: 100,
        projectId: "order",
        from: "2026-11-01T00:00:00.000Z",
        to: "2026-12-01T00:00:00.000Z",
        groupBy: "model",
      });
      expect(report.map((row) => row.group)).toEqual(["B-model", "a-model", "b-model", null]);
    });

    it("stores every usage column as given", async () => {
      const records = createUsageRepository(database.db, database.sqlite);
      // A distinct value in every column, so two columns swapped on the way in cannot pass.
      const row: UsageRecord = {
        request_id: "columns-1",
        project_id: "columns",
        key_id: "key-columns",
        endpoint: "vision",
        provider: "provider-b",
        model: "model-columns",
        status: 207,
        error_code: "SOME_CODE",
        input_tokens: 101,
        output_tokens: 102,
        cached_tokens: 103,
        reasoning_tokens: 104,
        cost_usd: 0.125,
        latency_ms: 45.5,
        ttfb_ms: 6.25,
        streamed: 1,
        outcome: "aborted",
        auth_method: "bearer-device-check",
        client_ip: "192.0.2.44",
        created_at: "2026-11-05T01:02:03.004Z",
        requests: 7,
        provider_answered: 1,
      };
      await records.insertBatch([row]);
      const stored = await database.db
        .selectFrom("usage_records")
        .selectAll()
        .where("request_id", "=", "columns-1")
        .executeTakeFirstOrThrow();
      expect({
        ...stored,
        cost_usd: Number(stored.cost_usd),
        latency_ms: Number(stored.latency_ms),
        ttfb_ms: Number(stored.ttfb_ms),
      }).toEqual(row);
    });

    it("stores every column of every row of a batch written by several statements, a request id given twice once", async () => {
      const records = createUsageRepository(database.db, database.sqlite);
      // 23 rows: on SQLite two statements of ten rows and three of one; every value differs by row
      // and column, so a row or a column bound one place off cannot pass.
      const rows: UsageRecord[] = Array.from({ length: 23 }, (_, index) => ({
        request_id: `batch-columns-${String(index).padStart(2, "0")}`,
        project_id: "batch-columns",
        key_id: `key-${index}`,
        endpoint: `endpoint-${index}`,
        provider: `provider-${index}`,
        model: `model-${index}`,
        status: 200 + index,
        error_code: index % 2 === 0 ? null : `CODE_${index}`,
        input_tokens: 1000 + index,
        output_tokens: 2000 + index,
        cached_tokens: index % 3 === 0 ? null : 3000 + index,
        reasoning_tokens: 4000 + index,
        cost_usd: index % 4 === 0 ? null : index / 1024,
        latency_ms: 5000 + index + 0.5,
        ttfb_ms: index % 5 === 0 ? null : 6000 + index + 0.25,
        streamed: index % 2,
        outcome: `outcome-${index}`,
        auth_method: `auth-${index}`,
        client_ip: `192.0.2.${index}`,
        created_at: `2026-11-05T01:02:${String(index).padStart(2, "0")}.004Z`,
        requests: 1 + index,
        provider_answered: index % 3 === 1 ? 1 : null,
      }));
      const again = { ...(rows[4] as UsageRecord), status: 599, model: "a second try" };
      await records.insertBatch([...rows.slice(0, 12), again, ...rows.slice(12)]);
      const stored = await database.db
        .selectFrom("usage_records")
        .selectAll()
        .where("project_id", "=", "batch-columns")
        .orderBy("request_id")
        .execute();
      expect(
        stored.map((row) => ({
          ...row,
          cost_usd: row.cost_usd === null ? null : Number(row.cost_usd),
          latency_ms: Number(row.latency_ms),
          ttfb_ms: row.ttfb_ms === null ? null : Number(row.ttfb_ms),
        })),
      ).toEqual(rows);
    });

    it("keeps token counts above 2^31 (up to 2^53) and costs to a double's full precision, read back as numbers", async () => {
      const records = createUsageRepository(database.db, database.sqlite);
      // Above PostgreSQL's 32-bit integer, up to the largest count the usage meter records; and a
      // cost a 32-bit float (or a rounding to fewer digits) would change.
      const row = usage("big-1", {
        project_id: "big",
        input_tokens: 2 ** 31 + 7,
        output_tokens: 2 ** 40 + 3,
        cached_tokens: 2 ** 33,
        reasoning_tokens: Number.MAX_SAFE_INTEGER,
        cost_usd: 0.1 + 0.2,
      });
      await records.insertBatch([row]);
      const stored = await database.db
        .selectFrom("usage_records")
        .selectAll()
        .where("request_id", "=", "big-1")
        .executeTakeFirstOrThrow();
      expect(stored).toEqual(row);
      const report = await records.report({
        limit: 100,
        projectId: "big",
        from: "2026-11-01T00:00:00.000Z",
        to: "2026-12-01T00:00:00.000Z",
        groupBy: "day",
      });
      expect(report).toEqual([
        {
          group: "2026-11-02",
          requests: 1,
          errors: 0,
          inputTokens: 2 ** 31 + 7,
          outputTokens: 2 ** 40 + 3,
          cachedTokens: 2 ** 33,
          reasoningTokens: Number.MAX_SAFE_INTEGER,
          costUsd: 0.3,
          unpricedRequests: 0,
        },
      ]);
      expect(await records.count("big")).toBe(1);
    });

    it("reports token sums past 2^63 (SQLite's integer sum() overflows there) on both engines", async () => {
      const records = createUsageRepository(database.db, database.sqlite);
      const rows = Array.from({ length: 1100 }, (_, index) =>
        usage(`huge-${index}`, { project_id: "huge", input_tokens: Number.MAX_SAFE_INTEGER }),
      );
      await records.insertBatch(rows);
      const [day] = await records.report({
        limit: 100,
        projectId: "huge",
        from: "2026-11-01T00:00:00.000Z",
        to: "2026-12-01T00:00:00.000Z",
        groupBy: "day",
      });
      expect(day?.requests).toBe(1100);
      expect(Math.abs((day?.inputTokens ?? 0) / (1100 * Number.MAX_SAFE_INTEGER) - 1)).toBeLessThan(1e-12);
    });

    // A cost is recorded to the billionth, as a double: summed as doubles one after the other (as
    // PostgreSQL's sum(double precision) does) 20,000 calls of $0.10 came to 1999.9999999992765,
    // which the report showed as 1999.999999999 on PostgreSQL and as 2000 on SQLite.
    it("sums costs exactly to the billionth on both engines, however many rows a group has", async () => {
      const records = createUsageRepository(database.db, database.sqlite);
      const dimes = Array.from({ length: 20_000 }, (_, index) =>
        usage(`dime-${index}`, { project_id: "dimes", model: "m-dime", cost_usd: 0.1 }),
      );
      const images = Array.from({ length: 30_000 }, (_, index) =>
        usage(`image-${index}`, { project_id: "dimes", model: "m-image", cost_usd: 0.04 }),
      );
      const odd = Array.from({ length: 3 }, (_, index) =>
        usage(`odd-${index}`, { project_id: "dimes", model: "m-odd", cost_usd: 0.000000001 }),
      );
      await records.insertBatch([...dimes, ...images, ...odd]);
      const report = await records.report({
        limit: 100,
        projectId: "dimes",
        from: "2026-11-01T00:00:00.000Z",
        to: "2026-12-01T00:00:00.000Z",
        groupBy: "model",
      });
      expect(report.map((row) => [row.group, row.requests, row.costUsd])).toEqual([
        ["m-dime", 20_000, 2000],
        ["m-image", 30_000, 1200],
        ["m-odd", 3, 0.000000003],
      ]);
    });

    // A row's cost is rounded to the billionth where it is summed. SQLite's round() takes a half away
    // from zero; PostgreSQL's round(double precision) to the even neighbour: rows written by another
    // tool with half billionths were summed differently by the two engines (this one answered
    // 0.000000012 on PostgreSQL, 0.000000015 on SQLite).
    it("rounds a half billionth of a row's cost the same way on both engines, away from zero", async () => {
      const records = createUsageRepository(database.db, database.sqlite);
      // Each of them times 1e9 is exactly the half it names: 2.5, 0.5, 12.5 and -1.5.
      const costs = [2.5e-9, 0.5e-9, 12.5e-9, -1.5e-9];
      await records.insertBatch(
        costs.map((cost_usd, index) =>
          usage(`half-${index}`, { project_id: "halves", model: "m-half", cost_usd }),
        ),
      );
      const window = {
        projectId: "halves",
        from: "2026-11-01T00:00:00.000Z",
        to: "2026-12-01T00:00:00.000Z",
      };
      // 3 + 1 + 13 - 2 billionths.
      for (const groupBy of ["day", "model", "endpoint"] as const) {
        const report = await records.report({ limit: 100, ...window, groupBy });
        expect(report.map((row) => row.costUsd)).toEqual([0.000000015]);
      }
      expect((await records.spendSince("halves", window.from)).totalUsd).toBe(0.000000015);
    });

    // Past 2^53 billionths (9,007,199.254740992 USD) a double no longer holds every whole billionth:
    // summed as doubles, each billionth added to the group's sum was rounded off, on PostgreSQL row
    // by row, on SQLite as its slices of 5,000 rows were added up.
    it("sums costs exactly past 2^53 billionths of a dollar, in a report and a spend read, on both engines", async () => {
      const records = createUsageRepository(database.db, database.sqlite);
      const start = Date.parse("2026-11-01T00:00:00.000Z");
      const slices = 12;
      // The whole first, then one billionth in each slice of 5,000 rows (the rest cost 0).
      const rows = Array.from({ length: slices * 5000 }, (_, index) =>
        usage(`nine-million-${index}`, {
          project_id: "nine-million",
          created_at: new Date(start + index).toISOString(),
          cost_usd: index === 0 ? 2 ** 53 / 1e9 : index % 5000 === 1 ? 1e-9 : 0,
        }),
      );
      await records.insertBatch(rows);
      // 2^53 + 12 billionths, as the nearest double: 2^53 alone is 9007199.254740992.
      const exact = 9_007_199.254741004;
      const window = {
        projectId: "nine-million",
        from: "2026-11-01T00:00:00.000Z",
        to: "2026-12-01T00:00:00.000Z",
      };
      for (const groupBy of ["day", "model", "endpoint"] as const) {
        const report = await records.report({ limit: 100, ...window, groupBy });
        expect(report.map((row) => [row.requests, row.costUsd])).toEqual([[slices * 5000, exact]]);
      }
      expect((await records.spendSince("nine-million", window.from)).totalUsd).toBe(exact);
    }, 60_000);

    // Summed as one 64-bit integer of billionths, 20 rows of $900 million overflow it (SQLite's
    // sum() fails with "integer overflow"), and a cost of 1e300 is none at all (cost-sums.ts).
    it("sums costs past what 64-bit billionths hold without failing, on both engines", async () => {
      const records = createUsageRepository(database.db, database.sqlite);
      const rows = [
        ...Array.from({ length: 20 }, (_, index) =>
          usage(`absurd-${index}`, { project_id: "absurd", model: "m-large", cost_usd: 900_000_000.5 }),
        ),
        usage("absurd-huge", { project_id: "absurd", model: "m-huge", cost_usd: 1e300 }),
        usage("absurd-small", { project_id: "absurd", model: "m-huge", cost_usd: 0.25 }),
      ];
      await records.insertBatch(rows);
      const from = "2026-11-01T00:00:00.000Z";
      const report = await records.report({
        limit: 100,
        projectId: "absurd",
        from,
        to: "2026-12-01T00:00:00.000Z",
        groupBy: "model",
      });
      expect(report.map((row) => [row.group, row.costUsd])).toEqual([
        ["m-huge", 1e300],
        ["m-large", 18_000_000_010],
      ]);
      expect((await records.spendSince("absurd", from)).totalUsd).toBe(1e300);
    });

    it("writes a large batch in one call", async () => {
      const records = createUsageRepository(database.db, database.sqlite);
      const rows = Array.from({ length: 1200 }, (_, index) => usage(`bulk-${index}`, { project_id: "bulk" }));
      await records.insertBatch(rows);
      expect(await records.count("bulk")).toBe(1200);
    });
  });
}
