import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { proxiedChat } from "../support/proxied-chat.js";
import { refusedPort } from "../support/refused-port.js";
import {
  createTestProject,
  logLinesOf,
  titleSchema as schema,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

describe("provider failures in the log", () => {
  let sluice: TestGateway;
  let project: TestProject;
  let projectC: TestProject;

  beforeAll(async () => {
    const port = refusedPort;
    sluice = await startTestGateway({
      providerABaseUrl: `http://127.0.0.1:${port}/v1`,
      providerCBaseUrl: `http://127.0.0.1:${port}/v1beta`,
      logLevel: "warn",
    });
    project = await createTestProject(sluice.gateway, { outputSchema: schema });
    projectC = await createTestProject(sluice.gateway, { provider: "provider-c", outputSchema: schema });
  });

  afterAll(async () => {
    await sluice.close();
  });

  const warnings = (from: number) =>
    logLinesOf(sluice, from).filter((line) => line.msg === "provider call failed");

  it("logs an unreachable provider at warn with its code, the request id and the route, once per window", async () => {
    const before = sluice.logs.length;
    const ids: string[] = [];
    for (let call = 0; call < 3; call++) {
      const response = await proxiedChat(sluice.url, project, {
        body: { model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] },
      });
      expect(response.status).toBe(502);
      ids.push(response.headers.get("x-request-id") ?? "");
      await response.arrayBuffer();
    }
    const logged = warnings(before);
    expect(logged).toHaveLength(1);
    expect(logged[0]).toMatchObject({
      level: "warn",
      provider: "provider-a",
      code: "ECONNREFUSED",
      status: 502,
      requestId: ids[0],
      route: expect.stringContaining("provider-a"),
    });
    expect(logged[0]?.cause).toContain("ECONNREFUSED");
  });

  it("logs a structured route's unreachable provider too, without its key", async () => {
    const before = sluice.logs.length;
    const response = await fetch(`${sluice.url}/v1/text/${projectC.projectId}`, {
      method: "POST",
      headers: {
        "x-sluice-test-key": projectC.testKey,
        "x-ai-key": projectC.partialKeys["provider-c"],
        "content-type": "application/json",
      },
      body: JSON.stringify({ text: "A calm lake at dawn" }),
    });
    expect(response.status).toBeGreaterThanOrEqual(500);
    await response.arrayBuffer();
    const logged = warnings(before);
    expect(logged).toHaveLength(1);
    expect(logged[0]).toMatchObject({
      provider: "provider-c",
      code: "ECONNREFUSED",
      requestId: response.headers.get("x-request-id"),
    });
    const text = sluice.logs.slice(before).join("");
    for (const secret of [
      projectC.providerKeys["provider-c"],
      projectC.partialKeys["provider-c"],
      projectC.testKey,
    ])
      expect(text).not.toContain(secret);
  });
});

describe("a provider base URL on a port fetch refuses, in the log", () => {
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    // 6000 (X11) is one of the WHATWG "bad ports": fetch refuses it before connecting.
    sluice = await startTestGateway({ providerABaseUrl: "http://127.0.0.1:6000/v1", logLevel: "warn" });
    project = await createTestProject(sluice.gateway, { outputSchema: schema });
  });

  afterAll(async () => {
    await sluice.close();
  });

  it("logs a structured route's call with a named code, and answers the client as an unreachable provider", async () => {
    const before = sluice.logs.length;
    const response = await fetch(`${sluice.url}/v1/text/${project.projectId}`, {
      method: "POST",
      headers: {
        "x-sluice-test-key": project.testKey,
        "x-ai-key": project.partialKeys["provider-a"],
        "content-type": "application/json",
      },
      body: JSON.stringify({ text: "A calm lake at dawn" }),
    });
    expect(response.status).toBe(502);
    const body = (await response.json()) as { error: Record<string, unknown> };
    expect(body.error).toMatchObject({
      code: "PROVIDER_ERROR",
      message: "The provider could not be reached",
      requestId: response.headers.get("x-request-id"),
    });
    // No retry can reach it until the base URL changes: not marked retryable, as other unreachable
    // providers are (a refused or reset connection may pass on the next try).
    expect(body.error.details).toMatchObject({ providerStatus: null, retryable: false });
    const logged = logLinesOf(sluice, before).filter((line) => line.msg === "provider call failed");
    expect(logged).toHaveLength(1);
    expect(logged[0]).toMatchObject({
      level: "warn",
      provider: "provider-a",
      code: "FETCH_BAD_PORT",
      status: 502,
      requestId: response.headers.get("x-request-id"),
    });
    expect(logged[0]?.cause).toContain("bad port");
  });
});

describe("provider failures still counted when the gateway closes", () => {
  it("writes the open window's suppressed count at the close, not only when its timer ends", async () => {
    const sluice = await startTestGateway({
      providerABaseUrl: `http://127.0.0.1:${refusedPort}/v1`,
      logLevel: "warn",
    });
    const project = await createTestProject(sluice.gateway);
    for (let call = 0; call < 3; call++) {
      const response = await proxiedChat(sluice.url, project, {
        body: { model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] },
      });
      expect(response.status).toBe(502);
      await response.arrayBuffer();
    }
    const counts = () =>
      logLinesOf(sluice).filter((line) => line.msg === "provider call failures suppressed");
    // The window (10 s) is still open: its count is not written yet.
    expect(counts()).toHaveLength(0);
    await sluice.close();
    expect(counts()).toEqual([
      expect.objectContaining({
        level: "warn",
        provider: "provider-a",
        code: "ECONNREFUSED",
        suppressed: 2,
        windowMs: 10_000,
      }),
    ]);
  });
});
