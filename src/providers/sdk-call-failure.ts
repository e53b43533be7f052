import { firstInChain, someInChain } from "../error-chain.js";
import { GatewayError } from "../errors.js";
import { isSuccessStatus } from "../net/success-status.js";
import { providerFailureFacts } from "../observability/provider-failure-log.js";
import { shutdownNotice } from "../usage/model-catalogue.js";
import { ProviderResponseTooLarge } from "./provider-fetch.js";
import type { ProviderId } from "./provider-id.js";
import { providerRefusal, type RefusalReason, refusalOfFailedCall } from "./provider-refusal.js";
import { providerRetryAfter } from "./provider-retry-after.js";

/** The message of a provider failure whose answer is not HTTP: the proxies' and the AI SDK routes'. */
export const notHttpMessage = "The provider's answer could not be read as HTTP";

/**
 * What the provider's answer began with, where undici closed the connection on it rather than wait
 * for a final answer (its `SocketError`s "bad response" and "bad upgrade", client-h1.js): an interim
 * 100 Continue, which only an `Expect: 100-continue` asks for, or a 101 Switching Protocols, which
 * only an `Upgrade` does. Sluice sends neither, and undici has no setting to pass over them (it
 * passes over every other 1xx, 102 and 103 Early Hints included). Its "bad response" for an answer
 * to no request reaches no call. Looked for along the causes: the proxies get undici's error as
 * is, the AI SDK routes under fetch's and the SDK's. Null for any other error.
 */
export function unaskedAnswer(error: unknown): UnaskedAnswer | null {
  const socketError = firstInChain(error, (each) => (each as { code?: unknown }).code === "UND_ERR_SOCKET");
  // The log line names the failure by this error's code and message (provider-failure-log.ts), in
  // place of undici's ("UND_ERR_SOCKET", "bad response").
  if (socketError?.message === "bad response")
    return new UnaskedAnswer(
      "SLUICE_UNASKED_CONTINUE",
      "it sent an interim 100 Continue, which Sluice did not ask for (it sends no Expect) and does not take",
    );
  if (socketError?.message === "bad upgrade")
    return new UnaskedAnswer(
      "SLUICE_UNASKED_UPGRADE",
      "it switched protocols (101), which Sluice did not ask for (it sends no Upgrade)",
    );
  return null;
}

/**
 * An interim answer Sluice did not ask for and its HTTP client refused (see unaskedAnswer): a 502
 * on every route, not retryable (the provider answers so every call), saying which it was.
 */
export class UnaskedAnswer extends Error {
  /** The client's message: an answer not read as HTTP, and why. */
  readonly answer: string;

  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.answer = `${notHttpMessage}: ${message}`;
  }
}

/** undici's codes for a provider that took too long once connected: 504 on every route. */
const timeoutCodes = new Set(["UND_ERR_HEADERS_TIMEOUT", "UND_ERR_BODY_TIMEOUT"]);

export function isUpstreamTimeoutCode(code: unknown): boolean {
  return timeoutCodes.has(code as string);
}

/** PROVIDER_TIMEOUT (504), as every route answers a provider that did not answer in time: retryable. */
export function providerTimeout(cause: unknown, provider: ProviderId): GatewayError {
  return new GatewayError("PROVIDER_TIMEOUT", "The provider did not answer in time", {
    cause,
    provider,
    details: { retryable: true },
  });
}

/**
 * Whether an AI SDK call failed for lack of time: its deadline fired (an AbortError or
 * TimeoutError), or undici gave up waiting for the provider's headers or body.
 */
export function isProviderTimeout(error: unknown): boolean {
  // Along the causes: the SDK wraps fetch's error, which wraps undici's.
  return someInChain(
    error,
    (cause) =>
      cause.name === "AbortError" ||
      cause.name === "TimeoutError" ||
      isUpstreamTimeoutCode((cause as { code?: unknown }).code),
  );
}

/**
 * The PROVIDER_ERROR for an answer over SLUICE_MAX_PROVIDER_RESPONSE_BYTES, or null when `error`
 * is another failure. The provider fetch throws it (an announced length) or fails the body with it
 * while the SDK reads it, which the SDK then wraps ("Failed to process successful response"): it
 * is looked for on the causes. Not retryable: the same call's answer is as large again (the cap is
 * the gateway's, not the provider's).
 */
