import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pipelinedStatuses } from "../support/pipelined.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

/**
 * The project-scoped model lists need no credentials. Their 404 for an unknown project must not
 * make them a free oracle of which project ids exist (nor a way to send the database a lookup per
 * made-up id): unknown ids count in the apps' failed-authentication throttle.
 */
describe("project-scoped model lists against project id enumeration", () => {
  let sluice: TestGateway;
  let project: TestProject;
  let nextAddress = 1;
  /** Each test calls from its own client address (x-forwarded-for from a trusted proxy). */
  const newAddress = () => `198.51.100.${nextAddress++}`;

  beforeAll(async () => {
    sluice = await startTestGateway({ authFailureLimit: 3, trustProxy: ["127.0.0.1"] });
    project = await createTestProject(sluice.gateway);
  });
  afterAll(() => sluice.close());

  const list = (path: string, address: string) =>
    fetch(`${sluice.url}${path}`, { headers: { "x-forwarded-for": address } });

  it("answers 429 after the limit of unknown ids from one address, for known projects too", async () => {
    const address = newAddress();
    for (const path of [
      "/v1/provider-a/guess-1/models",
      "/v1/provider-b/guess-2/v1/models",
      "/v1/provider-c/guess-3/v1beta/models",
    ]) {
      const response = await list(path, address);
      expect(response.status).toBe(404);
      expect(((await response.json()) as { error: { code: string } }).error.code).toBe("PROJECT_NOT_FOUND");
    }
    for (const path of [
      "/v1/provider-a/guess-4/models",
      `/v1/provider-a/${project.projectId}/models`,
      `/v1/provider-c/${project.projectId}/v1/models`,
    ]) {
      const refused = await list(path, address);
      expect(refused.status).toBe(429);
      expect(Number(refused.headers.get("retry-after"))).toBeGreaterThan(0);
      expect(refused.headers.get("ratelimit-policy")).toBe('"auth-failures";q=3;w=60');
      expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("TOO_MANY_REQUESTS");
    }
    // Another address is not affected.
    expect((await list(`/v1/provider-a/${project.projectId}/models`, newAddress())).status).toBe(200);
  });

  it("bounds a burst of unknown ids pipelined on one connection: at most the limit are looked up", async () => {
    const address = newAddress();
    const burst = 100;
    let raw = "";
    for (let index = 0; index < burst; index++)
      raw += `GET /v1/provider-a/burst-${index}/models HTTP/1.1\r\nhost: x\r\nx-forwarded-for: ${address}\r\n\r\n`;
    const statuses = await pipelinedStatuses(sluice.url, raw, burst);
    expect(statuses).toHaveLength(burst);
    expect(statuses.filter((line) => line.endsWith("404")).length).toBeLessThanOrEqual(3);
    expect(statuses.filter((line) => line.endsWith("429")).length).toBeGreaterThanOrEqual(burst - 3);
    // A project known to this instance needs no lookup slot: another address lists it at once.
    expect((await list(`/v1/provider-a/${project.projectId}/models`, newAddress())).status).toBe(200);
  });

  it("shares its count with the authenticated routes, so alternating between them gains nothing", async () => {
    const address = newAddress();
    for (let attempt = 0; attempt < 3; attempt++)
      expect((await list(`/v1/provider-b/unknown-${attempt}/models`, address)).status).toBe(404);
    const call = await fetch(`${sluice.url}/v1/text/${project.projectId}`, {
      method: "POST",
      headers: {
        "x-forwarded-for": address,
        authorization: `Bearer ${project.bearer("provider-a")}`,
        "content-type": "application/json",
      },
      body: JSON.stringify({ text: "hello" }),
    });
    expect(call.status).toBe(429);
  });

  it("counts each unknown id across addresses too, so spreading the guesses of one id gains nothing", async () => {
    for (let attempt = 0; attempt < 3; attempt++)
      expect((await list("/v1/provider-a/spread-guess/models", newAddress())).status).toBe(404);
    expect((await list("/v1/provider-a/spread-guess/models", newAddress())).status).toBe(429);
  });

  it("does not count lists of a known project", async () => {
    const address = newAddress();
    for (let attempt = 0; attempt < 5; attempt++)
      expect((await list(`/v1/provider-a/${project.projectId}/models`, address)).status).toBe(200);
  });
});
