import { createAnthropic } from "@ai-sdk/anthropic";
import { createGoogleGenerativeAI } from "@ai-sdk/google";
import { createOpenAI } from "@ai-sdk/openai";
import type { TestGateway, TestProject } from "./test-gateway.js";

/**
 * The AI SDK's three provider packages pointed at a gateway's proxies for one project, as an app
 * would set them up: `<partial_key>.<test_key>` as the API key, and as the base URL the proxy where
 * the package's default names the provider's API (docs/proxy.md, "The Vercel AI SDK"). Provider A's
 * proxy stands for `https://api.openai.com/v1`; B's and C's defaults end with the API version
 * (`/v1`, `/v1beta`), which is kept after the proxy and mapped as for the official SDKs.
 */
export function aiSdkClients(sluice: TestGateway, project: TestProject) {
  const base = (provider: string) => `${sluice.url}/v1/${provider}/${project.projectId}`;
  return {
    // The package appends `responses`, `chat/completions`, `embeddings`, …
    openai: createOpenAI({ baseURL: base("provider-a"), apiKey: project.bearer("provider-a") }),
    // Default https://api.anthropic.com/v1; the package appends `messages`.
    anthropic: createAnthropic({ baseURL: `${base("provider-b")}/v1`, apiKey: project.bearer("provider-b") }),
    // Default https://generativelanguage.googleapis.com/v1beta; the package appends `models/…`.
    google: createGoogleGenerativeAI({
      baseURL: `${base("provider-c")}/v1beta`,
      apiKey: project.bearer("provider-c"),
    }),
  };
}
