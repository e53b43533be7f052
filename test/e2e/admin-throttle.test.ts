import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
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
    sluice = await startTestGateway({ authFailureLimit: 3, metricsEnabled: true });
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

  it("are counted in the metrics: the token's outcomes and the throttle's refusals", async () => {
    // The address is over its admin limit since the test above.
    expect((await projects(adminToken)).status).toBe(429);
    const body = await (await fetch(`${sluice.url}/metrics`)).text();
    expect(body).toContain('sluice_auth_results_total{method="admin-token",result="UNAUTHORIZED"} 3');
    expect(body).toContain('sluice_auth_results_total{method="admin-token",result="TOO_MANY_REQUESTS"} 2');
    expect(body).toContain(
      'sluice_rate_limit_decisions_total{limit="admin_auth_failures",decision="limited"} 2',
    );
    // Apart from the apps' throttle, which refused no one here.
    expect(body).not.toContain('limit="auth_failures"');
  });
});

describe("the right admin token", () => {
  it("is counted as an admin authentication that passed", async () => {
    const sluice = await startTestGateway({ metricsEnabled: true });
    try {
      const response = await fetch(`${sluice.url}/admin/v1/projects`, {
        headers: { authorization: `Bearer ${adminToken}` },
      });
      expect(response.status).toBe(200);
      await response.arrayBuffer();
      const body = await (await fetch(`${sluice.url}/metrics`)).text();
      expect(body).toContain('sluice_auth_results_total{method="admin-token",result="ok"} 1');
    } finally {
      await sluice.close();
    }
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

/**
 * What a page in another origin can make the admin's browser send to /admin: simple requests, with
 * no `Authorization` (setting one needs a preflight, which /admin refuses). Such requests guess no
 * token; counted as wrong ones, a page left open in the admin's browser (or any browser behind the
 * admin's NAT) kept the admin's address refused with 429, the right token included.
 */
describe("admin requests without a bearer token", () => {
  let sluice: TestGateway;
  beforeEach(async () => {
    sluice = await startTestGateway({ authFailureLimit: 3, corsOrigins: ["*"] });
  });
  afterEach(() => sluice.close());

  const right = () =>
    fetch(`${sluice.url}/admin/v1/projects`, { headers: { authorization: `Bearer ${adminToken}` } });

  it("are refused with 401 but not counted: a cross-origin page cannot lock the admin out", async () => {
    const origin = "https://attacker.example";
    for (let attempt = 0; attempt < 5; attempt++) {
      // fetch(…, {mode: "no-cors"}), an <img>, a <form> post: no Authorization, at most a simple type.
      const get = await fetch(`${sluice.url}/admin/v1/projects`, { headers: { origin } });
      expect(get.status).toBe(401);
      expect(get.headers.get("access-control-allow-origin")).toBeNull();
      await get.arrayBuffer();
      const post = await fetch(`${sluice.url}/admin/v1/projects`, {
        method: "POST",
        headers: { origin, "content-type": "text/plain" },
        body: '{"name":"x","provider":"provider-a"}',
      });
      expect(post.status).toBe(401);
      await post.arrayBuffer();
    }
    const answer = await right();
    expect(answer.status).toBe(200);
    await answer.arrayBuffer();
  });

  it("nor is a header of another scheme, which can never hold the admin token", async () => {
    for (let attempt = 0; attempt < 5; attempt++) {
      const basic = await fetch(`${sluice.url}/admin/v1/projects`, {
        headers: { authorization: `Basic ${Buffer.from(`admin:${adminToken}x`).toString("base64")}` },
      });
      expect(basic.status).toBe(401);
      await basic.arrayBuffer();
    }
    expect((await right()).status).toBe(200);
  });

  it("while wrong bearer tokens still are", async () => {
    for (let attempt = 0; attempt < 3; attempt++) {
      const wrong = await fetch(`${sluice.url}/admin/v1/projects`, {
        headers: { authorization: `Bearer guess-${attempt}-aaaaaaaaaaaa` },
      });
      expect(wrong.status).toBe(401);
      await wrong.arrayBuffer();
    }
    expect((await right()).status).toBe(429);
  });
});
