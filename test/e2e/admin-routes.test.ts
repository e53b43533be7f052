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

  const usage = (query: string) =>
    fetch(`${sluice.url}/admin/v1/projects/routes/usage?${query}`, {
      headers: { authorization: `Bearer ${adminToken}` },
    });

  it.each([
    ["groupBy=day&groupBy=model", "groupBy: is given more than once"],
    ["from=2026-01-01&from=2026-02-01", "from: is given more than once"],
  ])("refuses a usage query that repeats a parameter (%s) rather than pick one", async (query, problem) => {
    const response = await usage(query);
    expect(response.status).toBe(400);
    const body = (await response.json()) as { error: { code: string; details: { problems: string[] } } };
    expect(body.error.code).toBe("BAD_REQUEST");
    expect(body.error.details.problems).toEqual([problem]);
  });

  it.each([
    ["groupBy=day&bogus=1", ["bogus: unknown parameter (the parameters are from, to, groupBy)"]],
    ["from=yesterday", ["from: must be an ISO instant (2026-11-01T10:00:00Z) or date (2026-11-01)"]],
    [
      "to=2026-13-01&groupBy=week",
      [
        "to: must be an ISO instant (2026-11-01T10:00:00Z) or date (2026-11-01)",
        'groupBy: Invalid option: expected one of "day"|"model"|"endpoint"',
      ],
    ],
  ])("names the query parameter, not the body, in a bad usage query (%s)", async (query, problems) => {
    const response = await usage(query);
    expect(response.status).toBe(400);
    const body = (await response.json()) as { error: { message: string; details: { problems: string[] } } };
    expect(body.error.details.problems).toEqual(problems);
    expect(body.error.message).toBe(`Invalid usage query: ${problems.join("; ")}`);
  });

  it("refuses a project whose model the catalogue lists under another provider with 422", async () => {
    const send = (method: string, path: string, body: unknown) =>
      fetch(`${sluice.url}/admin/v1/projects${path}`, {
        method,
        headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
    const created = await send("POST", "", {
      name: "Wrong",
      provider: "provider-a",
      model: "claude-sonnet-4-5",
    });
    expect(created.status).toBe(422);
    expect(((await created.json()) as { error: unknown }).error).toMatchObject({
      code: "VALIDATION_ERROR",
      message: `model "claude-sonnet-4-5" is a provider-b model; this project's provider is provider-a`,
      details: { model: "claude-sonnet-4-5", provider: "provider-a", modelProvider: "provider-b" },
    });
    const patched = await send("PATCH", "/routes", { model: "gemini-2.5-flash" });
    expect(patched.status).toBe(422);
    expect(((await patched.json()) as { error: { code: string } }).error.code).toBe("VALIDATION_ERROR");
    const custom = await send("PATCH", "/routes", { model: "my-own-model" });
    expect(custom.status).toBe(200);
  });
});
