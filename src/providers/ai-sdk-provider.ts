import type { LanguageModel, wrapImageModel } from "ai";
import { GatewayError } from "../errors.js";
import { type AnswerFinish, finishReadingFetch } from "./answer-finish-reason.js";
import { isModelName, modelNameRule } from "./model-name.js";
import type { ProviderId } from "./provider-id.js";

/** An image model object (specification v3), as the provider packages build and middleware wraps. */
export type SdkImageModel = Parameters<typeof wrapImageModel>[0]["model"];

export interface AiSdkProviderOptions {
  baseUrls: Record<ProviderId, string>;
  providerBVersion: string;
  clientIdentifier: string;
  /** Injected so tests or a custom dispatcher can replace the transport. */
  fetch?: typeof globalThis.fetch;
}

/**
 * Builds AI SDK models for the structured and image endpoints, pointed at the configured upstream
 * base URLs, with the rebuilt provider key. Provider instances are built per call because the key
 * differs per project; building one is cheap (no I/O). The SDK packages are loaded on first use:
 * a gateway that only proxies never pays their start-up time or memory.
 */
export function createAiSdkModels(options: AiSdkProviderOptions) {
  const fetch = withoutRedirects(options.fetch ?? globalThis.fetch);
  const fetchOption = { fetch };
  return {
    async language(provider: ProviderId, model: string, apiKey: string): Promise<LanguageModel> {
      requireModelName(model);
      switch (provider) {
        case "provider-a":
          // Chat completions: SPEC describes provider A as the chat/completions style of API.
          return (await import("@ai-sdk/openai"))
            .createOpenAI({ apiKey, baseURL: options.baseUrls[provider], ...fetchOption })
            .chat(model);
        case "provider-b":
          return (await import("@ai-sdk/anthropic")).createAnthropic({
            apiKey,
            baseURL: options.baseUrls[provider],
            headers: { "anthropic-version": options.providerBVersion },
            ...fetchOption,
          })(model);
        case "provider-c":
          return (await import("@ai-sdk/google")).createGoogleGenerativeAI({
            apiKey,
            baseURL: options.baseUrls[provider],
            headers: { "x-goog-api-client": options.clientIdentifier },
            ...fetchOption,
          })(model);
      }
    },
    /**
     * Image models exist for providers A and C; B has none (null). `extraBody` is merged into the
     * JSON request body, for provider parameters the AI SDK's option schemas do not carry
     * (provider A `style`; provider C `parameters.safetySetting`). With `finish`, provider C's model
     * notes there the finish reason of a Gemini image model's answer: such a model is built for one
     * provider call (finishReadingFetch), as building one is cheap. Provider A ignores `finish`.
     */
    async image(
      provider: ProviderId,
      model: string,
      apiKey: string,
      extraBody?: Record<string, unknown>,
      finish?: AnswerFinish,
    ): Promise<SdkImageModel | null> {
      requireModelName(model);
      const imageFetch = extraBody ? { fetch: mergingFetch(fetch, extraBody) } : fetchOption;
      switch (provider) {
        case "provider-a":
          return (await import("@ai-sdk/openai"))
            .createOpenAI({ apiKey, baseURL: options.baseUrls[provider], ...imageFetch })
            .image(model);
        case "provider-c":
          return (await import("@ai-sdk/google"))
            .createGoogleGenerativeAI({
              apiKey,
              baseURL: options.baseUrls[provider],
              headers: { "x-goog-api-client": options.clientIdentifier },
              fetch: finish ? finishReadingFetch(imageFetch.fetch, finish) : imageFetch.fetch,
            })
            .image(model);
        default:
          return null;
      }
    },
  };
}

export type AiSdkModels = ReturnType<typeof createAiSdkModels>;

/**
 * Defence in depth: the model name goes into the provider's URL (provider C:
 * `models/{model}:generateContent`), so a name outside the model-name rule is never built into a
 * model, even one stored before the admin input applied the rule. 422, as the input checks answer.
 */
function requireModelName(model: string): void {
  if (isModelName(model)) return;
  throw new GatewayError("VALIDATION_ERROR", `The model ${JSON.stringify(model)} ${modelNameRule}`, {
    details: { model },
  });
}

/**
 * A fetch that never follows a redirect: fetch drops only `authorization` when it follows one to
 * another origin, so provider B's `x-api-key` and C's `x-goog-api-key` (the rebuilt key) would go
 * to whatever host `Location` names, and an https base could be sent on over plain http. The 3xx
 * is the SDK's answer instead, which it fails as a provider error (502). The proxies never follow
 * one either (undici's dispatch does not), and hand it to the client.
 */
function withoutRedirects(base: typeof globalThis.fetch): typeof globalThis.fetch {
  return (input, init) => base(input, { ...init, redirect: "manual" });
}

/** A fetch that deep-merges `extra` into a JSON request body (one level of nested objects). */
function mergingFetch(
  base: typeof globalThis.fetch,
  extra: Record<string, unknown>,
): typeof globalThis.fetch {
  return (input, init) => {
    if (typeof init?.body !== "string") return base(input, init);
    const body = JSON.parse(init.body) as Record<string, unknown>;
    for (const [key, value] of Object.entries(extra)) {
      const current = body[key];
      body[key] =
        typeof current === "object" && current !== null && typeof value === "object" && value !== null
          ? { ...current, ...value }
          : value;
    }
    return base(input, { ...init, body: JSON.stringify(body) });
  };
}
