import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openAdminContext } from "../../src/admin/admin-context.js";
import { settings } from "../../src/config.js";
import { errorStatus } from "../../src/errors.js";
import { version } from "../../src/version.js";
import { adminToken, startTestGateway, type TestGateway } from "../support/test-gateway.js";

const admin = { authorization: `Bearer ${adminToken}`, "content-type": "application/json" };

describe("the gateway over HTTP", () => {
  let sluice: TestGateway;

  beforeAll(async () => {
    sluice = await startTestGateway({ maxBodyBytes: 4096 });
  });
  afterAll(async () => {
    await sluice.close();
  });

  const call = (path: string, init: RequestInit = {}) => fetch(`${sluice.url}${path}`, init);

  async function expectError(response: Response, status: number, code: string) {
    expect(response.status).toBe(status);
    expect(response.headers.get("content-type")).toMatch(/^application\/json/);
    const body = (await response.json()) as { error: Record<string, unknown> };
    expect(Object.keys(body)).toEqual(["error"]);
    expect(body.error.code).toBe(code);
    expect(typeof body.error.message).toBe("string");
    expect(body.error.requestId).toBe(response.headers.get("x-request-id"));
    // RFC 9110: a 401 carries a challenge.
    expect(response.headers.get("www-authenticate")).toBe(status === 401 ? 'Bearer realm="sluice"' : null);
    return body.error;
  }

  it("answers /health with the database check and no provider call", async () => {
    const response = await call("/health");
    expect(response.status).toBe(200);
    const body = (await response.json()) as Record<string, unknown>;
    expect(body).toMatchObject({ status: "ok", version, checks: { database: { status: "ok" } } });
    expect(typeof body.uptimeSeconds).toBe("number");
    const latencyMs = (body.checks as { database: { latencyMs: unknown } }).database.latencyMs;
    expect(typeof latencyMs === "number" && latencyMs >= 0).toBe(true);
    expect(response.headers.get("x-request-id")).toMatch(/^req_[0-9a-f]{32}$/);
  });

  it("answers an unknown route with 404 NOT_FOUND and a wrong method with 405 and Allow", async () => {
    await expectError(await call("/v2/nothing"), 404, "NOT_FOUND");
    const response = await call("/health", { method: "POST" });
    await expectError(response, 405, "METHOD_NOT_ALLOWED");
    expect(response.headers.get("allow")).toContain("GET");
  });

  // Project ids are at most 64 characters; a longer one in the path is still a project that does
  // not exist, however long (the router's own cap on a segment answered "No such route").
  it("answers a project id of any length in the path 404 PROJECT_NOT_FOUND, not an unknown route", async () => {
    for (const length of [65, 500, 501, 4000]) {
      const id = `p${"x".repeat(length - 1)}`;
      await expectError(await call(`/v1/provider-a/${id}/models`), 404, "PROJECT_NOT_FOUND");
      await expectError(
        await call(`/v1/provider-a/${id}/chat/completions`, {
          method: "POST",
          headers: { authorization: "Bearer sk_sluice_x_y.z", "content-type": "application/json" },
          body: "{}",
        }),
        404,
        "PROJECT_NOT_FOUND",
      );
    }
  });

  it("serves the six model lists in each provider's envelope", async () => {
    const projectId = await createProject("models");
    await addKeys(projectId, ["provider-a", "provider-b", "provider-c"]);
    for (const scope of ["", `/${projectId}`]) {
      const a = (await (await call(`/v1/provider-a${scope}/models`)).json()) as {
        object: string;
        data: unknown[];
      };
      expect(a.object).toBe("list");
      expect(a.data.length).toBeGreaterThan(0);
      expect(a.data[0]).toMatchObject({
        object: "model",
        pricing: expect.any(Object),
        capabilities: expect.any(Object),
      });
      const b = (await (await call(`/v1/provider-b${scope}/models`)).json()) as {
        data: unknown[];
        has_more: boolean;
      };
      expect(b.has_more).toBe(false);
      expect(b.data[0]).toMatchObject({ type: "model", display_name: expect.any(String) });
      const c = (await (await call(`/v1/provider-c${scope}/models`)).json()) as {
        models: Array<{ name: string }>;
      };
      expect(c.models[0]?.name).toMatch(/^models\//);
    }
    await expectError(await call("/v1/provider-a/no-such-project/models"), 404, "PROJECT_NOT_FOUND");
  });

  // DESIGN: each provider's own entry fields, which its SDK's Model type declares, on every entry.
  it("gives every entry the fields of its provider's own model object", async () => {
    const entries = async (provider: string) => {
      const body = (await (await call(`/v1/${provider}/models`)).json()) as {
        data?: Array<Record<string, unknown>>;
        models?: Array<Record<string, unknown>>;
      };
      const listed = body.data ?? body.models ?? [];
      // Some entries to check: an empty (or misnamed) list would pass every check below.
      expect(listed.length, provider).toBeGreaterThan(0);
      return listed;
    };
    for (const entry of await entries("provider-a"))
      expect(entry).toMatchObject({
        id: expect.any(String),
        object: "model",
        created: expect.any(Number),
        owned_by: expect.any(String),
      });
    for (const entry of await entries("provider-b")) {
      expect(entry).toMatchObject({
        id: expect.any(String),
        type: "model",
        display_name: expect.any(String),
        created_at: expect.any(String),
      });
      expect(new Date(entry.created_at as string).toISOString()).toBe(entry.created_at);
    }
    for (const entry of await entries("provider-c"))
      expect(entry).toMatchObject({
        name: expect.stringMatching(/^models\/./),
        displayName: expect.any(String),
      });
  });

  it("gives every list entry a name, its pricing (SPEC's per-image table; an unknown price null) and six capability flags", async () => {
    type Entry = Record<string, unknown> & { id?: string; name: string; pricing: Record<string, unknown> };
    const listed = async (provider: string) => {
      const response = await call(`/v1/${provider}/models`);
      // The lists without a project are the same for everyone: caches may keep them.
      expect(response.headers.get("cache-control")).toBe("public, max-age=300");
      const body = (await response.json()) as { data?: Entry[]; models?: Entry[] };
      return body.data ?? body.models ?? [];
    };
    const flags = ["text", "vision", "pdf", "structured", "image", "embeddings"];
    const all = new Map<string, Entry>();
    for (const provider of ["provider-a", "provider-b", "provider-c"]) {
      const entries = await listed(provider);
      expect(entries.length).toBeGreaterThan(0);
      for (const entry of entries) {
        expect(typeof entry.name).toBe("string");
        expect(Object.keys(entry.capabilities as object).sort()).toEqual([...flags].sort());
        for (const flag of flags)
          expect(typeof (entry.capabilities as Record<string, unknown>)[flag]).toBe("boolean");
        expect(entry.pricing.currency).toBe("USD");
        if (entry.pricing.unit === "1M tokens")
          for (const price of ["input", "output", "cachedInput"])
            expect(entry.pricing[price] === null || (entry.pricing[price] as number) >= 0).toBe(true);
        else expect(entry.pricing.unit).toBe("image");
        all.set(String(entry.id ?? entry.name).replace(/^models\//, ""), entry);
      }
    }
    expect(all.get("gpt-image-1")?.pricing.perImage).toEqual({
      low: { "1024x1024": 0.011, "1024x1536": 0.016, "1536x1024": 0.016 },
      medium: { "1024x1024": 0.042, "1024x1536": 0.063, "1536x1024": 0.063 },
      high: { "1024x1024": 0.167, "1024x1536": 0.25, "1536x1024": 0.25 },
    });
    expect(all.get("dall-e-3")?.pricing.perImage).toEqual({
      standard: {
        "1024x1024": 0.04,
        "1024x1536": 0.08,
        "1536x1024": 0.08,
        "1024x1792": 0.08,
        "1792x1024": 0.08,
      },
      hd: { "1024x1024": 0.08, "1024x1536": 0.12, "1536x1024": 0.12, "1024x1792": 0.12, "1792x1024": 0.12 },
    });
    expect(all.get("gpt-image-1-mini")?.pricing.perImage).toEqual({
      default: { "1024x1024": 0.016, "1024x1536": 0.018, "1536x1024": 0.02 },
    });
    expect(all.get("imagen-4.0-generate-001")?.pricing.perImage).toEqual({ default: { "*": 0.04 } });
    expect(all.get("imagen-4.0-fast-generate-001")?.pricing.perImage).toEqual({ default: { "*": 0.02 } });
    // The prices the cost engine uses beyond the base ones are listed too.
    expect(all.get("claude-sonnet-4-5")?.pricing).toMatchObject({
      input: 3,
      webSearchPerRequest: 0.01,
      longContext: { aboveInputTokens: 200_000, input: 6, output: 22.5, cachedInput: 0.6 },
    });
    expect(all.get("gemini-2.5-pro")?.pricing).toMatchObject({
      audioInput: 1.25,
      cachedAudioInput: 0.31,
      longContext: {
        aboveInputTokens: 200_000,
        input: 2.5,
        output: 15,
        cachedInput: 0.625,
        audioInput: 2.5,
        cachedAudioInput: 0.625,
      },
    });
    // Provider C's audio input prices, where Google lists them apart from text's.
    expect(all.get("gemini-2.5-flash")?.pricing).toMatchObject({
      input: 0.3,
      cachedInput: 0.075,
      audioInput: 1,
      cachedAudioInput: 0.25,
    });
    expect(all.get("gemini-embedding-001")?.pricing).not.toHaveProperty("audioInput");
    expect(all.get("gpt-4o")?.pricing).not.toHaveProperty("audioInput");
    // Provider A's GPT-6 models bill cache writes (kept 30 minutes), doubled over 272k input tokens.
    expect(all.get("gpt-6-sol")?.pricing).toEqual({
      unit: "1M tokens",
      currency: "USD",
      input: 2,
      output: 10,
      cachedInput: 0.2,
      cacheWrite: { thirtyMinutes: 2.5 },
      longContext: {
        aboveInputTokens: 272_000,
        input: 4,
        output: 15,
        cachedInput: 0.4,
        cacheWrite: { thirtyMinutes: 5 },
      },
    });
    // Image models after SPEC's table are priced by the token, images at prices of their own.
    expect(all.get("gpt-image-2.6-sunburst")?.pricing).toEqual({
      unit: "1M tokens",
      currency: "USD",
      input: 5,
      output: 30,
      cachedInput: 1.25,
      imageInput: 8,
    });
    expect(all.get("gemini-nano-banana-2.1")?.pricing).toMatchObject({
      input: 1.5,
      output: 7.5,
      imageOutput: 30,
    });
    expect(all.get("imagen-4.0-generate-001")?.deprecated).toEqual({
      shutdownDate: "2026-08-17",
      replacement: "gemini-nano-banana-2.1",
    });
    // SPEC has no price for provider C's ultra model: null, never 0.
    expect(all.get("imagen-4.0-ultra-generate-001")?.pricing.perImage).toEqual({ default: { "*": null } });
    // A model its provider deprecated says when its calls stop and what the provider names instead;
    // the others carry no `deprecated`.
    expect(all.get("claude-sonnet-4-5")?.deprecated).toEqual({
      shutdownDate: "2026-11-30",
      replacement: "claude-sonnet-5-5",
    });
    expect(all.get("claude-sonnet-5-5")).not.toHaveProperty("deprecated");
    // A day past: the provider has shut it down.
    expect(all.get("gpt-image-1")?.deprecated).toEqual({
      shutdownDate: "2026-10-23",
      replacement: "gpt-image-2.6-sunburst",
    });
    expect(all.get("gemini-2.5-flash")?.deprecated).toEqual({
      shutdownDate: "2026-12-01",
      replacement: "gemini-3.5-flash-lite",
    });
  });

  it("lists for a project only the models it may use: those of providers it holds a live key for, none while disabled", async () => {
    const projectId = await createProject("scoped models");
    const scoped = async () => {
      const lists = await Promise.all(
        ["provider-a", "provider-b", "provider-c"].map(async (provider) => {
          const response = await call(`/v1/${provider}/${projectId}/models`);
          expect(response.status).toBe(200);
          expect(response.headers.get("cache-control")).toBe("no-cache");
          const body = (await response.json()) as { data?: unknown[]; models?: unknown[] };
          return (body.data ?? body.models ?? []).length;
        }),
      );
      return lists;
    };
    const full = await Promise.all(
      ["provider-a", "provider-b", "provider-c"].map(async (provider) => {
        const body = (await (await call(`/v1/${provider}/models`)).json()) as {
          data?: unknown[];
          models?: unknown[];
        };
        return (body.data ?? body.models ?? []).length;
      }),
    );
    expect(await scoped()).toEqual([0, 0, 0]);
    const [keyA] = await addKeys(projectId, ["provider-a", "provider-c"]);
    expect(await scoped()).toEqual([full[0], 0, full[2]]);
    // An empty list keeps its provider's envelope.
    const emptyB = await (await call(`/v1/provider-b/${projectId}/models`)).json();
    expect(emptyB).toEqual({ data: [], has_more: false, first_id: null, last_id: null });
    await call(`/admin/v1/projects/${projectId}/keys/${keyA}`, { method: "DELETE", headers: admin });
    expect(await scoped()).toEqual([0, 0, full[2]]);
    await call(`/admin/v1/projects/${projectId}`, {
      method: "PATCH",
      headers: admin,
      body: JSON.stringify({ disabled: true }),
    });
    expect(await scoped()).toEqual([0, 0, 0]);
  });

  async function createProject(name: string): Promise<string> {
    const created = await call("/admin/v1/projects", {
      method: "POST",
      headers: admin,
      body: JSON.stringify({ name, provider: "provider-a" }),
    });
    return ((await created.json()) as { project: { id: string } }).project.id;
  }

  /** Adds one provider key per provider named; their key ids, in order. */
  async function addKeys(projectId: string, providers: string[]): Promise<string[]> {
    const ids: string[] = [];
    for (const provider of providers) {
      const added = await call(`/admin/v1/projects/${projectId}/keys`, {
        method: "POST",
        headers: admin,
        body: JSON.stringify({ provider, apiKey: `sk-${provider}-0123456789abcdef` }),
      });
      expect(added.status).toBe(201);
      ids.push(((await added.json()) as { keyId: string }).keyId);
    }
    return ids;
  }

  describe("admin API", () => {
    it("is refused without the admin token", async () => {
      await expectError(await call("/admin/v1/projects"), 401, "UNAUTHORIZED");
      await expectError(
        await call("/admin/v1/projects", { headers: { authorization: "Bearer wrong-token-wrong-token" } }),
        401,
        "UNAUTHORIZED",
      );
    });

    it("creates a project with its test key shown once, and reads, updates and deletes it", async () => {
      const created = await call("/admin/v1/projects", {
        method: "POST",
        headers: admin,
        body: JSON.stringify({ id: "admin-crud", name: "CRUD", provider: "provider-c", testMode: true }),
      });
      expect(created.status).toBe(201);
      // The one answer that holds the test key is kept by no cache on the way.
      expect(created.headers.get("cache-control")).toBe("no-store");
      const body = (await created.json()) as { project: Record<string, unknown>; testKey: string };
      expect(body.testKey).toMatch(/^tk_/);
      expect(body.project).toMatchObject({ id: "admin-crud", provider: "provider-c", testMode: true });
      const shown = await (await call("/admin/v1/projects/admin-crud", { headers: admin })).text();
      expect(shown).not.toContain(body.testKey);
      const patched = await call("/admin/v1/projects/admin-crud", {
        method: "PATCH",
        headers: admin,
        body: JSON.stringify({ model: "gemini-2.5-pro" }),
      });
      expect(await patched.json()).toMatchObject({ model: "gemini-2.5-pro" });
      const key = await call("/admin/v1/projects/admin-crud/keys", {
        method: "POST",
        headers: admin,
        body: JSON.stringify({ provider: "provider-c", apiKey: "AIzaSyTHISISASECRET" }),
      });
      expect(key.status).toBe(201);
      expect(key.headers.get("cache-control")).toBe("no-store");
      const keyBody = (await key.json()) as { keyId: string; partialKey: string };
      const listed = await (await call("/admin/v1/projects/admin-crud/keys", { headers: admin })).text();
      expect(listed).toContain(keyBody.keyId);
      expect(listed).not.toContain(keyBody.partialKey);
      expect(listed).not.toContain("AIzaSyTHISISASECRET");
      expect(
        (
          await call(`/admin/v1/projects/admin-crud/keys/${keyBody.keyId}`, {
            method: "DELETE",
            headers: admin,
          })
        ).status,
      ).toBe(204);
      expect((await call("/admin/v1/projects/admin-crud", { method: "DELETE", headers: admin })).status).toBe(
        204,
      );
      await expectError(
        await call("/admin/v1/projects/admin-crud", { headers: admin }),
        404,
        "PROJECT_NOT_FOUND",
      );
    });

    it.each([
      ["invalid JSON", "{nope", admin, 400, "BAD_REQUEST"],
      ["a JSON array", "[]", admin, 400, "BAD_REQUEST"],
      ["a missing name", JSON.stringify({ provider: "provider-a" }), admin, 400, "BAD_REQUEST"],
      [
        "an unknown provider",
        JSON.stringify({ name: "x", provider: "provider-d" }),
        admin,
        400,
        "BAD_REQUEST",
      ],
      [
        "an unknown field",
        JSON.stringify({ name: "x", provider: "provider-a", colour: "red" }),
        admin,
        400,
        "BAD_REQUEST",
      ],
      [
        "a bad id",
        JSON.stringify({ id: "-bad id", name: "x", provider: "provider-a" }),
        admin,
        400,
        "BAD_REQUEST",
      ],
      [
        "an invalid output schema",
        JSON.stringify({ name: "x", provider: "provider-a", outputSchema: { type: "object", oneOf: [] } }),
        admin,
        422,
        "VALIDATION_ERROR",
      ],
      [
        "device check without its key",
        JSON.stringify({ name: "x", provider: "provider-a", deviceCheck: { enabled: true } }),
        admin,
        422,
        "VALIDATION_ERROR",
      ],
      [
        "a bad .p8",
        JSON.stringify({
          name: "x",
          provider: "provider-a",
          deviceCheck: { privateKey: "-----BEGIN PRIVATE KEY-----\nnope" },
        }),
        admin,
        422,
        "VALIDATION_ERROR",
      ],
      ["a text body", "name=x", { ...admin, "content-type": "text/plain" }, 415, "UNSUPPORTED_MEDIA_TYPE"],
      [
        "a body over the cap",
        JSON.stringify({ name: "x".repeat(5000), provider: "provider-a" }),
        admin,
        413,
        "PAYLOAD_TOO_LARGE",
      ],
    ])("refuses %s", async (_what, body, headers, status, code) => {
      const error = await expectError(
        await call("/admin/v1/projects", { method: "POST", headers, body }),
        status,
        code,
      );
      expect(JSON.stringify(error)).not.toContain("-----BEGIN");
    });

    it("refuses a duplicate project id with 409 and bad usage queries with 400", async () => {
      const body = JSON.stringify({ id: "dupe", name: "x", provider: "provider-a" });
      expect((await call("/admin/v1/projects", { method: "POST", headers: admin, body })).status).toBe(201);
      await expectError(
        await call("/admin/v1/projects", { method: "POST", headers: admin, body }),
        409,
        "CONFLICT",
      );
      await expectError(
        await call("/admin/v1/projects/dupe/usage?groupBy=week", { headers: admin }),
        400,
        "BAD_REQUEST",
      );
      await expectError(
        await call("/admin/v1/projects/dupe/usage?from=2026-02-01&to=2026-01-01", { headers: admin }),
        400,
        "BAD_REQUEST",
      );
      const usage = await call("/admin/v1/projects/dupe/usage?groupBy=endpoint", { headers: admin });
      expect(await usage.json()).toMatchObject({ groupBy: "endpoint", rows: [] });
    });

    it("reads a `+` offset written unencoded in a usage query as the offset it is", async () => {
      const body = JSON.stringify({ id: "plus-offset", name: "x", provider: "provider-a" });
      expect((await call("/admin/v1/projects", { method: "POST", headers: admin, body })).status).toBe(201);
      const usage = await call(
        "/admin/v1/projects/plus-offset/usage?from=2026-11-01T10:00:00+02:00&to=2026-11-02T00:00:00%2B01:30",
        { headers: admin },
      );
      expect(usage.status).toBe(200);
      expect(await usage.json()).toMatchObject({
        from: "2026-11-01T08:00:00.000Z",
        to: "2026-11-01T22:30:00.000Z",
      });
    });

    it("shows a project created with the CLI's use cases on the same data", async () => {
      const context = await openAdminContext(sluice.gateway.config, () => {});
      await context.admin.createProject({ id: "from-cli", name: "CLI", provider: "provider-b" });
      await context.close();
      const response = await call("/admin/v1/projects/from-cli", { headers: admin });
      expect(await response.json()).toMatchObject({ id: "from-cli", provider: "provider-b" });
    });
  });
});

describe("the admin API while off", () => {
  it("answers 404 when SLUICE_ADMIN_TOKEN is unset", async () => {
    const sluice = await startTestGateway({ adminToken: undefined });
    try {
      const response = await fetch(`${sluice.url}/admin/v1/projects`, {
        headers: { authorization: "Bearer anything-at-all-here" },
      });
      expect(response.status).toBe(404);
    } finally {
      await sluice.close();
    }
  });
});

describe("documentation stays true", () => {
  it("lists every error code in docs/api.md", () => {
    const api = readFileSync(new URL("../../docs/api.md", import.meta.url), "utf8");
    for (const [code, status] of Object.entries(errorStatus)) {
      expect(api).toMatch(new RegExp(`\\| \`${code}\` \\| ${status} \\|`));
    }
  });

  it("lists every setting with its default and meaning in the README's configuration table, and no other", () => {
    const readme = readFileSync(new URL("../../README.md", import.meta.url), "utf8");
    const table = readme.slice(readme.indexOf("## Configuration"));
    const rows = table.split("\n").filter((line) => /^\| `[A-Z0-9_]+` \|/.test(line));
    const expected = Object.values(settings).map((setting) => {
      const defaultText = setting.default === undefined ? "unset" : `\`${setting.default}\``;
      return `| \`${setting.env}\` | ${defaultText} | ${setting.doc} |`;
    });
    expect(rows).toEqual(expected);
  });

  it("keeps src/version.ts equal to package.json", () => {
    const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as {
      version: string;
    };
    expect(version).toBe(pkg.version);
  });
});
