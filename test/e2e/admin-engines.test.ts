import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPostgresSchema, postgresAvailable } from "../support/services.js";
import { adminToken, startTestGateway, type TestGateway } from "../support/test-gateway.js";

/**
 * Input that one engine would take and the other refuse (or change): the answers must be the same
 * on SQLite and PostgreSQL, never a 500, and never a usage row that blocks the ones behind it.
 */
const engines = [
  { name: "SQLite", available: true, schema: false },
  { name: "PostgreSQL", available: postgresAvailable, schema: true },
];

for (const engine of engines) {
  describe.skipIf(!engine.available)(`admin input on ${engine.name}`, () => {
    let sluice: TestGateway;
    let drop: (() => Promise<void>) | undefined;

    beforeAll(async () => {
      const schema = engine.schema ? await createPostgresSchema() : undefined;
      drop = schema?.drop;
      sluice = await startTestGateway(schema ? { databaseUrl: schema.url } : {});
      const created = await admin("POST", "/projects", { id: "kept", name: "Kept", provider: "provider-a" });
      expect(created.status).toBe(201);
    });
    afterAll(async () => {
      await sluice?.close();
      await drop?.();
    });

    function admin(method: string, path: string, body?: unknown) {
      return fetch(`${sluice.url}/admin/v1${path}`, {
        method,
        headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
    }

    async function errorOf(response: Response) {
      return {
        status: response.status,
        code: ((await response.json()) as { error: { code: string } }).error.code,
      };
    }

    it.each([
      ["GET", "/projects/a%00b", "PROJECT_NOT_FOUND"],
      ["PATCH", "/projects/a%00b", "PROJECT_NOT_FOUND"],
      ["DELETE", "/projects/a%00b", "PROJECT_NOT_FOUND"],
      ["GET", "/projects/a%00b/usage", "PROJECT_NOT_FOUND"],
      ["GET", "/projects/a%00b/keys", "PROJECT_NOT_FOUND"],
      ["DELETE", "/projects/kept/keys/%00", "NOT_FOUND"],
      ["DELETE", "/projects/kept/test-keys/%00", "NOT_FOUND"],
    ])("answers %s %s with 404 %s", async (method, path, code) => {
      const response = await admin(method, path, method === "PATCH" ? { name: "x" } : undefined);
      expect(await errorOf(response)).toEqual({ status: 404, code });
    });

    it("answers a project-scoped model list for an id with a NUL with 404, not a database outage", async () => {
      const response = await fetch(`${sluice.url}/v1/provider-a/a%00b/models`);
      expect(await errorOf(response)).toEqual({ status: 404, code: "PROJECT_NOT_FOUND" });
    });

    it.each([
      ["a name with a NUL", "POST", "/projects", { name: "a\u0000b", provider: "provider-a" }],
      ["a model with a NUL", "POST", "/projects", { name: "n", provider: "provider-a", model: "m\u0000" }],
      ["a name with a lone high surrogate", "PATCH", "/projects/kept", { name: "x\ud800" }],
      ["a name with a lone low surrogate", "PATCH", "/projects/kept", { name: "\udc00x" }],
      [
        "a key label with a NUL",
        "POST",
        "/projects/kept/keys",
        { provider: "provider-a", apiKey: "sk-abcdefgh123", label: "l\u0000" },
      ],
    ])("refuses %s with 400 and stores nothing", async (_what, method, path, body) => {
      const before = await (await admin("GET", "/projects")).text();
      expect(await errorOf(await admin(method, path, body))).toEqual({ status: 400, code: "BAD_REQUEST" });
      expect(await (await admin("GET", "/projects")).text()).toBe(before);
      expect(
        ((await (await admin("GET", "/projects/kept/keys")).json()) as { data: unknown[] }).data,
      ).toEqual([]);
    });

    it("keeps recording usage after a call that named a project id with a NUL", async () => {
      const refused = await fetch(`${sluice.url}/v1/text/a%00b`, {
        method: "POST",
        headers: { authorization: "Bearer x.y", "content-type": "application/json" },
        body: JSON.stringify({ text: "x" }),
      });
      expect(refused.status).toBe(404);
      const next = await fetch(`${sluice.url}/v1/text/kept`, {
        method: "POST",
        headers: { authorization: "Bearer x.y", "content-type": "application/json" },
        body: JSON.stringify({ text: "x" }),
      });
      expect(next.status).toBe(401);
      await sluice.gateway.flushUsage();
      const rows = await sluice.gateway.database.db
        .selectFrom("usage_records")
        .select(["request_id", "project_id"])
        .where(
          "request_id",
          "in",
          [refused, next].map((response) => response.headers.get("x-request-id") ?? ""),
        )
        .execute();
      expect(rows.map((row) => row.project_id).sort()).toEqual(["a?b", "kept"]);
    });

    it("stores any other text exactly, astral characters included", async () => {
      const name = "Démo 🚀 \u00a0名前";
      // (A model name is letters, digits, `.`, `_` and `-` only: it becomes part of a provider's URL.)
      expect((await admin("PATCH", "/projects/kept", { name })).status).toBe(200);
      expect(await (await admin("GET", "/projects/kept")).json()).toMatchObject({ name });
    });
  });
}
