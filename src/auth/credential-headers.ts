import type { IncomingHttpHeaders } from "node:http";
import type { ProviderId } from "../providers/provider-id.js";
import type { Project } from "../storage/project-repository.js";
import type { AuthRequest } from "./authenticate.js";

export const testKeyHeader = "x-sluice-test-key";

/** What is wrong with a credential that is not `<partial_key>.<token>`, as the caller sent it. */
export function malformedBearer(authorization: string | undefined): string {
  if (authorization !== undefined && !/^bearer(?:[ \t]|$)/i.test(authorization))
    return "Authorization must be Bearer <partial_key>.<token>";
  return "the key must be <partial_key>.<token>";
}

export const testModeOffInProduction = "Test Mode is off in production, so test keys are not accepted";

export function bearerMismatch(project: Project, testModeAllowed: boolean): string {
  if (!testModeAllowed)
    return project.deviceCheck.enabled
      ? `the token is not a valid device token (${testModeOffInProduction})`
      : `${testModeOffInProduction}, and device check is off for this project`;
  if (!project.testMode && !project.deviceCheck.enabled)
    return "neither test mode nor device check is on for this project";
  if (!project.deviceCheck.enabled)
    return "the token is not a valid test key (device check is off for this project)";
  if (!project.testMode) return "the token is not a valid device token (test mode is off for this project)";
  return "the token is neither a valid test key nor a device token";
}

/** Longer than any real test-key credential set; a longer one is verified every time, not remembered. */
const maxCacheKeyLength = 1024;

/**
 * The credentials that decide a test-key authentication, as one cache key (null: none sent, or
 * too long to remember). Only what the test-key methods read: they come first (SPEC order), so
 * a success through them never depends on `x-device-token`, which stays out of the key, or one
 * credential with a new junk header each time would fill the cache.
 */
export function testKeyCacheKey(
  projectId: string,
  provider: ProviderId,
  headers: IncomingHttpHeaders,
  sdkKeyHeader: AuthRequest["sdkKeyHeader"],
): string | null {
  const headerKey = single(headers[testKeyHeader]);
  const bearer = bearerValue(headers, sdkKeyHeader);
  if (headerKey === undefined && bearer === undefined) return null;
  const aiKey = headerKey === undefined ? "" : (single(headers["x-ai-key"]) ?? "");
  const key = `${projectId}\u0000${provider}\u0000${headerKey ?? ""}\u0000${aiKey}\u0000${bearer ?? ""}`;
  return key.length > maxCacheKeyLength ? null : key;
}

export function single(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

/** `Authorization: Bearer <value>` (scheme case-insensitive), else the SDK key header. */
export function bearerValue(
  headers: IncomingHttpHeaders,
  sdkKeyHeader: AuthRequest["sdkKeyHeader"],
): string | undefined {
  const authorization = headers.authorization;
  if (authorization !== undefined) {
    const token = bearerToken(authorization);
    if (token !== undefined) return token;
    return sdkKeyHeader ? (single(headers[sdkKeyHeader]) ?? "") : "";
  }
  return sdkKeyHeader ? single(headers[sdkKeyHeader]) : undefined;
}

/**
 * What `/^bearer[ \t]+(\S*)[ \t]*$/i` captures in `value` (undefined when it does not match),
 * read without a regular expression: the pattern and its match array were ~2% of the
 * instructions of a proxied request (docs/decisions/0005). A test compares the two on random
 * strings. `/i` without `u` folds ASCII letters only; `\s` is JavaScript's white space.
 */
export function bearerToken(value: string): string | undefined {
  if (value.length < 7) return undefined;
  for (let index = 0; index < 6; index++)
    if ((value.charCodeAt(index) | 0x20) !== bearerLetters[index]) return undefined;
  let start = 6;
  while (isSpaceOrTab(value.charCodeAt(start))) start++;
  if (start === 6) return undefined;
  let end = start;
  while (end < value.length && !isWhiteSpace(value.charCodeAt(end))) end++;
  for (let index = end; index < value.length; index++)
    if (!isSpaceOrTab(value.charCodeAt(index))) return undefined;
  return value.slice(start, end);
}

/** "bearer", each letter's code with bit 0x20 set: an upper-case ASCII letter differs only there. */
const bearerLetters = [0x62, 0x65, 0x61, 0x72, 0x65, 0x72];

function isSpaceOrTab(code: number): boolean {
  return code === 0x20 || code === 0x09;
}

/** JavaScript's `\s`: white space and line terminators (ECMA-262 WhiteSpace, LineTerminator). */
function isWhiteSpace(code: number): boolean {
  if (code <= 0x20) return code === 0x20 || (code >= 0x09 && code <= 0x0d);
  if (code < 0xa0) return false;
  return (
    code === 0xa0 ||
    code === 0x1680 ||
    (code >= 0x2000 && code <= 0x200a) ||
    code === 0x2028 ||
    code === 0x2029 ||
    code === 0x202f ||
    code === 0x205f ||
    code === 0x3000 ||
    code === 0xfeff
  );
}
