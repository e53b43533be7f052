import type { ModelMessage } from "ai";
import { GatewayError, listedProblems, maxProblemsListed } from "../errors.js";
import { deadlineSignal } from "../net/deadline-signal.js";
import type { AiSdkModels } from "../providers/ai-sdk-provider.js";
import type { ProviderId } from "../providers/provider-id.js";
import {
  providerRefusal,
  type RefusalReason,
  schemaRefusal,
  schemaRefusalOfFailedCall,
} from "../providers/provider-refusal.js";
import {
  apiCallFailure,
  isProviderTimeout,
  providerTimeout,
  responseTooLargeFailure,
  successfulAnswerUnread,
  unreadAnswerBody,
} from "../providers/sdk-call-failure.js";
import {
  objectField,
  serviceTierOf,
  usageFromProvider,
  usageFromProviderA,
} from "../providers/usage-from-json.js";
import { quotesKey } from "../proxy/reflected-key-mask.js";
import { emptyUsage, type Sampling, type TokenUsage, tokenCount } from "../usage/token-usage.js";
import { withoutUnlistedProperties } from "./drop-unlisted-properties.js";
import type { AnalysisKind } from "./model-choice.js";
import { schemaForProvider } from "./provider-schema.js";
import { withReferencesWrittenOut } from "./references-written-out.js";
import { validateAgainstSchema } from "./schema-validator.js";

export type AnalysisInput =
  | { kind: "text"; text: string }
  | { kind: "vision"; bytes: Uint8Array; mediaType: string }
  | { kind: "pdf"; bytes: Uint8Array };

export interface AnalysisRequest {
  provider: ProviderId;
  model: string;
  providerKey: string;
  schema: Record<string, unknown>;
  input: AnalysisInput;
  timeoutMs: number;
  /** Aborts the provider calls early: the client went away. */
  signal?: AbortSignal;
}

/**
 * The schema-shaped object, or the PROVIDER_ERROR for output that did not match the schema even
 * after the repair (with `mismatch`, why), or the VALIDATION_ERROR for an answer the provider's
 * filter or the model refused. All carry the model the provider says answered and the usage of
 * every attempt, since every attempt was billed; with `partlyUnknown`, the usage of the attempts
 * whose usage is known, one attempt (billed) of unknown usage left out of it (addAttempt).
 */
export type AnalysisResult = { model: string; usage: TokenUsage; partlyUnknown?: true } & (
  | { ok: true; object: Record<string, unknown> }
  | { ok: false; error: GatewayError; mismatch?: OutputMismatch }
);

/**
 * Why the repair's answer failed the schema, for the operator's log: never the answer, nor a path in
 * it (the schema's names, the answer's own keys). `cutOff`: stopped at the output token limit;
 * `notJson`: no JSON object read from it (or empty); `schema`: read, not matching, `keyword` the
 * first mismatch's kind (Ajv's keyword, `finite`, `maxDepth`) and `mismatches` how many were found
 * (at most maxMismatchesFound; `moreMismatches` when there were more).
 */
export interface OutputMismatch {
  reason: "cutOff" | "notJson" | "schema";
  keyword?: string;
  mismatches?: number;
  moreMismatches?: true;
}

const system =
  "You are a structured analysis service. Analyze the user's input and answer with one JSON object that " +
  "matches the given JSON Schema exactly. Output only that JSON object.";

const instruction: Record<AnalysisKind, string> = {
  text: "Analyze this text.",
  vision: "Analyze this image.",
  pdf: "Analyze this PDF document.",
};

/**
 * Structured analysis through the AI SDK in the provider's native structured-output mode. Every
 * returned object validates against the schema; when the model's output does not, it is asked
 * once more with the reasons (a bounded repair), and then the result is a PROVIDER_ERROR. An answer
 * the provider's filter stopped or the model refused is not repaired (the same conversation is
 * refused again): the result is a 422 at once (docs/decisions/0020). A provider failure or time-out
 * is thrown, except on the repair, where the result carries it with the first attempt's usage, and
 * a 2xx answer it could not read (billed), whose result carries it with the usage that answer
 * reports added (none reported: the first attempt's usage, `partlyUnknown`: addAttempt).
 */
