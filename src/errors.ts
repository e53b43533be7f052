/**
 * The one error table. Every error the gateway itself produces is a GatewayError with one of
 * these codes, rendered by `renderError` as
 * `{"error":{"code","message","requestId","details"?}}`. docs/api.md lists every code (a test checks).
 */
export const errorStatus = {
  BAD_REQUEST: 400,
  UNAUTHORIZED: 401,
  FORBIDDEN: 403,
  PROJECT_NOT_FOUND: 404,
  NOT_FOUND: 404,
  METHOD_NOT_ALLOWED: 405,
  REQUEST_TIMEOUT: 408,
  CONFLICT: 409,
  PAYLOAD_TOO_LARGE: 413,
  UNSUPPORTED_MEDIA_TYPE: 415,
  RANGE_NOT_SATISFIABLE: 416,
  VALIDATION_ERROR: 422,
  REQUEST_HEADER_FIELDS_TOO_LARGE: 431,
  TOO_MANY_REQUESTS: 429,
  INTERNAL_ERROR: 500,
  PROVIDER_ERROR: 502,
  SERVICE_UNAVAILABLE: 503,
  PROVIDER_TIMEOUT: 504,
} as const;

export type ErrorCode = keyof typeof errorStatus;

export interface GatewayErrorOptions {
  details?: unknown;
  /** Extra response headers, e.g. Retry-After. */
  headers?: Record<string, string>;
  cause?: unknown;
  /** The provider that failed (PROVIDER_ERROR, PROVIDER_TIMEOUT), for the log; never rendered. */
  provider?: string;
  /** Another dependency that failed (`vault`), for the log as a provider is; never rendered. */
  dependency?: string;
}

/**
 * The codes of a failure the client may meet again or not: a provider's (502, 504) or another
 * dependency's, or the gateway's own load (503). Each says in `details.retryable` whether the same
 * call may succeed later (transient, cut short, overloaded: true; the same call gets the same
 * answer: false); the constructor's type asks for it, so no such error is built without it.
 */
export type FailureCode = "PROVIDER_ERROR" | "SERVICE_UNAVAILABLE" | "PROVIDER_TIMEOUT";

/** A FailureCode's details: `retryable`, and whatever else the failure names. */
export interface FailureDetails {
  retryable: boolean;
  [key: string]: unknown;
}

export class GatewayError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly details: unknown;
  readonly headers: Record<string, string>;
  readonly provider: string | undefined;
  readonly dependency: string | undefined;

  constructor(code: FailureCode, message: string, options: GatewayErrorOptions & { details: FailureDetails });
  constructor(code: Exclude<ErrorCode, FailureCode>, message: string, options?: GatewayErrorOptions);
  constructor(code: ErrorCode, message: string, options: GatewayErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "GatewayError";
    this.code = code;
    this.status = errorStatus[code];
    this.details = options.details;
    this.headers = options.headers ?? {};
    this.provider = options.provider;
    this.dependency = options.dependency;
  }

  /** This error with `extra` added to its details (a FailureCode's `retryable` kept), all else the same. */
  withDetails(extra: Record<string, unknown>): GatewayError {
    const details = this.details as Record<string, unknown> | undefined;
    return new GatewayError(this.code as FailureCode, this.message, {
      cause: this.cause,
      headers: this.headers,
      ...(this.provider === undefined ? {} : { provider: this.provider }),
      ...(this.dependency === undefined ? {} : { dependency: this.dependency }),
      details: { ...details, ...extra } as FailureDetails,
    });
  }
}

export function isGatewayError(error: unknown): error is GatewayError {
  return error instanceof GatewayError;
}

export interface ErrorBody {
  error: { code: ErrorCode; message: string; requestId: string; details?: unknown };
}

/** The envelope for an error; anything that is not a GatewayError says nothing internal. */
export function renderError(
  error: unknown,
  requestId: string,
): { status: number; body: ErrorBody; headers: Record<string, string> } {
  const gatewayError = isGatewayError(error)
    ? error
    : new GatewayError(
        "INTERNAL_ERROR",
        "An internal error occurred. Quote the request id when reporting it.",
      );
  const body: ErrorBody = {
    error: { code: gatewayError.code, message: gatewayError.message, requestId },
  };
  if (gatewayError.details !== undefined) body.error.details = gatewayError.details;
  const headers = noRetryBeside(gatewayError);
  // RFC 9110 §15.5.2: a 401 names the scheme that would authenticate (Bearer, the preferred method
  // of every endpoint and of the admin API).
  if (gatewayError.status === 401 && headers["www-authenticate"] === undefined)
    return { status: 401, body, headers: { ...headers, "www-authenticate": bearerChallenge } };
  return { status: gatewayError.status, body, headers };
}

/**
 * The error's headers, with `x-should-retry: false` beside a 5xx whose `details.retryable` is
 * false: the openai and Anthropic SDKs retry every 5xx twice by default and read no body to learn
 * otherwise, but they obey this header (an answer that is not HTTP, a provider's 401 on the
 * structured endpoints: the same call meets the same answer, so each retry only costs the app time).
 */
function noRetryBeside(error: GatewayError): Record<string, string> {
  if (error.status < 500 || (error.details as { retryable?: unknown } | undefined)?.retryable !== false)
    return error.headers;
  return { ...error.headers, "x-should-retry": "false" };
}

const bearerChallenge = 'Bearer realm="sluice"';

/** The problems one refusal lists at most: a bad input may hold tens of thousands. */
export const maxProblemsListed = 50;
/** The characters a listed problem keeps at most: one may quote a long name from the input. */
export const maxProblemLength = 400;

export interface ListedProblems {
  /** The problems listed, joined with `; `, and how many more there were: `…; and 39941 more problems`. */
  text: string;
  /** `details.problems`, and `details.moreProblems` when some were left out. */
  details: { problems: string[]; moreProblems?: number };
}

/**
 * `problems` as one refusal lists them, the one place every refusal's list is cut: the first
 * maxProblemsListed, each over maxProblemLength characters cut to its start (where) and end (why)
 * around `…`, and how many more there were. An answer's size then stays bounded whatever the
 * input: 40,000 required names no answer can have were a 9.4 MB 422 to a 349 KB body.
 */
export function listedProblems(problems: readonly string[]): ListedProblems {
  const listed = problems.slice(0, maxProblemsListed).map(shortened);
  const more = problems.length - listed.length;
  if (more === 0) return { text: listed.join("; "), details: { problems: listed } };
  return {
    text: `${listed.join("; ")}; and ${more} more ${more === 1 ? "problem" : "problems"}`,
    details: { problems: listed, moreProblems: more },
  };
}

function shortened(problem: string): string {
  if (problem.length <= maxProblemLength) return problem;
  const head = Math.floor((maxProblemLength - 1) / 2);
  return `${problem.slice(0, head)}…${problem.slice(problem.length - (maxProblemLength - 1 - head))}`;
}

/**
 * The refusal of an input for `problems` (400 or 422): `${lead}: ${problem}; …` and
 * `details.problems`, both listed by listedProblems, with `details.moreProblems` when some were left
 * out; `details` adds the refusal's other fields.
 */
export function problemsError(
  code: "BAD_REQUEST" | "VALIDATION_ERROR",
  lead: string,
  problems: readonly string[],
  details: Record<string, unknown> = {},
): GatewayError {
  const { text, details: listed } = listedProblems(problems);
  return new GatewayError(code, `${lead}: ${text}`, { details: { ...listed, ...details } });
}
