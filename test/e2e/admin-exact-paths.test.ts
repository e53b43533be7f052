import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { adminToken, startTestGateway, type TestGateway } from "../support/test-gateway.js";

/**
 * An admin route is reached only by its own path. `DELETE /admin/v1/projects/p/keys/..` leaves a
 * client (curl, fetch) as `DELETE /admin/v1/projects/p/`: read as `/admin/v1/projects/p`, with the
 * trailing slash ignored, it deleted the whole project instead of refusing a key id that is none.
 */
describe("admin routes matched exactly", () => {
  let sluice: TestGateway;
  let keyId: string;
  let testKeyId: string;
  let projectId: string;
  let created = 0;

  beforeAll(async () => {
    sluice = await startTestGateway();
  });
  // A project of its own for each test: one that a test wrongly deleted fails that test alone.
  beforeEach(async () => {
    const { admin } = sluice.gateway;
    projectId = `exact-${++created}`;
    await admin.createProject({ id: projectId, name: "Exact", provider: "provider-a", testMode: true });
    keyId = (await admin.addProviderKey(projectId, { provider: "provider-a", apiKey: "sk-exact-0123456789" }))
      .keyId;
    testKeyId = ((await admin.listTestKeys(projectId))[0] as { testKeyId: string }).testKeyId;
  });
  afterAll(async () => {
    await sluice?.close();
  });

  /** Everything the admin API can change, to see that a refused call changed nothing. */
  const state = async () => {
    const { admin } = sluice.gateway;
    return JSON.stringify({
      projects: await admin.listProjects(),
      keys: await admin.listProviderKeys(projectId),
      testKeys: await admin.listTestKeys(projectId),
    });
  };

  const call = (method: string, path: string, body?: unknown) =>
    fetch(`${sluice.url}${filled(path)}`, {
      method,
      headers: {
        authorization: `Bearer ${adminToken}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });

  /** `path` with `{project}`, `{key}` and `{testKey}` as the test's own. */
  const filled = (path: string) =>
    path.replace("{project}", projectId).replace("{key}", keyId).replace("{testKey}", testKeyId);

  const expectNoSuchRoute = async (response: Response, message: string) => {
    expect(response.status).toBe(404);
    expect(await response.json()).toEqual({
      error: { code: "NOT_FOUND", message, requestId: response.headers.get("x-request-id") },
    });
  };

  it.each([
    ["keys", "/admin/v1/projects/{project}/keys/.."],
    ["test-keys", "/admin/v1/projects/{project}/test-keys/.."],
    ["keys (encoded dots)", "/admin/v1/projects/{project}/keys/%2e%2e"],
  ])(
    "does not delete the project when a DELETE of %s ends in `..`, which fetch sends as the project's path and a slash",
    async (_, path) => {
      const before = await state();
      const response = await call("DELETE", path);
      await expectNoSuchRoute(
        response,
        "No such route: /admin/v1/projects/:projectId is matched exactly, without a trailing slash or an empty segment",
      );
      expect(await state()).toBe(before);
      expect((await sluice.gateway.admin.getProject(projectId)).id).toBe(projectId);
    },
  );

  it.each([
    ["POST", "/admin/v1/projects/", { name: "Slash", provider: "provider-a" }],
    ["GET", "/admin/v1/projects/", undefined],
    ["GET", "/admin/v1/projects/{project}/", undefined],
    ["PATCH", "/admin/v1/projects/{project}/", { name: "Renamed" }],
    ["DELETE", "/admin/v1/projects/{project}/", undefined],
    ["POST", "/admin/v1/projects/{project}/test-keys/", undefined],
    ["GET", "/admin/v1/projects/{project}/test-keys/", undefined],
    ["DELETE", "/admin/v1/projects/{project}/test-keys/{testKey}/", undefined],
    ["POST", "/admin/v1/projects/{project}/keys/", { provider: "provider-a", apiKey: "sk-slash-0123" }],
    ["GET", "/admin/v1/projects/{project}/keys/", undefined],
    ["DELETE", "/admin/v1/projects/{project}/keys/{key}/", undefined],
    ["GET", "/admin/v1/projects/{project}/usage/", undefined],
  ])("refuses %s %s, a trailing slash, as no route, changing nothing", async (method, path, body) => {
    const before = await state();
    const response = await call(method, path, body);
    expect(response.status).toBe(404);
    const answer = (await response.json()) as { error: { code: string; message: string } };
    expect(answer.error.code).toBe("NOT_FOUND");
    expect(answer.error.message).toMatch(/^No such route: \/admin\/v1\/projects\S* is matched exactly, /);
    expect(await state()).toBe(before);
  });

  it.each([
    ["DELETE", "/admin/v1/projects//"],
    ["DELETE", "/admin/v1/projects//keys/{key}"],
    ["DELETE", "/admin/v1/projects/{project}/keys//"],
    ["DELETE", "/admin/v1/projects/{project}/test-keys//"],
    ["GET", "/admin/v1/projects//keys"],
  ])("refuses %s %s, an empty segment, as no route", async (method, path) => {
    const before = await state();
    const response = await call(method, path);
    expect(response.status).toBe(404);
    const answer = (await response.json()) as { error: { code: string; message: string } };
    // Not the project's or the key's 404 (`Project "" does not exist`): the path names neither.
    expect(answer.error.code).toBe("NOT_FOUND");
    expect(answer.error.message).toMatch(/^No such route: \/admin\/v1\/projects\S* is matched exactly, /);
    expect(await state()).toBe(before);
  });

  it("answers a trailing slash before authentication, as any path that is no route", async () => {
    const response = await fetch(`${sluice.url}/admin/v1/projects/${projectId}/`, { method: "DELETE" });
    expect(response.status).toBe(404);
    expect((await sluice.gateway.admin.getProject(projectId)).id).toBe(projectId);
  });

  it("still serves each admin route at its exact path", async () => {
    const list = await call("GET", "/admin/v1/projects");
    expect(list.status).toBe(200);
    const revoked = await call("DELETE", "/admin/v1/projects/{project}/keys/{key}");
    expect(revoked.status).toBe(204);
    expect(await sluice.gateway.admin.listProviderKeys(projectId)).toEqual([
      expect.objectContaining({ keyId, revokedAt: expect.any(String) }),
    ]);
  });

  it("still ignores a trailing slash on the public routes, as docs/api.md says", async () => {
    expect((await fetch(`${sluice.url}/health/`)).status).toBe(200);
    expect((await fetch(`${sluice.url}/v1/provider-a/models/`)).status).toBe(200);
    expect((await fetch(`${sluice.url}/v1/provider-a/${projectId}/models/`)).status).toBe(200);
  });
});
