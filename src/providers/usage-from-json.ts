import {
  type Sampling,
  type ServiceTier,
  sumOrUnknown,
  type TokenUsage,
  tokenCount,
} from "../usage/token-usage.js";
import type { ProviderId } from "./provider-id.js";

/**
 * Token usage as each provider's wire format reports it, mapped onto TokenUsage. Missing counts
 * stay null. Provider A covers chat completions, embeddings and the Responses API.
 */
type Json = Record<string, unknown>;

const object = (value: unknown): Json | null =>
  typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Json) : null;
const count = tokenCount;

/**
 * The service tier an answer says served the call (its `service_tier`: provider A's at the answer's
 * top level, B's in `usage`; C's `usageMetadata.serviceTier`), as TokenUsage.serviceTier holds it:
 * undefined for the standard tier (A's `default`, B's and C's `standard`, C's `unspecified`, which
 * Google documents as standard) and for an answer that names none (A's `null`), as the call is
 * then billed at the standard prices. A's `fast` is its `priority` under the name OpenAI gave it on
 * 2026-07-30. Any other value, `auto` included (it names no tier), is `other`: never priced.
 */
export function serviceTierOf(provider: ProviderId, reported: unknown): ServiceTier | undefined {
  if (reported === undefined || reported === null) return undefined;
  if (typeof reported !== "string") return "other";
  const name = reported.toLowerCase();
  if (name === standardTier[provider] || (provider === "provider-c" && name === "unspecified"))
    return undefined;
  if (name === "flex" && provider !== "provider-b") return "flex";
  if (name === "priority" || (provider === "provider-a" && name === "fast")) return "priority";
  return "other";
}

const standardTier: Record<ProviderId, string> = {
  "provider-a": "default",
  "provider-b": "standard",
  "provider-c": "standard",
};

/**
 * Provider A's usage object, with `serviceTier` the answer's top-level `service_tier` (which is
 * outside the usage object; undefined when the caller did not find one).
 */
export function usageFromProviderA(reported: unknown, serviceTier?: unknown): TokenUsage | null {
  const usage = countsOfProviderA(reported);
  const tier = serviceTierOf("provider-a", serviceTier);
  if (usage && tier) usage.serviceTier = tier;
  return usage;
}

function countsOfProviderA(reported: unknown): TokenUsage | null {
  const record = object(reported);
  if (!record) return null;
  if ("input_tokens" in record || "output_tokens" in record) {
    const inputDetails = object(record.input_tokens_details);
    const outputDetails = object(record.output_tokens_details);
    const usage: TokenUsage = {
      inputTokens: count(record.input_tokens),
      outputTokens: count(record.output_tokens),
      cachedInputTokens: count(inputDetails?.cached_tokens),
      reasoningTokens: count(outputDetails?.reasoning_tokens),
    };
    // The images API (GPT Image models) breaks its counts down into text and image tokens.
    // The GPT-6 models' writes to the prompt cache, kept 30 minutes.
    const written = count(inputDetails?.cache_write_tokens);
    if (written) usage.cacheWriteTokens = { thirtyMinutes: written };
    const imageInput = count(inputDetails?.image_tokens);
    if (imageInput) usage.imageInputTokens = imageInput;
    const imageOutput = count(outputDetails?.image_tokens);
    if (imageOutput) usage.imageOutputTokens = imageOutput;
    return usage;
  }
  const prompt = count(record.prompt_tokens);
  const promptDetails = object(record.prompt_tokens_details);
  const usage: TokenUsage = {
    inputTokens: prompt,
    // Embeddings report no completion tokens: their output is zero, not unknown. A completion count
    // that is there but not a count is unknown.
    outputTokens:
      record.completion_tokens === undefined && prompt !== null ? 0 : count(record.completion_tokens),
    cachedInputTokens: count(promptDetails?.cached_tokens),
    reasoningTokens: count(object(record.completion_tokens_details)?.reasoning_tokens),
  };
  const written = count(promptDetails?.cache_write_tokens);
  if (written) usage.cacheWriteTokens = { thirtyMinutes: written };
  return usage;
}

