import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { adminToken, startTestGateway, type TestGateway } from "../support/test-gateway.js";

describe("admin routes", () => {
  let sluice: TestGateway;

  beforeAll(async () => {
    sluice = await startTestGateway();
    await sluice.gateway.admin.createProject({ id: "routes", name: "Routes", provider: "provider-a" });
  });
  afterAll(async () => {
    await sluice?.close();
  });

  it.each([
    ["groupBy=day&groupBy=model", "groupBy: "],
    ["from=2026-01-01&from=2026-02-01", "from: "],
  ])("refuses a usage query that repeats a parameter (%s) rather than pick one", async (query, problem) => {
    const response = await fetch(`${sluice.url}/admin/v1/projects/routes/usage?${query}`, {
      headers: { authorization: `Bearer ${adminToken}` },
    });
    expect(response.status).toBe(400);
    const body = (await response.json()) as { error: { code: string; details: { problems: string[] } } };
    expect(body.error.code).toBe("BAD_REQUEST");
    expect(body.error.details.problems).toEqual([expect.stringMatching(new RegExp(`^${problem}`))]);
  });
});
