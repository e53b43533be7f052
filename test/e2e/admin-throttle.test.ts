import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pipelinedStatuses } from "../support/pipelined.js";
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

describe("wrong admin tokens in one burst", () => {
  let sluice: TestGateway;
  beforeAll(async () => {
    sluice = await startTestGateway({ authFailureLimit: 5 });
  });
  afterAll(() => sluice.close());

  it("pipelined on one connection: at most the limit are compared, the rest refused with 429", async () => {
    const guesses = 200;
    let raw = "";
    for (let index = 0; index < guesses; index++)
      raw += `GET /admin/v1/projects HTTP/1.1\r\nhost: x\r\nauthorization: Bearer guess-${index}-aaaaaaaaaaaaaaaa\r\n\r\n`;
    const statuses = await pipelinedStatuses(sluice.url, raw, guesses);
    expect(statuses).toHaveLength(guesses);
    expect(statuses.filter((line) => line.endsWith("401")).length).toBeLessThanOrEqual(5);
    expect(statuses.filter((line) => line.endsWith("429")).length).toBeGreaterThanOrEqual(guesses - 5);
    // Even the right token now waits out the window.
    const after = await fetch(`${sluice.url}/admin/v1/projects`, {
      headers: { authorization: `Bearer ${adminToken}` },
    });
    expect(after.status).toBe(429);
  });
});