export async function analyze(models: AiSdkModels, request: AnalysisRequest): Promise<AnalysisResult> {
  const ai = await import("ai");
  const model = await models.language(request.provider, request.model, request.providerKey);
  const messages: ModelMessage[] = [{ role: "user", content: userContent(request.input) }];
  // Not AbortSignal.any with AbortSignal.timeout, whose timer a garbage collection can take
  // (deadline-signal.ts): the call would then run past its deadline.
  const { signal, clear } = deadlineSignal(request.timeoutMs, request.signal);
  try {
    let usage: TokenUsage = emptyUsage();
    let modelUsed = request.model;
    // What the provider is sent (only the annotations it takes, `nullable` as a type that takes null);
    // answers are validated against the project's schema itself.
    const forProvider = schemaForProvider(request.schema, request.provider);
    // Provider C's $refs written out before the AI SDK follows them, which takes time quadratic in
    // a chain of them (references-written-out.ts).
    const sentSchema =
      request.provider === "provider-c" ? withReferencesWrittenOut(forProvider) : forProvider;
    // An attempt of unknown usage was left out of `usage` (addAttempt): said on every result.
    let partlyUnknown = false;
    const unknownPart = () => (partlyUnknown ? { partlyUnknown: true as const } : {});
    let cut = false;
    let mismatch: OutputMismatch = { reason: "notJson" };
    for (let attempt = 1; attempt <= 2; attempt++) {
      let outcome: AttemptOutcome;
      try {
        outcome = await attemptOnce(ai, model, sentSchema, messages, signal, request.provider);
      } catch (error) {
        if (!(error instanceof GatewayError)) throw error;
        // A 2xx answer it could not read (past the response limit, cut short, `choices: []`): billed
        // all the same, at the usage it reports, else at a cost unknown (for the repair, the first
        // attempt's known usage kept beside it: addAttempt), which the spend cap counts at an
        // estimate (docs/decisions/0057). Read from the SDK's failure under the call's
        // PROVIDER_ERROR (the chain stops at one).
        if (successfulAnswerUnread(error.cause)) {
          const reported = usageOfUnreadAnswer(request.provider, error.cause);
          // Answered as any failure of a first attempt is (no model or usage in its details): the
          // usage is its row's.
          if (attempt === 1) return { ok: false, error, model: modelUsed, usage: reported ?? emptyUsage() };
          ({ usage, partlyUnknown } = addAttempt(usage, reported));
        } else if (attempt === 1) {
          // A 400 refusal of the input or of the schema (docs/decisions/0020) gives the model and usage, as
          // every refusal here does: on the first attempt, the model asked and no tokens (the call unbilled).
          throw isRefusal(error) ? withModelAndUsage(error, modelUsed, usage) : error;
        }
        // The repair failed at the provider (or its answer was not read): the first attempt was
        // billed all the same.
        return {
          ok: false,
          error: withModelAndUsage(error, modelUsed, usage),
          model: modelUsed,
          usage,
          ...unknownPart(),
        };
      }
      if (attempt === 1) usage = outcome.usage ?? emptyUsage();
      else ({ usage, partlyUnknown } = addAttempt(usage, outcome.usage));
      modelUsed = answeredModel(outcome.modelId, request.providerKey) ?? modelUsed;
      if (outcome.refused !== undefined) {
        return {
          ok: false,
          error: providerRefusal(outcome.refused, 200, {
            extra: { model: modelUsed, usage: countsOf(usage) },
          }),
          model: modelUsed,
          usage,
          ...unknownPart(),
        };
      }
      if (outcome.object !== undefined) {
        // Keys a closed object does not list are dropped, not repaired (docs/decisions/0019).
        const object = withoutUnlistedProperties(request.schema, outcome.object);
        const check = validateAgainstSchema(request.schema, object);
        // (Nested no deeper than maxAnswerDepth: a valid object is written out without overflow.)
        if (check.valid && quotesKey(JSON.stringify(object), request.providerKey))
          return { ok: false, error: keyQuoted(modelUsed, usage), model: modelUsed, usage, ...unknownPart() };
        if (check.valid)
          return {
            ok: true,
            object: object as Record<string, unknown>,
            model: modelUsed,
            usage,
            ...unknownPart(),
          };
        outcome.problems = check.errors;
        if (check.moreErrors) outcome.moreProblems = true;
        mismatch = {
          reason: "schema",
          ...(check.keyword === undefined ? {} : { keyword: check.keyword }),
          mismatches: check.errors.length,
          ...(check.moreErrors ? { moreMismatches: true as const } : {}),
        };
        // Sent back as the model wrote it, unless nested too deep for JSON.stringify (a stack overflow).
        if (!check.tooDeep) outcome.text = JSON.stringify(outcome.object);
      } else {
        mismatch = { reason: outcome.cut === true ? "cutOff" : "notJson" };
      }
      cut = outcome.cut === true;
      if (cut) {
        // Cut off at the output token limit: sending the cut text back would only be cut again.
        messages.push({
          role: "user",
          content:
            "Your answer was cut off at the output token limit. Answer again with a shorter JSON object that matches the JSON Schema.",
        });
        continue;
      }
      // An empty answer is not sent back: provider B refuses a conversation with an empty text block.
      // Nor is one nested too deep to write out (no text), whose problem says so.
      const answered = outcome.text?.trim() ? outcome.text : null;
      if (answered) messages.push({ role: "assistant", content: answered });
      const opening = answered
        ? "That answer"
        : outcome.text === undefined
          ? "Your answer"
          : "Your answer was empty, which";
      // The mismatches listed as a refusal lists its problems (at most 50, and how many more): Ajv
      // names every one, and an answer of many wrong items made a prompt many times its size.
      messages.push({
        role: "user",
        content: `${opening} does not match the JSON Schema (${mismatchesListed(outcome)}). Answer again with only a JSON object that matches it.`,
      });
    }
    return {
      ok: false,
      error: new GatewayError(
        "PROVIDER_ERROR",
        cut
          ? "The model's output was cut off at its output token limit, also after one repair attempt"
          : "The model's output did not match the project's output schema, also after one repair attempt",
        // The model may answer the same call otherwise; one cut again after being asked for a shorter
        // answer will be cut again (its output limit is too small for what the schema asks).
        { details: { retryable: !cut, model: modelUsed, usage: countsOf(usage) } },
      ),
      mismatch,
      model: modelUsed,
      usage,
      ...unknownPart(),
    };
  } finally {
    clear();
  }
}

