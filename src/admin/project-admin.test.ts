import { randomBytes } from "node:crypto";
import BetterSqlite3 from "better-sqlite3";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { usageRow } from "../../test/support/usage-row.js";
import { createSecretBox } from "../auth/secret-box.js";
import { GatewayError } from "../errors.js";
import { type OpenDatabase, openDatabase } from "../storage/database.js";
import { createKeyRepository, type KeyRepository } from "../storage/key-repository.js";
import { createProjectRepository, type ProjectRepository } from "../storage/project-repository.js";
import { createUsageRepository } from "../storage/usage-repository.js";
import { createProjectAdmin } from "./project-admin.js";

describe("project admin use cases", () => {
  let database: OpenDatabase;
  let changed: string[];

  beforeEach(async () => {
    database = await openDatabase({ dataDir: "unused", sqliteFile: ":memory:" });
    changed = [];
  });
  afterEach(async () => {
    await database.close();
  });

  function admin(projects: Partial<ProjectRepository> = {}, keys: Partial<KeyRepository> = {}) {
    return createProjectAdmin({
      projects: { ...createProjectRepository(database.db), ...projects },
      keys: { ...createKeyRepository(database.db), ...keys },
      usage: createUsageRepository(database.db, database.sqlite),
      secretBox: createSecretBox(randomBytes(32)),
      now: () => new Date("2026-11-02T10:00:00.000Z"),
      onProjectChanged: (id) => changed.push(id),
    });
  }

  it("creates a project with its test key or not at all, so the admin's retry succeeds", async () => {
    let failures = 1;
    const flaky = admin(
      {},
      {
        addTestKey: async (...args) => {
          if (failures-- > 0)
            throw Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), { code: "ECONNREFUSED" });
          return createKeyRepository(database.db).addTestKey(...args);
        },
      },
    );
    const failed = await flaky
      .createProject({ id: "whole", name: "Whole", provider: "provider-a" })
      .catch((caught: unknown) => caught);
    expect(failed).toBeInstanceOf(GatewayError);
    expect((failed as GatewayError).code).toBe("SERVICE_UNAVAILABLE");
    expect(await createProjectRepository(database.db).get("whole")).toBeNull();
    const retried = await flaky.createProject({ id: "whole", name: "Whole", provider: "provider-a" });
    expect(retried.testKey).toBeTruthy();
  });

  it("answers CONFLICT when another admin created the same id between the check and the insert", async () => {
    const racing = admin({ get: async () => null });
    await racing.createProject({ id: "twice", name: "First", provider: "provider-a" });
    const error = await racing
      .createProject({ id: "twice", name: "Second", provider: "provider-a" })
      .catch((caught: unknown) => caught);
    expect(error).toMatchObject({ code: "CONFLICT", status: 409 });
    expect((await admin().getProject("twice")).name).toBe("First");
  });

  it("answers CONFLICT when the project changes under every attempt of an update", async () => {
    await admin().createProject({ id: "busy", name: "Busy", provider: "provider-a" });
    let attempts = 0;
    const losing = admin({
      update: async () => {
        attempts++;
        return false;
      },
    });
    await expect(losing.updateProject("busy", { name: "Never" })).rejects.toMatchObject({
      code: "CONFLICT",
      status: 409,
    });
    expect(attempts).toBe(10);
    expect((await admin().getProject("busy")).name).toBe("Busy");
  });

  it("reads a usage report's date-only end as the end of that day (UTC)", async () => {
    await admin().createProject({ id: "usage", name: "Usage", provider: "provider-a" });
    const byDate = await admin().usageReport("usage", { from: "2026-11-01", to: "2026-11-02" });
    expect(byDate).toMatchObject({ from: "2026-11-01T00:00:00.000Z", to: "2026-11-03T00:00:00.000Z" });
    const byInstant = await admin().usageReport("usage", { to: "2026-11-02T12:00:00Z" });
    expect(byInstant.to).toBe("2026-11-02T12:00:00.000Z");
  });

  it.each([
    [{ bogus: "1" }, "bogus: unknown parameter (the parameters are from, to, groupBy)"],
    [{ from: "yesterday" }, "from: must be an ISO instant (2026-11-01T10:00:00Z) or date (2026-11-01)"],
    [{ to: ["2026-01-01", "2026-02-01"] }, "to: is given more than once"],
    [{ groupBy: ["day", "model"] }, "groupBy: is given more than once"],
    [{ groupBy: "week" }, 'groupBy: Invalid option: expected one of "day"|"model"|"endpoint"'],
  ])("names the query parameter of a bad usage query %j, never the body", async (query, problem) => {
    await admin().createProject({ id: "usage", name: "Usage", provider: "provider-a" });
    const error = await admin()
      .usageReport("usage", query)
      .catch((caught: unknown) => caught);
    expect(error).toMatchObject({
      code: "BAD_REQUEST",
      message: `Invalid usage query: ${problem}`,
      details: { problems: [problem] },
    });
  });

  it("names a bad usage query's parameters as the caller spells them", async () => {
    await admin().createProject({ id: "usage", name: "Usage", provider: "provider-a" });
    const flag = (field: string) => (field === "groupBy" ? "--group-by" : `--${field}`);
    await expect(admin().usageReport("usage", { groupBy: "week", from: "x" }, flag)).rejects.toMatchObject({
      details: {
        problems: [
          "--from: must be an ISO instant (2026-11-01T10:00:00Z) or date (2026-11-01)",
          '--group-by: Invalid option: expected one of "day"|"model"|"endpoint"',
        ],
      },
    });
    await expect(
      admin().usageReport("usage", { from: "2026-02-01", to: "2026-01-01" }, flag),
    ).rejects.toMatchObject({ code: "BAD_REQUEST", message: "`--from` must be before `--to`" });
    await expect(
      admin().usageReport("usage", { from: "2026-02-01", to: "2026-01-01" }),
    ).rejects.toMatchObject({
      message: "`from` must be before `to`",
    });
  });

  it("keeps every row in a report that ends with the last date there is", async () => {
    await admin().createProject({ id: "far", name: "Far", provider: "provider-a" });
    await createUsageRepository(database.db, database.sqlite).insertBatch([
      usageRow("far-1", { project_id: "far", created_at: "2026-11-02T09:00:00.000Z" }),
    ]);
    const report = await admin().usageReport("far", { from: "2026-01-01", to: "9999-12-31" });
    expect(report.to).toBe("9999-12-31T23:59:59.999Z");
    expect(report.rows.map((row) => [row.group, row.requests])).toEqual([["2026-11-02", 1]]);
  });

  it("tells this instance's caches about a created project, which they may hold as not found", async () => {
    await admin().createProject({ id: "px", name: "Px", provider: "provider-a" });
    expect(changed).toEqual(["px"]);
  });

  it("answers SERVICE_UNAVAILABLE with Retry-After when SQLite cannot serve", async () => {
    const failing = admin({
      list: async () => {
        throw new BetterSqlite3.SqliteError("disk I/O error", "SQLITE_IOERR_READ");
      },
    });
    const error = await failing.listProjects().catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(GatewayError);
    expect(error).toMatchObject({
      code: "SERVICE_UNAVAILABLE",
      status: 503,
      headers: { "retry-after": "2" },
    });
  });

  it("passes a constraint violation through unchanged: it is no outage", async () => {
    const violation = new BetterSqlite3.SqliteError(
      "UNIQUE constraint failed: projects.id",
      "SQLITE_CONSTRAINT_PRIMARYKEY",
    );
    const failing = admin({
      insert: async () => {
        throw violation;
      },
    });
    await expect(failing.createProject({ name: "Race", provider: "provider-a" })).rejects.toBe(violation);
  });
});
