import type { RateLimitDecision } from "./rate-limiter.js";

/**
 * The RateLimit header fields of draft-ietf-httpapi-ratelimit-headers-11 (23 May 2026), both
 * Structured Field Lists (RFC 9651):
 * - `RateLimit-Policy` (section 3) lists every policy that applied: `"<name>";q=<quota>;w=<window s>`.
 * - `RateLimit` (section 4) reports the most restrictive one: `"<name>";r=<remaining>;t=<seconds>`.
 * A refusal also carries `Retry-After` (RFC 9110 section 10.2.3) in whole seconds, at least 1, and
 * never earlier than the end of the reported window (draft section 6). Returns {} for no decisions.
 */
export function rateLimitHeaders(decisions: readonly RateLimitDecision[]): Record<string, string> {
  const binding = mostRestrictive(decisions);
  if (!binding) return {};
  const headers: Record<string, string> = {
    "ratelimit-policy": decisions.map(policyItem).join(", "),
    ratelimit: `${sfString(binding.name)};r=${sfInteger(binding.remaining)};t=${sfInteger(binding.resetSeconds)}`,
  };
  if (!binding.allowed) headers["retry-after"] = String(Math.max(1, sfInteger(binding.resetSeconds)));
  return headers;
}

/**
 * A refusal wins over any allowance; among refusals the longest wait wins (so Retry-After covers
 * every refused policy), among allowances the fewest remaining requests, then the longest wait.
 */
function mostRestrictive(decisions: readonly RateLimitDecision[]): RateLimitDecision | undefined {
  let binding: RateLimitDecision | undefined;
  for (const decision of decisions) {
    if (!binding || tighter(decision, binding)) binding = decision;
  }
  return binding;
}

function tighter(candidate: RateLimitDecision, current: RateLimitDecision): boolean {
  if (candidate.allowed !== current.allowed) return !candidate.allowed;
  if (candidate.allowed && candidate.remaining !== current.remaining)
    return candidate.remaining < current.remaining;
  return candidate.resetSeconds > current.resetSeconds;
}

function policyItem(decision: RateLimitDecision): string {
  return `${sfString(decision.name)};q=${sfInteger(decision.limit)};w=${Math.max(1, sfInteger(decision.windowSeconds))}`;
}

const sfStrings = new Map<string, string>();

/** An sf-string (RFC 9651 section 3.3.3): printable ASCII, with `"` and `\` escaped. */
function sfString(value: string): string {
  // Limit names come from code ("project", "ip", "device"): remembered, not re-escaped per request.
  let quoted = sfStrings.get(value);
  if (quoted === undefined) {
    quoted = `"${value.replace(/[^\x20-\x7e]/g, "").replace(/["\\]/g, "\\$&")}"`;
    if (sfStrings.size < 100) sfStrings.set(value, quoted);
  }
  return quoted;
}

/** The draft's q, w, r and t are non-negative sf-integers. */
function sfInteger(value: number): number {
  return Number.isFinite(value) ? Math.max(0, Math.floor(value)) : 0;
}
