import { describe, expect, it } from "vitest";
import { providerRetryAfter } from "./provider-retry-after.js";

const now = Date.UTC(2026, 10, 30, 8, 0, 0);
const retryInfo = (retryDelay: unknown, type = "type.googleapis.com/google.rpc.RetryInfo") =>
  JSON.stringify({
    error: { code: 429, status: "RESOURCE_EXHAUSTED", details: [{ "@type": type, retryDelay }] },
  });

describe("providerRetryAfter", () => {
  it("reads retry-after-ms before retry-after, rounding up to whole seconds", () => {
    expect(providerRetryAfter({ "retry-after-ms": "250", "retry-after": "9" }, undefined, now)).toBe(1);
    expect(providerRetryAfter({ "retry-after-ms": "2001.5" }, undefined, now)).toBe(3);
    expect(providerRetryAfter({ "retry-after-ms": "soon", "retry-after": "9" }, undefined, now)).toBe(9);
  });

  it("reads retry-after as seconds or an HTTP-date, held to 1 s and an hour", () => {
    expect(providerRetryAfter({ "retry-after": "0" }, undefined, now)).toBe(1);
    expect(providerRetryAfter({ "retry-after": "86400" }, undefined, now)).toBe(3600);
    expect(providerRetryAfter({ "retry-after": "Mon, 30 Nov 2026 08:00:42 GMT" }, undefined, now)).toBe(42);
    expect(providerRetryAfter({ "retry-after": "Mon, 30 Nov 2026 07:00:00 GMT" }, undefined, now)).toBe(1);
    expect(providerRetryAfter({ "retry-after": "-5" }, undefined, now)).toBeNull();
    expect(providerRetryAfter({ "retry-after": "1.5" }, undefined, now)).toBeNull();
  });

  it("reads provider C's RetryInfo when no header names a wait", () => {
    expect(providerRetryAfter({}, retryInfo("58s"), now)).toBe(58);
    expect(providerRetryAfter({}, retryInfo("0.217843437s"), now)).toBe(1);
    expect(providerRetryAfter({ "retry-after": "3" }, retryInfo("58s"), now)).toBe(3);
  });

  it("names no wait for a body without a RetryInfo duration it can read", () => {
    expect(providerRetryAfter(undefined, undefined, now)).toBeNull();
    expect(providerRetryAfter({}, "<html>retryDelay</html>", now)).toBeNull();
    expect(providerRetryAfter({}, retryInfo({ seconds: 5 }), now)).toBeNull();
    expect(providerRetryAfter({}, retryInfo("5m"), now)).toBeNull();
    expect(
      providerRetryAfter({}, retryInfo("5s", "type.googleapis.com/google.rpc.QuotaFailure"), now),
    ).toBeNull();
    expect(
      providerRetryAfter({}, JSON.stringify({ error: { details: [null, "retryDelay"] } }), now),
    ).toBeNull();
  });
});
