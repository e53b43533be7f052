import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createUsageRepository } from "../../src/storage/usage-repository.js";
import { adminToken, startTestGateway, type TestGateway } from "../support/test-gateway.js";
import { usageRow } from "../support/usage-row.js";

describe("admin routes", () => {
  let sluice: TestGateway;

  beforeAll(async () => {
    sluice = await startTestGateway();
    await sluice.gateway.admin.createProject({ id: "routes", name: "Routes", provider: "provider-a" });
  });
  afterAll(async () => {
    await sluice?.close();
  });

  const usage = (query: string) =>
    fetch(`${sluice.url}/admin/v1/projects/routes/usage?${query}`, {
      headers: { authorization: `Bearer ${adminToken}` },
    });

  it.each([
    ["groupBy=day&groupBy=model", "groupBy: is given more than once"],
    ["from=2026-01-01&from=2026-02-01", "from: is given more than once"],
  ])("refuses a usage query that repeats a parameter (%s) rather than pick one", async (query, problem) => {
    const response = await usage(query);
    expect(response.status).toBe(400);
    const body = (await response.json()) as { error: { code: string; details: { problems: string[] } } };
    expect(body.error.code).toBe("BAD_REQUEST");
    expect(body.error.details.problems).toEqual([problem]);
  });

  const sendJson = (method: string, path: string, body: unknown) =>
    fetch(`${sluice.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });

  it("refuses a name that shows as another (a right-to-left override) with 400 naming the field and the code point", async () => {
    const problem =
      "name: must not hold control, bidirectional or zero-width characters (U+202E at character 8)";
    for (const [method, path, what] of [
      ["POST", "/admin/v1/projects", "project"],
      ["PATCH", "/admin/v1/projects/routes", "project update"],
    ] as const) {
      const response = await sendJson(method, path, { name: "invoice\u202Efdp.exe", provider: "provider-a" });
      expect(response.status).toBe(400);
      const body = (await response.json()) as { error: Record<string, unknown> };
      expect(body.error).toMatchObject({
        code: "BAD_REQUEST",
        message: `Invalid ${what}: ${problem}`,
        details: { problems: [problem] },
      });
    }
    expect((await sluice.gateway.admin.getProject("routes")).name).toBe("Routes");
  });

  it("refuses a provider key's label that shows as another with 400 naming the field and the code point", async () => {
    const problem =
      "label: must not hold control, bidirectional or zero-width characters (U+202E at character 7)";
    const response = await sendJson("POST", "/admin/v1/projects/routes/keys", {
      provider: "provider-a",
      apiKey: "sk-0123456789abcdef",
      label: "backup\u202Etset",
    });
    expect(response.status).toBe(400);
    const body = (await response.json()) as { error: Record<string, unknown> };
    expect(body.error).toMatchObject({
      code: "BAD_REQUEST",
      message: `Invalid provider key: ${problem}`,
      details: { problems: [problem] },
    });
  });

  it("refuses a proxy allow-list rule holding a provider key with 422 that shows the rule by its start and length", async () => {
    const key = `sk-proj-${"Zx9Qw2Er7T".repeat(5)}`;
    const response = await sendJson("PATCH", "/admin/v1/projects/routes", {
      proxyAllowList: { "provider-a": [`POST chat/completions?key=${key}`] },
    });
    expect(response.status).toBe(422);
    const text = await response.text();
    expect(text).not.toContain(key.slice(0, 16));
    expect(JSON.parse(text).error.details.problems).toEqual([
      `proxyAllowList.provider-a.0: "POST…" (${key.length + 26} characters) holds a query string, which rules do not match: leave it out`,
    ]);
  });

  it.each([
    ["GET", "/admin/v1/projects/routes?fields=name", ["fields"]],
    ["GET", "/admin/v1/projects/routes/keys?limit=10&offset=20", ["limit", "offset"]],
    ["GET", "/admin/v1/projects/routes/keys?limit=1", ["limit"]],
    ["GET", "/admin/v1/projects/routes/test-keys?page=2", ["page"]],
    ["DELETE", "/admin/v1/projects/routes?force=true", ["force"]],
  ])(
    "refuses query parameters on a route that takes none (%s %s), as it refuses unknown fields",
    async (method, path, names) => {
      // A project's keys are not paged: a `limit` ignored would have answered every key without a word.
      const response = await fetch(`${sluice.url}${path}`, {
        method,
        headers: { authorization: `Bearer ${adminToken}` },
      });
      expect(response.status).toBe(400);
      const body = (await response.json()) as {
        error: { code: string; message: string; details: { problems: string[] } };
      };
      const problems = names.map((name) => `${name}: unknown parameter (this route takes none)`);
      expect(body.error).toMatchObject({ code: "BAD_REQUEST", details: { problems } });
      expect(body.error.message).toBe(`Invalid query: ${problems.join("; ")}`);
      // Nothing was done: the project is still there.
      expect((await sluice.gateway.admin.getProject("routes")).id).toBe("routes");
    },
  );

  it("answers a route that takes no query with an empty one (a bare `?`) as without", async () => {
    const response = await fetch(`${sluice.url}/admin/v1/projects/routes/keys?`, {
      headers: { authorization: `Bearer ${adminToken}` },
    });
    expect(response.status).toBe(200);
  });

  it.each([
    [
      "groupBy=day&bogus=1",
      ["bogus: unknown parameter (the parameters are from, to, groupBy, limit, cursor)"],
    ],
    ["from=yesterday", ["from: must be an ISO instant (2026-11-01T10:00:00Z) or date (2026-11-01)"]],
    [
      "to=2026-13-01&groupBy=week",
      [
        "to: must be an ISO instant (2026-11-01T10:00:00Z) or date (2026-11-01)",
        'groupBy: Invalid option: expected one of "day"|"model"|"endpoint"',
      ],
    ],
  ])("names the query parameter, not the body, in a bad usage query (%s)", async (query, problems) => {
    const response = await usage(query);
    expect(response.status).toBe(400);
    const body = (await response.json()) as { error: { message: string; details: { problems: string[] } } };
    expect(body.error.details.problems).toEqual(problems);
    expect(body.error.message).toBe(`Invalid usage query: ${problems.join("; ")}`);
  });

  it.each([
    ["limit=0", "limit: must be a whole number from 1 to 5000"],
    ["limit=5001", "limit: must be a whole number from 1 to 5000"],
    ["limit=1e3", "limit: must be a whole number from 1 to 5000"],
    ["limit=10.5", "limit: must be a whole number from 1 to 5000"],
    ["limit=0200", "limit: must be a whole number from 1 to 5000, without a leading zero"],
    ["limit=00", "limit: must be a whole number from 1 to 5000, without a leading zero"],
    ["limit=-1", "limit: must be a whole number from 1 to 5000"],
    ["limit=", "limit: must be a whole number from 1 to 5000"],
    ["limit=10&limit=20", "limit: is given more than once"],
    ["cursor=bm90LWEtY3Vyc29y", "cursor: is not a cursor a usage report answered (its `next`)"],
    ["cursor=", "cursor: is not a cursor a usage report answered (its `next`)"],
    ["cursor=(3000 characters)", "cursor: is not a cursor a usage report answered (its `next`)"],
  ])("refuses a bad page of the usage report (%s) with 400 naming the parameter", async (query, problem) => {
    const response = await usage(query.replace("(3000 characters)", "A".repeat(3000)));
    expect(response.status).toBe(400);
    const body = (await response.json()) as {
      error: { code: string; message: string; details: { problems: string[] } };
    };
    expect(body.error).toMatchObject({ code: "BAD_REQUEST", message: `Invalid usage query: ${problem}` });
    expect(body.error.details.problems).toEqual([problem]);
  });

  it("reads on with a cursor only in its own report: another window, grouping or project is 422", async () => {
    const { database } = sluice.gateway;
    await sluice.gateway.admin.createProject({ id: "routes-2", name: "Routes 2", provider: "provider-a" });
    const now = Date.now();
    await createUsageRepository(database.db, database.sqlite).insertBatch(
      ["m1", "m2", "m3"].map((model, index) =>
        usageRow(`cursor-${index}`, {
          project_id: "routes",
          model,
          created_at: new Date(now + index).toISOString(),
        }),
      ),
    );
    const window = `from=${new Date(now - 60_000).toISOString()}&to=${new Date(now + 60_000).toISOString()}`;
    const first = (await (await usage(`${window}&groupBy=model&limit=2`)).json()) as {
      rows: { group: string }[];
      next: string;
    };
    expect(first.rows.map((row) => row.group)).toEqual(["m1", "m2"]);
    // As many groups as `limit`, and none after them: no `next`.
    const whole = (await (await usage(`${window}&groupBy=model&limit=3`)).json()) as { rows: unknown[] };
    expect(whole.rows).toHaveLength(3);
    expect(whole).not.toHaveProperty("next");
    const next = encodeURIComponent(first.next);
    // Given alone, or with its own window and grouping, it reads on.
    for (const query of [`cursor=${next}`, `${window}&groupBy=model&cursor=${next}&limit=2`]) {
      const page = (await (await usage(query)).json()) as { rows: { group: string }[]; next?: string };
      expect(page.rows.map((row) => row.group)).toEqual(["m3"]);
      expect(page).not.toHaveProperty("next");
    }
    const refused = async (response: Response) => {
      expect(response.status).toBe(422);
      const body = (await response.json()) as { error: { code: string; details: { problems: string[] } } };
      expect(body.error.code).toBe("VALIDATION_ERROR");
      return body.error.details.problems;
    };
    expect(await refused(await usage(`cursor=${next}&groupBy=day`))).toEqual([
      "groupBy: differs from the cursor (model); leave it out to read on in the cursor's report",
    ]);
    expect(await refused(await usage(`cursor=${next}&from=2026-01-01`))).toEqual([
      `from: differs from the cursor (${new Date(now - 60_000).toISOString()}); leave it out to read on in the cursor's report`,
    ]);
    const elsewhere = await fetch(`${sluice.url}/admin/v1/projects/routes-2/usage?cursor=${next}`, {
      headers: { authorization: `Bearer ${adminToken}` },
    });
    expect(await refused(elsewhere)).toEqual(["cursor: is a cursor of another project's usage report"]);
  });

  const projectList = (query: string) =>
    fetch(`${sluice.url}/admin/v1/projects${query}`, { headers: { authorization: `Bearer ${adminToken}` } });

  it("answers a list of few projects as before pages: `data` alone, every project, no `next`", async () => {
    const response = await projectList("");
    expect(response.status).toBe(200);
    const body = (await response.json()) as { data: { id: string }[] };
    expect(Object.keys(body)).toEqual(["data"]);
    expect(body.data.map((project) => project.id)).toContain("routes");
    // As many as `limit`, and none after them: no `next` either.
    const exact = (await (await projectList(`?limit=${body.data.length}`)).json()) as object;
    expect(exact).toEqual(body);
  });

  it.each([
    ["limit=0", "limit: must be a whole number from 1 to 200"],
    ["limit=201", "limit: must be a whole number from 1 to 200"],
    ["limit=1e2", "limit: must be a whole number from 1 to 200"],
    ["limit=050", "limit: must be a whole number from 1 to 200, without a leading zero"],
    ["limit=", "limit: must be a whole number from 1 to 200"],
    ["limit=10&limit=20", "limit: is given more than once"],
    ["cursor=bm90LWEtY3Vyc29y", "cursor: is not a cursor the project list answered (its `next`)"],
    ["cursor=", "cursor: is not a cursor the project list answered (its `next`)"],
    ["cursor=(3000 characters)", "cursor: is not a cursor the project list answered (its `next`)"],
    ["offset=20", "offset: unknown parameter (the parameters are limit, cursor)"],
  ])("refuses a bad page of the project list (%s) with 400 naming the parameter", async (query, problem) => {
    const response = await projectList(`?${query.replace("(3000 characters)", "A".repeat(3000))}`);
    expect(response.status).toBe(400);
    const body = (await response.json()) as {
      error: { code: string; message: string; details: { problems: string[] } };
    };
    expect(body.error).toMatchObject({
      code: "BAD_REQUEST",
      message: `Invalid project list query: ${problem}`,
    });
    expect(body.error.details.problems).toEqual([problem]);
  });

  it("refuses a cursor of one paged list given to the other with 422: it would read on elsewhere", async () => {
    await sluice.gateway.admin.createProject({ id: "routes-3", name: "Routes 3", provider: "provider-a" });
    const projects = (await (await projectList("?limit=1")).json()) as { next: string };
    const now = Date.now();
    await createUsageRepository(sluice.gateway.database.db, sluice.gateway.database.sqlite).insertBatch(
      ["x1", "x2"].map((model, index) =>
        usageRow(`other-list-${index}`, {
          project_id: "routes",
          model,
          created_at: new Date(now + index).toISOString(),
        }),
      ),
    );
    const window = `from=${new Date(now - 60_000).toISOString()}&to=${new Date(now + 60_000).toISOString()}`;
    const report = (await (await usage(`${window}&groupBy=model&limit=1`)).json()) as { next: string };
    const refused = async (response: Response, message: string) => {
      expect(response.status).toBe(422);
      const body = (await response.json()) as { error: { code: string; message: string } };
      expect(body.error).toMatchObject({ code: "VALIDATION_ERROR", message });
    };
    await refused(
      await projectList(`?cursor=${encodeURIComponent(report.next)}`),
      "Invalid project list query: cursor: is a cursor of a usage report, not of the project list",
    );
    await refused(
      await usage(`cursor=${encodeURIComponent(projects.next)}`),
      "Invalid usage query: cursor: is a cursor of the project list, not of a usage report",
    );
  });

  // Found by test/e2e/fuzz-bad-inputs.test.ts: `?=1` was refused as ": unknown parameter (…)", a
  // problem that names nothing.
  it.each([
    [
      "/admin/v1/projects/routes/test-keys?=1",
      "Invalid query: (a parameter without a name): unknown parameter (this route takes none)",
    ],
    [
      "/admin/v1/projects?=1",
      "Invalid project list query: (a parameter without a name): unknown parameter (the parameters are limit, cursor)",
    ],
    [
      "/admin/v1/projects/routes/usage?=&groupBy=day",
      "Invalid usage query: (a parameter without a name): unknown parameter (the parameters are from, to, groupBy, limit, cursor)",
    ],
  ])("names a query parameter sent without a name as such (%s)", async (path, message) => {
    const response = await fetch(`${sluice.url}${path}`, {
      headers: { authorization: `Bearer ${adminToken}` },
    });
    expect(response.status).toBe(400);
    const body = (await response.json()) as { error: { code: string; message: string } };
    expect(body.error).toMatchObject({ code: "BAD_REQUEST", message });
  });

  // Found by a hostile audit: a provider key sent as a bare query string (`?sk-proj-…`, `?AIza…`), a
  // parameter's name, was echoed whole in the 400, though a key typed where a project id goes is
  // named by its start and length only (docs/api.md, PROJECT_NOT_FOUND).
  it.each([
    ["/admin/v1/projects/routes/keys?", "(this route takes none)"],
    ["/admin/v1/projects?", "(the parameters are limit, cursor)"],
    ["/admin/v1/projects/routes/usage?groupBy=day&", "(the parameters are from, to, groupBy, limit, cursor)"],
  ])("names a query parameter that may be a key by its start and length (%s)", async (path, rest) => {
    const key = `sk-proj-${"k".repeat(40)}`;
    const response = await fetch(`${sluice.url}${path}${key}`, {
      headers: { authorization: `Bearer ${adminToken}` },
    });
    expect(response.status).toBe(400);
    const text = await response.text();
    expect(text).not.toContain(key.slice(0, 12));
    const body = JSON.parse(text) as { error: { details: { problems: string[] } } };
    expect(body.error.details.problems).toEqual([`"sk-p…" (48 characters): unknown parameter ${rest}`]);
  });

  it("refuses a project whose model the catalogue lists under another provider with 422", async () => {
    const send = (method: string, path: string, body: unknown) =>
      fetch(`${sluice.url}/admin/v1/projects${path}`, {
        method,
        headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
    const created = await send("POST", "", {
      name: "Wrong",
      provider: "provider-a",
      model: "claude-sonnet-4-5",
    });
    expect(created.status).toBe(422);
    expect(((await created.json()) as { error: unknown }).error).toMatchObject({
      code: "VALIDATION_ERROR",
      message: `model "claude-sonnet-4-5" is a provider-b model; this project's provider is provider-a`,
      details: { model: "claude-sonnet-4-5", provider: "provider-a", modelProvider: "provider-b" },
    });
    const patched = await send("PATCH", "/routes", { model: "gemini-2.5-flash" });
    expect(patched.status).toBe(422);
    expect(((await patched.json()) as { error: { code: string } }).error.code).toBe("VALIDATION_ERROR");
    const custom = await send("PATCH", "/routes", { model: "my-own-model" });
    expect(custom.status).toBe(200);
  });

  /** A closed object schema that requires each of `names`, none among its properties. */
  const requiringUnlisted = (names: string[]) => ({
    name: "Many",
    provider: "provider-a",
    outputSchema: { type: "object", properties: {}, required: names, additionalProperties: false },
  });
  const postProject = (body: unknown) =>
    fetch(`${sluice.url}/admin/v1/projects`, {
      method: "POST",
      headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });

  it("lists at most 50 problems in one 422 and says how many more there were, so its size stays bounded", async () => {
    // 39,990 names no answer can have, and the schema over its 65,536 bytes: 39,991 problems, which
    // were each listed twice (message and details), a 9.4 MB answer to a 349 KB body.
    const names = Array.from({ length: 39_990 }, (_, index) => `p${index}`);
    const response = await postProject(requiringUnlisted(names));
    expect(response.status).toBe(422);
    const text = await response.text();
    expect(text.length).toBeLessThan(32 * 1024);
    const { error } = JSON.parse(text) as {
      error: { code: string; message: string; details: { problems: string[]; moreProblems: number } };
    };
    const listed = [
      "the output schema must be at most 65536 bytes of JSON (UTF-8)",
      ...names
        .slice(0, 49)
        .map(
          (name, index) =>
            `#/required/${index}: "${name}" is not among the properties and additionalProperties is false, so no answer can have it`,
        ),
    ];
    expect(error).toMatchObject({
      code: "VALIDATION_ERROR",
      details: { problems: listed, moreProblems: 39_941 },
    });
    expect(error.message).toBe(`The output schema is invalid: ${listed.join("; ")}; and 39941 more problems`);
  });

  it("cuts a problem that quotes a long value of the input to its start and end, where and why", async () => {
    // A name (here a required one) that long is shown by its start and length, as one that may be a
    // key; a value (here a type) is quoted, and the problem cut.
    const response = await postProject({
      name: "Long",
      provider: "provider-a",
      outputSchema: { type: "object", properties: { a: { type: "n".repeat(30_000) } } },
    });
    expect(response.status).toBe(422);
    const text = await response.text();
    expect(text.length).toBeLessThan(2 * 1024);
    const { error } = JSON.parse(text) as { error: { message: string; details: { problems: string[] } } };
    const [problem] = error.details.problems as [string];
    expect(error.details.problems).toHaveLength(1);
    expect(problem).toMatch(/^#\/properties\/a: unknown type "n+…n+"$/);
    expect(problem.length).toBe(400);
    expect(error.message).toBe(`The output schema is invalid: ${problem}`);
    const named = await postProject(requiringUnlisted(["n".repeat(30_000)]));
    expect(
      ((await named.json()) as { error: { details: { problems: string[] } } }).error.details.problems,
    ).toEqual([
      '#/required/0: "nnnn…" (30000 characters) is not among the properties and additionalProperties is false, so no answer can have it',
    ]);
  });

  it("answers a rule across fields and a .p8 that is no key with 422 and details.problems naming the fields", async () => {
    const post = async (body: unknown) => {
      const response = await fetch(`${sluice.url}/admin/v1/projects`, {
        method: "POST",
        headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      return { status: response.status, error: ((await response.json()) as { error: unknown }).error };
    };
    const base = { name: "Rules", provider: "provider-a" };
    expect(await post({ ...base, deviceCheck: { enabled: true, teamId: "TEAM123456" } })).toMatchObject({
      status: 422,
      error: {
        code: "VALIDATION_ERROR",
        details: {
          problems: [
            "deviceCheck.keyId: is required when deviceCheck.enabled is true",
            "deviceCheck.privateKey: is required when deviceCheck.enabled is true (the .p8 file's contents)",
          ],
        },
      },
    });
    const privateKey = "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n";
    expect(await post({ ...base, deviceCheck: { privateKey } })).toMatchObject({
      status: 422,
      error: {
        code: "VALIDATION_ERROR",
        details: {
          problems: ["deviceCheck.privateKey: must be the PEM contents of an Apple .p8 (EC P-256) key"],
        },
      },
    });
  });

  const send = (method: string, path: string, body?: string, type = "application/json") =>
    fetch(`${sluice.url}/admin/v1/projects${path}`, {
      method,
      headers: {
        authorization: `Bearer ${adminToken}`,
        ...(body === undefined ? {} : { "content-type": type }),
      },
      ...(body === undefined ? {} : { body }),
    });

  it.each(["default", "const"])(
    "refuses an output schema whose %s nests 4,500 levels with 422 and the reason, not a 500",
    async (keyword) => {
      const deep = `${"[".repeat(4500)}1${"]".repeat(4500)}`;
      const schema = `{"type":"object","properties":{"x":{"type":"array","${keyword}":${deep}}}}`;
      for (const response of [
        await send("POST", "", `{"name":"Deep","provider":"provider-a","outputSchema":${schema}}`),
        await send("PATCH", "/routes", `{"outputSchema":${schema}}`),
      ]) {
        expect(response.status).toBe(422);
        const body = (await response.json()) as { error: { code: string; details: { problems: string[] } } };
        expect(body.error.code).toBe("VALIDATION_ERROR");
        expect(body.error.details.problems).toEqual([
          expect.stringMatching(/nests objects and arrays deeper than 64 levels$/),
        ]);
      }
    },
  );

  // Found by a hostile audit: the admin API parsed its bodies without the bounds the JSON endpoints
  // have (json-shape.ts), so one body within SLUICE_MAX_BODY_BYTES held the event loop, every app's
  // call with it, for seconds: 13 s for 9M nested arrays, 36 s for an output schema of a 9M-value enum.
  it.each([
    [
      "POST",
      "",
      (value: string) => `{"id":"big","name":"Big","provider":"provider-a","outputSchema":${value}}`,
    ],
    ["PATCH", "/routes", (value: string) => `{"outputSchema":${value}}`],
    [
      "POST",
      "/routes/keys",
      (value: string) => `{"provider":"provider-a","apiKey":"sk-0123456789","label":${value}}`,
    ],
    ["POST", "/routes/test-keys", (value: string) => `{"x":${value}}`],
    ["DELETE", "/routes", (value: string) => `{"x":${value}}`],
  ])(
    "refuses a %s %s body deeper or larger than any admin input before parsing it",
    async (method, path, body) => {
      const refusals = [
        [
          `{"type":"object","enum":[${"0,".repeat(40_000)}0]}`,
          "holds more than 40000 object members and array elements",
        ],
        [`${"[".repeat(10_000)}${"]".repeat(10_000)}`, "nests objects and arrays more than 10000 deep"],
      ];
      for (const [value, what] of refusals) {
        const response = await send(method, path, body(value as string));
        expect(response.status).toBe(400);
        expect(((await response.json()) as { error: unknown }).error).toMatchObject({
          code: "BAD_REQUEST",
          message: `The request body ${what}: the admin API takes one JSON object of the fields its route lists (docs/api.md)`,
          details: { maxDepth: 10_000, maxValues: 40_000 },
        });
      }
      // Nothing was written: no project created, the project and its keys as they were.
      expect((await send("GET", "/big")).status).toBe(404);
      expect((await send("GET", "/routes")).status).toBe(200);
      expect(await (await send("GET", "/routes/keys")).json()).toEqual({ data: [] });
    },
  );

  // Found by a hostile audit: `outputSchema` was read as a zod record, which drops a `__proto__`
  // member rather than copy it (it would set the copy's prototype): the schema was checked and stored
  // without it, where the same keyword anywhere deeper is refused.
  it("refuses `__proto__` at the root of an output schema as any unsupported keyword, rather than drop it", async () => {
    const schema = '{"type":"object","__proto__":{"type":"string"}}';
    const before = await (await send("GET", "/routes")).json();
    for (const response of [
      await send(
        "POST",
        "",
        `{"id":"proto","name":"Proto","provider":"provider-a","outputSchema":${schema}}`,
      ),
      await send("PATCH", "/routes", `{"outputSchema":${schema}}`),
    ]) {
      expect(response.status).toBe(422);
      expect(((await response.json()) as { error: unknown }).error).toMatchObject({
        code: "VALIDATION_ERROR",
        details: {
          problems: [`#: keyword "__proto__" is not supported by the providers' structured output`],
        },
      });
    }
    expect((await send("GET", "/proto")).status).toBe(404);
    expect(await (await send("GET", "/routes")).json()).toEqual(before);
  });

  // Found by a hostile audit: JSON.parse keeps the last of two members of one name without a word,
  // so `{"testMode":false,…,"testMode":true}` turned Test Mode on, where a proxy or a log in front may
  // read the first (RFC 8259 §4: such a body's meaning is unpredictable). A repeated query parameter
  // and a repeated Authorization header are refused rather than one picked; so is this.
  it.each([
    [
      "POST",
      "",
      '{"id":"dup","name":"Dup","provider":"provider-a","testMode":false,"testMode":true}',
      ["testMode"],
    ],
    [
      "PATCH",
      "/routes",
      '{"name":"a","name":"b","rateLimits":{"perMinute":5,"perMinute":6}}',
      ["name", "rateLimits.perMinute"],
    ],
    [
      "PATCH",
      "/routes",
      '{"deviceCheck":{"environment":"production","environm\\u0065nt":"development"}}',
      ["deviceCheck.environment"],
    ],
    [
      "PATCH",
      "/routes",
      '{"outputSchema":{"type":"object","properties":{"a":{"anyOf":[{"type":"string"},{"type":"string","type":"number"}]}}}}',
      ["outputSchema.properties.a.anyOf.1.type"],
    ],
    [
      "POST",
      "/routes/keys",
      '{"provider":"provider-a","apiKey":"sk-0123456789","apiKey":"sk-9876543210"}',
      ["apiKey"],
    ],
  ])(
    "refuses a %s %s body that names a member twice in one object, naming it",
    async (method, path, body, paths) => {
      const before = await (await send("GET", "/routes")).json();
      const response = await send(method, path, body);
      expect(response.status).toBe(400);
      const problems = paths.map((name) => `${name}: is given more than once`);
      expect(((await response.json()) as { error: unknown }).error).toMatchObject({
        code: "BAD_REQUEST",
        message: `Invalid request body: ${problems.join("; ")}`,
        details: { problems },
      });
      // Nothing was written.
      expect((await send("GET", "/dup")).status).toBe(404);
      expect(await (await send("GET", "/routes")).json()).toEqual(before);
      expect(await (await send("GET", "/routes/keys")).json()).toEqual({ data: [] });
    },
  );

  it("takes the same name in two objects, and a member name that a string value repeats", async () => {
    const body = '{"name":"name","deviceCheck":{"teamId":null},"teamId":null}';
    expect((await send("PATCH", "/routes", body)).status).toBe(200);
  });

  it("refuses `__proto__`, `constructor` and `prototype` members at every level, polluting nothing", async () => {
    const members = ['"__proto__":{"polluted":1}', '"constructor":{"prototype":{"polluted":1}}'];
    for (const member of members) {
      for (const body of [
        `{"name":"P","provider":"provider-a",${member}}`,
        `{"name":"P","provider":"provider-a","deviceCheck":{${member}}}`,
        `{"name":"P","provider":"provider-a","rateLimits":{${member}}}`,
        `{"name":"P","provider":"provider-a","proxyAllowList":{${member}}}`,
      ]) {
        const response = await send("POST", "", body);
        expect(response.status).toBe(400);
        expect(((await response.json()) as { error: { code: string } }).error.code).toBe("BAD_REQUEST");
      }
    }
    expect(({} as { polluted?: unknown }).polluted).toBeUndefined();
    expect(Object.hasOwn(Object.prototype, "prototype")).toBe(false);
  });

  it.each([
    ["an unknown field", '{"foo":1}', 400],
    ["a body that is not an object", "[]", 400],
    ["an empty object", "{}", 201],
    ["no body", undefined, 201],
  ])("rotates a test key only when the body has no fields: %s", async (_what, body, status) => {
    const response = await send("POST", "/routes/test-keys", body);
    expect(response.status).toBe(status);
    if (status === 400) {
      const error = ((await response.json()) as { error: { code: string; details?: unknown } }).error;
      expect(error.code).toBe("BAD_REQUEST");
    }
  });

  it.each([
    ["DELETE", "/routes/test-keys/tk0000000000000000"],
    ["DELETE", "/routes/keys/key0000"],
    ["DELETE", "/routes"],
  ])("refuses unknown fields in the body of %s %s with 400, changing nothing", async (method, path) => {
    const response = await send(method, path, '{"foo":1}');
    expect(response.status).toBe(400);
    const error = ((await response.json()) as { error: { code: string; details: unknown } }).error;
    expect(error).toMatchObject({
      code: "BAD_REQUEST",
      details: { problems: ['(body): Unrecognized key: "foo"'] },
    });
    expect((await send("GET", "/routes")).status).toBe(200);
  });

  it.each([
    ["an unknown member", (name: string) => `{"name":"Keyed","provider":"provider-a","${name}":1}`],
    ["an unknown member of deviceCheck", (name: string) => `{"name":"Keyed","deviceCheck":{"${name}":1}}`],
    ["a repeated member", (name: string) => `{"name":"Keyed","deviceCheck":{"${name}":1,"${name}":2}}`],
  ])("names %s shaped like a key by its start and length only", async (_, bodyWith) => {
    const key = `sk-proj-${"Ab3".repeat(16)}`;
    const response = await send("POST", "", bodyWith(key));
    expect(response.status).toBe(400);
    const text = await response.text();
    expect(text).not.toContain(key.slice(0, 12));
    // As the answer's JSON holds it: the quotes around the start escaped.
    expect(text).toContain(JSON.stringify(`"sk-p…" (${key.length} characters)`).slice(1, -1));
  });

  it.each([
    ["an unknown keyword", (name: string) => ({ type: "object", [name]: 1 })],
    [
      "a property whose schema is refused",
      (name: string) => ({ type: "object", properties: { [name]: { type: "nonsense" } } }),
    ],
    [
      "a definition with an unknown keyword",
      (name: string) => ({ type: "object", $defs: { [name]: { type: "object", bogus: true } } }),
    ],
    [
      "a required name no answer can have",
      (name: string) => ({ type: "object", properties: {}, required: [name], additionalProperties: false }),
    ],
  ])("names %s of an output schema shaped like a key by its start and length only", async (_, schemaWith) => {
    const key = `sk-proj-${"Ab3".repeat(16)}`;
    for (const [method, path, body] of [
      ["POST", "", { name: "Keyed", provider: "provider-a", outputSchema: schemaWith(key) }],
      ["PATCH", "/routes", { outputSchema: schemaWith(key) }],
    ] as const) {
      const response = await send(method, path, JSON.stringify(body));
      expect(response.status, method).toBe(422);
      const text = await response.text();
      expect(text).toContain("The output schema is invalid");
      expect(text, method).not.toContain(key.slice(0, 12));
      expect(text, method).toContain(JSON.stringify(`"sk-p…" (${key.length} characters)`).slice(1, -1));
    }
  });

  it("creates, shows, replaces and removes a project's proxy allow-list", async () => {
    const json = async (response: Response) => (await response.json()) as { proxyAllowList: unknown };
    const chatOnly = {
      "provider-a": ["POST chat/completions"],
      "provider-c": ["POST models/*:generateContent"],
    };
    const created = await send(
      "POST",
      "",
      JSON.stringify({ id: "allow-list", name: "Allow", provider: "provider-a", proxyAllowList: chatOnly }),
    );
    expect(created.status).toBe(201);
    expect(
      ((await created.json()) as { project: { proxyAllowList: unknown } }).project.proxyAllowList,
    ).toEqual(chatOnly);
    expect(await json(await send("GET", "/allow-list"))).toMatchObject({ proxyAllowList: chatOnly });
    const replaced = await send(
      "PATCH",
      "/allow-list",
      JSON.stringify({ proxyAllowList: { "provider-b": [] } }),
    );
    expect(await json(replaced)).toMatchObject({ proxyAllowList: { "provider-b": [] } });
    const removed = await send("PATCH", "/allow-list", JSON.stringify({ proxyAllowList: null }));
    expect(await json(removed)).toMatchObject({ proxyAllowList: null });
    expect(await json(await send("GET", "/routes"))).toMatchObject({ proxyAllowList: null });
  });

  it("refuses proxy allow-list rules that do not parse with 422 and every reason, and a list of the wrong shape with 400", async () => {
    const rules = {
      "provider-a": ["GET files/**", "DELETE /files/*", `POST ${"x".repeat(200)}`],
      "provider-b": ["GET messages/batches"],
    };
    const refused = await send("PATCH", "/routes", JSON.stringify({ proxyAllowList: rules }));
    expect(refused.status).toBe(422);
    const problems = [
      'proxyAllowList.provider-a.1: "DELETE /files/*" starts with /: write the path after the provider\'s base URL (chat/completions)',
      `proxyAllowList.provider-a.2: "POST ${"x".repeat(200)}" is longer than 200 characters`,
      'proxyAllowList.provider-b.0: "GET messages/batches" names a method provider-b\'s proxy does not take (it takes POST)',
    ];
    expect(((await refused.json()) as { error: unknown }).error).toEqual({
      code: "VALIDATION_ERROR",
      message: `Invalid project: ${problems.join("; ")}`,
      requestId: refused.headers.get("x-request-id"),
      details: { problems },
    });
    const many = Array.from({ length: 101 }, (_, index) => `POST x${index}`);
    const tooMany = await send(
      "POST",
      "",
      JSON.stringify({ name: "Many", provider: "provider-a", proxyAllowList: { "provider-a": many } }),
    );
    expect(tooMany.status).toBe(422);
    expect(((await tooMany.json()) as { error: { details: unknown } }).error.details).toEqual({
      problems: ["proxyAllowList.provider-a: holds 101 rules; at most 100"],
    });
    const misshapen = await send(
      "PATCH",
      "/routes",
      JSON.stringify({ proxyAllowList: { "provider-x": ["**"] } }),
    );
    expect(misshapen.status).toBe(400);
    expect(((await misshapen.json()) as { error: unknown }).error).toMatchObject({
      code: "BAD_REQUEST",
      details: { problems: ['proxyAllowList: Unrecognized key: "provider-x"'] },
    });
    expect(await send("GET", "/routes").then((response) => response.json())).toMatchObject({
      proxyAllowList: null,
    });
  });
});