/**
 * The model the provider says answered, or undefined when it quotes the provider key (as it is, or
 * escaped as a JSON string or a URL writes it: quotesKey). A compatible server that
 * echoes the request can name the key there, and this model goes into a failed call's
 * `details.model` (a 502 after the repair, a 422 refusal) and its row: the whole rebuilt key reached
 * a client that holds only a share of it. The model asked is named instead.
 */
function answeredModel(modelId: string | undefined, providerKey: string): string | undefined {
  if (modelId === undefined) return undefined;
  return quotesKey(modelId, providerKey) ? undefined : modelId;
}

/**
 * The provider's failure (502, billed as answered) for output that quotes the provider key, as it
 * is or escaped (quotesKey): a compatible server that echoes the request can write it into the
 * model's output, and this answer, unlike a proxied success (docs/decisions/0010), is Sluice's own,
 * parsed and checked whole before it is sent, to a client that holds only a share of the key. No
 * real provider's model knows the key: asked again, such a server would echo it again.
 */
function keyQuoted(model: string, usage: TokenUsage): GatewayError {
  return new GatewayError(
    "PROVIDER_ERROR",
    "The model's output quoted the provider key Sluice sent the provider, so it is not answered",
    { details: { retryable: false, model, usage: countsOf(usage) } },
  );
}

/**
 * An attempt's mismatches as a refusal lists its problems (listedProblems: at most 50, and how many
 * more); past maxMismatchesFound their search stopped, and the count is said to be more than that.
 */
function mismatchesListed({ problems, moreProblems }: AttemptOutcome): string {
  if (!moreProblems) return listedProblems(problems).text;
  const listed = problems.slice(0, maxProblemsListed);
  return `${listedProblems(listed).text}; and more than ${problems.length - listed.length} other problems`;
}

/**
 * A provider's 400 that refuses the caller's input (providerRefusal) or the project's output schema
 * (schemaRefusal): 422 with a `reason`.
 */
function isRefusal(error: GatewayError): boolean {
  const details = error.details as Record<string, unknown> | undefined;
  return error.code === "VALIDATION_ERROR" && typeof details?.reason === "string";
}

/**
 * A failed call's error with the model and the attempts' usage added to its details, as the row
 * records them and as a refusal inside an answer or a mismatch after the repair carry them: the
 * repair's failure (a 400 refusal, a 502, a 504) with the first attempt's usage, the failed call
 * being unbilled; the first attempt's 400 refusal with no tokens.
 */
