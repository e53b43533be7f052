import type { RateLimitDecision } from "./rate-limiter.js";

/**
 * RateLimit header fields per draft-ietf-httpapi-ratelimit-headers-09 (structured fields):
 * `RateLimit-Policy` lists every policy (`"name";q=<quota>;w=<window seconds>`), `RateLimit`
 * reports the most restrictive one (`"name";r=<remaining>;t=<seconds to reset>`). A refusal also
 * carries `Retry-After` (RFC 9110 section 10.2.3) in whole seconds.
 */
export function rateLimitHeaders(decisions: readonly RateLimitDecision[]): Record<string, string> {
  if (decisions.length === 0) return {};
  const policies = decisions
    .map((decision) => `"${decision.name}";q=${decision.limit};w=${decision.windowSeconds}`)
    .join(", ");
  const refused = decisions.filter((decision) => !decision.allowed);
  const binding = (refused.length > 0 ? refused : decisions).reduce((tightest, decision) =>
    decision.remaining < tightest.remaining ||
    (decision.remaining === tightest.remaining && decision.resetSeconds > tightest.resetSeconds)
      ? decision
      : tightest,
  );
  const headers: Record<string, string> = {
    "ratelimit-policy": policies,
    ratelimit: `"${binding.name}";r=${binding.remaining};t=${binding.resetSeconds}`,
  };
  if (refused.length > 0)
    headers["retry-after"] = String(Math.max(...refused.map((decision) => decision.resetSeconds), 1));
  return headers;
}
