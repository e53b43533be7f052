import Anthropic from "@anthropic-ai/sdk";
import { GoogleGenAI } from "@google/genai";
import OpenAI from "openai";
import type { TestGateway, TestProject } from "./test-gateway.js";

/**
 * The three official SDKs pointed at a gateway's proxies for one project, as an app would set
 * them up: only the base URL and the key change. No retries, so every call reaches Sluice once.
 */
export function sdkClients(sluice: TestGateway, project: TestProject) {
  const base = (provider: string) => `${sluice.url}/v1/${provider}/${project.projectId}`;
  return {
    openai: new OpenAI({ baseURL: base("provider-a"), apiKey: project.bearer("provider-a"), maxRetries: 0 }),
    anthropic: new Anthropic({
      baseURL: base("provider-b"),
      apiKey: project.bearer("provider-b"),
      maxRetries: 0,
    }),
    google: new GoogleGenAI({
      apiKey: project.bearer("provider-c"),
      httpOptions: { baseUrl: base("provider-c") },
    }),
  };
}