function withModelAndUsage(error: GatewayError, model: string, usage: TokenUsage): GatewayError {
  return error.withDetails({ model, usage: countsOf(usage) });
}

interface AttemptOutcome {
  /** The answer stopped at the output token limit (finish reason `length`). */
  cut?: boolean;
  /**
   * The answer was refused (finish reason `content-filter`): the model declined (provider A's
   * `refusal`, provider B's `refusal` stop reason), or the provider's filter stopped it (provider
   * A's `content_filter`, provider C's `SAFETY`, `PROHIBITED_CONTENT`, `RECITATION` and the like,
   * or a prompt it blocked, with no candidate at all).
   */
  refused?: RefusalReason;
  object?: unknown;
  text?: string;
  problems: string[];
  /** The answer has more mismatches than `problems` (the search stopped at maxMismatchesFound). */
  moreProblems?: boolean;
  usage: TokenUsage | null;
  modelId?: string;
}

async function attemptOnce(
  ai: typeof import("ai"),
  model: Awaited<ReturnType<AiSdkModels["language"]>>,
  schema: Record<string, unknown>,
  messages: ModelMessage[],
  signal: AbortSignal,
  provider: ProviderId,
): Promise<AttemptOutcome> {
  try {
    const result = await ai.generateObject({
      model,
      schema: ai.jsonSchema(schema),
      system,
      messages,
      maxRetries: 0,
      abortSignal: signal,
      // Provider A's strict mode would reject schemas that do not list every property as required.
      providerOptions: { openai: { strictJsonSchema: false } },
      // A model offered the json tool without being forced to use it may answer in text.
      experimental_repairText: async ({ text, error }) =>
        error.name === "AI_JSONParseError" ? jsonInText(text) : null,
    });
    return {
      object: result.object,
      problems: [],
      usage: usageOf(provider, result.usage, result.response.body),
      modelId: result.response.modelId,
    };
  } catch (error) {
    if (ai.NoObjectGeneratedError.isInstance(error)) {
      return {
        ...(error.finishReason === "length" ? { cut: true } : {}),
        ...(error.finishReason === "content-filter"
          ? // The response's body is the provider's answer, as the SDK parsed it (its type leaves it out).
            { refused: refusalReason(provider, (error.response as { body?: unknown } | undefined)?.body) }
          : {}),
        text: error.text ?? "",
        problems: ["the answer is not valid JSON"],
        // The SDK's error keeps the answer's body beside the metadata its type names.
        usage: usageOf(provider, error.usage, (error.response as { body?: unknown } | undefined)?.body),
        ...(error.response?.modelId ? { modelId: error.response.modelId } : {}),
      };
    }
    throw providerFailure(ai, error, signal, provider, typeof model === "string" ? model : model.modelId);
  }
}

/**
 * Why an answer that finished with `content-filter` was refused: provider B's only such stop
 * reason is the model's `refusal`; provider A's answer says `refusal` (the model's explanation,
 * not passed on) where its model declined, and finishes with `content_filter` where its filter
 * stopped it; provider C's are all its filters'.
 */
function refusalReason(provider: ProviderId, body: unknown): RefusalReason {
  if (provider === "provider-b") return "modelRefused";
  if (provider === "provider-a") {
    const choices = (body as { choices?: unknown } | null | undefined)?.choices;
    const refusal = Array.isArray(choices)
      ? (choices[0] as { message?: { refusal?: unknown } } | undefined)?.message?.refusal
      : undefined;
    if (typeof refusal === "string" && refusal.length > 0) return "modelRefused";
  }
  return "contentPolicy";
}

/**
 * The JSON a text answer holds when it is not JSON itself: the inside of a code fence, else what
 * lies from the first `{` to the last `}` (after a line of prose, say). Null when there is neither;
 * whatever it finds is parsed and checked against the schema as any answer is.
 */
export function jsonInText(text: string): string | null {
  const fenced = fencedText(text);
  if (fenced) return fenced;
  const start = text.indexOf("{");
  const end = text.lastIndexOf("}");
  return start >= 0 && end > start ? text.slice(start, end + 1) : null;
}

/**
 * The trimmed inside of the first code fence: "```", a language name, the line's end, and what
 * follows up to the next "```". Found with searches that each read the text once: the answer is
 * the model's, and a client can ask for its shape, so a pattern that backtracks (as the regular
 * expression here did, for seconds on a fence left open over a few thousand blank lines) would
 * let one answer stall every request the instance serves.
 */
