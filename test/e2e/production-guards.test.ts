import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { proxiedChat } from "../support/proxied-chat.js";
import {
  adminToken,
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowOf,
} from "../support/test-gateway.js";

/** The warnings a gateway logged at start, as their fields and messages. */
function warningsOf(sluice: TestGateway): Array<Record<string, unknown>> {
  return sluice.logs
    .flatMap((chunk) => chunk.split("\n"))
    .filter(Boolean)
    .map((line) => JSON.parse(line) as Record<string, unknown>)
    .filter((line) => line.level === "warn");
}

/**
 * SLUICE_ENV=production on records a development gateway left behind (same data dir and master
 * key): a project still in Test Mode, one that is not.
 */
describe("a production gateway (SLUICE_ENV=production)", () => {
  const dataDir = mkdtempSync(join(tmpdir(), "sluice-production-"));
  const masterKey = randomBytes(32).toString("base64");
  let sluice: TestGateway;
  let testing: TestProject;
  let live: TestProject;

  beforeAll(async () => {
    const development = await startTestGateway({ dataDir, masterKey });
    testing = await createTestProject(development.gateway);
    live = await createTestProject(development.gateway, { testMode: false });
    await development.close();
    sluice = await startTestGateway({ dataDir, masterKey, environment: "production" });
  });
  afterAll(async () => {
    await sluice?.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  const admin = (method: string, path: string, body: unknown) =>
    fetch(`${sluice.url}/admin/v1/projects${path}`, {
      method,
      headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });

  it("warns once at start, naming the projects still in Test Mode", () => {
    const testModeWarnings = warningsOf(sluice).filter((line) => String(line.msg).includes("Test Mode"));
    expect(testModeWarnings).toHaveLength(1);
    expect(testModeWarnings[0]?.projectIds).toEqual([testing.projectId]);
    expect(String(testModeWarnings[0]?.msg)).toContain(testing.projectId);
    expect(String(testModeWarnings[0]?.msg)).not.toContain(live.projectId);
  });

  it("warns once at start that calls must use HTTPS, as it neither serves TLS nor trusts a proxy", () => {
    const httpsWarnings = warningsOf(sluice).filter((line) => String(line.msg).includes("HTTPS"));
    expect(httpsWarnings).toHaveLength(1);
    expect(String(httpsWarnings[0]?.msg)).toContain("SLUICE_TLS_CERT and SLUICE_TLS_KEY");
  });

  it("refuses a right test key with 401, saying Test Mode is off in production, and records the call", async () => {
    const response = await proxiedChat(sluice.url, testing);
    expect(response.status).toBe(401);
    expect(((await response.json()) as { error: unknown }).error).toMatchObject({
      code: "UNAUTHORIZED",
      message:
        "No authentication method succeeded: Test Mode is off in production, so test keys are not accepted, and device check is off for this project",
    });
    expect(await usageRowOf(sluice.gateway, response)).toMatchObject({
      project_id: testing.projectId,
      status: 401,
      error_code: "UNAUTHORIZED",
      auth_method: "bearer-test-key",
    });
  });

  it("refuses through the admin API to create a project in Test Mode or switch one to it, with 422", async () => {
    const created = await admin("POST", "", { name: "New", provider: "provider-a", testMode: true });
    const switched = await admin("PATCH", `/${live.projectId}`, { testMode: true });
    for (const response of [created, switched]) {
      expect(response.status).toBe(422);
      expect(((await response.json()) as { error: unknown }).error).toMatchObject({
        code: "VALIDATION_ERROR",
        message:
          "testMode cannot be turned on in production (SLUICE_ENV=production): Test Mode is for development and testing only",
      });
    }
    expect((await admin("PATCH", `/${testing.projectId}`, { testMode: false })).status).toBe(200);
  });
});