/**
 * Whether provider A's Responses API answer says its hosted tools ran at a cost of their own: its
 * `tool_usage` ("Usage reported by hosted tools, separate from base model `usage`", openai's
 * `Response.tool_usage`), the image generation tool's tokens (`image_gen`) or the web search tool's
 * billable searches (`web_search.num_requests`). Every tool family is listed, with zero counts where
 * it was not used: zeros (or a count left out) say no; a value that is no count says yes, as what it
 * cost is then unknown.
 */
export function reportsHostedToolUse(toolUsage: unknown): boolean {
  const imageGeneration = object(object(toolUsage)?.image_gen);
  const webSearch = object(object(toolUsage)?.web_search);
  const used = (value: unknown) => value !== undefined && value !== null && value !== 0;
  return (
    used(imageGeneration?.input_tokens) ||
    used(imageGeneration?.output_tokens) ||
    used(imageGeneration?.total_tokens) ||
    used(webSearch?.num_requests)
  );
}

/**
 * Provider B's counts as reported so far. Its stream reports them twice, in `message_start` and
 * (cumulative) in `message_delta`, where a count that is missing or null is unchanged, as its SDK
 * reads them: each report's counts replace only the counts before them that it gives.
 */
export interface ProviderBCounts {
  input: number | null;
  cacheRead: number | null;
  cacheWrite: number | null;
  /** The part of `cacheWrite` cached for an hour (`cache_creation.ephemeral_1h_input_tokens`). */
  cacheWriteHour: number | null;
  output: number | null;
  /** The part of `output` the model spent thinking (`output_tokens_details.thinking_tokens`). */
  thinking: number | null;
  /** Searches its web search tool ran (`server_tool_use.web_search_requests`), billed per search. */
  webSearches: number | null;
  /** (Beta) The sampling iterations the counts above leave out (`usage.iterations`); null: none reported. */
  iterations: ProviderBIterations | null;
  /** The speed the call ran at (`usage.speed`): `fast` is billed above the standard prices. */
  speed: string | null;
  /** Where inference ran (`usage.inference_geo`): `us` is billed above the global prices. */
  inferenceGeo: string | null;
  /** The tier that served the call (`usage.service_tier`): `priority` and `batch` are not billed at the standard prices. */
  serviceTier: unknown;
  /**
   * (Beta, server-side fallback) The model that served the answer when the requested one refused
   * it: the `model` of the last `fallback_message` entry of `usage.iterations`. The top-level counts
   * are that model's, billed at its prices; a stream's `message_start`, sent before the refusal,
   * names the requested model. Null: no fallback ran.
   */
  servedBy: string | null;
}

/**
 * What provider B's `usage.iterations` (beta) adds to its top-level counts, which hold the answer's
 * own sampling (its `message` entries) and nothing else. A `compaction` entry is the same model
 * summarising the context it closes, a sampling step of its own that the provider bills and leaves
 * out of the top-level counts: its tokens are added to them for the row (a count that is not one
 * makes that total unknown). An `advisor_message` entry is an advisor's sub-inference on another
 * model (the `model` it names), billed at that model's prices: its tokens are never added to this
 * model's. Each of the two is also kept as a sampling of its own (`samplings`), which the cost
 * prices apart: the top-level counts' long-context threshold is not a step's.
 */
interface ProviderBIterations {
  input: number | null;
  cacheRead: number;
  cacheWrite: number;
  cacheWriteHour: number;
  output: number | null;
  samplings: Sampling[];
}

