import { describe, expect, it } from "vitest";
import { rateLimitHeaders } from "./rate-limit-headers.js";
import type { RateLimitDecision } from "./rate-limiter.js";

const decision = (overrides: Partial<RateLimitDecision> & Pick<RateLimitDecision, "name">) => ({
  allowed: true,
  limit: 10,
  remaining: 5,
  resetSeconds: 30,
  windowSeconds: 60,
  ...overrides,
});

describe("rateLimitHeaders", () => {
  it("lists every policy and reports the one with the fewest requests left", () => {
    expect(
      rateLimitHeaders([
        decision({ name: "project", limit: 100, remaining: 70 }),
        decision({ name: "ip", limit: 20, remaining: 2, resetSeconds: 10, windowSeconds: 10 }),
      ]),
    ).toEqual({
      "ratelimit-policy": '"project";q=100;w=60, "ip";q=20;w=10',
      ratelimit: '"ip";r=2;t=10',
    });
  });

  it("reports the longer wait when two policies have as few requests left", () => {
    const headers = rateLimitHeaders([
      decision({ name: "ip", remaining: 0, resetSeconds: 5 }),
      decision({ name: "device", remaining: 0, resetSeconds: 40 }),
    ]);
    expect(headers.ratelimit).toBe('"device";r=0;t=40');
    expect(headers).not.toHaveProperty("retry-after");
  });

  it("reports a refusal, with Retry-After covering every refused policy", () => {
    expect(
      rateLimitHeaders([
        decision({ name: "project", remaining: 0, resetSeconds: 50 }),
        decision({ name: "ip", allowed: false, remaining: 0, resetSeconds: 12 }),
        decision({ name: "device", allowed: false, remaining: 0, resetSeconds: 42 }),
      ]),
    ).toEqual({
      "ratelimit-policy": '"project";q=10;w=60, "ip";q=10;w=60, "device";q=10;w=60',
      ratelimit: '"device";r=0;t=42',
      "retry-after": "42",
    });
  });

  it("never sends a Retry-After below 1 second", () => {
    const headers = rateLimitHeaders([
      decision({ name: "ip", allowed: false, remaining: 0, resetSeconds: 0 }),
    ]);
    expect(headers["retry-after"]).toBe("1");
  });

  it("writes names as structured-field strings and numbers as non-negative integers", () => {
    const headers = rateLimitHeaders([
      decision({ name: 'odd "name"\\é', limit: 7.9, remaining: -1, resetSeconds: 2.5 }),
    ]);
    expect(headers).toEqual({
      "ratelimit-policy": '"odd \\"name\\"\\\\";q=7;w=60',
      ratelimit: '"odd \\"name\\"\\\\";r=0;t=2',
    });
  });

  it("sends nothing without decisions", () => {
    expect(rateLimitHeaders([])).toEqual({});
  });
});
