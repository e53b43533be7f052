import type { IncomingHttpHeaders } from "node:http";

/**
 * Cross-origin access for web apps calling Sluice from a browser (`SLUICE_CORS_ORIGINS`).
 * Credentials travel in headers (never cookies), so no `Access-Control-Allow-Credentials` is sent
 * and `*` is safe to allow. Applies to the client API (`/v1/…`) and `/health`; the admin API and
 * `/metrics` are for operators and never answer cross-origin.
 */
export interface CorsPolicy {
  /** Whether `path` is one a browser app may call cross-origin. */
  covers(path: string): boolean;
  /** Whether `origin` is one of the configured origins (always, with `*`). */
  allows(origin: string): boolean;
  /**
   * Headers for an actual request from `origin` (undefined: the request sent none). With `*` every
   * answer carries them, Origin or not, so the answer does not depend on it. With a list, an origin
   * not allowed (or none) gets only `Vary: Origin`: a cache must not serve an answer without CORS
   * headers to a listed origin, or the other way round.
   */
  headersFor(origin: string | undefined): Record<string, string> | null;
  /** Headers for a preflight from an allowed `origin`, for a path accepting `methods`. */
  preflightHeaders(
    origin: string,
    methods: readonly string[],
    headers: IncomingHttpHeaders,
  ): Record<string, string>;
}

/** How long a browser may reuse a preflight's answer, in seconds. */
const preflightMaxAgeSeconds = 600;

/** `*`, or exact origins (`scheme://host[:port]`). */
export function createCorsPolicy(origins: readonly string[]): CorsPolicy {
  const anyOrigin = origins.includes("*");
  const allowed = new Set(origins);
  // `*` in Expose-Headers lets a browser app read every response header (request ids, the
  // RateLimit fields, the provider's own headers); valid because no credentials mode is used.
  const shared = { "access-control-expose-headers": "*" };
  const allows = (origin: string) => anyOrigin || allowed.has(origin);
  const varyOnly = { vary: "Origin" };
  const originHeaders = (origin: string): Record<string, string> =>
    anyOrigin
      ? { "access-control-allow-origin": "*", ...shared }
      : { "access-control-allow-origin": origin, vary: "Origin", ...shared };

  return {
    // `/health/` too: the router answers it as `/health`.
    covers: (path) => path.startsWith("/v1/") || path === "/health" || path === "/health/",
    allows,
    // With `*`, a request without an Origin gets the headers too: a shared cache may hand its answer
    // (a model list is `public, max-age=300`) to a browser, which would refuse it without them.
    headersFor: (origin) =>
      anyOrigin || (origin !== undefined && allowed.has(origin)) ? originHeaders(origin ?? "*") : varyOnly,
    preflightHeaders(origin, methods, headers) {
      const requested = headers["access-control-request-headers"];
      return {
        "access-control-allow-origin": anyOrigin ? "*" : origin,
        "access-control-allow-methods": methods.join(", "),
        // Echoed, not `*`: a wildcard never covers Authorization, and provider SDKs send their own
        // headers (anthropic-version, x-stainless-…) that a fixed list would miss.
        ...(requested && headerList.test(requested) ? { "access-control-allow-headers": requested } : {}),
        "access-control-max-age": String(preflightMaxAgeSeconds),
        vary: "Origin, Access-Control-Request-Method, Access-Control-Request-Headers",
      };
    },
  };
}

/** A comma-separated list of header names (RFC 9110 tokens), safe to echo. */
const headerList = /^[\t ]*[!#$%&'*+.^_`|~0-9A-Za-z-]+(?:[\t ]*,[\t ]*[!#$%&'*+.^_`|~0-9A-Za-z-]+)*[\t ]*$/;

/**
 * `SLUICE_CORS_ORIGINS` as a list: `*` or comma-separated origins, each as a browser serializes it
 * in `Origin` (RFC 6454 §6.1): an entry is taken in any form that names the same origin (an
 * upper-case scheme or host, a default port, a trailing `/`) and stored in that serialized form,
 * which the `Origin` header is compared with. Returns the problem as a string, with the origin to
 * write where there is one, when an entry is not an http or https origin.
 */
export function parseCorsOrigins(value: string): string[] | string {
  const entries = value
    .split(",")
    .map((entry) => entry.trim())
    .filter((entry) => entry !== "");
  if (entries.length === 0) return "list at least one origin, or `*`";
  const origins = new Set<string>();
  for (const entry of entries) {
    const origin = originOf(entry);
    if (origin.problem !== undefined) return `${JSON.stringify(entry)} ${origin.problem}`;
    origins.add(origin.serialized);
  }
  return [...origins];
}

/** `entry`'s origin as a browser sends it, or what keeps it from being one. */
function originOf(entry: string): { serialized: string; problem?: never } | { problem: string } {
  if (entry === "*") return { serialized: entry };
  const parsed = URL.canParse(entry) ? new URL(entry) : null;
  if (!parsed || !/^https?:$/.test(parsed.protocol))
    return {
      problem:
        "is not an origin such as https://app.example.com (http or https, a host, a port if not the default)",
    };
  // A path, query, fragment or user would be ignored by the match, not honoured: refused, not dropped.
  if (parsed.pathname !== "/" || /[?#]/.test(entry) || parsed.username || parsed.password)
    return {
      problem: `is not an origin (scheme, host and port only, no path): write it as ${parsed.origin}`,
    };
  return { serialized: parsed.origin };
}
