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
   * Headers for an actual request from `origin` (undefined: the request sent none). For an origin
   * not allowed, only `Vary: Origin` when the answer depends on the origin (a list, not `*`): a
   * cache must not serve an answer without CORS headers to a listed origin, or the other way round.
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
    headersFor: (origin) =>
      origin !== undefined && allows(origin) ? originHeaders(origin) : anyOrigin ? null : varyOnly,
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
 * `SLUICE_CORS_ORIGINS` as a list: `*` or comma-separated origins, each exactly as a browser sends
 * it in `Origin` (no path, no trailing slash). Returns the problem as a string when one is invalid.
 */
export function parseCorsOrigins(value: string): string[] | string {
  const origins = value
    .split(",")
    .map((entry) => entry.trim())
    .filter((entry) => entry !== "");
  if (origins.length === 0) return "list at least one origin, or `*`";
  for (const origin of origins) {
    if (origin === "*") continue;
    const parsed = URL.canParse(origin) ? new URL(origin) : null;
    if (!parsed || !/^https?:$/.test(parsed.protocol) || parsed.origin !== origin)
      return `${JSON.stringify(origin)} is not an origin such as https://app.example.com (scheme, host and port only, no trailing slash)`;
  }
  return origins;
}
