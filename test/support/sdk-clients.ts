import Anthropic from "@anthropic-ai/sdk";
import { GoogleGenAI } from "@google/genai";
import { GoogleGenAI as GoogleGenAIV1 } from "google-genai-v1";
import OpenAI from "openai";
import type { TestGateway, TestProject } from "./test-gateway.js";

/**
 * The three official SDKs pointed at a gateway's proxies for one project, as an app would set
 * them up: only the base URL and the key change. No retries, so every call reaches Sluice once.
 */
export function sdkClients(sluice: TestGateway, project: TestProject) {
  return {
    openai: new OpenAI({
      baseURL: base(sluice, project, "provider-a"),
      apiKey: project.bearer("provider-a"),
      maxRetries: 0,
    }),
    anthropic: new Anthropic({
      baseURL: base(sluice, project, "provider-b"),
      apiKey: project.bearer("provider-b"),
      maxRetries: 0,
    }),
    google: new GoogleGenAI({
      apiKey: project.bearer("provider-c"),
      httpOptions: { baseUrl: base(sluice, project, "provider-c") },
    }),
  };
}

/**
 * `@google/genai` 1.x (the `google-genai-v1` alias), as the many apps not yet on a later major set
 * it up: it addresses the `v1beta` API by default (3.x: `v1`), and its `models.generateImages` calls
 * Imagen's `predict` on the Gemini API (from 2.0 on: Vertex AI only).
 */
export function googleGenAiV1Client(sluice: TestGateway, project: TestProject) {
  return new GoogleGenAIV1({
    apiKey: project.bearer("provider-c"),
    httpOptions: { baseUrl: base(sluice, project, "provider-c") },
  });
}

function base(sluice: TestGateway, project: TestProject, provider: string) {
  return `${sluice.url}/v1/${provider}/${project.projectId}`;
}