function fencedText(text: string): string | null {
  for (let open = text.indexOf("```"); open >= 0; open = text.indexOf("```", open + 3)) {
    let at = open + 3;
    while (at < text.length && isAsciiLetter(text.charCodeAt(at))) at++;
    // Spaces up to the (last) line end of the run: the fence's line ends there.
    let lineEnd = -1;
    for (; at < text.length && whitespace.test(text.charAt(at)); at++)
      if (text.charAt(at) === "\n") lineEnd = at;
    if (lineEnd < 0) continue;
    const close = text.indexOf("```", lineEnd + 1);
    return close < 0 ? null : text.slice(lineEnd + 1, close).trim() || null;
  }
  return null;
}

const whitespace = /\s/;

function isAsciiLetter(code: number): boolean {
  return (code >= 0x41 && code <= 0x5a) || (code >= 0x61 && code <= 0x7a);
}

function userContent(input: AnalysisInput) {
  switch (input.kind) {
    case "text":
      return [{ type: "text" as const, text: `${instruction.text}\n\n${input.text}` }];
    case "vision":
      return [
        { type: "text" as const, text: instruction.vision },
        { type: "image" as const, image: input.bytes, mediaType: input.mediaType },
      ];
    case "pdf":
      return [
        { type: "text" as const, text: instruction.pdf },
        { type: "file" as const, data: input.bytes, mediaType: "application/pdf" },
      ];
  }
}

/** Maps an AI SDK failure onto the error table without echoing the provider's body. */
function providerFailure(
  ai: typeof import("ai"),
  error: unknown,
  signal: AbortSignal,
  provider: ProviderId,
  model: string,
): GatewayError {
  if (signal.aborted || isProviderTimeout(error)) return providerTimeout(error, provider);
  // The SDK refuses before sending anything, e.g. provider C's schema conversion takes no recursive
  // $ref and no enum of mixed types: the project's schema is at fault, not the provider (SPEC:
  // VALIDATION_ERROR for an invalid project schema). The SDK's message names what it refused.
  if (ai.UnsupportedFunctionalityError.isInstance(error) || ai.InvalidArgumentError.isInstance(error)) {
    return new GatewayError(
      "VALIDATION_ERROR",
      `${provider}'s structured output cannot take this project's output schema or input: ${error.message}`,
      { cause: error },
    );
  }
  const tooLarge = responseTooLargeFailure(error, provider);
  if (tooLarge) return tooLarge;
  if (ai.APICallError.isInstance(error)) {
    // The provider refused the project's output schema: every call is refused the same way until
    // the project's admin changes it, so it is no failure of the provider's to retry (0020, amended).
    if (schemaRefusalOfFailedCall(provider, error) !== null) return schemaRefusal({ cause: error });
    return apiCallFailure(error, provider, "process the request", model);
  }
  // An answer the SDK could not use (a shape it does not read): the same call gets it again.
  return new GatewayError("PROVIDER_ERROR", "The provider failed to process the request", {
    cause: error,
    provider,
    details: { retryable: false },
  });
}

interface SdkUsage {
  inputTokens?: number | undefined;
  outputTokens?: number | undefined;
  reasoningTokens?: number | undefined;
  cachedInputTokens?: number | undefined;
  inputTokenDetails?: { cacheReadTokens?: number | undefined };
  outputTokenDetails?: { reasoningTokens?: number | undefined };
  /** The provider's own usage object, as its answer reported it. */
  raw?: unknown;
}

/**
 * An attempt's usage, read from the provider's own usage object as the proxies read it, so the call
 * is priced as the same call proxied would be: the AI SDK's summary leaves out what the provider
 * bills apart (provider A's and B's cache writes, B's by their lifetime), which would be priced as
 * plain input. The summary's counts only when the answer carries no usage object to read. The route
 * asks for no service tier, but a project's default may serve the call on another: B and C name it
 * in their usage objects, A beside its usage, in the answer's `service_tier` (`body`, the answer as
 * the SDK parsed it).
 */
