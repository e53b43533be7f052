import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestGateway, type TestGateway } from "../support/test-gateway.js";

/**
 * DESIGN's error table: INTERNAL_ERROR (500) is a bug, "logged with cause, body says nothing
 * internal". A route that fails with a plain error stands in for one.
 */
describe("a request that fails with a bug", () => {
  let sluice: TestGateway;
  const internal = "connect ECONNREFUSED 10.1.2.3:5432 for user sluice_admin in /srv/sluice/src/db.ts";

  beforeAll(async () => {
    sluice = await startTestGateway(
      {},
      {
        registerApiRoutes(router) {
          router.on("GET", "/v1/bug-probe", () => {
            throw Object.assign(new Error(internal), { details: { table: "secret_table" } });
          });
        },
      },
    );
  });
  afterAll(async () => {
    await sluice.close();
  });

  it("answers 500 INTERNAL_ERROR with the request id and nothing internal, and logs the cause", async () => {
    const before = sluice.logs.length;
    const response = await fetch(`${sluice.url}/v1/bug-probe`);
    const requestId = response.headers.get("x-request-id");
    const text = await response.text();
    expect(response.status).toBe(500);
    expect(JSON.parse(text)).toEqual({
      error: { code: "INTERNAL_ERROR", message: expect.any(String), requestId },
    });
    expect(text).not.toContain("ECONNREFUSED");
    expect(text).not.toContain("secret_table");
    expect(text).not.toContain("/srv/sluice");
    const logged = sluice.logs.slice(before).join("");
    expect(logged).toContain('"msg":"request failed"');
    expect(logged).toContain(internal);
    expect(logged).toContain(String(requestId));
  });
});
