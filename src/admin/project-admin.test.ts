import { generateKeyPairSync, randomBytes } from "node:crypto";
import BetterSqlite3 from "better-sqlite3";
import { InsertQueryNode, type KyselyPlugin } from "kysely";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { usageRow } from "../../test/support/usage-row.js";
import { createSecretBox } from "../auth/secret-box.js";
import { GatewayError } from "../errors.js";
import { type OpenDatabase, openDatabase } from "../storage/database.js";
import { createKeyRepository, type KeyRepository } from "../storage/key-repository.js";
import { createProjectRepository, type ProjectRepository } from "../storage/project-repository.js";
import { createUsageRepository } from "../storage/usage-repository.js";
import { createProjectAdmin } from "./project-admin.js";
import { monthlySpendCapRule, nameCharactersRule } from "./project-input.js";

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

  function admin(
    projects: Partial<ProjectRepository> = {},
    keys: Partial<KeyRepository> = {},
    testModeAllowed = true,
  ) {
    return createProjectAdmin({
      projects: { ...createProjectRepository(database.db), ...projects },
      keys: { ...createKeyRepository(database.db), ...keys },
      usage: createUsageRepository(database.db, database.sqlite),
      secretBox: createSecretBox(randomBytes(32)),
      now: () => new Date("2026-11-02T10:00:00.000Z"),
      onProjectChanged: (id) => changed.push(id),
      testModeAllowed,
    });
  }

  it("refuses fields that contradict each other with 422, as other incompatible parameters", async () => {
    const base = { name: "C", provider: "provider-a" };
    await expect(admin().createProject({ ...base, saveImagesToVault: true })).rejects.toMatchObject({
      code: "VALIDATION_ERROR",
      status: 422,
      message: "saveImagesToVault needs a teamId (it is the first segment of the vault path)",
    });
    await expect(admin().createProject({ ...base, deviceCheck: { enabled: true } })).rejects.toMatchObject({
      code: "VALIDATION_ERROR",
      status: 422,
    });
  });

  it("names each field a rule across fields needs in details.problems, as a single field's refusal", async () => {
    const base = { name: "C", provider: "provider-a" };
    await expect(admin().createProject({ ...base, saveImagesToVault: true })).rejects.toMatchObject({
      details: {
        problems: [
          "teamId: is required when saveImagesToVault is true (it is the first segment of the vault path)",
        ],
      },
    });
    await expect(admin().createProject({ ...base, deviceCheck: { enabled: true } })).rejects.toMatchObject({
      details: {
        problems: [
          "deviceCheck.teamId: is required when deviceCheck.enabled is true",
          "deviceCheck.keyId: is required when deviceCheck.enabled is true",
          "deviceCheck.privateKey: is required when deviceCheck.enabled is true (the .p8 file's contents)",
        ],
      },
    });
    // Only the fields still missing, the stored project's included.
    await admin().createProject({ ...base, id: "half", deviceCheck: { teamId: "TEAM123456" } });
    await expect(
      admin().updateProject("half", { deviceCheck: { enabled: true, keyId: "KEY1234567" } }),
    ).rejects.toMatchObject({
      details: {
        problems: [
          "deviceCheck.privateKey: is required when deviceCheck.enabled is true (the .p8 file's contents)",
        ],
      },
    });
    await expect(admin().createProject({ ...base, model: "claude-sonnet-4-5" })).rejects.toMatchObject({
      details: {
        problems: [`model: "claude-sonnet-4-5" is a provider-b model; this project's provider is provider-a`],
        model: "claude-sonnet-4-5",
      },
    });
    await expect(admin({}, {}, false).createProject({ ...base, testMode: true })).rejects.toMatchObject({
      details: {
        problems: ["testMode: cannot be turned on in production (SLUICE_ENV=production)"],
        field: "testMode",
      },
    });
  });

  it("refuses to put a project in Test Mode in production, on creation or by an update, with 422", async () => {
    const production = admin({}, {}, false);
    const refusal = {
      code: "VALIDATION_ERROR",
      status: 422,
      message:
        "testMode cannot be turned on in production (SLUICE_ENV=production): Test Mode is for development and testing only",
      details: { field: "testMode", environment: "production" },
    };
    await expect(
      production.createProject({ id: "born-testing", name: "T", provider: "provider-a", testMode: true }),
    ).rejects.toMatchObject(refusal);
    expect(await createProjectRepository(database.db).get("born-testing")).toBeNull();
    await production.createProject({ id: "live", name: "Live", provider: "provider-a", testMode: false });
    await expect(production.updateProject("live", { testMode: true })).rejects.toMatchObject(refusal);
    expect((await production.getProject("live")).testMode).toBe(false);
    // Development and test put a project in Test Mode as before.
    const created = await admin().createProject({
      id: "dev",
      name: "D",
      provider: "provider-a",
      testMode: true,
    });
    expect(created.project.testMode).toBe(true);
  });

  it("lets production change a project already in Test Mode, and turn Test Mode off", async () => {
    await admin().createProject({ id: "legacy", name: "Legacy", provider: "provider-a", testMode: true });
    const production = admin({}, {}, false);
    expect(await production.updateProject("legacy", { name: "Renamed" })).toMatchObject({ testMode: true });
    expect(await production.updateProject("legacy", { testMode: false })).toMatchObject({ testMode: false });
  });

  it("creates a project with its test key or not at all, so the admin's retry succeeds", async () => {
    // The test key's statement fails once, after the project's row was written: the database failed
    // in between (or the shutdown's deadline refused the call, after which nothing more is sent).
    let failures = 1;
    const failingTestKeyOnce: KyselyPlugin = {
      transformQuery({ node }) {
        if (InsertQueryNode.is(node) && node.into?.table.identifier.name === "test_keys" && failures-- > 0)
          throw Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), { code: "ECONNREFUSED" });
        return node;
      },
      transformResult: async ({ result }) => result,
    };
    const flaky = admin(createProjectRepository(database.db.withPlugin(failingTestKeyOnce)));
    const failed = await flaky
      .createProject({ id: "whole", name: "Whole", provider: "provider-a" })
      .catch((caught: unknown) => caught);
    expect(failed).toBeInstanceOf(GatewayError);
    expect((failed as GatewayError).code).toBe("SERVICE_UNAVAILABLE");
    expect(await createProjectRepository(database.db).get("whole")).toBeNull();
    const retried = await flaky.createProject({ id: "whole", name: "Whole", provider: "provider-a" });
    expect(retried.testKey).toBeTruthy();
  });

  it("stamps deviceCheck.changedAt when a change names another Apple app (team, key id, .p8 key, environment), and for no other change", async () => {
    const projectAdmin = admin();
    const newKey = () =>
      generateKeyPairSync("ec", { namedCurve: "prime256v1" })
        .privateKey.export({ type: "pkcs8", format: "pem" })
        .toString();
    const key = newKey();
    const deviceCheck = {
      enabled: true,
      teamId: "TEAM123456",
      keyId: "KEY1234567",
      privateKey: key,
      environment: "development",
    } as const;
    const { project } = await projectAdmin.createProject({
      id: "apple",
      name: "Apple",
      provider: "provider-a",
      deviceCheck,
    });
    expect(project.deviceCheck.changedAt).toBeNull();
    // The same settings sent again (the .p8 key too, sealed anew), or other fields: no change.
    for (const unrelated of [
      { name: "Renamed" },
      { rateLimits: { perMinute: 5, devicePerMinute: 2 } },
      { deviceCheck: { tokenMode: "single-use" } },
      { deviceCheck: { enabled: false } },
      { deviceCheck },
    ]) {
      expect((await projectAdmin.updateProject("apple", unrelated)).deviceCheck.changedAt).toBeNull();
    }
    for (const change of [
      { environment: "production" },
      { teamId: "TEAM654321" },
      { keyId: "KEY7654321" },
      { privateKey: newKey() },
    ]) {
      const updated = await projectAdmin.updateProject("apple", { deviceCheck: change });
      expect(updated.deviceCheck.changedAt).toBe(updated.updatedAt);
      // Kept by later changes of other fields, and stored.
      expect((await projectAdmin.updateProject("apple", { name: "Again" })).deviceCheck.changedAt).toBe(
        updated.updatedAt,
      );
      expect((await projectAdmin.getProject("apple")).deviceCheck.changedAt).toBe(updated.updatedAt);
    }
  });

  // The .p8 key was compared as the bytes of its text: the same key re-uploaded with Windows line
  // endings, or without the trailing newline, was another key (an audit `fields` entry, and the
  // tokens Apple verified trusted no more).
  it("takes the same .p8 key sent in another text (line endings, a newline more or less, SEC1) for no change", async () => {
    const projectAdmin = admin();
    const pair = () => generateKeyPairSync("ec", { namedCurve: "prime256v1" }).privateKey;
    const key = pair();
    const pem = key.export({ type: "pkcs8", format: "pem" }).toString();
    expect(pem.endsWith("-----\n")).toBe(true);
    const deviceCheck = { enabled: true, teamId: "TEAM123456", keyId: "KEY1234567", privateKey: pem };
    await projectAdmin.createProject({
      id: "same-key",
      name: "Same key",
      provider: "provider-a",
      deviceCheck,
    });
    for (const privateKey of [
      pem.replaceAll("\n", "\r\n"),
      pem.trimEnd(),
      `${pem}\n`,
      `\n${pem.replaceAll("\n", "\r\n")}\r\n\r\n`,
      key.export({ type: "sec1", format: "pem" }).toString(),
      pem,
    ]) {
      const { changed: fields, project } = await projectAdmin.changeProject("same-key", {
        deviceCheck: { privateKey },
      });
      expect(fields, JSON.stringify(privateKey.slice(0, 40))).toEqual([]);
      expect(project.deviceCheck.changedAt).toBeNull();
    }
    // Another key, in whatever text, still is a change.
    const other = pair().export({ type: "pkcs8", format: "pem" }).toString().replaceAll("\n", "\r\n");
    const { changed: fields, project } = await projectAdmin.changeProject("same-key", {
      deviceCheck: { privateKey: other },
    });
    expect(fields).toEqual(["deviceCheck.privateKey"]);
    expect(project.deviceCheck.changedAt).toBe(project.updatedAt);
  });

  it("answers an update with no field with the project as it is, written by no one", async () => {
    const created = await admin().createProject({
      id: "untouched",
      name: "U",
      provider: "provider-a",
    });
    changed.length = 0;
    const answered = await admin().updateProject("untouched", {});
    expect(answered).toEqual(created.project);
    expect((await admin().getProject("untouched")).updatedAt).toBe(created.project.updatedAt);
    expect(changed).toEqual([]);
    await expect(admin().updateProject("missing", {})).rejects.toMatchObject({ code: "PROJECT_NOT_FOUND" });
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
    [{ bogus: "1" }, "bogus: unknown parameter (the parameters are from, to, groupBy, limit, cursor)"],
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
    // `to` left out is now: the refusal says so, rather than name a parameter that was not sent.
    await expect(admin().usageReport("usage", { from: "2026-11-03" }, flag)).rejects.toMatchObject({
      code: "BAD_REQUEST",
      message: "`--from` must be before `--to`, which is now (2026-11-02T10:00:00.000Z) when not given",
    });
  });

  // A call of a project deleted under the id, begun before the new one's creation and ended after:
  // its row is the deleted project's (docs/api.md, DELETE), whatever window the report asks for.
  it("leaves out a call begun before the project's creation from a report whose window starts after it", async () => {
    await admin().createProject({ id: "begun-window", name: "Begun", provider: "provider-a" });
    await createUsageRepository(database.db, database.sqlite).insertBatch([
      // Ended 10 minutes after the creation (10:00), 20 minutes long: begun before it.
      usageRow("begun-window-old", {
        project_id: "begun-window",
        created_at: "2026-11-02T10:10:00.000Z",
        latency_ms: 1_200_000,
      }),
      usageRow("begun-window-new", {
        project_id: "begun-window",
        created_at: "2026-11-02T10:10:00.000Z",
        latency_ms: 1_000,
      }),
    ]);
    const requests = async (input: Record<string, string>) =>
      (await admin().usageReport("begun-window", { groupBy: "endpoint", ...input })).rows.reduce(
        (sum, row) => sum + row.requests,
        0,
      );
    expect(await requests({ from: "2026-11-02T00:00:00.000Z", to: "2026-11-02T11:00:00.000Z" })).toBe(1);
    expect(await requests({ from: "2026-11-02T10:05:00.000Z", to: "2026-11-02T11:00:00.000Z" })).toBe(1);
  });

  it("counts a row written in the millisecond the report runs, when it names no end", async () => {
    await admin().createProject({ id: "just-now", name: "Just now", provider: "provider-a" });
    // The clock's now: a row written this millisecond, which the report finds in the table (its
    // call begun in it too: the project was created in it, and a call begun before is not its).
    await createUsageRepository(database.db, database.sqlite).insertBatch([
      usageRow("just-now-1", {
        project_id: "just-now",
        created_at: "2026-11-02T10:00:00.000Z",
        latency_ms: 0,
      }),
    ]);
    const report = await admin().usageReport("just-now", {});
    expect(report.rows.reduce((sum, row) => sum + row.requests, 0)).toBe(1);
  });

  it("keeps every row in a report that ends with the last date there is", async () => {
    await admin().createProject({ id: "far", name: "Far", provider: "provider-a" });
    await createUsageRepository(database.db, database.sqlite).insertBatch([
      usageRow("far-1", { project_id: "far", created_at: "2026-11-02T11:00:00.000Z" }),
    ]);
    const report = await admin().usageReport("far", { from: "2026-01-01", to: "9999-12-31" });
    expect(report.to).toBe("9999-12-31T23:59:59.999Z");
    expect(report.rows.map((row) => [row.group, row.requests])).toEqual([["2026-11-02", 1]]);
  });

  it("tells this instance's caches about a created project, which they may hold as not found", async () => {
    await admin().createProject({ id: "px", name: "Px", provider: "provider-a" });
    expect(changed).toEqual(["px"]);
  });

  it.each([
    [{ provider: "provider-a", model: "claude-sonnet-4-5" }, "provider-b", "provider-a"],
    [{ provider: "provider-b", model: "gpt-4o-mini-2024-07-18" }, "provider-a", "provider-b"],
    [{ provider: "provider-c", model: "models/gpt-image-1" }, "provider-a", "provider-c"],
    [{ provider: "provider-a", model: "imagen-4.0-generate-001" }, "provider-c", "provider-a"],
  ] as const)(
    "refuses to create a project %j whose model the catalogue lists under %s",
    async (fields, owner, provider) => {
      const error = await admin()
        .createProject({ id: "mismatch", name: "Mismatch", ...fields })
        .catch((caught: unknown) => caught);
      expect(error).toBeInstanceOf(GatewayError);
      expect(error).toMatchObject({
        code: "VALIDATION_ERROR",
        status: 422,
        message: `model "${fields.model}" is a ${owner} model; this project's provider is ${provider}`,
        details: { model: fields.model, provider, modelProvider: owner },
      });
      expect(await createProjectRepository(database.db).get("mismatch")).toBeNull();
    },
  );

  it("creates projects with their provider's models, custom model names and no model", async () => {
    for (const [id, fields] of [
      ["own", { provider: "provider-b", model: "claude-sonnet-4-5-20250929" }],
      ["custom", { provider: "provider-a", model: "my-fine-tune" }],
      ["none", { provider: "provider-c", model: null }],
    ] as const) {
      const { project } = await admin().createProject({ id, name: id, ...fields });
      expect(project).toMatchObject(fields);
    }
  });

  it("refuses an update whose provider or model leaves the model under another provider", async () => {
    await admin().createProject({
      id: "moving",
      name: "Moving",
      provider: "provider-a",
      model: "gpt-4.1-mini",
    });
    await expect(admin().updateProject("moving", { model: "gemini-2.5-pro" })).rejects.toMatchObject({
      code: "VALIDATION_ERROR",
      message: `model "gemini-2.5-pro" is a provider-c model; this project's provider is provider-a`,
      details: { model: "gemini-2.5-pro", provider: "provider-a", modelProvider: "provider-c" },
    });
    await expect(admin().updateProject("moving", { provider: "provider-b" })).rejects.toMatchObject({
      code: "VALIDATION_ERROR",
      message: `model "gpt-4.1-mini" is a provider-a model; this project's provider is provider-b`,
    });
    expect(await admin().getProject("moving")).toMatchObject({
      provider: "provider-a",
      model: "gpt-4.1-mini",
    });
    // Both together, or the model cleared, or a custom name: allowed.
    expect(
      await admin().updateProject("moving", { provider: "provider-c", model: "gemini-2.5-pro" }),
    ).toMatchObject({ provider: "provider-c", model: "gemini-2.5-pro" });
    expect(await admin().updateProject("moving", { provider: "provider-b", model: null })).toMatchObject({
      provider: "provider-b",
      model: null,
    });
    expect(await admin().updateProject("moving", { model: "claude-custom" })).toMatchObject({
      model: "claude-custom",
    });
  });

  it("keeps updating a project stored earlier with another provider's model while neither field changes", async () => {
    await admin().createProject({ id: "legacy", name: "Legacy", provider: "provider-a" });
    const repository = createProjectRepository(database.db);
    const stored = (await repository.get("legacy"))!;
    expect(await repository.update({ ...stored, model: "claude-sonnet-4-5" }, stored.updatedAt)).toBe(true);
    expect(await admin().updateProject("legacy", { name: "Renamed", testMode: true })).toMatchObject({
      name: "Renamed",
      provider: "provider-a",
      model: "claude-sonnet-4-5",
    });
    // The same pair sent back unchanged (a client that writes every field) is no change either.
    expect(
      await admin().updateProject("legacy", {
        provider: "provider-a",
        model: "claude-sonnet-4-5",
        name: "Again",
      }),
    ).toMatchObject({ name: "Again" });
    await expect(admin().updateProject("legacy", { model: "claude-haiku-4-5" })).rejects.toMatchObject({
      code: "VALIDATION_ERROR",
    });
  });

  it("names a missing required field as required, as the CLI names its flag", async () => {
    const problems = [
      "name: is required",
      'provider: is required (expected one of "provider-a"|"provider-b"|"provider-c")',
    ];
    await expect(admin().createProject({})).rejects.toMatchObject({
      code: "BAD_REQUEST",
      message: `Invalid project: ${problems.join("; ")}`,
      details: { problems },
    });
    await admin().createProject({ id: "keyless", name: "K", provider: "provider-a" });
    await expect(admin().addProviderKey("keyless", { provider: "provider-a" })).rejects.toMatchObject({
      message: "Invalid provider key: apiKey: is required",
    });
    // A value of the wrong type is still named as such.
    await expect(admin().createProject({ name: 5, provider: "provider-a" })).rejects.toMatchObject({
      message: "Invalid project: name: Invalid input: expected string, received number",
    });
  });

  it("refuses an empty provider key with one problem, that it is empty, not also its length and characters", async () => {
    await admin().createProject({ id: "emptykey", name: "E", provider: "provider-a" });
    await expect(
      admin().addProviderKey("emptykey", { provider: "provider-a", apiKey: "" }),
    ).rejects.toMatchObject({
      code: "BAD_REQUEST",
      message: "Invalid provider key: apiKey: is empty",
      details: { problems: ["apiKey: is empty"] },
    });
    // A value that is there but wrong still gets every problem it has.
    await expect(
      admin().addProviderKey("emptykey", { provider: "provider-a", apiKey: "a b" }),
    ).rejects.toMatchObject({
      details: {
        problems: [
          "apiKey: is too short to be a provider key",
          "apiKey: must be printable ASCII without spaces",
        ],
      },
    });
  });

  it("refuses a .p8 key that does not load with 422, naming it in details.problems as every other field's rule, without echoing it", async () => {
    // Well typed (a string, within its length), but not a key: 422, as a malformed model name or
    // proxy rule; 400 is for a body that does not parse or a field missing or of the wrong type.
    const problems = ["deviceCheck.privateKey: must be the PEM contents of an Apple .p8 (EC P-256) key"];
    const refusal = {
      code: "VALIDATION_ERROR",
      status: 422,
      message: `Invalid project: ${problems[0]}`,
      details: { problems },
    };
    const privateKey = "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n";
    await expect(
      admin().createProject({ id: "p8", name: "K", provider: "provider-a", deviceCheck: { privateKey } }),
    ).rejects.toMatchObject(refusal);
    await admin().createProject({ id: "p8", name: "K", provider: "provider-a" });
    const refused = await admin()
      .updateProject("p8", { deviceCheck: { privateKey } })
      .catch((error: unknown) => error);
    expect(refused).toMatchObject(refusal);
    const { message, details } = refused as { message: string; details: unknown };
    expect(JSON.stringify({ message, details })).not.toContain("not a key");
  });

  it("refuses a monthly spend cap finer than a billionth of a dollar, on creation and by an update, with 400", async () => {
    const problems = [`monthlySpendCapUsd: must be ${monthlySpendCapRule}`];
    const fields = { id: "capped", name: "C", provider: "provider-a" };
    await expect(admin().createProject({ ...fields, monthlySpendCapUsd: 1e-16 })).rejects.toMatchObject({
      code: "BAD_REQUEST",
      message: `Invalid project: ${problems[0]}`,
      details: { problems },
    });
    await admin().createProject({ ...fields, monthlySpendCapUsd: 0.000000001 });
    await expect(
      admin().updateProject("capped", { monthlySpendCapUsd: 12.1234567891 }),
    ).rejects.toMatchObject({
      code: "BAD_REQUEST",
      message: `Invalid project update: ${problems[0]}`,
    });
    expect((await admin().getProject("capped")).monthlySpendCapUsd).toBe(1e-9);
    // A floating-point sum a JavaScript client sends stands for the amount it is within rounding of.
    await admin().updateProject("capped", { monthlySpendCapUsd: 0.1 + 0.2 });
    expect((await admin().getProject("capped")).monthlySpendCapUsd).toBe(0.3);
  });

  it.each([
    ["a C0 control (ESC)", "Prod\u001b[2J", "U+001B at character 5"],
    ["a tab inside", "A\tB", "U+0009 at character 2"],
    ["DEL", "A\u007fB", "U+007F at character 2"],
    ["a C1 control (CSI)", "A\u009b31mB", "U+009B at character 2"],
    ["a right-to-left override", "invoice\u202Efdp.exe", "U+202E at character 8"],
    ["a bidi isolate", "\u2067admin\u2069", "U+2067 at character 1"],
    ["a right-to-left mark", "a\u200Fb", "U+200F at character 2"],
    ["an Arabic letter mark", "a\u061Cb", "U+061C at character 2"],
    ["a zero-width space", "pay\u200Broll", "U+200B at character 4"],
    ["a zero-width joiner between Latin letters", "pay\u200Droll", "U+200D at character 4"],
    ["a zero-width non-joiner between Latin letters", "pay\u200Croll", "U+200C at character 4"],
    ["a zero-width joiner after an emoji, before a letter", "\u{1F469}\u200Dx", "U+200D at character 2"],
    ["a zero-width joiner between Han characters", "\u6771\u200D\u4EAC", "U+200D at character 2"],
    ["a zero-width joiner between accents", "pa\u0301\u200D\u0301yroll", "U+200D at character 4"],
    ["a right-to-left override after spaces", "  invoice\u202Efdp.exe", "U+202E at character 10"],
    ["a word joiner", "pay\u2060roll", "U+2060 at character 4"],
    ["a byte order mark inside", "pay\uFEFFroll", "U+FEFF at character 4"],
  ])(
    "refuses a name holding %s on creation and by an update with 400, naming the field and the code point",
    async (_kind, name, where) => {
      const problem = `name: ${nameCharactersRule} (${where})`;
      await expect(admin().createProject({ name, provider: "provider-a" })).rejects.toMatchObject({
        code: "BAD_REQUEST",
        message: `Invalid project: ${problem}`,
        details: { problems: [problem] },
      });
      await admin().createProject({ id: "named", name: "Named", provider: "provider-a" });
      await expect(admin().updateProject("named", { name })).rejects.toMatchObject({
        code: "BAD_REQUEST",
        message: `Invalid project update: ${problem}`,
        details: { problems: [problem] },
      });
      expect((await admin().getProject("named")).name).toBe("Named");
    },
  );

  it("takes names of any script, emoji and the joiners their writing needs; whitespace at the ends is trimmed as before", async () => {
    const names = [
      "Café",
      "東京 app",
      "مشروع",
      // Persian writes a zero-width non-joiner inside words; Devanagari a joiner after a virama; an
      // emoji ZWJ sequence joins emoji (woman, ZWJ, laptop: a woman technologist).
      "می\u200Cخواهم",
      "क्\u200Dष",
      "\u{1F469}\u{1F3FD}\u200D\u{1F4BB} team",
      "  Padded\t",
    ];
    for (const name of names) {
      const created = await admin().createProject({ name, provider: "provider-a" });
      expect(created.project.name).toBe(name.trim());
    }
  });

  it("serves, lists and updates a project stored with such a name, and the stored-project check names it", async () => {
    await admin().createProject({ id: "spoofed", name: "Spoofed", provider: "provider-a" });
    const repository = createProjectRepository(database.db);
    const stored = (await repository.get("spoofed"))!;
    const name = "admin\u202Etset\u001b[0m";
    expect(await repository.update({ ...stored, name }, stored.updatedAt)).toBe(true);
    expect((await admin().getProject("spoofed")).name).toBe(name);
    expect((await admin().listProjects()).data.map((project) => project.name)).toEqual([name]);
    expect(await admin().updateProject("spoofed", { testMode: true })).toMatchObject({
      name,
      testMode: true,
    });
    const found: Array<{ id: string; problems: string[] }> = [];
    const outcome = await admin().checkStoredProjects(async (project) => {
      found.push(project);
      return true;
    });
    expect(outcome).toEqual({ checked: 1, withProblems: 1, stopped: false });
    expect(found).toEqual([
      { id: "spoofed", problems: [`name: ${nameCharactersRule} (U+202E at character 6)`] },
    ]);
    // Renamed, it has no problem left.
    await admin().updateProject("spoofed", { name: "admin" });
    expect(await admin().checkStoredProjects(async () => true)).toMatchObject({ withProblems: 0 });
  });

  it.each([
    ["a C0 control (ESC)", "Key\u001b]0;owned\u0007", "U+001B at character 4"],
    ["a C1 control (CSI)", "A\u009b31mB", "U+009B at character 2"],
    ["a right-to-left override", "backup\u202Etset", "U+202E at character 7"],
    ["a zero-width space", "pay\u200Broll", "U+200B at character 4"],
  ])(
    "refuses a provider key's label holding %s with 400, naming the field and the code point",
    async (_kind, label, where) => {
      await admin().createProject({ id: "labelled", name: "L", provider: "provider-a" });
      const problem = `label: ${nameCharactersRule} (${where})`;
      await expect(
        admin().addProviderKey("labelled", { provider: "provider-a", apiKey: "sk-0123456789abcdef", label }),
      ).rejects.toMatchObject({
        code: "BAD_REQUEST",
        status: 400,
        message: `Invalid provider key: ${problem}`,
        details: { problems: [problem] },
      });
      expect(await admin().listProviderKeys("labelled")).toEqual([]);
    },
  );

  it("takes a provider key's label of any script and the joiners its writing needs, trimmed as before", async () => {
    await admin().createProject({ id: "labelled", name: "L", provider: "provider-a" });
    for (const label of ["Café", "東京", "می\u200Cخواهم", "\u{1F469}\u200D\u{1F4BB} team", " padded\t"]) {
      const added = await admin().addProviderKey("labelled", {
        provider: "provider-a",
        apiKey: "sk-0123456789abcdef",
        label,
      });
      expect(added.label).toBe(label.trim());
    }
  });

  it("lists a provider key stored with such a label, and the stored-project check names it while the key is active", async () => {
    await admin().createProject({ id: "spoofed", name: "Spoofed", provider: "provider-a" });
    const added = await admin().addProviderKey("spoofed", {
      provider: "provider-a",
      apiKey: "sk-0123456789abcdef",
    });
    const label = "backup\u202Etset\u001b[0m";
    await database.db.updateTable("provider_keys").set({ label }).where("id", "=", added.keyId).execute();
    expect((await admin().listProviderKeys("spoofed")).map((key) => key.label)).toEqual([label]);
    const found: Array<{ id: string; problems: string[] }> = [];
    const outcome = await admin().checkStoredProjects(async (project) => {
      found.push(project);
      return true;
    });
    expect(outcome).toEqual({ checked: 1, withProblems: 1, stopped: false });
    expect(found).toEqual([
      {
        id: "spoofed",
        problems: [
          `label of provider key ${added.keyId}: ${nameCharactersRule} (U+202E at character 7); a label is not changed: add the key again with another label and revoke this one`,
        ],
      },
    ]);
    // The flag's name, as the CLI names fields.
    await admin().checkStoredProjects(
      async (project) => {
        expect(project.problems[0]).toMatch(/^--label of provider key /);
        return true;
      },
      (field) => `--${field}`,
    );
    // Revoked, it is no longer one an operator can act on, nor used: not named.
    await admin().revokeProviderKey("spoofed", added.keyId);
    expect(await admin().checkStoredProjects(async () => true)).toMatchObject({ withProblems: 0 });
  });

  it("names a list given for a text field once, by its type, not also by the list's length", async () => {
    // zod runs a string's length checks on any value with a length, so a list was also "too short".
    await expect(admin().createProject({ name: [], provider: "provider-a" })).rejects.toMatchObject({
      message: "Invalid project: name: Invalid input: expected string, received array",
      details: { problems: ["name: Invalid input: expected string, received array"] },
    });
    await admin().createProject({ id: "listed", name: "L", provider: "provider-a" });
    const apiKey = ["sk-0123456789abcdef"];
    await expect(admin().addProviderKey("listed", { provider: "provider-a", apiKey })).rejects.toMatchObject({
      message: "Invalid provider key: apiKey: Invalid input: expected string, received array",
    });
    await expect(admin().updateProject("listed", { deviceCheck: { privateKey: [] } })).rejects.toMatchObject({
      message:
        "Invalid project update: deviceCheck.privateKey: Invalid input: expected string, received array",
    });
  });

  it("creates, shows, replaces and clears a proxy allow-list, null (every call) by default", async () => {
    const created = await admin().createProject({ id: "listed", name: "L", provider: "provider-a" });
    expect(created.project.proxyAllowList).toBeNull();
    const chatOnly = { "provider-a": ["POST chat/completions"], "provider-b": ["POST messages"] };
    expect((await admin().updateProject("listed", { proxyAllowList: chatOnly })).proxyAllowList).toEqual(
      chatOnly,
    );
    expect((await admin().getProject("listed")).proxyAllowList).toEqual(chatOnly);
    // A PATCH replaces the whole list: a provider it leaves out is no longer allowed anything.
    const embeddings = { "provider-a": ["POST embeddings"] };
    await admin().updateProject("listed", { proxyAllowList: embeddings });
    expect((await admin().getProject("listed")).proxyAllowList).toEqual(embeddings);
    // Other changes keep it.
    await admin().updateProject("listed", { name: "Renamed" });
    expect((await admin().getProject("listed")).proxyAllowList).toEqual(embeddings);
    await admin().updateProject("listed", { proxyAllowList: null });
    expect((await admin().getProject("listed")).proxyAllowList).toBeNull();
    const born = await admin().createProject({ name: "B", provider: "provider-c", proxyAllowList: {} });
    expect(born.project.proxyAllowList).toEqual({});
  });

  it("refuses a proxy allow-list rule holding a key's form without echoing the key, by its start and length", async () => {
    const key = `sk-proj-${"a1B2c3D4e5".repeat(5)}`;
    const proxyAllowList = {
      "provider-a": [`Bearer ${key}`, `POST chat/completions?key=${key}`, key.repeat(4)],
    };
    const refused = await admin()
      .createProject({ name: "K", provider: "provider-a", proxyAllowList })
      .catch((error: unknown) => error);
    expect(refused).toMatchObject({
      code: "VALIDATION_ERROR",
      details: {
        problems: [
          `proxyAllowList.provider-a.0: "Bear…" (${key.length + 7} characters) names a method provider-a's proxy does not take (it takes GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS)`,
          `proxyAllowList.provider-a.1: "POST…" (${key.length + 26} characters) holds a query string, which rules do not match: leave it out`,
          `proxyAllowList.provider-a.2: "sk-p…" (${key.length * 4} characters) is longer than 200 characters`,
        ],
      },
    });
    const { message, details } = refused as { message: string; details: unknown };
    expect(JSON.stringify({ message, details })).not.toContain(key.slice(0, 20));
  });

  it("refuses proxy allow-list rules that do not parse with 422, naming each, and writes nothing", async () => {
    await admin().createProject({ id: "rules", name: "R", provider: "provider-a" });
    const problems = [
      'proxyAllowList.provider-a.1: "post embeddings" has a method in lower case: write POST',
      'proxyAllowList.provider-b.0: "POST v1/messages" starts with the version segment v1/: rules match the path without it (messages matches v1/messages)',
    ];
    const refusal = {
      code: "VALIDATION_ERROR",
      status: 422,
      message: `Invalid project: ${problems.join("; ")}`,
      details: { problems },
    };
    const proxyAllowList = {
      "provider-a": ["POST chat/completions", "post embeddings"],
      "provider-b": ["POST v1/messages"],
    };
    await expect(admin().updateProject("rules", { proxyAllowList })).rejects.toMatchObject(refusal);
    await expect(
      admin().createProject({ id: "rules-2", name: "R", provider: "provider-a", proxyAllowList }),
    ).rejects.toMatchObject(refusal);
    expect((await admin().getProject("rules")).proxyAllowList).toBeNull();
    expect(await createProjectRepository(database.db).get("rules-2")).toBeNull();
  });

  it.each([
    [{ "provider-d": ["POST x"] }, 'proxyAllowList: Unrecognized key: "provider-d"'],
    [
      { "provider-a": "POST chat/completions" },
      "proxyAllowList.provider-a: Invalid input: expected array, received string",
    ],
    [{ "provider-a": [7] }, "proxyAllowList.provider-a.0: Invalid input: expected string, received number"],
    [["POST chat/completions"], "proxyAllowList: Invalid input: expected object, received array"],
  ])(
    "refuses a proxy allow-list of the wrong shape (%j) with 400, as any ill-typed field",
    async (proxyAllowList, problem) => {
      await expect(
        admin().createProject({ name: "S", provider: "provider-a", proxyAllowList }),
      ).rejects.toMatchObject({ code: "BAD_REQUEST", details: { problems: [problem] } });
    },
  );

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
