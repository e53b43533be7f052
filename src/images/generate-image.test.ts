import { describe, expect, it } from "vitest";
import { providerC } from "../../test/fakes/fake-upstream-responses.js";
import { GatewayError } from "../errors.js";
import { createAiSdkModels } from "../providers/ai-sdk-provider.js";
import type { ProviderId } from "../providers/provider-id.js";
import type { Project } from "../storage/project-repository.js";
import { generateImages } from "./generate-image.js";
import type { ImageRequest } from "./image-request.js";
import type { VaultStore } from "./vault-store.js";

/** The AI SDK's models, their calls answered by `fetch` (the provider's base URLs are never reached). */
function modelsFetching(fetch: typeof globalThis.fetch) {
  return createAiSdkModels({
    baseUrls: {
      "provider-a": "http://upstream.test/v1",
      "provider-b": "http://upstream.test/v1",
      "provider-c": "http://upstream.test/v1beta",
    },
    providerBVersion: "2023-06-01",
    clientIdentifier: "sluice-test",
    fetch,
  });
}

/** What generateImages needs besides its models, with a vault that stores nothing. */
function storelessDeps(models: ReturnType<typeof modelsFetching>) {
  return {
    models,
    vault: { put: async () => {}, remove: async () => {}, signedUrl: () => "" },
    vaultUrlTtlSeconds: 60,
    vaultTimeoutMs: 5000,
    timeoutMs: 5000,
    now: () => new Date(),
    defaultImageModels: { "provider-a": "gpt-image-1", "provider-c": "imagen-4.0-generate-001" },
  };
}

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
      const models = modelsFetching(async () => {
        upstreamCalls++;
        return new Response("{}", { status: 500 });
      });
      const deps = storelessDeps(models);
      const call = { project: { id: "p1" } as Project, provider: provider as ProviderId, providerKey: "k" };
      const request: ImageRequest = { prompt: "x", model, n: 1, providerOptions, warnings: [] };
      const error = await generateImages(deps, call, request).catch((thrown: unknown) => thrown);
      expect(error).toBeInstanceOf(GatewayError);
      expect((error as GatewayError).code).toBe("VALIDATION_ERROR");
      expect(upstreamCalls).toBe(0);
    },
  );
});

describe("image generation with a vault that stores late", () => {
  it("deletes an image whose store finished after its deadline, as the 503 never named it", async () => {
    const models = modelsFetching(async () => Response.json(providerC.predictions(1)));
    // A store that takes no notice of the deadline's signal: it finishes when the test says.
    let finish = () => {};
    const removed: string[] = [];
    let wasRemoved = () => {};
    const vault: VaultStore = {
      put: () => new Promise<void>((resolve) => (finish = resolve)),
      remove: async (path) => {
        removed.push(path);
        wasRemoved();
      },
      signedUrl: () => "",
    };
    const deps = {
      models,
      vault,
      vaultUrlTtlSeconds: 60,
      vaultTimeoutMs: 50,
      timeoutMs: 5000,
      now: () => new Date(),
      defaultImageModels: { "provider-a": "gpt-image-1", "provider-c": "imagen-4.0-generate-001" },
    };
    const project = { id: "p1", teamId: "team1", saveImagesToVault: true } as Project;
    const request: ImageRequest = { prompt: "x", n: 1, providerOptions: {}, warnings: [] };
    const error = await generateImages(
      deps,
      { project, provider: "provider-c", providerKey: "k" },
      request,
    ).catch((thrown: unknown) => thrown);
    expect((error as GatewayError).code).toBe("SERVICE_UNAVAILABLE");
    expect(removed).toEqual([]);
    const removal = new Promise<void>((resolve) => (wasRemoved = resolve));
    finish();
    await removal;
    expect(removed).toHaveLength(1);
    expect(removed[0]).toMatch(/^team1\/generated-images\/p1\//);
  });
});

describe("a Gemini image model's calls of one request, run at once", () => {
  it("reads each call's finish reason from its own answer", async () => {
    // One answer per call, by the order the calls were sent, answered together once all three
    // were: each call's answer comes while the others' are read, as a shared note would be.
    const answers = [
      geminiFinish("IMAGE_PROHIBITED_CONTENT"),
      geminiFinish("NO_IMAGE"),
      providerC.imageResponse("gemini-nano-banana-2.1", {}),
    ];
    const waiting: Array<() => void> = [];
    const fetch: typeof globalThis.fetch = async () => {
      const answer = answers[waiting.length];
      await new Promise<void>((resolve) => {
        waiting.push(resolve);
        if (waiting.length === answers.length) for (const release of waiting) release();
      });
      return Response.json(answer);
    };
    const models = modelsFetching(fetch);
    const deps = storelessDeps(models);
    const call = { project: { id: "p1" } as Project, provider: "provider-c" as const, providerKey: "k" };
    const request: ImageRequest = {
      prompt: "x",
      model: "gemini-nano-banana-2.1",
      n: 3,
      providerOptions: {},
      warnings: [],
    };
    const { result } = await generateImages(deps, call, request);
    expect(waiting).toHaveLength(3);
    expect(result.images).toHaveLength(1);
    expect(result.warnings).toEqual([
      "1 of 3 images was withheld by the provider's safety filter",
      "1 of 3 images was not generated by the provider",
    ]);
  });
});

/** A Gemini image model's answer without an image, for `finishReason`. */
const geminiFinish = (finishReason: string) => ({
  candidates: [{ content: { role: "model" }, finishReason, index: 0 }],
  usageMetadata: { promptTokenCount: 20, totalTokenCount: 20 },
  modelVersion: "gemini-nano-banana-2.1",
});
