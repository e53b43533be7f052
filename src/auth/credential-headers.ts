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

/**
 * A hint for a caller who put the token first (`<test key>.<partial key>`): the token's place holds
 * a partial key. Only the prefix every partial key has is named, never the value.
 */
export function swappedBearerHint(token: string): string {
  return token.startsWith("sk_sluice_")
    ? "; the partial key (sk_sluice_…) goes first: <partial_key>.<token>"
    : "";
}

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
 * Where a success of the test-key header method (SPEC method 1) is remembered: what it read and
 * nothing else, the test key `headerKey` (the header's value) and the partial key in `x-ai-key`
 * (null: too long to remember). It is tried first, so its success is the same whatever comes
 * beside them: an Authorization value or SDK key header is no part of the key, or one credential
 * sent with a new one each time would miss every time and fill the cache. Its keys begin with `1`,
 * `testKeyCacheKey`'s with `2`: one never names the other's entry.
 */
export function headerTestKeyCacheKey(
  projectId: string,
  provider: ProviderId,
  headerKey: string,
  headers: IncomingHttpHeaders,
): string | null {
  const key = `1\u0000${projectId}\u0000${provider}\u0000${headerKey}\u0000${single(headers["x-ai-key"]) ?? ""}`;
  return key.length > maxCacheKeyLength ? null : key;
}

/**
 * Where a success of the Bearer test-key method (2a) is remembered (null: no Bearer value or SDK key
 * header, or too long to remember): the Bearer value, and beside it what method 1 read and refused
 * before it (`headerKey`, the test-key header's value, and `x-ai-key` with it), since other
 * credentials there could pass method 1 instead. Only what the test-key methods read: a success
 * through them never depends on `x-device-token`, which stays out of the key, or one credential
 * with a new junk header each time would fill the cache.
 */
export function testKeyCacheKey(
  projectId: string,
  provider: ProviderId,
  headerKey: string | undefined,
  headers: IncomingHttpHeaders,
  sdkKeyHeader: AuthRequest["sdkKeyHeader"],
): string | null {
  const bearer = bearerValue(headers, sdkKeyHeader);
  if (bearer === undefined) return null;
  const aiKey = headerKey === undefined ? "" : (single(headers["x-ai-key"]) ?? "");
  const key = `2\u0000${projectId}\u0000${provider}\u0000${headerKey ?? ""}\u0000${aiKey}\u0000${bearer}`;
  return key.length > maxCacheKeyLength ? null : key;
}

/** Sluice's own credential headers, as it reads them (the provider SDKs' key headers are theirs). */
const ownCredentialHeaders: readonly string[] = [testKeyHeader, "x-ai-key", "x-device-token"];

/**
 * For a caller whose credentials fell short: each of Sluice's own credential headers it did not
 * send but sent spelt with underscores for dashes (`x_ai_key`, `x_ai-key`), which Sluice does not
 * read (nor do nginx and other proxies by default, which drop such names), as
 * `; header x_ai_key is not read: use x-ai-key`; "" when there is none. Asked only once the answer
 * is a 401, so a request that authenticates never pays for the walk over its header names.
 */
export function underscoreHeaderHint(headers: IncomingHttpHeaders): string {
  let hint = "";
  for (const name in headers) {
    if (!name.includes("_")) continue;
    const meant = name.replaceAll("_", "-");
    if (ownCredentialHeaders.includes(meant) && headers[meant] === undefined)
      hint += `; header ${name} is not read: use ${meant}`;
  }
  return hint;
}

export function single(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

/**
 * `Bearer`, spaces or tabs, and a value without white space, which may be followed by spaces or
 * tabs. The value's group is optional rather than empty-able: were it `(\S*)`, a header with white
 * space inside its value (a client's) could have its leading spaces taken by either run of spaces,
 * and every split was tried before it failed, quadratic in their number (~0.4 s for 16 KiB).
 */
const bearerCredential = /^bearer[ \t]+(?:(\S+)[ \t]*)?$/i;

/** `Authorization: Bearer <value>` (scheme case-insensitive), else the SDK key header. */
export function bearerValue(
  headers: IncomingHttpHeaders,
  sdkKeyHeader: AuthRequest["sdkKeyHeader"],
): string | undefined {
  const authorization = headers.authorization;
  if (authorization !== undefined) {
    const match = bearerCredential.exec(authorization);
    if (match) return match[1] ?? "";
    return sdkKeyHeader ? (single(headers[sdkKeyHeader]) ?? "") : "";
  }
  return sdkKeyHeader ? single(headers[sdkKeyHeader]) : undefined;
}

/**
 * `bearerValue` as the warm DeviceCheck path reads it, without a regular expression over the value
 * (a device token is a few KiB): everything after the usual `Bearer `. What the strict reading
 * would trim or refuse (a second space, a tab, whitespace inside) is left in, where it matches
 * nothing that path holds (a partial key rebuilt, a well-formed token), so such a request takes
 * the full path, which reads it with `bearerValue`.
 */
export function bearerValueAsSent(
  headers: IncomingHttpHeaders,
  sdkKeyHeader: AuthRequest["sdkKeyHeader"],
): string | undefined {
  const authorization = headers.authorization;
  return authorization?.startsWith("Bearer ") ? authorization.slice(7) : bearerValue(headers, sdkKeyHeader);
}

/** `<partial_key>.<token>` split at its first dot; both empty when nothing comes before one. */
export function splitBearer(bearer: string): { partialKey: string; token: string } {
  const separator = bearer.indexOf(".");
  return separator > 0
    ? { partialKey: bearer.slice(0, separator), token: bearer.slice(separator + 1) }
    : { partialKey: "", token: "" };
}
