import { createAnthropic } from "@ai-sdk/anthropic";
import { createGoogleGenerativeAI } from "@ai-sdk/google";
import { createOpenAI } from "@ai-sdk/openai";
import type { ImageModel, LanguageModel } from "ai";
import type { ProviderId } from "./provider-id.js";

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
 * differs per project; building one is cheap (no I/O).
 */
export function createAiSdkModels(options: AiSdkProviderOptions) {
  const fetchOption = options.fetch ? { fetch: options.fetch } : {};
  return {
    language(provider: ProviderId, model: string, apiKey: string): LanguageModel {
      switch (provider) {
        case "provider-a":
          // Chat completions: SPEC describes provider A as the chat/completions style of API.
          return createOpenAI({ apiKey, baseURL: options.baseUrls[provider], ...fetchOption }).chat(model);
        case "provider-b":
          return createAnthropic({
            apiKey,
            baseURL: options.baseUrls[provider],
            headers: { "anthropic-version": options.providerBVersion },
            ...fetchOption,
          })(model);
        case "provider-c":
          return createGoogleGenerativeAI({
            apiKey,
            baseURL: options.baseUrls[provider],
            headers: { "x-goog-api-client": options.clientIdentifier },
            ...fetchOption,
          })(model);
      }
    },
    /** Image models exist for providers A and C; B has none (null). */
    image(provider: ProviderId, model: string, apiKey: string): ImageModel | null {
      switch (provider) {
        case "provider-a":
          return createOpenAI({ apiKey, baseURL: options.baseUrls[provider], ...fetchOption }).image(model);
        case "provider-c":
          return createGoogleGenerativeAI({
            apiKey,
            baseURL: options.baseUrls[provider],
            headers: { "x-goog-api-client": options.clientIdentifier },
            ...fetchOption,
          }).image(model);
        default:
          return null;
      }
    },
  };
}

export type AiSdkModels = ReturnType<typeof createAiSdkModels>;