export function responseTooLargeFailure(error: unknown, provider: ProviderId): GatewayError | null {
  const tooLarge = firstInChain(
    error,
    (cause): cause is ProviderResponseTooLarge => cause instanceof ProviderResponseTooLarge,
  );
  return tooLarge === undefined
    ? null
    : new GatewayError("PROVIDER_ERROR", tooLarge.message, {
        cause: error,
        provider,
        details: { providerStatus: tooLarge.status, retryable: false },
      });
}

/**
 * Whether a provider call failed on a successful (2xx) answer Sluice could not read, which the
 * provider billed all the same: one larger than SLUICE_MAX_PROVIDER_RESPONSE_BYTES (Sluice read no
 * more than the cap of it), or a JSON answer the AI SDK could not use (cut short on its way, of a
 * shape it does not take, such as images given as URLs, or of one it takes but holds nothing to
 * read: provider A's `choices: []`, the SDK's InvalidResponseDataError, which it throws only on an
 * answer it parsed). Looked for along the causes. A 2xx that is no JSON (a proxy's or captive
 * portal's page) is not the provider's answer: false, as for any other failure.
 */
export function successfulAnswerUnread(error: unknown): boolean {
  const tooLarge = firstInChain(
    error,
    (cause): cause is ProviderResponseTooLarge => cause instanceof ProviderResponseTooLarge,
  );
  if (tooLarge !== undefined) return isSuccessStatus(tooLarge.status);
  if (someInChain(error, isInvalidResponseData)) return true;
  const call = successfulApiCall(error);
  if (call === undefined) return false;
  const contentType = Object.entries(call.responseHeaders ?? {}).find(
    ([name]) => name.toLowerCase() === "content-type",
  )?.[1];
  return contentType !== undefined && /^application\/json\b/i.test(contentType.trim());
}

/**
 * The provider's answer as the AI SDK parsed it, where the call failed on a successful (2xx) answer
 * the SDK could not use (successfulAnswerUnread) and read whole: provider A's `choices: []` (the
 * InvalidResponseDataError's `data`), JSON of another shape than the provider's (the
 * TypeValidationError's `value` under the APICallError). Where it reports usage, the call's row
 * records and prices it. Undefined for any other failure, and for an answer not read whole (past
 * SLUICE_MAX_PROVIDER_RESPONSE_BYTES, cut short, not JSON).
 */
export function unreadAnswerBody(error: unknown): unknown {
  const invalid = firstInChain(error, isInvalidResponseData) as (Error & { data?: unknown }) | undefined;
  if (invalid !== undefined) return invalid.data;
  const cause = successfulApiCall(error)?.cause;
  return cause instanceof Error && cause.name === "AI_TypeValidationError"
    ? (cause as Error & { value?: unknown }).value
    : undefined;
}

const isInvalidResponseData = (cause: Error) => cause.name === "AI_InvalidResponseDataError";

/** The AI SDK's APICallError along `error`'s causes where its status is a success (2xx), else undefined. */
function successfulApiCall(error: unknown) {
  const call = firstInChain(error, (cause) => cause.name === "AI_APICallError") as
    | (Error & { statusCode?: number; responseHeaders?: Record<string, string> })
    | undefined;
  return call !== undefined && isSuccessStatus(call.statusCode) ? call : undefined;
}

/**
 * An AI SDK APICallError on the error table, without the provider's body: with the provider's
 * status when it answered (`The provider failed to <what> (status 400)`), else it could not be
 * reached, as the proxies say. When the provider refused the model (400, 404, 410) and it is one
 * the catalogue says its provider had shut down by `today`, the message says so and names the
 * provider's replacement: the likely reason, and what to send instead. A 400 that refuses the
 * caller's input (refusalOfFailedCall) is no failure of the provider's: 422 VALIDATION_ERROR,
 * saying why (`refusalMessages` words it for the route), docs/decisions/0020. A retryable failure
 * carries the wait the provider asked for (providerRetryAfter) as its Retry-After.
 */
