import { GatewayError } from "../errors.js";
import type { ProviderId } from "./provider-id.js";

/**
 * Why a provider refused a call for what the caller sent (docs/decisions/0020): its safety system
 * refused the input or the answer to it, the input is longer than the model takes, or the model
 * declined to answer it. The same input is refused again, so a retry only costs more.
 */
export type RefusalReason = "contentPolicy" | "inputTooLong" | "modelRefused";

const messages: Record<RefusalReason, string> = {
  contentPolicy:
    "The provider's content filter refused this input or the model's answer to it; change the input rather than retry it",
  inputTooLong:
    "The input is longer than the model takes (its context window, or its page limit for a PDF); send a shorter input rather than retry it",
  modelRefused: "The model refused to analyse this input; change the input rather than retry it",
};

/**
 * The 422 VALIDATION_ERROR for a refusal caused by the caller's input, with `details` the app can
 * branch on. Never the provider's body or its words (they may quote the input, or name the
 * provider's account). `extra` adds to `details` (the structured routes' model and usage).
 */
export function providerRefusal(
  reason: RefusalReason,
  providerStatus: number,
  options: { cause?: unknown; extra?: Record<string, unknown>; message?: string } = {},
): GatewayError {
  return new GatewayError("VALIDATION_ERROR", options.message ?? messages[reason], {
    cause: options.cause,
    details: { reason, providerStatus, retryable: false, ...options.extra },
  });
}

/**
 * The reason of a provider's 400 that refuses the caller's input, from the error it answered with
 * (`data`: the AI SDK's parse of the body; else the body), or null for any other failure, which
 * stays the provider's (502). Only the recorded shapes, by code where the provider gives one:
 * - provider A: `context_length_exceeded`; on the images API `content_policy_violation` (DALL·E)
 *   and `moderation_blocked` (the GPT Image models), and its older answer with no code: type
 *   `invalid_request_error` and a message that opens with "Your request was rejected as a result of
 *   our safety system." (the sentence every recorded variant starts with);
 * - provider B (no code, `invalid_request_error` for every 400): "prompt is too long: N tokens > M
 *   maximum", and "A maximum of N PDF pages may be provided.";
 * - provider C (`INVALID_ARGUMENT` for every 400): "The input token count (N) exceeds the maximum
 *   number of tokens allowed (M).", and Imagen's refused prompt ("This prompt contains sensitive
 *   words that violate Google's Responsible AI practices").
 */
export function refusalOfFailedCall(
  provider: ProviderId,
  error: { statusCode?: number | undefined; data?: unknown; responseBody?: string | undefined },
): RefusalReason | null {
  const inner = errorOf400(error);
  if (inner === null) return null;
  const { code, message, type } = inner as { code?: unknown; message?: unknown; type?: unknown };
  switch (provider) {
    case "provider-a":
      if (code === "context_length_exceeded") return "inputTooLong";
      if (code === "content_policy_violation" || code === "moderation_blocked") return "contentPolicy";
      if (
        code == null &&
        type === "invalid_request_error" &&
        typeof message === "string" &&
        message.startsWith("Your request was rejected as a result of our safety system.")
      )
        return "contentPolicy";
      return null;
    case "provider-b":
      if (typeof message !== "string") return null;
      if (/^prompt is too long: \d+ tokens > \d+ maximum/.test(message)) return "inputTooLong";
      if (/: A maximum of \d+ PDF pages may be provided\.$/.test(message)) return "inputTooLong";
      return null;
    case "provider-c":
      if (typeof message !== "string") return null;
      if (/^The input token count \(\d+\) exceeds the maximum number of tokens allowed \(\d+\)/.test(message))
        return "inputTooLong";
      if (message.includes("violate Google's Responsible AI practices")) return "contentPolicy";
      return null;
  }
}

/**
 * Why a provider refused the project's output schema (docs/decisions/0020, amended): it is too
 * complex for the provider (its grammar, its states, its nesting), or it holds a keyword or shape
 * the provider does not take. Every call with that schema is refused the same way, whatever the
 * input: the project's admin must change the schema. Sluice's save-time check (output-schema.ts,
 * provider-limits.ts) refuses what is known beforehand; this is what it did not foresee.
 */
export type SchemaRefusal = "tooComplex" | "unsupported";

const schemaRefusedMessage =
  "The provider refused this project's output schema (too complex for it, or a keyword or shape it does not take); the project's admin must simplify the schema, and a retry is refused the same way";

