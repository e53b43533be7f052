import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPostgresSchema, postgresAvailable } from "../support/services.js";
import {
  adminToken,
  createTestProject,
  startTestGateway,
  type TestGateway,
} from "../support/test-gateway.js";

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

    // A cursor is base64url of JSON, so one can be made by hand: a last group with a NUL, which no
    // group read from either database holds, was given to PostgreSQL (whose text refuses a NUL) and
    // answered 500 there.
    it.each(["model", "day", "endpoint"])(
      "refuses a usage report cursor (groupBy %s) whose last group holds a NUL with 400",
      async (groupBy) => {
        const made = (after: string) =>
          Buffer.from(
            JSON.stringify([
              1,
              "kept",
              groupBy,
              "2026-01-01T00:00:00.000Z",
              "9999-12-31T23:59:59.999Z",
              after,
            ]),
          ).toString("base64url");
        const read = (after: string) => admin("GET", `/projects/kept/usage?cursor=${made(after)}`);
        expect((await read("a")).status).toBe(200);
        const refused = await read("a\u0000b");
        expect(await errorOf(refused)).toEqual({ status: 400, code: "BAD_REQUEST" });
      },
    );

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

    it("answers every one of several rotations sent at once with a test key that works", async () => {
      const project = await createTestProject(sluice.gateway);
      // The project has no output schema: a call that passes authentication is refused after it.
      const answer = async (testKey: string) => {
        const response = await fetch(`${sluice.url}/v1/text/${project.projectId}`, {
          method: "POST",
          headers: {
            authorization: `Bearer ${project.partialKeys["provider-a"]}.${testKey}`,
            "content-type": "application/json",
          },
          body: JSON.stringify({ text: "x" }),
        });
        return ((await response.json()) as { error: { code: string } }).error.code;
      };
      expect(await answer("tk_not-a-key-of-this-project-0000000000000")).toBe("UNAUTHORIZED");
      const passed = await answer(project.testKey);
      expect(passed).not.toBe("UNAUTHORIZED");
      const rotations = await Promise.all(
        Array.from({ length: 5 }, () => admin("POST", `/projects/${project.projectId}/test-keys`)),
      );
      expect(rotations.map((response) => response.status)).toEqual([201, 201, 201, 201, 201]);
      const issued = await Promise.all(
        rotations.map(async (response) => ((await response.json()) as { testKey: string }).testKey),
      );
      expect(await Promise.all(issued.map(answer))).toEqual(issued.map(() => passed));
    });

    it("lists every provider key added at once, and revokes each of several revoked at once", async () => {
      const project = await createTestProject(sluice.gateway);
      const keysPath = `/projects/${project.projectId}/keys`;
      const add = (index: number) =>
        admin("POST", keysPath, { provider: "provider-a", apiKey: `sk-racing-key-${index}-0123456789` });
      const added = await Promise.all(Array.from({ length: 5 }, (_, index) => add(index)));
      expect(added.map((response) => response.status)).toEqual([201, 201, 201, 201, 201]);
      const ids = await Promise.all(
        added.map(async (response) => ((await response.json()) as { keyId: string }).keyId),
      );
      // Three revoked while two more are added, all at once.
      const [revoked, more] = await Promise.all([
        Promise.all(ids.slice(0, 3).map((keyId) => admin("DELETE", `${keysPath}/${keyId}`))),
        Promise.all([add(5), add(6)]),
      ]);
      expect(revoked.map((response) => response.status)).toEqual([204, 204, 204]);
      expect(more.map((response) => response.status)).toEqual([201, 201]);
      const moreIds = await Promise.all(
        more.map(async (response) => ((await response.json()) as { keyId: string }).keyId),
      );
      const listed = (
        (await (await admin("GET", keysPath)).json()) as {
          data: Array<{ keyId: string; revokedAt: string | null }>;
        }
      ).data;
      const state = Object.fromEntries(listed.map((key) => [key.keyId, key.revokedAt !== null]));
      expect(state).toEqual({
        [project.keyIds["provider-a"]]: false,
        [project.keyIds["provider-b"]]: false,
        [project.keyIds["provider-c"]]: false,
        ...Object.fromEntries(ids.map((keyId, index) => [keyId, index < 3])),
        ...Object.fromEntries(moreIds.map((keyId) => [keyId, false])),
      });
    });
  });
}