function usageOf(provider: ProviderId, usage: SdkUsage | undefined, body: unknown): TokenUsage | null {
  if (!usage) return null;
  // Provider A's answer names its tier beside the usage object, not in it.
  const tierField = provider === "provider-a" ? objectField(body, "service_tier") : undefined;
  const reported =
    usage.raw === undefined
      ? null
      : provider === "provider-a"
        ? usageFromProviderA(usage.raw, tierField)
        : usageFromProvider[provider](usage.raw);
  if (reported) return reported;
  const summary: TokenUsage = {
    inputTokens: tokenCount(usage.inputTokens),
    outputTokens: tokenCount(usage.outputTokens),
    cachedInputTokens: tokenCount(usage.inputTokenDetails?.cacheReadTokens ?? usage.cachedInputTokens),
    reasoningTokens: tokenCount(usage.outputTokenDetails?.reasoningTokens ?? usage.reasoningTokens),
  };
  const tier = serviceTierOf(provider, tierField);
  if (tier) summary.serviceTier = tier;
  return summary;
}

/**
 * The usage a 2xx answer the AI SDK could not use reports (unreadAnswerBody), read as usageOf reads
 * an answer's: provider A's `usage` (its tier beside it), B's `usage`, C's `usageMetadata`. Null
 * when the answer was not read whole or reports none.
 */
function usageOfUnreadAnswer(provider: ProviderId, error: unknown): TokenUsage | null {
  const body = unreadAnswerBody(error);
  if (body === undefined) return null;
  if (provider === "provider-a")
    return usageFromProviderA(objectField(body, "usage"), objectField(body, "service_tier"));
  return usageFromProvider[provider](
    objectField(body, provider === "provider-b" ? "usage" : "usageMetadata"),
  );
}

/**
 * The usage of two attempts: their counts added, for the row, and each attempt a sampling of its
 * own for the cost. Each attempt is a provider call, priced on its own as the provider bills it
 * (held to the model's long-context threshold alone: two prompts under it are not one over it).
 * An input or output count unknown for either attempt (no usage at all included) is unknown for
 * both: the other attempt's alone would be priced as the whole. Cached and reasoning counts are
 * parts of those, a missing one counted as 0.
 */
export function addUsage(total: TokenUsage, next: TokenUsage | null): TokenUsage {
  const counted = next ?? emptyUsage();
  const both = (a: number | null, b: number | null) => (a === null || b === null ? null : a + b);
  const add = (a: number | null, b: number | null) => (a === null && b === null ? null : (a ?? 0) + (b ?? 0));
  return {
    inputTokens: both(total.inputTokens, counted.inputTokens),
    outputTokens: both(total.outputTokens, counted.outputTokens),
    cachedInputTokens: add(total.cachedInputTokens, counted.cachedInputTokens),
    reasoningTokens: add(total.reasoningTokens, counted.reasoningTokens),
    samplings: [...samplingsOf(total), ...samplingsOf(counted)],
  };
}

/**
 * The first attempt's usage (`total`) and the repair's (`next`; null: its answer reported none, or
 * was not read): addUsage's sum when both attempts' input and output counts are known. Otherwise
 * the attempt of known counts alone, and `partlyUnknown`: the other attempt, billed, is left out
 * of the counts and the cost rather than making the known one's unknown, so the row keeps what is
 * known, and the spend cap counts the call at that cost plus the estimate of a call of unknown cost
 * (docs/decisions/0057, amended). Neither known: addUsage's sum, its counts unknown, as one
 * attempt of unknown usage is.
 */
export function addAttempt(
  total: TokenUsage,
  next: TokenUsage | null,
): { usage: TokenUsage; partlyUnknown: boolean } {
  const firstKnown = countsKnown(total);
  if (next !== null && countsKnown(next)) {
    return firstKnown
      ? { usage: addUsage(total, next), partlyUnknown: false }
      : { usage: next, partlyUnknown: true };
  }
  return firstKnown
    ? { usage: total, partlyUnknown: true }
    : { usage: addUsage(total, next), partlyUnknown: false };
}

/** Whether a usage's input and output counts are both known. */
function countsKnown(usage: TokenUsage): boolean {
  return usage.inputTokens !== null && usage.outputTokens !== null;
}

/** The samplings a usage is priced as: its own (an earlier sum's, provider B's iterations), else itself. */
function samplingsOf(usage: TokenUsage): readonly Sampling[] {
  return usage.samplings ?? [{ usage }];
}

/** The four counts of a usage (what a 502's or a refusal's `details` shows). */
function countsOf(usage: TokenUsage): TokenUsage {
  const { inputTokens, outputTokens, cachedInputTokens, reasoningTokens } = usage;
  return { inputTokens, outputTokens, cachedInputTokens, reasoningTokens };
}
