import type { GatewayError } from "../errors.js";
import type { Logger } from "./logger.js";
import { createSuppressionWindows, type SuppressionWindowsOptions } from "./suppression-windows.js";

/**
 * `windowMs`: one line per provider and error code per window; the others are counted (default 10 s).
 * `registry`: the gateway's, whose close writes the counts of the windows still open.
 */
export type ProviderFailureLogOptions = Partial<
  Pick<SuppressionWindowsOptions<unknown>, "windowMs" | "now" | "schedule" | "registry">
>;

/** What one failure to reach a provider is logged with; no key, header or URL query. */
export interface ProviderFailureFacts {
  provider: string;
  /**
   * The system or undici error code (`ECONNREFUSED`, `UND_ERR_HEADERS_TIMEOUT`); `FETCH_BAD_PORT`
   * for fetch's refusal of a WHATWG "bad port" (its base URL's port), which undici gives no code;
   * else the error's name.
   */
  code: string;
  /** What the innermost cause says, URL queries cut (a query may carry a key, e.g. provider C's `key=`). */
  cause: string;
  /** The provider's own HTTP status when it answered with an error (AI SDK routes). */
  providerStatus?: number;
  /**
   * The name the provider's error gives its kind (AI SDK routes), a word and never its message:
   * provider A's `code` or `type` (`rate_limit_exceeded`, `insufficient_quota`), B's `type`
   * (`overloaded_error`), C's `status` (`RESOURCE_EXHAUSTED`).
   */
  providerError?: string;
}

/** Windows beyond this many close at once (codes come from Node, undici and the SDK). */
const maxKeys = 200;

/**
 * Logs a provider failure (PROVIDER_ERROR, PROVIDER_TIMEOUT) at warn, at most once per provider,
 * error code, and status and kind the provider answered (`providerStatus`, `providerError`) per window: a provider that is down fails every request, and one line per request
 * would drown the log. The first failure opens a window and is logged; the others in it are
 * counted, and when the window ends with any counted, one more line says how many ("provider call
 * failures suppressed"), so the count is written even when the provider recovers and fails no more.
 * Another dependency's failure (a GatewayError's `dependency`: the image vault) is logged the same
 * way, as `<dependency> call failed` with a `dependency` field instead of `provider`. The line names
 * the project the call was admitted for (`projectId`, an id and no secret), when there is one. A
 * provider's 4xx (its 401 or 403 for the project's key, its 429 for the project's account) is the
 * project's own, so its window is the project's too: another project's key refused meanwhile is not
 * counted into it unnamed. Its 5xx, or a provider not reached, is one window for every project.
 */
export function createProviderFailureLog(logger: Logger, options: ProviderFailureLogOptions = {}) {
  const windowMs = options.windowMs ?? 10_000;
  type Failed = {
    field: "provider" | "dependency";
    name: string;
    code: string;
    /** Set when the window is the project's (the provider answered a 4xx). */
    projectId?: string;
    providerStatus?: number;
    providerError?: string;
  };
  const subject = (failed: Failed) => (failed.field === "provider" ? "provider" : failed.name);
  const windows = createSuppressionWindows<Failed>({
    // The test clock and timers, and the gateway's registry, as given.
    ...options,
    windowMs,
    maxKeys,
    onSuppressed: (failed, suppressed) =>
      logger.warn(
        {
          [failed.field]: failed.name,
          ...(failed.projectId === undefined ? {} : { projectId: failed.projectId }),
          code: failed.code,
          ...(failed.providerStatus === undefined ? {} : { providerStatus: failed.providerStatus }),
          ...(failed.providerError === undefined ? {} : { providerError: failed.providerError }),
          suppressed,
          windowMs,
        },
        `${subject(failed)} call failures suppressed`,
      ),
  });
  return (error: GatewayError, requestId: string, route: string, projectId?: string): void => {
    const field = error.provider !== undefined ? "provider" : "dependency";
    const name = error.provider ?? error.dependency;
    if (name === undefined) return;
    const { provider: _, ...facts } = providerFailureFacts(name, error.cause);
    const failed: Failed = { field, name, code: facts.code };
    const status = facts.providerStatus;
    if (projectId !== undefined && status !== undefined && status >= 400 && status < 500)
      failed.projectId = projectId;
    if (status !== undefined) failed.providerStatus = status;
    if (facts.providerError !== undefined) failed.providerError = facts.providerError;
    // A window per status and kind the provider answered: its 401 (the project's key refused), or
    // its 429 for an account out of credit, is not counted into the window of its 429s for a rate
    // limit (a busy provider), where no line would name it.
    const answered = `${status ?? ""} ${facts.providerError ?? ""}`;
    if (!windows.open(`${field} ${name} ${facts.code} ${answered} ${failed.projectId ?? ""}`, failed)) return;
    logger.warn(
      {
        [field]: name,
        ...(projectId === undefined ? {} : { projectId }),
        ...facts,
        status: error.status,
        requestId,
        route,
      },
      `${subject(failed)} call failed`,
    );
  };
}