export function apiCallFailure(
  error: Error & {
    statusCode?: number;
    isRetryable: boolean;
    data?: unknown;
    responseBody?: string;
    responseHeaders?: Record<string, string>;
  },
  provider: ProviderId,
  what: string,
  model: string | null = null,
  today: Date = new Date(),
  refusalMessages: Partial<Record<RefusalReason, string>> = {},
): GatewayError {
  const refusal = refusalOfFailedCall(provider, error);
  if (refusal !== null) {
    const message = refusalMessages[refusal];
    return providerRefusal(refusal, 400, { cause: error, ...(message ? { message } : {}) });
  }
  const providerStatus = error.statusCode ?? null;
  // Only where the provider refused the model itself: a 401, 429 or 5xx has another cause.
  const retired = modelRefusals.has(providerStatus ?? 0) ? shutdownNotice(provider, model, today) : null;
  const facts = providerFailureFacts(provider, error);
  // A base URL on a port fetch refuses (a WHATWG "bad port") fails every try the same way, as does
  // one naming a server that answers with no HTTP (notHttpAnswer), and provider A's 429 for an
  // account out of credit: only its billing mends it.
  // An interim answer Sluice did not ask for is named as the proxies name it (unaskedAnswer), and
  // logged by its code.
  const unasked = providerStatus === null ? unaskedAnswer(error) : null;
  const notHttp = providerStatus === null && (unasked !== null || notHttpAnswer(error));
  const retryable =
    (error.isRetryable || unreadableAnswer(error, providerStatus)) &&
    !notHttp &&
    facts.code !== "FETCH_BAD_PORT" &&
    !(provider === "provider-a" && facts.providerError === "insufficient_quota");
  // The provider's wait (its rate limit, an overload) is the client's: retrying sooner fails again.
  const wait = retryable ? providerRetryAfter(error.responseHeaders, error.responseBody) : null;
  const message = unasked
    ? unasked.answer
    : notHttp
      ? notHttpMessage
      : providerStatus === null
        ? "The provider could not be reached"
        : `The provider failed to ${what} (status ${providerStatus})`;
  return new GatewayError(
    "PROVIDER_ERROR",
    retired === null
      ? message
      : `${message}: its model ${model} was shut down by ${provider} on ${retired.shutdown}${retired.replacement ? `; name a current model, such as ${retired.replacement}` : ""}`,
    {
      cause: unasked ?? error,
      provider,
      ...(wait === null ? {} : { headers: { "retry-after": String(wait) } }),
      details: {
        providerStatus,
        retryable,
        ...(retired === null ? {} : { modelShutdown: retired.shutdown }),
      },
    },
  );
}

/**
 * A 2xx whose body does not parse as JSON (the AI SDK's "Invalid JSON response" over a
 * JSONParseError): a proxy's or captive portal's page, a body cut short. No answer of the
 * provider's, so the same call may get one later, as after its 5xx; the SDK marks it not retryable
 * (it reads only the status). JSON of another shape than the provider's (a TypeValidationError) is
 * not this: the same call gets it again.
 */
function unreadableAnswer(error: Error, providerStatus: number | null): boolean {
  if (providerStatus === null || providerStatus < 200 || providerStatus > 299) return false;
  return someInChain(error.cause, (cause) => cause.name === "AI_JSONParseError");
}

/**
 * Whether the provider's server answered with something that is not HTTP (llhttp's
 * HTTPParserError: a base URL on another protocol's port, such as an SSH banner) or a head undici
 * will not read (over its 16 KiB): the AI SDK calls it a network error ("Cannot connect to API"),
 * retryable, but the same server answers the same way on every try. The proxy says the same
 * (src/proxy/forward.ts).
 */
function notHttpAnswer(error: Error): boolean {
  return someInChain(
    error,
    (cause) =>
      cause.name === "HTTPParserError" || (cause as { code?: unknown }).code === "UND_ERR_HEADERS_OVERFLOW",
  );
}

/** The statuses the providers answer an unknown or retired model with. */
const modelRefusals = new Set([400, 404, 410]);