function iterationsOf(entries: unknown[]): ProviderBIterations {
  const sum: ProviderBIterations = {
    input: 0,
    cacheRead: 0,
    cacheWrite: 0,
    cacheWriteHour: 0,
    output: 0,
    samplings: [],
  };
  for (const entry of entries) {
    const record = object(entry);
    const type = record?.type;
    if (record === null || (type !== "compaction" && type !== "advisor_message")) continue;
    const counts: TokenCounts = {
      input: count(record.input_tokens),
      cacheRead: count(record.cache_read_input_tokens) ?? 0,
      cacheWrite: count(record.cache_creation_input_tokens) ?? 0,
      cacheWriteHour: count(object(record.cache_creation)?.ephemeral_1h_input_tokens) ?? 0,
      output: count(record.output_tokens),
    };
    const usage = usageOfCounts(counts, null);
    if (type === "advisor_message") {
      sum.samplings.push({ usage, otherModel: typeof record.model === "string" ? record.model : null });
      continue;
    }
    sum.samplings.push({ usage });
    sum.input = sumOrUnknown(sum.input, counts.input);
    sum.output = sumOrUnknown(sum.output, counts.output);
    sum.cacheRead += counts.cacheRead ?? 0;
    sum.cacheWrite += counts.cacheWrite ?? 0;
    sum.cacheWriteHour += Math.min(counts.cacheWriteHour ?? 0, counts.cacheWrite ?? 0);
  }
  return sum;
}

export function providerBCounts(usage: unknown, previous: ProviderBCounts | null): ProviderBCounts | null {
  const record = object(usage);
  if (!record) return previous;
  return {
    input: count(record.input_tokens) ?? previous?.input ?? null,
    cacheRead: count(record.cache_read_input_tokens) ?? previous?.cacheRead ?? null,
    cacheWrite: count(record.cache_creation_input_tokens) ?? previous?.cacheWrite ?? null,
    cacheWriteHour:
      count(object(record.cache_creation)?.ephemeral_1h_input_tokens) ?? previous?.cacheWriteHour ?? null,
    output: count(record.output_tokens) ?? previous?.output ?? null,
    thinking: count(object(record.output_tokens_details)?.thinking_tokens) ?? previous?.thinking ?? null,
    webSearches: count(object(record.server_tool_use)?.web_search_requests) ?? previous?.webSearches ?? null,
    iterations: Array.isArray(record.iterations)
      ? iterationsOf(record.iterations)
      : (previous?.iterations ?? null),
    speed: typeof record.speed === "string" ? record.speed : (previous?.speed ?? null),
    inferenceGeo:
      typeof record.inference_geo === "string" ? record.inference_geo : (previous?.inferenceGeo ?? null),
    serviceTier: record.service_tier ?? previous?.serviceTier ?? null,
    servedBy:
      (Array.isArray(record.iterations) ? fallbackModel(record.iterations) : null) ??
      previous?.servedBy ??
      null,
  };
}

/** The model of the last `fallback_message` entry (a server-side fallback's), or null. */
function fallbackModel(entries: unknown[]): string | null {
  for (let at = entries.length - 1; at >= 0; at--) {
    const record = object(entries[at]);
    if (record?.type === "fallback_message" && typeof record.model === "string" && record.model !== "")
      return record.model;
  }
  return null;
}

/**
 * Provider B's input tokens include its cache reads and writes; the writes are also reported apart
 * (priced above the input price), those without a stated lifetime as five-minute ones. Without its
 * uncached input count, the input is unknown: the cache counts alone are only part of it. Its
 * reasoning tokens are the thinking part of the output (`output_tokens_details`), which
 * `output_tokens` already counts. Its web searches (`server_tool_use`) are billed per search, beside
 * the tokens their results brought into the input. Compaction iterations (beta) add their tokens; an
 * advisor's are not this model's; both are priced as samplings of their own (see ProviderBIterations).
 * A call that ran in fast mode (`speed: "fast"`) or kept its inference in the US (`inference_geo:
 * "us"`) says so, as both are billed above the standard prices, and so does one served on a tier
 * other than the standard one (`service_tier`: Priority Tier, billed against a commitment).
 */
