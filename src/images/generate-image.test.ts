import { describe, expect, it } from "vitest";
import { GatewayError } from "../errors.js";
import { createAiSdkModels } from "../providers/ai-sdk-provider.js";
import type { ProviderId } from "../providers/provider-id.js";
import type { Project } from "../storage/project-repository.js";
import { generateImages } from "./generate-image.js";
import type { ImageRequest } from "./image-request.js";

describe("image generation failures", () => {
  // Requests built directly, past parseImageRequest's checks, reach the AI SDK's own option schemas
  // (for a model the catalogue does not know, past fitImageRequest's model rules too).
  it.each([
    ["provider-a", { "provider-a": { quality: "ultra" } }, "my-image-model"],
    ["provider-c", { "provider-c": { personGeneration: "hd" } }, undefined],
  ] as const)(
    "maps the SDK's refusal of a %s option to 422 without calling the provider",
    async (provider, providerOptions, model) => {
      let upstreamCalls = 0;
      const models = createAiSdkModels({
        baseUrls: {
          "provider-a": "http://upstream.test/v1",
          "provider-b": "http://upstream.test/v1",
          "provider-c": "http://upstream.test/v1beta",
        },
        providerBVersion: "2023-06-01",
        clientIdentifier: "sluice-test",
        fetch: async () => {
          upstreamCalls++;
          return new Response("{}", { status: 500 });
        },
      });
      const deps = {
        models,
        vault: { put: async () => {}, signedUrl: () => "" },
        vaultUrlTtlSeconds: 60,
        vaultTimeoutMs: 5000,
        timeoutMs: 5000,
        now: () => new Date(),
        defaultImageModels: { "provider-a": "gpt-image-1", "provider-c": "imagen-4.0-generate-001" },
      };
      const call = { project: { id: "p1" } as Project, provider: provider as ProviderId, providerKey: "k" };
      const request: ImageRequest = { prompt: "x", model, n: 1, providerOptions, warnings: [] };
      const error = await generateImages(deps, call, request).catch((thrown: unknown) => thrown);
      expect(error).toBeInstanceOf(GatewayError);
      expect((error as GatewayError).code).toBe("VALIDATION_ERROR");
      expect(upstreamCalls).toBe(0);
    },
  );
});
