import { GatewayError } from "../errors.js";
import { ProviderResponseTooLarge } from "./provider-fetch.js";
import type { ProviderId } from "./provider-id.js";

/** undici's codes for a provider that took too long once connected (the proxies map them so too). */
const timeoutCodes = new Set(["UND_ERR_HEADERS_TIMEOUT", "UND_ERR_BODY_TIMEOUT"]);

/**
 * Whether an AI SDK call failed for lack of time: its deadline fired (an AbortError or
 * TimeoutError), or undici gave up waiting for the provider's headers or body (the code is on a
 * cause: the SDK wraps fetch's error, which wraps undici's).
 */
export function isProviderTimeout(error: unknown): boolean {
  let current: unknown = error;
  for (let depth = 0; current instanceof Error && depth < 6; depth++) {
    if (current.name === "AbortError" || current.name === "TimeoutError") return true;
    if (timeoutCodes.has((current as { code?: unknown }).code as string)) return true;
    current = current.cause;
  }
  return false;
}

/**
 * The PROVIDER_ERROR for an answer over SLUICE_MAX_PROVIDER_RESPONSE_BYTES, or null when `error`
 * is another failure. The provider fetch throws it (an announced length) or fails the body with it
 * while the SDK reads it, which the SDK then wraps ("Failed to process successful response"): it
 * is looked for on the causes.
 */
export function responseTooLargeFailure(error: unknown, provider: ProviderId): GatewayError | null {
  let current: unknown = error;
  for (let depth = 0; current instanceof Error && depth < 6; depth++) {
    if (current instanceof ProviderResponseTooLarge) {
      return new GatewayError("PROVIDER_ERROR", current.message, { cause: error, provider });
    }
    current = current.cause;
  }
  return null;
}

/**
 * An AI SDK APICallError on the error table, without the provider's body: with the provider's
 * status when it answered (`The provider failed to <what> (status 400)`), else it could not be
 * reached, as the proxies say.
 */
export function apiCallFailure(
  error: Error & { statusCode?: number; isRetryable: boolean },
  provider: ProviderId,
  what: string,
): GatewayError {
  const providerStatus = error.statusCode ?? null;
  return new GatewayError(
    "PROVIDER_ERROR",
    providerStatus === null
      ? "The provider could not be reached"
      : `The provider failed to ${what} (status ${providerStatus})`,
    { cause: error, provider, details: { providerStatus, retryable: error.isRetryable } },
  );
}