/**
 * The 422 VALIDATION_ERROR, `reason` `schemaRefused`, for a provider's 400 that refuses the
 * project's output schema. Never the provider's words: they may quote the schema (provider B's
 * "Invalid schema" does, provider C's name its fields) or a request id. `extra` as providerRefusal's.
 */
export function schemaRefusal(
  options: { cause?: unknown; extra?: Record<string, unknown> } = {},
): GatewayError {
  return new GatewayError("VALIDATION_ERROR", schemaRefusedMessage, {
    cause: options.cause,
    details: { reason: "schemaRefused", providerStatus: 400, retryable: false, ...options.extra },
  });
}

/**
 * Why the provider refused the project's output schema, from the 400 it answered a structured
 * analysis with, or null for any other failure. Only answers that name the schema (its parameter
 * or its field path, or words that can only be about it), as recorded in public reports
 * (test/fakes/fake-schema-refusals.ts names them); an answer that names the structured output but
 * not its schema (an unknown `response_format.type`, provider B's retired `output_format`) or
 * nothing at all ("Request contains an invalid argument.") stays the provider's failure:
 * - provider A: `param` `response_format` and a message that opens "Invalid schema for
 *   response_format" (its code is null);
 * - provider B: a message that opens with the schema's path (`output_config.format.schema:`, the
 *   older `output_format.schema:`, a tool's `tools.N.input_schema:` or `tools.N.custom.input_schema:`,
 *   the AI SDK sending the schema as its `json` tool), or its grammar compiler's "The compiled grammar
 *   is too large" and "Schemas contains too many parameters with union types";
 * - provider C: "The specified schema produces a constraint that has too many states for serving",
 *   "A schema in GenerationConfig in the request exceeds the maximum allowed nesting depth", and a
 *   field path in `generation_config.response_schema`.
 */
export function schemaRefusalOfFailedCall(
  provider: ProviderId,
  error: { statusCode?: number | undefined; data?: unknown; responseBody?: string | undefined },
): SchemaRefusal | null {
  const inner = errorOf400(error);
  if (inner === null) return null;
  const { message, param } = inner as { message?: unknown; param?: unknown };
  if (typeof message !== "string") return null;
  switch (provider) {
    case "provider-a":
      return param === "response_format" && message.startsWith("Invalid schema for response_format")
        ? "unsupported"
        : null;
    case "provider-b":
      if (
        message.startsWith("The compiled grammar is too large") ||
        message.startsWith("Schemas contains too many parameters with union types")
      )
        return "tooComplex";
      return /^(output_config\.format\.schema|output_format\.schema|tools\.\d+(\.custom)?\.input_schema)[.:[ ]/.test(
        message,
      )
        ? "unsupported"
        : null;
    case "provider-c":
      if (
        message.startsWith(
          "The specified schema produces a constraint that has too many states for serving",
        ) ||
        message.startsWith(
          "A schema in GenerationConfig in the request exceeds the maximum allowed nesting depth",
        )
      )
        return "tooComplex";
      return /(^\* GenerateContentRequest\.generation_config\.response_schema[.:[ ]|^Invalid JSON payload received\. Unknown name "[^"]*" at 'generation_config\.response_schema)/.test(
        message,
      )
        ? "unsupported"
        : null;
  }
}

/**
 * Which schema refusal `error` is (a GatewayError that schemaRefusal made, with the provider's
 * error as its cause), for the operator's log; null for any other error.
 */
export function schemaRefusalOf(error: unknown, provider: ProviderId): SchemaRefusal | null {
  if (!(error instanceof GatewayError) || error.code !== "VALIDATION_ERROR") return null;
  if ((error.details as { reason?: unknown } | undefined)?.reason !== "schemaRefused") return null;
  const cause = error.cause as { statusCode?: number; data?: unknown; responseBody?: string } | undefined;
  return cause === undefined ? null : schemaRefusalOfFailedCall(provider, cause);
}

/**
 * The `error` object of a provider's 400 (`data`: the AI SDK's parse of the body; else the body,
 * parsed), which every provider answers a refusal with; null for another status or shape.
 */
function errorOf400(error: {
  statusCode?: number | undefined;
  data?: unknown;
  responseBody?: string | undefined;
}): object | null {
  if (error.statusCode !== 400) return null;
  const answered = (error.data ?? jsonOrNull(error.responseBody)) as { error?: unknown } | null;
  const inner = answered?.error;
  return typeof inner === "object" && inner !== null ? inner : null;
}

function jsonOrNull(text: string | undefined): unknown {
  if (text === undefined || text.length > 65_536) return null;
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}
