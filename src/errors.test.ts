import { describe, expect, it } from "vitest";
import { GatewayError, listedProblems, problemsError, renderError } from "./errors.js";
import { providerTimeout } from "./providers/sdk-call-failure.js";
import { databaseUnavailable } from "./storage/database-unavailable.js";

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
