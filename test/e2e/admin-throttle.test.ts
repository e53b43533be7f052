import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  adminToken,
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

describe("wrong admin tokens", () => {
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    sluice = await startTestGateway({ authFailureLimit: 3 });
    project = await createTestProject(sluice.gateway);
  });
  afterAll(() => sluice.close());

  const projects = (token: string) =>
    fetch(`${sluice.url}/admin/v1/projects`, { headers: { authorization: `Bearer ${token}` } });

  it("are throttled per address: after the limit even the right token waits, and apps are not affected", async () => {
    for (let attempt = 0; attempt < 3; attempt++)
      expect((await projects(`guess-${attempt}`)).status).toBe(401);
    const refused = await projects(adminToken);
    expect(refused.status).toBe(429);
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThan(0);
    expect(refused.headers.get("ratelimit-policy")).toBe('"admin-auth-failures";q=3;w=60');
    expect(await refused.json()).toMatchObject({ error: { code: "TOO_MANY_REQUESTS" } });

    // The apps' throttle keeps its own counts: the same address still calls the API.
    const text = await fetch(`${sluice.url}/v1/text/${project.projectId}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${project.bearer("provider-a")}`,
        "content-type": "application/json",
      },
      body: "{}",
    });
    expect(text.status).not.toBe(429);
  });
});