/** What fetch's error, and the AI SDK's in its place, say of a refused "bad port" above its cause. */
const fetchFailures = new Set(["fetch failed", "Cannot connect to API: bad port"]);

/** The code and message of the innermost cause of `error` (fetch wraps the socket's error in its own). */
export function providerFailureFacts(provider: string, error: unknown): ProviderFailureFacts {
  let code: string | undefined;
  let providerStatus: number | undefined;
  let providerError: string | undefined;
  let innermost: unknown = error;
  let current: unknown = error;
  let fetchFailed = false;
  // Not errorChain: one path down to a single innermost cause (an AggregateError's first member), named in one line.
  for (let depth = 0; current instanceof Error && depth < 6; depth++) {
    const fields = current as Error & { code?: unknown; statusCode?: unknown; errors?: unknown };
    if (typeof fields.code === "string") code ??= fields.code;
    if (fetchFailures.has(current.message)) fetchFailed = true;
    if (typeof fields.statusCode === "number") {
      providerStatus ??= fields.statusCode;
      providerError ??= errorName((fields as { data?: unknown }).data);
    }
    innermost = current;
    // Node's connect to several addresses fails with an AggregateError of one error per address.
    current =
      current.cause ?? (Array.isArray(fields.errors) && fields.message === "" ? fields.errors[0] : undefined);
  }
  const named = innermost instanceof Error ? innermost : undefined;
  // An AI SDK APICallError's message is the provider's error body: its status says enough.
  const message =
    typeof (named as { statusCode?: unknown } | undefined)?.statusCode === "number"
      ? `the provider answered ${providerStatus}`
      : (named?.message ?? String(innermost));
  // fetch (undici) refuses a WHATWG "bad port" before connecting, with a network error of that
  // message alone (under its "fetch failed", or the AI SDK's "Cannot connect to API: …" in its
  // place): named here as the codes beside it are, so a search or an alert can tell it.
  if (code === undefined && fetchFailed && named?.message === "bad port") code = "FETCH_BAD_PORT";
  return {
    provider,
    code: code ?? named?.name ?? "unknown",
    cause: withoutProviderText(named, withoutQueries(message)).slice(0, 300),
    ...(providerStatus === undefined ? {} : { providerStatus }),
    ...(providerError === undefined ? {} : { providerError }),
  };
}

/**
 * The kind an error body (the AI SDK's parse of it) names in its `error` object: the first of
 * `code`, `type` and `status` that is a word of letters (a provider's enumerated name, never free
 * text nor a key).
 */
function errorName(data: unknown): string | undefined {
  const inner = (data as { error?: unknown } | null | undefined)?.error;
  if (typeof inner !== "object" || inner === null) return undefined;
  const { code, type, status } = inner as Record<string, unknown>;
  return [code, type, status].find(
    // Words of letters joined by `_` or `.`, no digits: the providers' enumerated names have none,
    // and a key (which a compatible server might quote as its code) has some, so is never logged.
    (value): value is string =>
      typeof value === "string" && value.length <= 64 && /^[A-Za-z]+(?:[_.][A-Za-z]+)*$/.test(value),
  );
}

/**
 * The message without text the provider sent, which parse errors quote and which may hold anything
 * (a key a server echoed, the user's content): V8's JSON errors quote the text around the bad byte
 * (`Unexpected token 's', "{"a": sk-pro"... is not valid JSON`), and the AI SDK's parse and
 * validation errors quote the whole answer after `Text: ` or `Value: `.
 */
function withoutProviderText(error: Error | undefined, message: string): string {
  if (error instanceof SyntaxError) {
    const quote = message.indexOf('"');
    return quote < 0 ? message : `${message.slice(0, quote)}[text cut]`;
  }
  return message.replace(/\b(Text|Value): [\s\S]*?(?=\.\nError message:|$)/g, "$1: [cut]");
}

/**
 * The message with every URL's query and fragment cut: in each run of text without whitespace that
 * holds a `://`, what follows the first `?` or `#` after it. Read word by word, not by one pattern
 * over the message: a pattern tried at each scheme (or each `://`) and run to the word's end read a
 * validation error's quote of the provider's answer once per `://` in it, quadratic in its length.
 */
function withoutQueries(message: string): string {
  return message.replace(/\S+/g, (word) => {
    const url = word.indexOf("://");
    if (url < 0) return word;
    const query = word.slice(url + 3).search(/[?#]/);
    return query < 0 ? word : `${word.slice(0, url + 3 + query)}?[cut]`;
  });
}
