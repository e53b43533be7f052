import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { proxiedChat } from "../support/proxied-chat.js";
import {
  adminToken,
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowOf,
} from "../support/test-gateway.js";

/**
 * Every admin change that decides who may call takes effect at once on the instance that made it,
 * whatever SLUICE_PROJECT_CACHE_TTL_MS says (other instances see it within that time).
 */
describe("admin changes and the credential cache of the same instance", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let clockAhead = 0;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    // A cache far longer than the test: only the admin use cases' invalidation can refresh it.
    // Its clock runs `clockAhead` ms ahead of the real one.
    sluice = await startTestGateway(
      { providerABaseUrl: `${fake.url}/a/v1`, projectCacheTtlMs: 600_000 },
      { now: () => new Date(Date.now() + clockAhead) },
    );
  });
  afterAll(async () => {
    await sluice?.close();
    await fake?.close();
  });

  const admin = (method: string, path: string, body?: unknown) =>
    fetch(`${sluice.url}/admin/v1/projects/${path}`, {
      method,
      headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
  const call = (project: TestProject, bearer = project.bearer("provider-a")) =>
    proxiedChat(sluice.url, { projectId: project.projectId, bearer });
  async function answer(response: Response) {
    const body = (await response.json()) as { error?: { code: string } };
    return [response.status, body.error?.code ?? "ok"];
  }

  it.each([
    ["disabling the project", { disabled: true }, [403, "FORBIDDEN"]],
    ["turning test mode off", { testMode: false }, [401, "UNAUTHORIZED"]],
    ["lowering its rate limit to 1 a minute", { rateLimits: { perMinute: 1 } }, [429, "TOO_MANY_REQUESTS"]],
  ])("applies %s to the next request", async (_what, change, refused) => {
    const project = await createTestProject(sluice.gateway);
    expect(await answer(await call(project))).toEqual([200, "ok"]);
    expect((await admin("PATCH", project.projectId, change)).status).toBe(200);
    // The rate limit counts the request made before the change: the next one is over it.
    expect(await answer(await call(project))).toEqual(refused);
  });

  it("refuses a revoked test key, and the oldest after two rotations, at the next request", async () => {
    const project = await createTestProject(sluice.gateway);
    expect(await answer(await call(project))).toEqual([200, "ok"]);
    // Rotations keep any key issued in the minute before them: these come two minutes later.
    clockAhead += 120_000;
    const first = (await (await admin("POST", `${project.projectId}/test-keys`)).json()) as {
      testKey: string;
    };
    const second = (await (await admin("POST", `${project.projectId}/test-keys`)).json()) as {
      testKey: string;
      testKeyId: string;
    };
    expect(await answer(await call(project))).toEqual([401, "UNAUTHORIZED"]);
    const withKey = (testKey: string) => `${project.partialKeys["provider-a"]}.${testKey}`;
    expect(await answer(await call(project, withKey(first.testKey)))).toEqual([200, "ok"]);
    expect((await admin("DELETE", `${project.projectId}/test-keys/${second.testKeyId}`)).status).toBe(204);
    expect(await answer(await call(project, withKey(second.testKey)))).toEqual([401, "UNAUTHORIZED"]);
  });

  it("answers 403 FORBIDDEN to the holder of a revoked key at the next request, and records the call", async () => {
    const project = await createTestProject(sluice.gateway);
    expect(await answer(await call(project))).toEqual([200, "ok"]);
    const keyId = project.keyIds["provider-a"];
    expect((await admin("DELETE", `${project.projectId}/keys/${keyId}`)).status).toBe(204);
    const refused = await call(project);
    expect(refused.status).toBe(403);
    expect(((await refused.json()) as { error: unknown }).error).toMatchObject({
      code: "FORBIDDEN",
      message: "This provider key was revoked",
    });
    expect(await usageRowOf(sluice.gateway, refused)).toMatchObject({
      project_id: project.projectId,
      status: 403,
      error_code: "FORBIDDEN",
      auth_method: "bearer-test-key",
    });
    // Without the right test key, the revoked key is no different from a wrong one.
    const stranger = await call(project, `${project.partialKeys["provider-a"]}.tk_wrong`);
    expect(await answer(stranger)).toEqual([401, "UNAUTHORIZED"]);
  });

  it("answers PROJECT_NOT_FOUND at the next request once the project is deleted", async () => {
    const project = await createTestProject(sluice.gateway);
    expect(await answer(await call(project))).toEqual([200, "ok"]);
    expect((await admin("DELETE", project.projectId)).status).toBe(204);
    expect(await answer(await call(project))).toEqual([404, "PROJECT_NOT_FOUND"]);
  });
});
