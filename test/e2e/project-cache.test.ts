import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { adminToken, startTestGateway, type TestGateway } from "../support/test-gateway.js";

const admin = { authorization: `Bearer ${adminToken}`, "content-type": "application/json" };

describe("the project cache on the instance that changes a project", () => {
  let sluice: TestGateway;

  beforeAll(async () => {
    // A cache far longer than the test: only the admin use cases' invalidation can refresh it.
    sluice = await startTestGateway({ projectCacheTtlMs: 600_000 });
  });
  afterAll(async () => {
    await sluice.close();
  });

  const proxyCall = () =>
    fetch(`${sluice.url}/v1/provider-a/px/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "gpt-4o-mini", messages: [] }),
    });
  const createPx = () =>
    fetch(`${sluice.url}/admin/v1/projects`, {
      method: "POST",
      headers: admin,
      body: JSON.stringify({ id: "px", name: "Px", provider: "provider-a" }),
    });

  it("knows a re-created project at once after answering 404 for it", async () => {
    expect((await createPx()).status).toBe(201);
    const deleted = await fetch(`${sluice.url}/admin/v1/projects/px`, { method: "DELETE", headers: admin });
    expect(deleted.status).toBe(204);
    const gone = await proxyCall();
    expect(gone.status).toBe(404);
    expect(((await gone.json()) as { error: { code: string } }).error.code).toBe("PROJECT_NOT_FOUND");

    expect((await createPx()).status).toBe(201);
    const known = await proxyCall();
    // Known again: the request now fails authentication (it has no key), not the project lookup.
    expect(known.status).toBe(401);
    expect(((await known.json()) as { error: { code: string } }).error.code).toBe("UNAUTHORIZED");
  });
});
