import { describe, expect, it } from "vitest";
import { providerA } from "../fakes/fake-upstream-responses.js";
import { structuredOnEachProvider } from "../support/structured-on-each-provider.js";
import { logLinesOf, titleSchema as schema, usageRowOf } from "../support/test-gateway.js";

/** Provider C's 429 (recorded shape): no Retry-After header, the delay in its RetryInfo. */
const providerCQuota = (retryDelay: string) => ({
  error: {
    code: 429,
    message: "You exceeded your current quota, please check your plan and billing details.",
    status: "RESOURCE_EXHAUSTED",
    details: [
      {
        "@type": "type.googleapis.com/google.rpc.QuotaFailure",
        violations: [{ quotaId: "GenerateRequestsPerMinutePerProjectPerModel" }],
      },
      { "@type": "type.googleapis.com/google.rpc.RetryInfo", retryDelay },
    ],
  },
});

/**
 * Provider A's 429 for an account out of credit or over its monthly budget (recorded shape,
 * OpenAI's error codes guide): no retry mends it, only the account's billing.
 */
const providerAInsufficientQuota = {
  error: {
    message: "You exceeded your current quota, please check your plan and billing details.",
    type: "insufficient_quota",
    param: null,
    code: "insufficient_quota",
  },
};

/** Provider B's answer when it is overloaded (recorded shape). */
const providerBOverloaded = { type: "error", error: { type: "overloaded_error", message: "Overloaded" } };

/**
 * A provider that is busy (its rate limit, an overload) answers a retryable failure, most often
 * with the time to wait. The client gets 502 PROVIDER_ERROR, `retryable: true`, and that wait as
 * its own Retry-After, not a bare 502 to retry at once or guess at.
 */
