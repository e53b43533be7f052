import { generateKeyPairSync, randomBytes } from "node:crypto";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { createSecretBox } from "../auth/secret-box.js";
import { modelNameRule } from "../providers/model-name.js";
import { startFailureMessage } from "../start-failure.js";
import { type OpenDatabase, openDatabase } from "../storage/database.js";
import { createKeyRepository } from "../storage/key-repository.js";
import { createProjectRepository } from "../storage/project-repository.js";
import { createUsageRepository } from "../storage/usage-repository.js";
import { createProjectAdmin } from "./project-admin.js";
import { readProjectsFile, seedProjects } from "./seed-projects.js";

describe("projects as code (SLUICE_CONFIG_FILE)", () => {
  let database: OpenDatabase;
  let admin: ReturnType<typeof createProjectAdmin>;
  const directory = mkdtempSync(join(tmpdir(), "sluice-seed-"));
  const file = (name: string, content: unknown) => {
    const path = join(directory, name);
    writeFileSync(path, typeof content === "string" ? content : JSON.stringify(content));
    return path;
  };
  /** Seeds the file at `path` as a start does: read and checked first, then written. */
  const seed = async (path: string, into = admin) => seedProjects(into, await readProjectsFile(path));

  beforeEach(async () => {
    database = await openDatabase({ dataDir: "unused", sqliteFile: ":memory:" });
    admin = createProjectAdmin({
      projects: createProjectRepository(database.db),
      keys: createKeyRepository(database.db),
      usage: createUsageRepository(database.db, database.sqlite),
      secretBox: createSecretBox(randomBytes(32)),
      now: () => new Date(),
      onProjectChanged: () => {},
      testModeAllowed: true,
    });
  });
  afterEach(async () => {
    await database.close();
  });

  it("creates the missing projects, updates the listed ones to match and leaves the others alone", async () => {
    await admin.createProject({ id: "by-hand", name: "By hand", provider: "provider-b" });
    const first = file("first.json", {
      projects: [{ id: "demo-app", name: "Demo app", provider: "provider-a", testMode: true }],
    });
    expect(await seed(first)).toEqual({ created: ["demo-app"], updated: [], unchanged: [] });
    const second = file("second.json", {
      projects: [{ id: "demo-app", name: "Renamed", provider: "provider-a", testMode: false }],
    });
    expect(await seed(second)).toEqual({ created: [], updated: ["demo-app"], unchanged: [] });
    expect(await admin.getProject("demo-app")).toMatchObject({ name: "Renamed", testMode: false });
    expect((await admin.listProjects()).data.map((project) => project.id).sort()).toEqual([
      "by-hand",
      "demo-app",
    ]);
  });

  it("writes nothing for a listed project that already matches the file, and only the fields it lists count", async () => {
    // Each write a second after the one before, so an updatedAt that moved shows.
    let clock = Date.parse("2026-11-20T10:00:00.000Z");
    const tick = () => {
      clock += 1000;
      return new Date(clock);
    };
    const changed: string[] = [];
    const watched = createProjectAdmin({
      projects: createProjectRepository(database.db),
      keys: createKeyRepository(database.db),
      usage: createUsageRepository(database.db, database.sqlite),
      secretBox: createSecretBox(randomBytes(32)),
      now: tick,
      onProjectChanged: (id) => changed.push(id),
      testModeAllowed: true,
    });
    const entry = {
      id: "steady-app",
      name: " Steady app ",
      provider: "provider-b",
      teamId: "TEAM123",
      testMode: true,
      outputSchema: { type: "object", required: ["a"], properties: { a: { type: "string" } } },
      rateLimits: { perMinute: 60 },
      deviceCheck: { environment: "development", privateKey: null },
      monthlySpendCapUsd: 12.5,
    };
    const path = file("steady.json", { projects: [entry] });
    expect(await seed(path, watched)).toMatchObject({ created: ["steady-app"], updated: [] });
    // Changed by hand where the file says nothing: the file still matches.
    await watched.updateProject("steady-app", { rateLimits: { devicePerMinute: 5 }, model: "claude-x" });
    const before = await watched.getProject("steady-app");
    changed.length = 0;
    const again = await seed(path, watched);
    expect(await watched.getProject("steady-app")).toEqual(before);
    expect(changed).toEqual([]);
    expect(again).toEqual({ created: [], updated: [], unchanged: ["steady-app"] });
    const edited = file("edited.json", { projects: [{ ...entry, rateLimits: { perMinute: 61 } }] });
    expect(await seed(edited, watched)).toEqual({
      created: [],
      updated: ["steady-app"],
      unchanged: [],
    });
    expect(changed).toEqual(["steady-app"]);
    expect((await watched.getProject("steady-app")).updatedAt > before.updatedAt).toBe(true);
  });

  it("updates a project whose output schema the file lists with its members in another order: a model answers in their order", async () => {
    const schema = (...names: string[]) => ({
      type: "object",
      properties: Object.fromEntries(names.map((name) => [name, { type: "string" }])),
      required: names,
    });
    const entry = { id: "ordered-app", name: "Ordered app", provider: "provider-a" };
    const first = file("ordered.json", {
      projects: [{ ...entry, outputSchema: schema("title", "summary") }],
    });
    expect(await seed(first)).toMatchObject({ created: ["ordered-app"] });
    // `properties` reordered, `required` as it was: the admin API takes this PATCH as a change.
    const reordered = { ...schema("summary", "title"), required: ["title", "summary"] };
    const second = file("reordered.json", { projects: [{ ...entry, outputSchema: reordered }] });
    expect(await seed(second)).toEqual({ created: [], updated: ["ordered-app"], unchanged: [] });
    expect(JSON.stringify((await admin.getProject("ordered-app")).outputSchema)).toBe(
      JSON.stringify(reordered),
    );
    expect(await seed(second)).toEqual({ created: [], updated: [], unchanged: ["ordered-app"] });
  });

  it("writes an entry that sets a private key on a project that has one: the stored key is sealed, so it cannot be compared", async () => {
    const { privateKey } = generateKeyPairSync("ec", { namedCurve: "prime256v1" });
    const pem = privateKey.export({ format: "pem", type: "pkcs8" }).toString();
    const entry = {
      id: "device-app",
      name: "Device app",
      provider: "provider-a",
      deviceCheck: { enabled: true, teamId: "TEAM123456", keyId: "KEY1234567", privateKey: pem },
    };
    const path = file("device.json", { projects: [entry] });
    expect(await seed(path)).toMatchObject({ created: ["device-app"] });
    expect(await seed(path)).toMatchObject({ updated: ["device-app"] });
    const { privateKey: _key, ...withoutKey } = entry.deviceCheck;
    const keyless = file("keyless.json", { projects: [{ ...entry, deviceCheck: withoutKey }] });
    expect(await seed(keyless)).toMatchObject({ unchanged: ["device-app"] });
  });

  it("lets two instances seed the same file at once: the one that loses the race to create writes nothing", async () => {
    // Each write a millisecond after the one before, so an updatedAt that moved shows.
    let clock = Date.parse("2026-11-20T10:00:00.000Z");
    const changed: string[] = [];
    const instance = () =>
      createProjectAdmin({
        projects: createProjectRepository(database.db),
        keys: createKeyRepository(database.db),
        usage: createUsageRepository(database.db, database.sqlite),
        secretBox: createSecretBox(randomBytes(32)),
        now: () => new Date(++clock),
        onProjectChanged: (id) => changed.push(id),
        testModeAllowed: true,
      });
    const path = file("shared.json", {
      projects: [{ id: "shared-app", name: "Shared app", provider: "provider-a" }],
    });
    const results = await Promise.all([seed(path, instance()), seed(path, instance())]);
    expect(results.flatMap((result) => result.created)).toEqual(["shared-app"]);
    expect(results.flatMap((result) => result.updated)).toEqual([]);
    expect(results.flatMap((result) => result.unchanged)).toEqual(["shared-app"]);
    const stored = await admin.getProject("shared-app");
    expect(stored).toMatchObject({ name: "Shared app" });
    expect(stored.updatedAt).toBe(stored.createdAt);
    // Dropped from the caches once, by the instance that created it.
    expect(changed).toEqual(["shared-app"]);
  });

  it("updates a project another instance created meanwhile from a file that differs (a rolling deploy)", async () => {
    const older = file("older.json", {
      projects: [{ id: "rolled-app", name: "Old name", provider: "provider-a" }],
    });
    const newer = file("newer.json", {
      projects: [{ id: "rolled-app", name: "New name", provider: "provider-a" }],
    });
    const [first, second] = await Promise.all([seed(older), seed(newer)]);
    // The newer file's instance lost the race to create, and still brings the project to its file.
    expect(first).toEqual({ created: ["rolled-app"], updated: [], unchanged: [] });
    expect(second).toEqual({ created: [], updated: ["rolled-app"], unchanged: [] });
    expect(await admin.getProject("rolled-app")).toMatchObject({ name: "New name" });
  });

  it("refuses a file that does not parse or does not have the projects shape, naming the file", async () => {
    for (const content of ["{not json", { projects: [{ name: "no id" }] }, { projects: [], extra: 1 }]) {
      const path = file("bad.json", content);
      await expect(seed(path)).rejects.toThrow(`SLUICE_CONFIG_FILE ${path}`);
    }
  });

  // Windows editors (Notepad) save UTF-8 with a byte order mark, which JSON.parse refused as an
  // unexpected token the message could not show.
  it("reads a file that starts with a UTF-8 byte order mark", async () => {
    const entry = { id: "bom-app", name: "BOM app", provider: "provider-a" };
    const path = file("bom.json", `\uFEFF${JSON.stringify({ projects: [entry] })}`);
    expect(await seed(path)).toEqual({ created: ["bom-app"], updated: [], unchanged: [] });
  });

  // Node 20 says only "at position 181": in a file of many lines, a count of characters to make.
  it("names the line and column of a JSON syntax error, never the text there", async () => {
    const path = file(
      "lines.json",
      '{\n  "projects": [\n    {\n      "id": "a",\n      "name": "A"\n      "provider": "provider-a"\n    }\n  ]\n}\n',
    );
    const error = (await seed(path).catch((caught: unknown) => caught)) as Error;
    expect(error.message).toBe(
      `SLUICE_CONFIG_FILE ${path} is not a valid projects file: Expected ',' or '}' after property value in JSON at line 6, column 7`,
    );
  });

  // A file that is not there is not "an invalid projects file": the start says it cannot be read.
  it.each([
    ["missing.json", "no such file"],
    ["", "a directory"],
  ])("names a file it cannot read (%j) as such, with the reason", async (name, reason) => {
    const path = join(directory, name);
    const error = (await readProjectsFile(path).catch((caught: unknown) => caught)) as Error;
    expect(error.message).toMatch(`SLUICE_CONFIG_FILE ${path} cannot be read (${reason}): E`);
  });

  it("never quotes the file's text around a JSON syntax error: it may be part of a private key", async () => {
    const path = file(
      "broken.json",
      '{"projects":[{"deviceCheck":{"privateKey":"MIGTAgEAMBMGByqGSM49AgEG", "x": tru}}]}',
    );
    const error = (await seed(path).catch((caught: unknown) => caught)) as Error;
    expect(error.message).toBe(
      `SLUICE_CONFIG_FILE ${path} is not a valid projects file: Unexpected token '}' (not valid JSON)`,
    );
    // Without its path: a random directory under TMPDIR, which may hold "tru" itself.
    expect(error.message.replace(path, "")).not.toContain("tru");
    // A long file: V8 quotes a window of it, cut at both ends (`..."…"...`).
    const long = file(
      "long.json",
      `{"projects":[{"id":"p1","name":"P","provider":"provider-a","deviceCheck":{"privateKey": 'SECRETPEMSECRETPEMSECRETPEM-MIGTAgEAMBMGByqGSM49AgEG'}}]}`,
    );
    const quoted = (await seed(long).catch((caught: unknown) => caught)) as Error;
    expect(quoted.message.replace(long, "")).not.toContain("SECRET");
    expect(quoted.message).toMatch(/\(not valid JSON\)$/);
  });

  it.each([
    [{ projects: [{ name: "no id" }] }, "projects.0.id: is required"],
    [[1], "(file): Invalid input: expected object, received array"],
    // One problem, said once: not as both a record and an object expected.
    [{ projects: ["demo-app"] }, "projects.0: Invalid input: expected object, received string"],
    [
      {
        projects: [
          { id: "twice", name: "A", provider: "provider-a" },
          { id: "twice", name: "B" },
        ],
      },
      'projects.1.id: "twice" is listed twice',
    ],
  ])(
    "refuses the file %j with one line naming each problem, before seeding any project",
    async (content, reason) => {
      const path = file("unclear.json", content);
      await expect(seed(path)).rejects.toThrow(
        new Error(`SLUICE_CONFIG_FILE ${path} is not a valid projects file: ${reason}`),
      );
      expect((await admin.listProjects()).data).toEqual([]);
    },
  );

  it("refuses a file whose objects name a member twice, naming each by its place, before seeding any project", async () => {
    // JSON.parse keeps the last of the two without a word: Test Mode on though the first says off.
    const path = file(
      "repeated.json",
      `{"projects": [
        {"id": "a", "name": "A", "provider": "provider-a", "testMode": false, "testMode": true},
        {"id": "b", "name": "B", "provider": "provider-a"},
        {"id": "c", "name": "C", "provider": "provider-a",
         "deviceCheck": {"environment": "production", "environment": "development"}}
      ]}`,
    );
    await expect(seed(path)).rejects.toThrow(
      new Error(
        `SLUICE_CONFIG_FILE ${path} is not a valid projects file: projects.0.testMode: is given more than once; ` +
          "projects.2.deviceCheck.environment: is given more than once",
      ),
    );
    expect((await admin.listProjects()).data).toEqual([]);
    const twice = file("projects-twice.json", '{"projects": [], "projects": [{"id": "a"}]}');
    await expect(readProjectsFile(twice)).rejects.toThrow(
      new Error(
        `SLUICE_CONFIG_FILE ${twice} is not a valid projects file: projects: is given more than once`,
      ),
    );
  });

  it("seeds a proxy allow-list, leaves a project whose list matches unwritten, and names a refused rule by its place", async () => {
    const chatOnly = {
      "provider-a": ["POST chat/completions"],
      "provider-c": ["POST models/*:generateContent"],
    };
    const entry = { id: "chat-app", name: "Chat app", provider: "provider-a", proxyAllowList: chatOnly };
    const path = file("allow-list.json", { projects: [entry] });
    expect(await seed(path)).toMatchObject({ created: ["chat-app"] });
    expect((await admin.getProject("chat-app")).proxyAllowList).toEqual(chatOnly);
    expect(await seed(path)).toMatchObject({ unchanged: ["chat-app"] });
    const opened = file("opened.json", { projects: [{ ...entry, proxyAllowList: null }] });
    expect(await seed(opened)).toMatchObject({ updated: ["chat-app"] });
    expect((await admin.getProject("chat-app")).proxyAllowList).toBeNull();
    const refused = file("bad-rule.json", {
      projects: [{ ...entry, proxyAllowList: { "provider-a": ["POST chat/completions", "GET /files"] } }],
    });
    expect(((await seed(refused).catch((caught: unknown) => caught)) as Error).message).toBe(
      `SLUICE_CONFIG_FILE ${refused}: project "chat-app": Invalid project: projects.0.proxyAllowList.provider-a.1: ` +
        `"GET /files" starts with /: write the path after the provider's base URL (chat/completions)`,
    );
    expect((await admin.getProject("chat-app")).proxyAllowList).toBeNull();
  });

  it("refuses a name that shows as another, naming its place and code point, and updates a project stored with one by its other fields", async () => {
    const refused = file("spoofed-name.json", {
      projects: [{ id: "spoofed", name: "admin\u202Etset", provider: "provider-a" }],
    });
    await expect(readProjectsFile(refused)).rejects.toThrow(
      `SLUICE_CONFIG_FILE ${refused}: project "spoofed": Invalid project: projects.0.name: ` +
        "must not hold control, bidirectional or zero-width characters (U+202E at character 6)",
    );
    // Stored by an earlier release: a file entry that leaves the name out still seeds the project.
    await admin.createProject({ id: "spoofed", name: "Spoofed", provider: "provider-a" });
    const repository = createProjectRepository(database.db);
    const stored = (await repository.get("spoofed"))!;
    await repository.update({ ...stored, name: "admin\u202Etset" }, stored.updatedAt);
    const path = file("spoofed-fields.json", {
      projects: [{ id: "spoofed", provider: "provider-a", testMode: true }],
    });
    expect(await seed(path)).toMatchObject({ updated: ["spoofed"] });
    expect(await admin.getProject("spoofed")).toMatchObject({ name: "admin\u202Etset", testMode: true });
  });

  it("stops at an entry the admin API would refuse, with its reason", async () => {
    const path = file("refused.json", {
      projects: [{ id: "bad-provider", name: "x", provider: "provider-z" }],
    });
    const error = await seed(path).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(Error);
    expect((error as Error).message).toMatch(
      new RegExp(`^SLUICE_CONFIG_FILE ${path}: project "bad-provider": `),
    );
    expect((error as Error).cause).toMatchObject({ status: 400 });
  });

  it("gives the refused entry's reason once in the failed-start line", async () => {
    const path = file("test-mode.json", {
      projects: [{ id: "demo-app", name: "Demo app", provider: "provider-a", testMode: "yes" }],
    });
    const line = startFailureMessage(await seed(path).catch((caught: unknown) => caught));
    expect(line).toBe(
      `sluice failed to start: SLUICE_CONFIG_FILE ${path}: project "demo-app": ` +
        "Invalid project: projects.0.testMode: Invalid input: expected boolean, received string\n",
    );
  });

  it("gives each refused entry's reason once in the failed-start line, also when several are refused", async () => {
    const path = file("two-reasons.json", {
      projects: [
        { id: "first", name: "First", provider: "provider-a", testMode: "yes" },
        { id: "second", name: "Second", provider: "provider-a", disabled: "no" },
      ],
    });
    const line = startFailureMessage(await seed(path).catch((caught: unknown) => caught));
    expect(line.split("projects.0.testMode")).toHaveLength(2);
    expect(line).toMatch(/project "second": .*projects\.1\.disabled.*\n$/);
  });

  it("checks every entry before it writes any, and names each refused one and its problems", async () => {
    const path = file("two-refused.json", {
      projects: [
        { id: "fresh-one", name: "Fine", provider: "provider-a" },
        { id: "fresh-two", name: "Wrong model", provider: "provider-a", model: "claude-sonnet-4-5" },
        { id: "fresh-three", name: "No keys", provider: "provider-a", deviceCheck: { enabled: true } },
      ],
    });
    const error = (await seed(path).catch((caught: unknown) => caught)) as Error;
    expect(error.message).toBe(
      `SLUICE_CONFIG_FILE ${path}: ` +
        'project "fresh-two": model "claude-sonnet-4-5" is a provider-b model; this project\'s provider is provider-a; ' +
        'project "fresh-three": Device Check needs projects.2.deviceCheck.teamId, projects.2.deviceCheck.keyId and ' +
        "projects.2.deviceCheck.privateKey (the .p8 file's contents) when enabled",
    );
    expect((await admin.listProjects()).data).toEqual([]);
  });

  it("lists at most 50 problems of an entry, and how many more it has, as the admin API does", async () => {
    const required = Array.from({ length: 40_000 }, (_, index) => `p${index}`);
    const outputSchema = { type: "object", properties: {}, required, additionalProperties: false };
    const path = file("many-problems.json", {
      projects: [{ id: "many", name: "Many", provider: "provider-a", outputSchema }],
    });
    const error = (await readProjectsFile(path).catch((caught: unknown) => caught)) as Error;
    const listed = [
      "the output schema must be at most 65536 bytes of JSON (UTF-8)",
      ...required
        .slice(0, 49)
        .map(
          (name, index) =>
            `#/required/${index}: "${name}" is not among the properties and additionalProperties is false, so no answer can have it`,
        ),
    ];
    expect(error.message).toBe(
      `SLUICE_CONFIG_FILE ${path}: project "many": The output schema is invalid: ${listed.join("; ")}; and 39951 more problems`,
    );
  });

  it("names at most 50 refused entries, and how many more there are", async () => {
    const projects = Array.from({ length: 60 }, (_, index) => ({ id: `bad-${index}`, model: "../evil" }));
    const path = file("many-refused.json", { projects });
    const error = (await readProjectsFile(path).catch((caught: unknown) => caught)) as Error;
    const named = projects
      .slice(0, 50)
      .map(({ id }, index) => `project "${id}": Invalid project: projects.${index}.model: ${modelNameRule}`);
    expect(error.message).toBe(
      `SLUICE_CONFIG_FILE ${path}: ${named.join("; ")}; and 10 more projects refused`,
    );
  });

  it("checks each entry's fields and values while reading the file, before any database, naming each refused one", async () => {
    const path = file("bad-fields.json", {
      projects: [
        { id: "fine", name: "Fine", provider: "provider-a" },
        { id: "extra", name: "Extra", provider: "provider-a", bogus: 1 },
        { id: "bad id!", name: "Bad id" },
        { id: "bad-model", model: "../evil" },
        { id: "bad-schema", outputSchema: { type: "object", properties: { a: { type: "nonsense" } } } },
      ],
    });
    await expect(readProjectsFile(path)).rejects.toThrow(
      new Error(
        `SLUICE_CONFIG_FILE ${path}: ` +
          'project "extra": Invalid project: projects.1: Unrecognized key: "bogus"; ' +
          'project "bad id!": Invalid project: projects.2.id: must match ^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$; ' +
          `project "bad-model": Invalid project: projects.3.model: ${modelNameRule}; ` +
          'project "bad-schema": The output schema is invalid: #/properties/a: unknown type "nonsense"',
      ),
    );
  });

  it("refuses an entry's __proto__ member as any unknown field, as the admin API does, rather than drop it", async () => {
    // Written as text: JSON.stringify of an object literal would not write the member.
    const path = file(
      "proto.json",
      '{"projects":[{"id":"proto","name":"Proto","provider":"provider-a","__proto__":{"testMode":true}}]}',
    );
    await expect(readProjectsFile(path)).rejects.toThrow(
      new Error(
        `SLUICE_CONFIG_FILE ${path}: project "proto": Invalid project: projects.0: Unrecognized key: "__proto__"`,
      ),
    );
  });
});
