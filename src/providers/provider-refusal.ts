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
  if (error.statusCode !== 400) return null;
  const answered = (error.data ?? jsonOrNull(error.responseBody)) as { error?: unknown } | null;
  const inner = answered?.error;
  if (typeof inner !== "object" || inner === null) return null;
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

function jsonOrNull(text: string | undefined): unknown {
  if (text === undefined || text.length > 65_536) return null;
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}