export function usageOfProviderB(counts: ProviderBCounts): TokenUsage {
  const { iterations } = counts;
  const usage = usageOfCounts(
    iterations === null ? counts : withCompactions(counts, iterations),
    counts.thinking,
  );
  if (counts.webSearches) usage.webSearches = counts.webSearches;
  const premiums: Pick<TokenUsage, "fastMode" | "usOnlyInference" | "serviceTier"> = {};
  if (counts.speed === "fast") premiums.fastMode = true;
  if (counts.inferenceGeo === "us") premiums.usOnlyInference = true;
  const tier = serviceTierOf("provider-b", counts.serviceTier);
  if (tier) premiums.serviceTier = tier;
  Object.assign(usage, premiums);
  if (iterations !== null && iterations.samplings.length > 0) {
    // The answer's own sampling: the top-level counts, with the searches it ran.
    const answer = usageOfCounts(counts, counts.thinking);
    if (counts.webSearches) answer.webSearches = counts.webSearches;
    // Each sampling keeps the call's premiums, as a sum of attempts (addUsage) prices each apart.
    usage.samplings = [{ usage: answer }, ...iterations.samplings].map((sampling) => ({
      ...sampling,
      usage: { ...sampling.usage, ...premiums },
    }));
  }
  return usage;
}

type TokenCounts = Pick<ProviderBCounts, "input" | "cacheRead" | "cacheWrite" | "cacheWriteHour" | "output">;

/** Usage of provider B's counts (a report's, or one iteration's). */
function usageOfCounts(counts: TokenCounts, thinking: number | null): TokenUsage {
  const { input, cacheRead, cacheWrite, cacheWriteHour, output } = counts;
  const usage: TokenUsage = {
    inputTokens: input === null ? null : input + (cacheRead ?? 0) + (cacheWrite ?? 0),
    outputTokens: output,
    cachedInputTokens: cacheRead,
    reasoningTokens: thinking,
  };
  if (cacheWrite) {
    const oneHour = Math.min(cacheWriteHour ?? 0, cacheWrite);
    usage.cacheWriteTokens = { fiveMinutes: cacheWrite - oneHour, oneHour };
  }
  return usage;
}

/** The top-level counts with the compaction iterations' added. */
function withCompactions(counts: ProviderBCounts, iterations: ProviderBIterations): TokenCounts {
  const plus = (value: number | null, added: number) =>
    value === null && added === 0 ? value : (value ?? 0) + added;
  return {
    input: sumOrUnknown(counts.input, iterations.input),
    output: sumOrUnknown(counts.output, iterations.output),
    cacheRead: plus(counts.cacheRead, iterations.cacheRead),
    cacheWrite: plus(counts.cacheWrite, iterations.cacheWrite),
    cacheWriteHour: plus(counts.cacheWriteHour, iterations.cacheWriteHour),
  };
}

/** Provider B's usage from one report (a JSON answer's `usage`). */
export function usageFromProviderB(usage: unknown): TokenUsage | null {
  const counts = providerBCounts(usage, null);
  return counts && usageOfProviderB(counts);
}

/**
 * Provider C: output counts candidates plus thoughts (both are billed as output); input counts the
 * prompt plus `toolUsePromptTokenCount`, what a built-in tool (URL context, Google Search, code
 * execution) brought in, which Google bills as input and counts in `totalTokenCount`. Its API
 * leaves out a count that is zero (no thoughts from a model that does not think, no candidates for
 * an answer blocked or cut before any, no tool use): in a report that gives a count, a part left
 * out is 0, while one that is there but not a count leaves its total unknown. The prompt's audio
 * part (`promptTokensDetails`, modality AUDIO; the prompt's breakdown, its cached part included) is
 * reported apart, and so is the cached part's (`cacheTokensDetails`) where Google breaks that down:
 * it bills audio input at prices of its own on some models. The tier that served the call
 * (`serviceTier`: flex, priority) is read too, as Google bills those above or below the standard prices.
 */
