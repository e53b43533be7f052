import { describe, expect, it } from "vitest";
import { errorStatus, GatewayError, listedProblems, problemsError, renderError } from "./errors.js";
import { providerTimeout } from "./providers/sdk-call-failure.js";
import { databaseUnavailable } from "./storage/database-unavailable.js";

describe("the one error table", () => {
  it("maps each code DESIGN.md names to its status, and adds only the codes decision 0056 records", () => {
    const designed = {
      BAD_REQUEST: 400,
      UNAUTHORIZED: 401,
      FORBIDDEN: 403,
      PROJECT_NOT_FOUND: 404,
      NOT_FOUND: 404,
      METHOD_NOT_ALLOWED: 405,
      PAYLOAD_TOO_LARGE: 413,
      UNSUPPORTED_MEDIA_TYPE: 415,
      VALIDATION_ERROR: 422,
      TOO_MANY_REQUESTS: 429,
      INTERNAL_ERROR: 500,
      PROVIDER_ERROR: 502,
      SERVICE_UNAVAILABLE: 503,
      PROVIDER_TIMEOUT: 504,
    };
    const added = {
      REQUEST_TIMEOUT: 408,
      CONFLICT: 409,
      RANGE_NOT_SATISFIABLE: 416,
      REQUEST_HEADER_FIELDS_TOO_LARGE: 431,
    };
    expect(errorStatus).toEqual({ ...designed, ...added });
  });

  it("renders the envelope with code, message and requestId, and details only when given", () => {
    const bare = renderError(new GatewayError("NOT_FOUND", "No such route"), "req_1");
    expect(bare).toEqual({
      status: 404,
      body: { error: { code: "NOT_FOUND", message: "No such route", requestId: "req_1" } },
      headers: {},
    });
    const detailed = renderError(
      new GatewayError("BAD_REQUEST", "bad", { details: { problems: ["x"] } }),
      "req_2",
    );
    expect(detailed.body).toEqual({
      error: { code: "BAD_REQUEST", message: "bad", requestId: "req_2", details: { problems: ["x"] } },
    });
  });

  it("says nothing internal for an error that is not a GatewayError (500)", () => {
    const { status, body } = renderError(new Error("ECONNREFUSED 10.0.0.5:5432 password=hunter2"), "req_3");
    expect(status).toBe(500);
    expect(body.error.code).toBe("INTERNAL_ERROR");
    expect(JSON.stringify(body)).not.toMatch(/ECONNREFUSED|10\.0\.0\.5|hunter2/);
  });
});

describe("details.retryable on 503 and 504", () => {
  it.each([
    [
      "a provider that did not answer in time (504)",
      () => providerTimeout(new Error("timed out"), "provider-a"),
    ],
    ["the database down (503)", () => databaseUnavailable(new Error("ECONNREFUSED"))],
  ])("%s is retryable", (_, make) => {
    const { body } = renderError(make(), "req_1");
    expect(body.error.details).toEqual({ retryable: true });
  });

  it("tells the SDKs not to retry a 5xx the same call meets again (x-should-retry: false), and only that", () => {
    const again = new GatewayError("PROVIDER_ERROR", "not HTTP", {
      details: { retryable: false },
      headers: { "x-extra": "1" },
    });
    expect(renderError(again, "req_1").headers).toEqual({ "x-extra": "1", "x-should-retry": "false" });
    expect(again.headers).toEqual({ "x-extra": "1" });
    const later = new GatewayError("PROVIDER_ERROR", "cut", { details: { retryable: true } });
    expect(renderError(later, "req_1").headers).toEqual({});
    // A 4xx with retryable false (a refused input) is never retried by the SDKs: no header.
    const refused = new GatewayError("VALIDATION_ERROR", "refused", { details: { retryable: false } });
    expect(renderError(refused, "req_1").headers).toEqual({});
    expect(renderError(new Error("boom"), "req_1").headers).toEqual({});
  });

  it("takes no PROVIDER_ERROR, SERVICE_UNAVAILABLE or PROVIDER_TIMEOUT without details.retryable", () => {
    // The constructor's type refuses these (tsc --noEmit checks it); each would be answered without it.
    // @ts-expect-error a provider's failure says whether the same call may succeed later
    const bare = new GatewayError("PROVIDER_ERROR", "The provider failed");
    // @ts-expect-error so does a dependency's
    const unavailable = new GatewayError("SERVICE_UNAVAILABLE", "down", { headers: { "retry-after": "1" } });
    const said = new GatewayError("PROVIDER_TIMEOUT", "late", { details: { retryable: true } });
    expect([bare, unavailable, said].map((error) => error.status)).toEqual([502, 503, 504]);
  });

  it("keeps retryable when details are added (withDetails)", () => {
    const error = new GatewayError("PROVIDER_ERROR", "x", {
      provider: "provider-a",
      headers: { "retry-after": "3" },
      details: { providerStatus: 429, retryable: true },
    }).withDetails({ model: "m" });
    expect(error).toMatchObject({
      code: "PROVIDER_ERROR",
      provider: "provider-a",
      headers: { "retry-after": "3" },
      details: { providerStatus: 429, retryable: true, model: "m" },
    });
  });
});

describe("the problems one refusal lists", () => {
  const many = (count: number) => Array.from({ length: count }, (_, index) => `p${index}: wrong`);

  it("lists 50 whole, with no count of more", () => {
    expect(listedProblems(many(50))).toEqual({ text: many(50).join("; "), details: { problems: many(50) } });
  });

  it("lists the first 50 of 51 and says one more", () => {
    const error = problemsError("VALIDATION_ERROR", "Invalid project", many(51), { provider: "provider-a" });
    expect(error.message).toBe(`Invalid project: ${many(50).join("; ")}; and 1 more problem`);
    expect(error.details).toEqual({ problems: many(50), moreProblems: 1, provider: "provider-a" });
  });

  it("keeps a problem of 400 characters whole and cuts a longer one to 400 around `…`", () => {
    const fits = `a: ${"x".repeat(397)}`;
    const long = `a: ${"x".repeat(1000)} is wrong`;
    const [kept, cut] = listedProblems([fits, long]).details.problems as [string, string];
    expect(kept).toBe(fits);
    expect(cut).toHaveLength(400);
    expect(cut).toBe(`${long.slice(0, 199)}…${long.slice(-200)}`);
  });
});
