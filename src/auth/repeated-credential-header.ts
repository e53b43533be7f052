import { GatewayError } from "../errors.js";
import type { AuthRequest } from "./authenticate.js";

/** The headers authenticate() reads a credential from on every endpoint, lower-cased. */
const everywhere = ["authorization", "x-sluice-test-key", "x-ai-key", "x-device-token"] as const;

/** The same, with the header a proxy's provider SDK sends its key in (AuthRequest.sdkKeyHeader). */
const withSdkKeyHeader = {
  "x-api-key": [...everywhere, "x-api-key"],
  "x-goog-api-key": [...everywhere, "x-goog-api-key"],
} as const;

/**
 * The first credential header a request carries more than once (lower-cased), else null. Node keeps
 * only the first `Authorization` in `request.headers` and joins other repeats with `, `, while a
 * proxy or CDN in front may read the last one: which credential was meant is ambiguous, so such a
 * request is refused rather than authenticated with either. Runs on every authenticated request:
 * one pass over `rawHeaders` (name, value, name, value…), comparing names without a regex and
 * allocating nothing.
 */
export function repeatedCredentialHeader(
  rawHeaders: readonly string[],
  sdkKeyHeader?: AuthRequest["sdkKeyHeader"],
): string | null {
  const names: readonly string[] = sdkKeyHeader === undefined ? everywhere : withSdkKeyHeader[sdkKeyHeader];
  let seen = 0;
  for (let index = 0; index < rawHeaders.length; index += 2) {
    const name = rawHeaders[index]!;
    for (let which = 0; which < names.length; which++) {
      const candidate = names[which]!;
      if (!sameNameIgnoringCase(name, candidate)) continue;
      const bit = 1 << which;
      if ((seen & bit) !== 0) return candidate;
      seen |= bit;
      break;
    }
  }
  return null;
}

/**
 * The 400 for a request that carries a credential header more than once, else null: what the app
 * routes (admission) and the admin API answer. The message names the header, never its values.
 */
export function repeatedCredentialHeaderError(
  rawHeaders: readonly string[],
  sdkKeyHeader?: AuthRequest["sdkKeyHeader"],
): GatewayError | null {
  const repeated = repeatedCredentialHeader(rawHeaders, sdkKeyHeader);
  return repeated === null
    ? null
    : new GatewayError(
        "BAD_REQUEST",
        `The ${repeated} header was sent more than once; send each credential header once`,
      );
}

/**
 * The `x-project-id` header as the AI SDK routes read it (where the path names no project): its
 * first value, and whether it came more than once (Node joins repeats as `p1, p2`, which names no
 * project). One pass over `rawHeaders`.
 */
export function projectIdHeader(rawHeaders: readonly string[]): {
  value: string | undefined;
  repeated: boolean;
} {
  let value: string | undefined;
  for (let index = 0; index < rawHeaders.length; index += 2) {
    if (!sameNameIgnoringCase(rawHeaders[index]!, "x-project-id")) continue;
    if (value !== undefined) return { value, repeated: true };
    value = rawHeaders[index + 1] ?? "";
  }
  return { value, repeated: false };
}

/** The 400 for an `x-project-id` header sent more than once where it is read (see projectIdHeader). */
export function repeatedProjectIdError(): GatewayError {
  return new GatewayError(
    "BAD_REQUEST",
    "The x-project-id header was sent more than once; send it once (or put the project id in the path)",
  );
}

/** Whether `name` is `lowerCase` in any letter case (header names are ASCII, RFC 9110 section 5.1). */
function sameNameIgnoringCase(name: string, lowerCase: string): boolean {
  if (name.length !== lowerCase.length) return false;
  for (let at = 0; at < name.length; at++) {
    const code = name.charCodeAt(at);
    // A-Z to a-z; nothing else changes.
    if ((code >= 0x41 && code <= 0x5a ? code + 0x20 : code) !== lowerCase.charCodeAt(at)) return false;
  }
  return true;
}