describe("a structured analysis the provider is too busy to answer", () => {
  const on = structuredOnEachProvider(schema, { title: "t" });
  const post = on.postText;

  const inSeconds = (seconds: number) => new Date(Date.now() + seconds * 1000).toUTCString();

  it.each([
    ["provider-a", 429, { "retry-after": "7" }, undefined, "7"],
    ["provider-a", 429, { "retry-after-ms": "1500" }, undefined, "2"],
    ["provider-a", 503, { "retry-after": "3" }, undefined, "3"],
    ["provider-b", 429, { "retry-after": "12" }, undefined, "12"],
    ["provider-b", 529, { "retry-after": "4" }, providerBOverloaded, "4"],
    ["provider-c", 429, {}, providerCQuota("17.5s"), "18"],
    ["provider-c", 503, { "retry-after": "5" }, undefined, "5"],
  ] as const)(
    "%s %i: 502, retryable, with the provider's wait as Retry-After (%j)",
    async (provider, status, headers, body, retryAfter) => {
      on.fake.enqueueResponse({ status, headers, ...(body === undefined ? {} : { body }) });
      const response = await post(provider);
      expect(response.status).toBe(502);
      expect(response.headers.get("retry-after")).toBe(retryAfter);
      const { error } = (await response.json()) as { error: { code: string; details: unknown } };
      expect(error).toMatchObject({
        code: "PROVIDER_ERROR",
        details: { providerStatus: status, retryable: true },
      });
      expect(on.fake.requests).toHaveLength(1);
      expect(await usageRowOf(on.sluice.gateway, response)).toMatchObject({
        status: 502,
        error_code: "PROVIDER_ERROR",
        input_tokens: null,
        cost_usd: null,
      });
    },
  );

  it("reads an HTTP-date Retry-After as the seconds until it", async () => {
    on.fake.enqueueResponse({ status: 429, headers: { "retry-after": inSeconds(30) } });
    const response = await post("provider-a");
    expect(response.status).toBe(502);
    expect(Number(response.headers.get("retry-after"))).toBeGreaterThanOrEqual(28);
    expect(Number(response.headers.get("retry-after"))).toBeLessThanOrEqual(30);
  });

  it("gives no Retry-After where the provider gave none, or one that is no wait", async () => {
    on.fake.enqueueResponse({ status: 529, body: providerBOverloaded });
    on.fake.enqueueResponse({ status: 429, headers: { "retry-after": "soon" } });
    for (const provider of ["provider-b", "provider-a"] as const) {
      const response = await post(provider);
      expect(response.status).toBe(502);
      expect(response.headers.get("retry-after")).toBeNull();
      await response.arrayBuffer();
    }
  });

  it("passes on no Retry-After of a failure a retry cannot mend (the server's key refused)", async () => {
    on.fake.enqueueResponse({ status: 401, headers: { "retry-after": "7" } });
    const response = await post("provider-a");
    expect(response.status).toBe(502);
    expect(response.headers.get("retry-after")).toBeNull();
    const { error } = (await response.json()) as { error: { details: unknown } };
    expect(error.details).toEqual({ providerStatus: 401, retryable: false });
  });

  it("gives the repair's wait too, beside the first attempt's billed usage", async () => {
    const usage = { input: 11, output: 7, cached: 0, reasoning: 0 };
    on.fake.enqueueResponse({ status: 200, body: providerA.chat("gpt-5.4-mini", '{"other":1}', usage) });
    on.fake.enqueueResponse({ status: 429, headers: { "retry-after": "9" } });
    const response = await post("provider-a");
    expect(response.status).toBe(502);
    expect(response.headers.get("retry-after")).toBe("9");
    const { error } = (await response.json()) as { error: { details: unknown } };
    expect(error.details).toMatchObject({
      providerStatus: 429,
      retryable: true,
      usage: { inputTokens: 11, outputTokens: 7 },
    });
    expect(await usageRowOf(on.sluice.gateway, response)).toMatchObject({ status: 502, input_tokens: 11 });
  });

  it("gives the wait on /v1/image too", async () => {
    on.fake.enqueueResponse({ status: 429, headers: { "retry-after": "6" } });
    const response = await fetch(`${on.sluice.url}/v1/image/${on.projects["provider-a"].projectId}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${on.projects["provider-a"].bearer("provider-a")}`,
        "content-type": "application/json",
      },
      body: JSON.stringify({ prompt: "a calm lake" }),
    });
    expect(response.status).toBe(502);
    expect(response.headers.get("retry-after")).toBe("6");
    const { error } = (await response.json()) as { error: { details: unknown } };
    expect(error.details).toMatchObject({ providerStatus: 429, retryable: true });
  });

  const captivePage = "<!doctype html><html><body>Sign in to the network to continue</body></html>";
  it.each([
    ["provider-a", "a proxy's or captive portal's page", captivePage],
    ["provider-b", "a proxy's or captive portal's page", captivePage],
    ["provider-c", "a proxy's or captive portal's page", captivePage],
    ["provider-a", "a body cut short", '{"id":"chatcmpl-1","object":"chat.comp'],
    ["provider-c", "a body cut short", '{"candidates":[{"content":{"parts":[{"te'],
  ] as const)(
    "%s: a 200 whose body is not JSON (%s) is a 502 to retry, as the provider's 5xx",
    async (provider, _what, body) => {
      on.fake.enqueueResponse({ status: 200, headers: { "content-type": "text/html" }, body });
      const response = await post(provider);
      expect(response.status).toBe(502);
      const { error } = (await response.json()) as { error: { code: string; details: unknown } };
      expect(error).toMatchObject({
        code: "PROVIDER_ERROR",
        details: { providerStatus: 200, retryable: true },
      });
    },
  );

  it("keeps a 200 of JSON in another shape than the provider's not retryable: the same call gets it again", async () => {
    on.fake.enqueueResponse({ status: 200, body: { unexpected: "shape" } });
    const response = await post("provider-a");
    expect(response.status).toBe(502);
    const { error } = (await response.json()) as { error: { details: unknown } };
    expect(error.details).toEqual({ providerStatus: 200, retryable: false });
  });

  it("answers a 200 whose body is not JSON as retryable on /v1/image too", async () => {
    on.fake.enqueueResponse({ status: 200, headers: { "content-type": "text/html" }, body: captivePage });
    const response = await fetch(`${on.sluice.url}/v1/image/${on.projects["provider-a"].projectId}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${on.projects["provider-a"].bearer("provider-a")}`,
        "content-type": "application/json",
      },
      body: JSON.stringify({ prompt: "a calm lake" }),
    });
    expect(response.status).toBe(502);
    const { error } = (await response.json()) as { error: { details: unknown } };
    expect(error.details).toMatchObject({ providerStatus: 200, retryable: true });
  });

  it("logs the provider's 403 for the operator, though a 429 of the same provider came just before", async () => {
    // A status no other test here answers: its window (10 s) is this test's own.
    on.fake.enqueueResponse({ status: 429, headers: { "retry-after": "7" } });
    on.fake.enqueueResponse({ status: 403 });
    const before = on.sluice.logs.length;
    await (await post("provider-b")).arrayBuffer();
    const refused = await post("provider-b");
    expect(refused.status).toBe(502);
    await refused.arrayBuffer();
    const failed = logLinesOf(on.sluice, before).filter((line) => line.msg === "provider call failed");
    expect(failed).toContainEqual(
      expect.objectContaining({
        level: "warn",
        provider: "provider-b",
        providerStatus: 403,
        cause: "the provider answered 403",
        status: 502,
        requestId: refused.headers.get("x-request-id"),
        // Which project's provider key was refused: an id, no secret.
        projectId: on.projects["provider-b"].projectId,
      }),
    );
    expect(JSON.stringify(failed)).not.toContain(on.projects["provider-b"].providerKeys["provider-b"]);
  });

  it("answers provider A's 429 for an account out of credit as not retryable, and logs it apart from rate limits", async () => {
    on.fake.enqueueResponse({ status: 429, headers: { "retry-after": "7" } });
    on.fake.enqueueResponse({ status: 429, body: providerAInsufficientQuota });
    const before = on.sluice.logs.length;
    await (await post("provider-a")).arrayBuffer();
    const response = await post("provider-a");
    expect(response.status).toBe(502);
    expect(response.headers.get("retry-after")).toBeNull();
    const { error } = (await response.json()) as { error: { details: unknown } };
    expect(error.details).toEqual({ providerStatus: 429, retryable: false });
    const failed = logLinesOf(on.sluice, before).filter((line) => line.msg === "provider call failed");
    expect(failed).toContainEqual(
      expect.objectContaining({
        provider: "provider-a",
        providerStatus: 429,
        providerError: "insufficient_quota",
        requestId: response.headers.get("x-request-id"),
      }),
    );
  });
});