export function usageFromProviderC(usageMetadata: unknown): TokenUsage | null {
  const record = object(usageMetadata);
  if (!record) return null;
  const parts = [record.promptTokenCount, record.candidatesTokenCount, record.thoughtsTokenCount];
  const reported = parts.some((part) => count(part) !== null);
  const part = (value: unknown) => (value === undefined && reported ? 0 : count(value));
  const candidates = part(record.candidatesTokenCount);
  const thoughts = part(record.thoughtsTokenCount);
  const prompt = count(record.promptTokenCount);
  const toolUse = part(record.toolUsePromptTokenCount);
  const usage: TokenUsage = {
    inputTokens: sumOrUnknown(prompt, toolUse),
    outputTokens: sumOrUnknown(candidates, thoughts),
    cachedInputTokens: count(record.cachedContentTokenCount),
    reasoningTokens: count(record.thoughtsTokenCount),
  };
  const audio = modalityTokens(record.promptTokensDetails, "AUDIO");
  if (audio > 0) {
    usage.audioInputTokens = audio;
    const cachedAudio = modalityTokens(record.cacheTokensDetails, "AUDIO");
    if (cachedAudio > 0) usage.cachedAudioInputTokens = cachedAudio;
  }
  // Images a Gemini image model generated, part of the candidates' count.
  const generatedImages = modalityTokens(record.candidatesTokensDetails, "IMAGE");
  if (generatedImages > 0) usage.imageOutputTokens = generatedImages;
  const tier = serviceTierOf("provider-c", record.serviceTier);
  if (tier) usage.serviceTier = tier;
  return usage;
}

/**
 * The tokens of one modality in a modality breakdown: generateContent's `{modality: "AUDIO",
 * tokenCount}`, the Interactions API's `{modality: "audio", tokens}`. 0 without a breakdown.
 */
function modalityTokens(details: unknown, modality: "AUDIO" | "IMAGE"): number {
  if (!Array.isArray(details)) return 0;
  const lower = modality.toLowerCase();
  let tokens = 0;
  for (const detail of details) {
    const record = object(detail);
    if (record?.modality === modality || record?.modality === lower)
      tokens += count(record.tokenCount ?? record.tokens) ?? 0;
  }
  return tokens;
}

/** Each provider's reader of its usage object, as its answers (JSON or stream events) report it. */
export const usageFromProvider: Record<ProviderId, (reported: unknown) => TokenUsage | null> = {
  "provider-a": usageFromProviderA,
  "provider-b": usageFromProviderB,
  "provider-c": usageFromProviderC,
};

/**
 * Provider C's Interactions API (`POST interactions`): the interaction's `usage`. Its `total_*`
 * counts are generateContent's usageMetadata counts under other names: Google describes each in the
 * same words (`total_input_tokens` the prompt, cached content included, as `promptTokenCount`;
 * `total_cached_tokens` "the cached part of the prompt"; `total_output_tokens` the generated
 * responses, thoughts not included, as `candidatesTokenCount`; `total_thought_tokens` and
 * `total_tool_use_tokens` beside them, all four summing to `total_tokens`). So they are read as
 * usageFromProviderC reads those, zero counts left out included, and an interaction costs what the
 * same generateContent call costs. Its `input_tokens_by_modality` is `promptTokensDetails`, and its
 * `cached_tokens_by_modality` `cacheTokensDetails`.
 */
export function usageFromInteractions(usage: unknown): TokenUsage | null {
  const record = object(usage);
  if (!record) return null;
  return usageFromProviderC({
    promptTokenCount: record.total_input_tokens,
    candidatesTokenCount: record.total_output_tokens,
    thoughtsTokenCount: record.total_thought_tokens,
    toolUsePromptTokenCount: record.total_tool_use_tokens,
    cachedContentTokenCount: record.total_cached_tokens,
    promptTokensDetails: record.input_tokens_by_modality,
    cacheTokensDetails: record.cached_tokens_by_modality,
    candidatesTokensDetails: record.output_tokens_by_modality,
  });
}

export function objectField(value: unknown, field: string): unknown {
  return object(value)?.[field];
}
