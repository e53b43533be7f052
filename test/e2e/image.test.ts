import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { type AddressInfo, connect } from "node:net";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { providerA, providerC, tinyPng } from "../fakes/fake-upstream-responses.js";
import {
  createTestProject,
  logLinesOf,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowOf,
} from "../support/test-gateway.js";

describe("image generation", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let a: TestProject;
  let c: TestProject;
  let b: TestProject;
  let vaulted: TestProject;
  let underscored: TestProject;
  // The gateway's clock: the real time, or the instant a test stops it at.
  let stoppedAt: Date | null = null;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway(
      {
        providerABaseUrl: `${fake.url}/a/v1`,
        providerCBaseUrl: `${fake.url}/c/v1beta`,
        vaultUrlTtlSeconds: 2,
        metricsEnabled: true,
      },
      { now: () => stoppedAt ?? new Date() },
    );
    a = await createTestProject(sluice.gateway, { provider: "provider-a" });
    b = await createTestProject(sluice.gateway, { provider: "provider-b" });
    c = await createTestProject(sluice.gateway, { provider: "provider-c" });
    vaulted = await createTestProject(sluice.gateway, {
      provider: "provider-c",
      teamId: "team42",
      saveImagesToVault: true,
    });
    underscored = await createTestProject(sluice.gateway, {
      provider: "provider-c",
      teamId: "_team",
      saveImagesToVault: true,
    });
  });

  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });

  beforeEach(() => fake.clear());

  const providerOf = (project: TestProject) =>
    project === a ? "provider-a" : project === b ? "provider-b" : "provider-c";

  function generate(project: TestProject, body: unknown) {
    return fetch(`${sluice.url}/v1/image/${project.projectId}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${project.bearer(providerOf(project))}`,
        "content-type": "application/json",
      },
      body: typeof body === "string" ? body : JSON.stringify(body),
    });
  }

  const rowFor = (response: Response) => usageRowOf(sluice.gateway, response);

  it("generates with provider A's default model and returns SPEC's result shape with revisedPrompt", async () => {
    const response = await generate(a, {
      prompt: "a lighthouse",
      model: "dall-e-3",
      size: "1024x1024",
      providerOptions: { "provider-a": { quality: "hd", style: "vivid" } },
    });
    expect(response.status).toBe(200);
    const body = (await response.json()) as Record<string, unknown>;
    expect(body).toEqual({
      images: [{ base64: tinyPng.toString("base64"), mediaType: "image/png" }],
      providerMetadata: { "provider-a": { images: [{ revisedPrompt: "A revised prompt 1" }] } },
    });
    const upstream = fake.last()!;
    expect(upstream.path).toBe("/a/v1/images/generations");
    expect(upstream.json).toMatchObject({
      model: "dall-e-3",
      prompt: "a lighthouse",
      n: 1,
      size: "1024x1024",
      quality: "hd",
      style: "vivid",
    });
    expect(upstream.headers.authorization).toBe(`Bearer ${a.providerKeys["provider-a"]}`);
    expect(await rowFor(response)).toMatchObject({
      endpoint: "image",
      model: "dall-e-3",
      cost_usd: 0.08,
      status: 200,
    });
  });

  it("counts an image generation's cost in sluice_cost_usd_total, as its usage row records it", async () => {
    const costOf = async () => {
      const metrics = await (await fetch(`${sluice.url}/metrics`)).text();
      const line = metrics
        .split("\n")
        .find((text) => text.startsWith('sluice_cost_usd_total{provider="provider-c"}'));
      return Number(line?.split(" ")[1] ?? 0);
    };
    const before = await costOf();
    const response = await generate(c, { prompt: "a lighthouse", n: 2 });
    expect(response.status).toBe(200);
    const row = await rowFor(response);
    expect(row.cost_usd).toBe(0.08);
    expect((await costOf()) - before).toBeCloseTo(0.08, 9);
  });

  it("uses the first model of provider A and the standard model of provider C by default", async () => {
    await generate(a, { prompt: "x" });
    expect((fake.last()!.json as { model: string }).model).toBe("gpt-image-1");
    const response = await generate(c, {
      prompt: "x",
      aspectRatio: "16:9",
      seed: 7,
      providerOptions: { "provider-c": { safetyFilterLevel: "block_few" } },
    });
    expect(response.status).toBe(200);
    const upstream = fake.last()!;
    expect(upstream.path).toBe("/c/v1beta/models/imagen-4.0-generate-001:predict");
    expect(upstream.headers["x-goog-api-key"]).toBe(c.providerKeys["provider-c"]);
    expect(upstream.json).toMatchObject({
      instances: [{ prompt: "x" }],
      parameters: { sampleCount: 1, aspectRatio: "16:9", safetySetting: "block_only_high" },
    });
    const body = (await response.json()) as { warnings?: string[] };
    expect(body.warnings?.some((warning) => warning.includes("seed"))).toBe(true);
    expect(await rowFor(response)).toMatchObject({ model: "imagen-4.0-generate-001", cost_usd: 0.04 });
  });

  it("uses the project's model when it is an image model, and the provider's default otherwise", async () => {
    const dalle = await createTestProject(sluice.gateway, { provider: "provider-a", model: "dall-e-3" });
    const response = await fetch(`${sluice.url}/v1/image/${dalle.projectId}`, {
      method: "POST",
      headers: { authorization: `Bearer ${dalle.bearer("provider-a")}`, "content-type": "application/json" },
      body: JSON.stringify({ prompt: "x", size: "1024x1024" }),
    });
    expect(response.status).toBe(200);
    expect((fake.last()!.json as { model: string }).model).toBe("dall-e-3");
    expect(await rowFor(response)).toMatchObject({ model: "dall-e-3", cost_usd: 0.04 });
    const chat = await createTestProject(sluice.gateway, { provider: "provider-a", model: "gpt-4.1-mini" });
    const fallback = await fetch(`${sluice.url}/v1/image/${chat.projectId}`, {
      method: "POST",
      headers: { authorization: `Bearer ${chat.bearer("provider-a")}`, "content-type": "application/json" },
      body: JSON.stringify({ prompt: "x" }),
    });
    expect(fallback.status).toBe(200);
    expect((fake.last()!.json as { model: string }).model).toBe("gpt-image-1");
    expect((await rowFor(fallback)).model).toBe("gpt-image-1");
  });

  it("sends a `models/` model name to provider C once prefixed, from the request or the project", async () => {
    const response = await generate(c, { prompt: "x", model: "models/imagen-4.0-fast-generate-001" });
    expect(response.status).toBe(200);
    expect(fake.last()!.path).toBe("/c/v1beta/models/imagen-4.0-fast-generate-001:predict");
    expect(await rowFor(response)).toMatchObject({ model: "imagen-4.0-fast-generate-001", cost_usd: 0.02 });
    const stored = await createTestProject(sluice.gateway, {
      provider: "provider-c",
      model: "models/imagen-4.0-fast-generate-001",
    });
    fake.clear();
    const own = await fetch(`${sluice.url}/v1/image/${stored.projectId}`, {
      method: "POST",
      headers: { authorization: `Bearer ${stored.bearer("provider-c")}`, "content-type": "application/json" },
      body: JSON.stringify({ prompt: "x" }),
    });
    expect(own.status).toBe(200);
    expect(fake.last()!.path).toBe("/c/v1beta/models/imagen-4.0-fast-generate-001:predict");
    expect(await rowFor(own)).toMatchObject({ model: "imagen-4.0-fast-generate-001", cost_usd: 0.02 });
  });

  it("batches n over maxImagesPerCall", async () => {
    const response = await generate(c, {
      prompt: "x",
      n: 5,
      maxImagesPerCall: 2,
      model: "imagen-4.0-fast-generate-001",
    });
    const body = (await response.json()) as { images: unknown[] };
    expect(body.images).toHaveLength(5);
    expect(
      fake.requests.map(
        (request) => (request.json as { parameters: { sampleCount: number } }).parameters.sampleCount,
      ),
    ).toEqual([2, 2, 1]);
    expect(await rowFor(response)).toMatchObject({ model: "imagen-4.0-fast-generate-001", cost_usd: 0.1 });
  });

  // One call with more images than the model takes is the provider's 400, which Sluice would answer
  // 502 as if the provider had failed: the parameters are incompatible (SPEC: VALIDATION_ERROR).
  it.each([
    ["dall-e-3", "a", 2, 1],
    ["gpt-image-1", "a", 11, 10],
    ["imagen-4.0-generate-001", "c", 5, 4],
  ] as const)(
    "refuses a maxImagesPerCall above what %s takes in one call with 422, before any call",
    async (model, which, maxImagesPerCall, max) => {
      const response = await generate(which === "a" ? a : c, {
        prompt: "x",
        model,
        n: maxImagesPerCall,
        maxImagesPerCall,
      });
      expect(response.status).toBe(422);
      const body = (await response.json()) as { error: { code: string; message: string; details: unknown } };
      expect(body.error).toMatchObject({
        code: "VALIDATION_ERROR",
        message: `\`maxImagesPerCall\` must be at most ${max} for model ${model}: it generates at most ${max} per call`,
        details: { option: "maxImagesPerCall", max },
      });
      expect(fake.requests).toHaveLength(0);
      expect(await rowFor(response)).toMatchObject({ model, status: 422, error_code: "VALIDATION_ERROR" });
    },
  );

  // SPEC Limits: n is at most 20, so 20 itself is taken (21 is refused below).
  it("generates SPEC's maximum of 20 images in one request", async () => {
    const response = await generate(c, { prompt: "x", n: 20 });
    expect(response.status).toBe(200);
    expect(((await response.json()) as { images: unknown[] }).images).toHaveLength(20);
    const counts = fake.requests.map(
      (request) => (request.json as { parameters: { sampleCount: number } }).parameters.sampleCount,
    );
    expect(counts.reduce((sum, count) => sum + count, 0)).toBe(20);
    expect(await rowFor(response)).toMatchObject({ status: 200, cost_usd: 0.8 });
  });

  it("takes a maxImagesPerCall up to what the model takes in one call", async () => {
    const response = await generate(c, { prompt: "x", n: 5, maxImagesPerCall: 4 });
    expect(response.status).toBe(200);
    expect(
      fake.requests.map(
        (request) => (request.json as { parameters: { sampleCount: number } }).parameters.sampleCount,
      ),
    ).toEqual([4, 1]);
  });

  it.each([
    [
      { model: "gpt-image-1", size: "1024x1536", providerOptions: { "provider-a": { quality: "low" } } },
      0.016,
    ],
    [
      { model: "gpt-image-1", size: "1536x1024", providerOptions: { "provider-a": { quality: "medium" } } },
      0.063,
    ],
    [
      { model: "gpt-image-1", size: "1024x1024", providerOptions: { "provider-a": { quality: "high" } } },
      0.167,
    ],
    [{ model: "dall-e-3", size: "1024x1536" }, 0.08],
    [{ model: "dall-e-3", size: "1792x1024" }, 0.08],
    [{ model: "dall-e-3", size: "1024x1792", providerOptions: { "provider-a": { quality: "hd" } } }, 0.12],
    [{ model: "gpt-image-1-mini", size: "1536x1024" }, 0.02],
    // The provider generates at the model's default size and quality (dall-e-3: 1024x1024, standard),
    // as the proxy prices it.
    [{ model: "dall-e-3" }, 0.04],
    [{ model: "dall-e-3", n: 2, providerOptions: { "provider-a": { quality: "hd" } } }, 0.16],
    // gpt-image-1's default (`auto`) has no price, but its answer names what it generated (the fake
    // upstream: 1024x1024, medium), as the proxy prices it.
    [{ model: "gpt-image-1" }, 0.042],
    [{ model: "gpt-image-1", n: 2, size: "1536x1024" }, 0.126],
    // Provider A takes no aspect ratio (the SDK drops it with a warning): the size is the model's default.
    [{ model: "dall-e-3", aspectRatio: "2:3" }, 0.04],
    [
      { model: "gpt-image-1", aspectRatio: "3:2", providerOptions: { "provider-a": { quality: "low" } } },
      0.011,
    ],
    [
      {
        model: "gpt-image-1",
        size: "1024x1024",
        n: 3,
        providerOptions: { "provider-a": { quality: "low" } },
      },
      0.033,
    ],
  ])("records the cost of %j as %s", async (options, cost) => {
    const response = await generate(a, { prompt: "x", ...options });
    expect(response.status).toBe(200);
    expect((await rowFor(response)).cost_usd).toBe(cost);
  });

  // GPT Image 2.6 Sunburst: text in $5, image in $8, image out $30 per 1M tokens. Gemini Nano Banana
  // 2.1: $1.50 in, $7.50 text out, $30 per 1M generated image tokens.
  describe("models priced by the token", () => {
    const gptImage2Answer = (images: number) =>
      providerA.gptImage({
        count: images,
        quality: "medium",
        size: "1024x1024",
        usage: {
          input_tokens: 1050,
          input_tokens_details: { image_tokens: 1000, text_tokens: 50 },
          output_tokens: 4160 * images,
          total_tokens: 1050 + 4160 * images,
        },
      });
    const geminiImageAnswer = providerC.imageResponse("gemini-nano-banana-2.1", {
      promptTokenCount: 20,
      candidatesTokenCount: 1120,
      thoughtsTokenCount: 200,
      totalTokenCount: 1340,
      candidatesTokensDetails: [{ modality: "IMAGE", tokenCount: 1120 }],
    });

    it("prices a GPT Image 2 generation by the tokens its answer reports, as the proxy does", async () => {
      fake.enqueueResponse({ status: 200, body: gptImage2Answer(2) });
      const response = await generate(a, { prompt: "two cats", model: "gpt-image-2.6-sunburst", n: 2 });
      expect(response.status).toBe(200);
      expect(((await response.json()) as { images: unknown[] }).images).toHaveLength(2);
      expect(fake.last()?.json).toMatchObject({ model: "gpt-image-2.6-sunburst", n: 2 });
      // 50 text tokens at 5, 1000 image tokens at 8, 8320 image tokens out at 30.
      expect(await rowFor(response)).toMatchObject({
        model: "gpt-image-2.6-sunburst",
        input_tokens: 1050,
        output_tokens: 8320,
        cost_usd: 0.25785,
      });
      fake.enqueueResponse({ status: 200, body: gptImage2Answer(2) });
      const viaProxy = await fetch(`${sluice.url}/v1/provider-a/${a.projectId}/images/generations`, {
        method: "POST",
        headers: { authorization: `Bearer ${a.bearer("provider-a")}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "gpt-image-2.6-sunburst", prompt: "two cats", n: 2 }),
      });
      expect(await rowFor(viaProxy)).toMatchObject({ endpoint: "proxy", cost_usd: 0.25785 });
    });

    it("generates with a Gemini image model one image per call, priced by its tokens, images above text", async () => {
      for (let call = 0; call < 3; call++) fake.enqueueResponse({ status: 200, body: geminiImageAnswer });
      const response = await generate(c, {
        prompt: "a lighthouse",
        model: "gemini-nano-banana-2.1",
        n: 3,
        aspectRatio: "16:9",
        providerOptions: { "provider-c": { safetyFilterLevel: "block_few" } },
      });
      expect(response.status).toBe(200);
      const body = (await response.json()) as { images: Array<{ mediaType: string }>; warnings: string[] };
      expect(body.images).toHaveLength(3);
      expect(body.images[0]?.mediaType).toBe("image/png");
      // Imagen's safety parameter means nothing to generateContent: dropped, not sent.
      expect(body.warnings).toEqual([
        "providerOptions.provider-c.safetyFilterLevel is not supported by gemini-nano-banana-2.1 and was ignored",
      ]);
      expect(fake.requests.map((request) => request.path)).toEqual(
        Array(3).fill("/c/v1beta/models/gemini-nano-banana-2.1:generateContent"),
      );
      expect(fake.last()?.json).toMatchObject({
        generationConfig: { responseModalities: ["IMAGE"], imageConfig: { aspectRatio: "16:9" } },
      });
      expect(JSON.stringify(fake.last()?.json)).not.toContain("safetySetting");
      // Each call: 20 in at 1.50, 1120 image tokens at 30, 200 thought tokens at 7.50.
      expect(await rowFor(response)).toMatchObject({
        model: "gemini-nano-banana-2.1",
        input_tokens: 60,
        output_tokens: 3960,
        reasoning_tokens: 600,
        cost_usd: 0.10539,
      });
    });

    it("reports a warning of every call once", async () => {
      for (let call = 0; call < 3; call++) fake.enqueueResponse({ status: 200, body: geminiImageAnswer });
      const response = await generate(c, {
        prompt: "x",
        model: "gemini-nano-banana-2.1",
        n: 3,
        size: "1024x1024",
      });
      expect(response.status).toBe(200);
      expect(((await response.json()) as { warnings: string[] }).warnings).toEqual([
        "size is not supported by this model: This model does not support the `size` option. Use `aspectRatio` instead.",
      ]);
    });

    it("refuses more than one image per call for a Gemini image model with 422, before any call", async () => {
      const response = await generate(c, {
        prompt: "x",
        model: "gemini-3.1-flash-image",
        n: 2,
        maxImagesPerCall: 2,
      });
      expect(response.status).toBe(422);
      expect(((await response.json()) as { error: { message: string } }).error.message).toBe(
        "`maxImagesPerCall` must be 1 for model gemini-3.1-flash-image: it generates one image per call",
      );
      expect(fake.requests).toHaveLength(0);
    });

    it("refuses a seed a Gemini image model cannot take (its API's is 32-bit) with 422, before any call", async () => {
      // generateContent's `generationConfig.seed` is an int32: the provider refuses a larger one (a 502).
      for (const seed of [2 ** 31, -(2 ** 31) - 1, 1e300]) {
        fake.clear();
        const response = await generate(c, { prompt: "x", model: "gemini-nano-banana-2.1", seed });
        expect(response.status).toBe(422);
        expect(await response.json()).toMatchObject({
          error: {
            code: "VALIDATION_ERROR",
            message:
              "`seed` must be a whole number from -2147483648 to 2147483647 for model gemini-nano-banana-2.1",
            details: { option: "seed", min: -2147483648, max: 2147483647 },
          },
        });
        expect(fake.requests).toHaveLength(0);
      }
      for (const seed of [2 ** 31 - 1, -(2 ** 31)]) {
        fake.enqueueResponse({ status: 200, body: geminiImageAnswer });
        const response = await generate(c, { prompt: "x", model: "gemini-nano-banana-2.1", seed });
        expect(response.status).toBe(200);
        expect(fake.last()?.json).toMatchObject({ generationConfig: { seed } });
      }
      // Where no model takes a seed it is dropped with a warning, whatever its size.
      const imagen = await generate(c, { prompt: "x", seed: 2 ** 40 });
      expect(imagen.status).toBe(200);
    });

    it("records the cost of the calls that answered when a later one fails", async () => {
      fake.enqueueResponse({ status: 200, body: geminiImageAnswer });
      fake.failNext(500);
      const response = await generate(c, { prompt: "x", model: "gemini-nano-banana-2.1", n: 2 });
      expect(response.status).toBe(502);
      expect(await rowFor(response)).toMatchObject({ status: 502, cost_usd: 0.03513, output_tokens: 1320 });
    });
  });

  it("prices a generation at the model's defaults as the provider A proxy does", async () => {
    const viaImage = await generate(a, { prompt: "a fox", model: "dall-e-3" });
    expect(viaImage.status).toBe(200);
    const viaProxy = await fetch(`${sluice.url}/v1/provider-a/${a.projectId}/images/generations`, {
      method: "POST",
      headers: { authorization: `Bearer ${a.bearer("provider-a")}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "dall-e-3", prompt: "a fox" }),
    });
    expect(viaProxy.status).toBe(200);
    const [imageRow, proxyRow] = [await rowFor(viaImage), await rowFor(viaProxy)];
    expect(imageRow).toMatchObject({ endpoint: "image", model: "dall-e-3", cost_usd: 0.04 });
    expect(proxyRow).toMatchObject({ endpoint: "proxy", model: "dall-e-3", cost_usd: 0.04 });
  });

  it("writes the AI SDK's warnings to the JSON log, not the console", async () => {
    const printed: unknown[] = [];
    const spies = (["warn", "info", "log"] as const).map((method) =>
      vi.spyOn(console, method).mockImplementation((...args: unknown[]) => void printed.push(args)),
    );
    try {
      const response = await generate(a, { prompt: "x", model: "dall-e-3", aspectRatio: "2:3" });
      expect(response.status).toBe(200);
      const body = (await response.json()) as { warnings: string[] };
      expect(body.warnings.join(" ")).toContain("aspectRatio");
    } finally {
      for (const spy of spies) spy.mockRestore();
    }
    expect(printed).toEqual([]);
    const logged = sluice.logs
      .map((line) => JSON.parse(line))
      .filter((line) => line.msg === "AI SDK warnings")
      .at(-1);
    expect(logged).toMatchObject({ provider: "openai.image", model: "dall-e-3" });
    expect(JSON.stringify(logged.warnings)).toContain("aspectRatio");
  });

  it("records the ultra model's cost as unknown, never 0", async () => {
    const response = await generate(c, { prompt: "x", model: "imagen-4.0-ultra-generate-001" });
    expect((await rowFor(response)).cost_usd).toBeNull();
  });

  it.each([
    ["invalid JSON", "{", 400, "BAD_REQUEST"],
    ["a missing prompt", { n: 1 }, 400, "BAD_REQUEST"],
    ["an empty prompt", { prompt: " " }, 400, "BAD_REQUEST"],
    ["n as a string", { prompt: "x", n: "2" }, 400, "BAD_REQUEST"],
    ["size and aspectRatio", { prompt: "x", size: "1024x1024", aspectRatio: "1:1" }, 422, "VALIDATION_ERROR"],
    ["a malformed size", { prompt: "x", size: "1024*1024" }, 422, "VALIDATION_ERROR"],
    ["a malformed aspectRatio", { prompt: "x", aspectRatio: "wide" }, 422, "VALIDATION_ERROR"],
    ["n = 0", { prompt: "x", n: 0 }, 422, "VALIDATION_ERROR"],
    ["n = 21", { prompt: "x", n: 21 }, 422, "VALIDATION_ERROR"],
    ["n = 1.5", { prompt: "x", n: 1.5 }, 422, "VALIDATION_ERROR"],
    ["maxImagesPerCall = 0", { prompt: "x", maxImagesPerCall: 0 }, 422, "VALIDATION_ERROR"],
  ])("refuses %s without calling the provider", async (_name, body, status, code) => {
    const response = await generate(a, body);
    expect(response.status).toBe(status);
    expect(((await response.json()) as { error: { code: string } }).error.code).toBe(code);
    expect(fake.requests).toHaveLength(0);
  });

  it.each([
    ["provider-a", { quality: "ultra" }, "providerOptions.provider-a.quality"],
    ["provider-a", { style: "bold" }, "providerOptions.provider-a.style"],
    ["provider-c", { personGeneration: "hd" }, "providerOptions.provider-c.personGeneration"],
    ["provider-c", { safetyFilterLevel: "strict" }, "providerOptions.provider-c.safetyFilterLevel"],
  ] as const)(
    "refuses %s options %j with 422 naming %s, without calling the provider",
    async (provider, options, option) => {
      const response = await generate(provider === "provider-a" ? a : c, {
        prompt: "x",
        providerOptions: { [provider]: options },
      });
      expect(response.status).toBe(422);
      const body = (await response.json()) as { error: { code: string; details: { option: string } } };
      expect(body.error).toMatchObject({ code: "VALIDATION_ERROR", details: { option } });
      expect(fake.requests).toHaveLength(0);
      expect(await rowFor(response)).toMatchObject({
        endpoint: "image",
        provider,
        status: 422,
        error_code: "VALIDATION_ERROR",
      });
    },
  );

  it.each([
    [
      "gpt-image-1 with dall-e-3's quality",
      "a",
      { model: "gpt-image-1", providerOptions: { "provider-a": { quality: "hd" } } },
      "providerOptions.provider-a.quality",
      ["low", "medium", "high", "auto"],
    ],
    [
      "gpt-image-1-mini with dall-e-3's quality",
      "a",
      { model: "gpt-image-1-mini", providerOptions: { "provider-a": { quality: "standard" } } },
      "providerOptions.provider-a.quality",
      ["low", "medium", "high", "auto"],
    ],
    [
      "dall-e-3 with gpt-image's quality",
      "a",
      { model: "dall-e-3", providerOptions: { "provider-a": { quality: "low" } } },
      "providerOptions.provider-a.quality",
      ["standard", "hd"],
    ],
    [
      "gpt-image-1 (the default) with a size it cannot make",
      "a",
      { size: "512x512" },
      "size",
      ["1024x1024", "1536x1024", "1024x1536"],
    ],
    [
      "a dated gpt-image-1-mini with a size it cannot make",
      "a",
      { model: "gpt-image-1-mini-2025-10-06", size: "1792x1024" },
      "size",
      ["1024x1024", "1536x1024", "1024x1536"],
    ],
    [
      "Imagen (the default) with an aspect ratio it cannot make",
      "c",
      { aspectRatio: "2:3" },
      "aspectRatio",
      ["1:1", "3:4", "4:3", "9:16", "16:9"],
    ],
    [
      "Imagen fast with an aspect ratio it cannot make",
      "c",
      { model: "imagen-4.0-fast-generate-001", aspectRatio: "21:9" },
      "aspectRatio",
      ["1:1", "3:4", "4:3", "9:16", "16:9"],
    ],
  ] as const)(
    "refuses %s with 422 naming the option and the model, without calling the provider",
    async (_name, which, options, option, allowed) => {
      const project = which === "a" ? a : c;
      const response = await generate(project, { prompt: "x", ...options });
      expect(response.status).toBe(422);
      const body = (await response.json()) as { error: { code: string; message: string; details: unknown } };
      expect(body.error.code).toBe("VALIDATION_ERROR");
      expect(body.error.details).toEqual({ option, allowed });
      const model =
        "model" in options ? options.model : which === "a" ? "gpt-image-1" : "imagen-4.0-generate-001";
      expect(body.error.message).toContain(option);
      expect(body.error.message).toContain(model);
      expect(fake.requests).toHaveLength(0);
      expect(await rowFor(response)).toMatchObject({ status: 422, error_code: "VALIDATION_ERROR", model });
    },
  );

  it.each([
    ["a chat model of its own provider", "a", "gpt-4.1", "provider-a", "is not an image model"],
    ["a dated chat model", "a", "gpt-4.1-2025-04-14", "provider-a", "is not an image model"],
    ["an embedding model", "c", "gemini-embedding-001", "provider-c", "is not an image model"],
    ["provider C's image model", "a", "imagen-4.0-generate-001", "provider-c", "is a provider-c model"],
    ["provider A's image model", "c", "gpt-image-1", "provider-a", "is a provider-a model"],
    ["provider B's chat model", "a", "claude-sonnet-4-5", "provider-b", "is a provider-b model"],
  ] as const)(
    "refuses %s with 422 naming it, without calling the provider, and records the row",
    async (_name, which, model, modelProvider, says) => {
      const project = which === "a" ? a : c;
      const provider = providerOf(project);
      const response = await generate(project, { prompt: "x", model });
      expect(response.status).toBe(422);
      // The image models still served, those without a shutdown date first; none its provider shut
      // down (gpt-image-1, dall-e-3, Imagen 4). gpt-image-1-mini is listed, with its date, until then.
      const served =
        provider === "provider-a"
          ? "gpt-image-2\\.6-sunburst, gpt-image-2\\.6-flare, gpt-image-2(, gpt-image-1-mini \\(until 2026-12-01\\))?"
          : "gemini-nano-banana-2\\.1, gemini-3\\.1-flash-lite-image, gemini-3-pro-image";
      expect(await response.json()).toEqual({
        error: {
          code: "VALIDATION_ERROR",
          message: expect.stringMatching(
            new RegExp(
              `^model "${model}" ${says}; this project generates images with ${provider}, whose image models are ${served}$`,
            ),
          ),
          requestId: response.headers.get("x-request-id"),
          details: { model, provider, modelProvider },
        },
      });
      expect(fake.requests).toHaveLength(0);
      expect(await rowFor(response)).toMatchObject({
        endpoint: "image",
        provider,
        model,
        status: 422,
        error_code: "VALIDATION_ERROR",
        cost_usd: null,
      });
    },
  );

  it("keeps the values each model takes, and leaves sizes and custom models alone", async () => {
    for (const [project, options] of [
      [
        a,
        { model: "gpt-image-1", size: "1536x1024", providerOptions: { "provider-a": { quality: "auto" } } },
      ],
      [
        a,
        {
          model: "gpt-image-1-mini",
          size: "1024x1536",
          providerOptions: { "provider-a": { quality: "high" } },
        },
      ],
      // dall-e-3's sizes are not restricted (the price table's sizes differ from the real API's).
      [
        a,
        { model: "dall-e-3", size: "1792x1024", providerOptions: { "provider-a": { quality: "standard" } } },
      ],
      // A model the catalogue does not know passes as before, whatever the option.
      [
        a,
        {
          model: "my-image-model",
          size: "512x512",
          providerOptions: { "provider-a": { quality: "hd", style: "vivid" } },
        },
      ],
      [c, { model: "imagen-4.0-ultra-generate-001", aspectRatio: "9:16" }],
      [c, { model: "my-imagen", aspectRatio: "2:3" }],
    ] as const) {
      fake.clear();
      const response = await generate(project, { prompt: "x", ...options });
      expect(response.status, JSON.stringify(options)).toBe(200);
      expect(fake.requests).toHaveLength(1);
    }
    expect(fake.last()!.path).toBe("/c/v1beta/models/my-imagen:predict");
  });

  it.each(["gpt-image-1", "gpt-image-1-mini"])(
    "drops style for %s with a warning, and still sends it for dall-e-3",
    async (model) => {
      const response = await generate(a, {
        prompt: "x",
        model,
        size: "1024x1024",
        providerOptions: { "provider-a": { style: "natural", quality: "low" } },
      });
      expect(response.status).toBe(200);
      const body = (await response.json()) as { warnings?: string[] };
      expect(body.warnings).toContain(
        `providerOptions.provider-a.style is not supported by ${model} and was ignored`,
      );
      const sent = fake.last()!.json as Record<string, unknown>;
      expect(sent).toMatchObject({ model, quality: "low" });
      expect(sent).not.toHaveProperty("style");
      const dalle = await generate(a, {
        prompt: "x",
        model: "dall-e-3",
        providerOptions: { "provider-a": { style: "natural" } },
      });
      expect(((await dalle.json()) as { warnings?: string[] }).warnings ?? []).toEqual([]);
      expect(fake.last()!.json).toMatchObject({ model: "dall-e-3", style: "natural" });
    },
  );

  it("answers many unknown provider options with one warning, not one each", async () => {
    const options = Object.fromEntries(Array.from({ length: 100 }, (_, index) => [String(index), 0]));
    const response = await generate(a, { prompt: "cat", providerOptions: { "provider-a": options } });
    expect(response.status).toBe(200);
    expect(((await response.json()) as { warnings?: string[] }).warnings).toEqual([
      "providerOptions.provider-a.0, providerOptions.provider-a.1, providerOptions.provider-a.2 and 97 more are not supported and were ignored",
    ]);
  });

  it("warns of fields /v1/image does not take, naming where a provider option goes, rather than ignore them unsaid", async () => {
    // Provider A's own API takes `quality` and `style` at the top: sent so, they were dropped without
    // a word, and the standard image generated and billed.
    const response = await generate(a, { prompt: "cat", model: "dall-e-3", quality: "hd", style: "vivid" });
    expect(response.status).toBe(200);
    expect(((await response.json()) as { warnings?: string[] }).warnings).toEqual([
      "quality and style are not supported and were ignored: provider options go in providerOptions (providerOptions.provider-a.quality, providerOptions.provider-a.style)",
    ]);
    expect(fake.last()!.json).not.toHaveProperty("quality");
    expect(await rowFor(response)).toMatchObject({ model: "dall-e-3", cost_usd: 0.04 });
    const fields = Object.fromEntries(Array.from({ length: 50 }, (_, index) => [`field${index}`, 0]));
    const many = await generate(c, { prompt: "cat", aspect_ratio: "16:9", ...fields });
    expect(((await many.json()) as { warnings?: string[] }).warnings).toEqual([
      "aspect_ratio, field0, field1 and 48 more are not supported and were ignored",
    ]);
  });

  it.each([
    [
      "1.5M provider options",
      `{"prompt":"cat","model":"gpt-image-1.5","providerOptions":{"provider-a":{${Array.from({ length: 1_500_000 }, (_, index) => `"${index}":0`).join(",")}}}}`,
      "holds more than 10000 object members and array elements",
    ],
    [
      "10M nested arrays",
      `{"prompt":"cat","a":${"[".repeat(10_000_000)}`,
      "nests objects and arrays more than 64 deep",
    ],
  ])(
    "refuses a body of %s with 400 before parsing it, without calling the provider",
    async (_name, body, says) => {
      const response = await generate(a, body);
      expect(await response.json()).toEqual({
        error: {
          code: "BAD_REQUEST",
          message: `The request body ${says}: /v1/image takes one JSON object such as {"prompt": "…", "providerOptions": {…}} (docs/images.md)`,
          requestId: response.headers.get("x-request-id"),
          details: { maxDepth: 64, maxValues: 10000 },
        },
      });
      expect(response.status).toBe(400);
      expect(fake.requests).toHaveLength(0);
    },
  );

  it("refuses more than 100 provider options with 422, without calling the provider", async () => {
    const options = Object.fromEntries(Array.from({ length: 101 }, (_, index) => [String(index), 0]));
    const response = await generate(a, {
      prompt: "cat",
      model: "gpt-image-1.5",
      providerOptions: { "provider-a": options },
    });
    expect(response.status).toBe(422);
    expect(await response.json()).toEqual({
      error: {
        code: "VALIDATION_ERROR",
        message:
          "`providerOptions.provider-a` has 101 members; at most 100 are taken (docs/images.md lists the provider options)",
        requestId: response.headers.get("x-request-id"),
        details: { option: "providerOptions.provider-a", count: 101, max: 100 },
      },
    });
    expect(fake.requests).toHaveLength(0);
  });

  it("ignores the other image provider's options with a warning, after checking their values", async () => {
    const onA = await generate(a, {
      prompt: "x",
      model: "gpt-image-1",
      providerOptions: { "provider-c": { personGeneration: "allow_all", safetyFilterLevel: "block_few" } },
    });
    expect(onA.status).toBe(200);
    expect(((await onA.json()) as { warnings?: string[] }).warnings).toEqual([
      "providerOptions.provider-c is ignored: this project generates images with provider-a",
    ]);
    expect(JSON.stringify(fake.last()!.json)).not.toMatch(/person|safety/i);
    const onC = await generate(c, {
      prompt: "x",
      providerOptions: { "provider-a": { quality: "hd", style: "vivid" } },
    });
    expect(onC.status).toBe(200);
    expect(((await onC.json()) as { warnings?: string[] }).warnings).toEqual([
      "providerOptions.provider-a is ignored: this project generates images with provider-c",
    ]);
    expect(JSON.stringify(fake.last()!.json)).not.toMatch(/vivid|quality|style/);
    fake.clear();
    const bad = await generate(c, { prompt: "x", providerOptions: { "provider-a": { quality: "ultra" } } });
    expect(bad.status).toBe(422);
    expect(fake.requests).toHaveLength(0);
  });

  it("refuses image generation for provider B with 422, also for another provider's image model", async () => {
    for (const body of [{ prompt: "x" }, { prompt: "x", model: "gpt-image-1" }]) {
      const response = await generate(b, body);
      expect(response.status).toBe(422);
      expect(((await response.json()) as { error: { message: string } }).error.message).toBe(
        "provider-b has no image models; use a project of provider-a or provider-c",
      );
    }
    expect(fake.requests).toHaveLength(0);
  });

  it("answers 502 when the provider fails, and records which model failed", async () => {
    fake.failNext(500);
    const response = await generate(a, { prompt: "x", model: "gpt-image-2.6-flare" });
    expect(response.status).toBe(502);
    expect(((await response.json()) as { error: { message: string } }).error.message).toBe(
      "The provider failed to generate images (status 500)",
    );
    const row = await rowFor(response);
    expect(row).toMatchObject({ status: 502, error_code: "PROVIDER_ERROR", cost_usd: null });
    expect(row.model).toBe("gpt-image-2.6-flare");
  });

  it("says so when the model that failed is one its provider has shut down, naming the replacement", async () => {
    // SPEC's default models are: gpt-image-1 on 2026-10-23, Imagen 4 on 2026-08-17.
    for (const [project, model, shutdown, replacement] of [
      [a, "gpt-image-1", "2026-10-23", "gpt-image-2.6-sunburst"],
      [c, "imagen-4.0-generate-001", "2026-08-17", "gemini-nano-banana-2.1"],
    ] as const) {
      fake.failNext(404);
      const response = await generate(project, { prompt: "x" });
      expect(response.status).toBe(502);
      const { error } = (await response.json()) as { error: { message: string; details: unknown } };
      expect(error.message).toBe(
        `The provider failed to generate images (status 404): its model ${model} was shut down by ${providerOf(project)} on ${shutdown}; name a current model, such as ${replacement}`,
      );
      expect(error.details).toMatchObject({ providerStatus: 404, modelShutdown: shutdown });
      expect(await rowFor(response)).toMatchObject({ model, error_code: "PROVIDER_ERROR" });
    }
    // A failure with another cause (the key, the rate, the provider itself) is not put on the model.
    for (const status of [401, 429, 500]) {
      fake.failNext(status);
      const response = await generate(a, { prompt: "x" });
      const { error } = (await response.json()) as { error: { message: string; details: unknown } };
      expect(error.message).toBe(`The provider failed to generate images (status ${status})`);
      expect(error.details).not.toHaveProperty("modelShutdown");
    }
  });

  it("answers 502 for an answer whose data is no image, never stored or served as one, with its cost", async () => {
    const text = Buffer.from("hello world").toString("base64");
    fake.enqueueResponse({
      status: 200,
      body: { predictions: [{ bytesBase64Encoded: text, mimeType: "image/png" }] },
    });
    const response = await generate(vaulted, { prompt: "x" });
    expect(response.status).toBe(502);
    expect(((await response.json()) as { error: { message: string } }).error.message).toBe(
      "The provider (provider-c) answered with data that is not an image (11 bytes)",
    );
    expect(await rowFor(response)).toMatchObject({
      status: 502,
      error_code: "PROVIDER_ERROR",
      cost_usd: 0.04,
    });
    // A JPEG the SDK would call a PNG is answered, and stored, as what it is.
    const jpeg = Buffer.concat([Buffer.from([0xff, 0xd8, 0xff, 0xe0]), Buffer.alloc(16)]);
    fake.enqueueResponse({
      status: 200,
      body: { predictions: [{ bytesBase64Encoded: jpeg.toString("base64"), mimeType: "image/png" }] },
    });
    const stored = (await (await generate(vaulted, { prompt: "x" })).json()) as {
      images: Array<{ mediaType: string; path: string }>;
    };
    expect(stored.images[0]).toMatchObject({
      mediaType: "image/jpeg",
      path: expect.stringMatching(/\.jpg$/),
    });
  });

  it.each([
    ["heic", "image/heic"],
    ["mif1", "image/heif"],
  ])("answers, stores and serves a %s image the AI SDK calls a PNG as %s", async (brand, mediaType) => {
    // An ftyp box of 24 bytes, as iPhones write it: the AI SDK knows HEIC by a 32-byte box only.
    const bytes = Buffer.concat([Buffer.from([0, 0, 0, 24]), Buffer.from(`ftyp${brand}`), Buffer.alloc(24)]);
    const base64 = bytes.toString("base64");
    for (const project of [c, vaulted]) {
      fake.enqueueResponse({
        status: 200,
        body: { predictions: [{ bytesBase64Encoded: base64, mimeType: "image/png" }] },
      });
      const response = await generate(project, { prompt: "x" });
      expect(response.status).toBe(200);
      const body = (await response.json()) as { images: Array<{ base64: string; mediaType: string }> };
      expect(body.images[0]).toMatchObject({ base64, mediaType });
    }
    fake.enqueueResponse({
      status: 200,
      body: { predictions: [{ bytesBase64Encoded: base64, mimeType: "image/png" }] },
    });
    const stored = (await (await generate(vaulted, { prompt: "x" })).json()) as {
      images: Array<{ url: string; path: string }>;
    };
    const extension = mediaType.slice("image/".length);
    expect(stored.images[0]!.path).toMatch(new RegExp(`\\.${extension}$`));
    const served = await fetch(stored.images[0]!.url);
    expect(served.headers.get("content-type")).toBe(mediaType);
    expect(served.headers.get("x-content-type-options")).toBe("nosniff");
    expect(Buffer.from(await served.arrayBuffer()).equals(bytes)).toBe(true);
  });

  it("answers fewer images than n with a warning, their revised prompts in order, priced per image answered", async () => {
    const png = tinyPng.toString("base64");
    fake.enqueueResponse({
      status: 200,
      body: {
        created: 1,
        size: "1024x1536",
        quality: "low",
        data: [{ b64_json: png, revised_prompt: "A revised prompt" }, { b64_json: png }],
      },
    });
    const response = await generate(a, { prompt: "x", model: "gpt-image-1", n: 3 });
    expect(response.status).toBe(200);
    const body = (await response.json()) as { images: unknown[] };
    expect(body).toMatchObject({
      warnings: ["1 of 3 images was not generated by the provider"],
      providerMetadata: { "provider-a": { images: [{ revisedPrompt: "A revised prompt" }, {}] } },
    });
    expect(body.images).toHaveLength(2);
    // Two images at the size and quality the answer names: 2 x 0.016.
    expect(await rowFor(response)).toMatchObject({ status: 200, cost_usd: 0.032 });
  });

  it("never fetches an image URL in provider A's answer: the answer is the provider's failure (502)", async () => {
    // A URL the provider names is fetched by nobody: not the gateway, not the AI SDK (which asks for
    // b64_json and refuses an answer without it), so an answer cannot point either at an internal host.
    const url = `${fake.url}/a/v1/fetched-by-the-gateway.png`;
    for (const data of [[{ url }], [{ b64_json: tinyPng.toString("base64") }, { url }], [{}]]) {
      fake.clear();
      fake.enqueueResponse({ status: 200, body: { created: 1, data } });
      const response = await generate(a, { prompt: "x", model: "dall-e-3" });
      expect(response.status).toBe(502);
      expect(((await response.json()) as { error: { code: string } }).error.code).toBe("PROVIDER_ERROR");
      expect(fake.requests.map((request) => request.path)).toEqual(["/a/v1/images/generations"]);
      expect(fake.requests[0]!.json).toMatchObject({ response_format: "b64_json" });
      expect(await rowFor(response)).toMatchObject({
        status: 502,
        error_code: "PROVIDER_ERROR",
        model: "dall-e-3",
      });
    }
  });

  it.each([
    ["that is no base64 at all", "!!!***"],
    // The AI SDK reads the start to name the type: what follows is read only for the answer.
    ["whose base64 breaks off after a PNG's start", `${tinyPng.toString("base64")}A`],
    [
      "whose base64 holds a stray character after a PNG's start",
      `${tinyPng.toString("base64").slice(0, 40)}*`,
    ],
  ])("answers 502, not 500, for an image %s, with its cost", async (_, base64) => {
    fake.enqueueResponse({ status: 200, body: { predictions: [{ bytesBase64Encoded: base64 }] } });
    const response = await generate(vaulted, { prompt: "x" });
    expect(response.status).toBe(502);
    const { error } = (await response.json()) as { error: { code: string; message: string } };
    expect(error).toMatchObject({
      code: "PROVIDER_ERROR",
      message: "The provider (provider-c) answered with an image that is not valid base64",
    });
    expect(await rowFor(response)).toMatchObject({
      status: 502,
      error_code: "PROVIDER_ERROR",
      cost_usd: 0.04,
    });
  });

  it("answers each image in standard, padded base64 of its bytes, whatever base64 the provider sent", async () => {
    // A JPEG whose base64 has `+` and `/` (`-` and `_` in the URL-safe alphabet) and needs padding.
    const jpeg = Buffer.from([0xff, 0xd8, 0xff, 0xfb, 0xff, 0xfe, 0xfa, 0x3e, 0xff, 0xbf]);
    const standard = jpeg.toString("base64");
    expect(standard).toMatch(/[+/].*=$/);
    const lineBroken = tinyPng.toString("base64").replace(/(.{16})/g, "$1\r\n");
    for (const [project, answer, bytes] of [
      // The AI SDK decodes URL-safe and unpadded base64, and base64 broken into lines, alike.
      [
        c,
        { predictions: [{ bytesBase64Encoded: jpeg.toString("base64url"), mimeType: "image/jpeg" }] },
        jpeg,
      ],
      [vaulted, { predictions: [{ bytesBase64Encoded: lineBroken, mimeType: "image/png" }] }, tinyPng],
    ] as const) {
      fake.enqueueResponse({ status: 200, body: answer });
      const response = await generate(project, { prompt: "x" });
      expect(response.status).toBe(200);
      const { images } = (await response.json()) as { images: Array<{ base64: string; url?: string }> };
      // What a strict decoder (a browser's atob, Swift's Data(base64Encoded:)) reads as the bytes.
      expect(images[0]!.base64).toBe(bytes.toString("base64"));
      if (project !== vaulted) continue;
      // The vault's file holds the same bytes.
      expect(Buffer.from(await (await fetch(images[0]!.url!)).arrayBuffer()).equals(bytes)).toBe(true);
    }
  });

  it("records the cost of the images already billed when one of several batches fails", async () => {
    const twoImages = Array.from({ length: 2 }, () => ({
      bytesBase64Encoded: tinyPng.toString("base64"),
      mimeType: "image/png",
    }));
    fake.enqueueResponse({ status: 200, body: { predictions: twoImages } });
    fake.failNext(500);
    const response = await generate(c, { prompt: "x", n: 4, maxImagesPerCall: 2 });
    expect(response.status).toBe(502);
    expect(fake.requests).toHaveLength(2);
    expect(await rowFor(response)).toMatchObject({
      status: 502,
      error_code: "PROVIDER_ERROR",
      model: "imagen-4.0-generate-001",
      cost_usd: 0.08,
    });
  });

  it("prices the batches that answered by the size and quality their answers name when another fails", async () => {
    // No size, no quality: gpt-image-1 generates at `auto`, and its answer names what it chose
    // (the fake's: 1024x1024, medium, 0.042 an image).
    let calls = 0;
    fake.setPlan(() => (calls++ === 1 ? { failStatus: 500 } : undefined));
    try {
      const response = await generate(a, { prompt: "x", model: "gpt-image-1", n: 3, maxImagesPerCall: 1 });
      expect(response.status).toBe(502);
      expect(fake.requests).toHaveLength(3);
      expect(await rowFor(response)).toMatchObject({ status: 502, model: "gpt-image-1", cost_usd: 0.084 });
    } finally {
      fake.setPlan(null);
    }
  });

  describe("a successful answer Sluice could not read, which the provider generated and billed", () => {
    afterEach(() => fake.setPlan(null));

    it("records the images of a 200 cut short as asked for, priced by the request", async () => {
      fake.setPlan(() => ({ cutBody: true }));
      const one = await generate(a, { prompt: "x", model: "dall-e-3" });
      expect(one.status).toBe(502);
      // The provider answered 2xx: the spend cap counts the call, at its cost or, unknown, its estimate.
      expect(await rowFor(one)).toMatchObject({
        status: 502,
        model: "dall-e-3",
        cost_usd: 0.04,
        provider_answered: 1,
      });
      // One batch of three cut short, the other two whole: three images billed.
      fake.clear();
      let calls = 0;
      fake.setPlan(() => (calls++ === 1 ? { cutBody: true } : undefined));
      const batched = await generate(a, {
        prompt: "x",
        model: "dall-e-3",
        n: 3,
        providerOptions: { "provider-a": { quality: "hd" } },
      });
      expect(batched.status).toBe(502);
      expect(fake.requests).toHaveLength(3);
      expect(await rowFor(batched)).toMatchObject({ status: 502, cost_usd: 0.24 });
    });

    it("records the images of a 200 whose images came as URLs, not base64, priced by the request", async () => {
      fake.enqueueResponse({
        status: 200,
        body: { created: 1, data: [{ url: "https://images.example.com/a.png" }] },
      });
      const response = await generate(a, { prompt: "x", model: "dall-e-3", size: "1536x1024" });
      expect(response.status).toBe(502);
      expect(await rowFor(response)).toMatchObject({
        status: 502,
        model: "dall-e-3",
        cost_usd: 0.08,
        provider_answered: 1,
      });
    });

    it("records no cost for a 200 that is no JSON answer of the provider's (an HTML page)", async () => {
      fake.enqueueResponse({
        status: 200,
        headers: { "content-type": "text/html" },
        body: "<html>a proxy's page</html>",
      });
      const response = await generate(a, { prompt: "x", model: "dall-e-3" });
      expect(response.status).toBe(502);
      // Not the provider's answer: nothing says it billed the call, which the cap then counts as nothing.
      expect(await rowFor(response)).toMatchObject({ status: 502, cost_usd: null, provider_answered: null });
    });
  });

  it.each([
    // Its status line not yet come: nothing says the provider generated its images.
    ["before the second batch's answer", "headers", 0.08],
    // A 200 had begun: the provider generated (and billed) its images, which Sluice never read.
    ["in the middle of the second batch's 200", "body", 0.16],
  ] as const)(
    "records a client that leaves %s as aborted (499), with the cost of the batches billed",
    async (_, hangIn, cost) => {
      await sluice.gateway.flushUsage();
      const before = new Set(
        (
          await sluice.gateway.database.db
            .selectFrom("usage_records")
            .select("request_id")
            .where("project_id", "=", c.projectId)
            .execute()
        ).map((row) => row.request_id),
      );
      const twoImages = Array.from({ length: 2 }, () => ({ bytesBase64Encoded: tinyPng.toString("base64") }));
      fake.enqueueResponse({ status: 200, body: { predictions: twoImages } });
      if (hangIn === "body") {
        // The second batch's answer starts and goes no further.
        fake.enqueueResponse({
          status: 200,
          headers: { "content-type": "application/json" },
          parts: ['{"predictions":[', "]}"],
        });
        fake.hangStreamsAfter(1);
      } else {
        let calls = 0;
        fake.setPlan(() => (calls++ === 1 ? { latencyMs: 30_000 } : undefined));
      }
      const client = new AbortController();
      try {
        const pending = fetch(`${sluice.url}/v1/image/${c.projectId}`, {
          method: "POST",
          headers: { authorization: `Bearer ${c.bearer("provider-c")}`, "content-type": "application/json" },
          body: JSON.stringify({ prompt: "x", n: 4, maxImagesPerCall: 2 }),
          signal: client.signal,
        }).catch(() => null);
        await vi.waitFor(() => expect(fake.requests).toHaveLength(2), { timeout: 5000, interval: 10 });
        // The first batch answered whole; a moment for the gateway to read its few hundred bytes.
        await vi.waitFor(
          () => expect(fake.requests.some((request) => request.finishedAt && !request.aborted)).toBe(true),
          { timeout: 5000, interval: 10 },
        );
        await new Promise((resolve) => setTimeout(resolve, 200));
        client.abort();
        expect(await pending).toBeNull();
        // The batch still under way is stopped at once.
        const hung = fake.requests.find((request) => !request.finishedAt);
        expect(hung).toBeDefined();
        await fake.waitForAbort(5000, (request) => request === hung);
      } finally {
        fake.hangStreamsAfter(null);
        fake.setPlan(null);
      }
      const row = await vi.waitFor(
        async () => {
          await sluice.gateway.flushUsage();
          const found = await sluice.gateway.database.db
            .selectFrom("usage_records")
            .selectAll()
            .where("project_id", "=", c.projectId)
            .where("status", "=", 499)
            .execute();
          const mine = found.filter((row) => !before.has(row.request_id));
          expect(mine).toHaveLength(1);
          return mine[0]!;
        },
        { timeout: 5000, interval: 20 },
      );
      expect(row).toMatchObject({ outcome: "aborted", model: "imagen-4.0-generate-001", cost_usd: cost });
    },
  );

  it("stores images in the vault with a signed URL that serves the same bytes until it expires", async () => {
    // The clock stands still at a whole second while the URLs are signed and fetched, then moves
    // past their expiry: on a slow machine a URL of 2 s could expire before it is fetched, and
    // waiting out its life took 3 s.
    const signedAt = new Date(Math.floor(Date.now() / 1000) * 1000);
    stoppedAt = signedAt;
    try {
      await storesAndServesUntilExpiry(signedAt);
    } finally {
      stoppedAt = null;
    }
  });

  async function storesAndServesUntilExpiry(signedAt: Date) {
    // The path holds the day (UTC) the image was stored.
    const day = signedAt.toISOString().slice(0, 10).replaceAll("-", "/");
    const response = await generate(vaulted, { prompt: "x", n: 2 });
    const body = (await response.json()) as { images: Array<{ base64: string; url: string; path: string }> };
    expect(body.images).toHaveLength(2);
    for (const image of body.images) {
      expect(image.path).toMatch(
        new RegExp(`^team42/generated-images/${vaulted.projectId}/${day}/[0-9a-f-]{36}\\.png$`),
      );
      const file = join(sluice.gateway.config.dataDir, "vault", image.path);
      expect(existsSync(file)).toBe(true);
      expect(readFileSync(file).equals(Buffer.from(image.base64, "base64"))).toBe(true);
      const fetched = await fetch(image.url);
      expect(fetched.status).toBe(200);
      expect(fetched.headers.get("content-type")).toBe("image/png");
      expect(fetched.headers.get("x-content-type-options")).toBe("nosniff");
      // The URL lives 2 s here: a cached copy must not outlive it.
      expect(fetched.headers.get("cache-control")).toMatch(/^private, max-age=[0-2]$/);
      expect(Buffer.from(await fetched.arrayBuffer()).equals(tinyPng)).toBe(true);
    }
    const url = new URL(body.images[0]!.url);
    const tampered = new URL(url);
    tampered.searchParams.set("signature", `${url.searchParams.get("signature")}A`);
    expect((await fetch(tampered)).status).toBe(403);
    const otherPath = new URL(body.images[1]!.url);
    otherPath.search = url.search;
    expect((await fetch(otherPath)).status).toBe(403);
    for (const traversal of [
      "/v1/vault/../../master.key",
      "/v1/vault/team42/..%2F..%2Fmaster.key",
      "/v1/vault/%2e%2e/master.key",
    ]) {
      const attempt = await fetch(`${sluice.url}${traversal}${url.search}`);
      expect([403, 404]).toContain(attempt.status);
    }
    expect(Number(url.searchParams.get("expires"))).toBe(signedAt.getTime() / 1000 + 2);
    stoppedAt = new Date(signedAt.getTime() + 3100);
    const expired = await fetch(url);
    expect(expired.status).toBe(403);
    expect(((await expired.json()) as { error: { message: string } }).error.message).toContain("expired");
  }

  it("answers 503 and logs it when a vault file cannot be read, 404 when it is missing, never logging the signature", async () => {
    const signedAt = new Date(Math.floor(Date.now() / 1000) * 1000);
    stoppedAt = signedAt;
    try {
      const response = await generate(vaulted, { prompt: "x", n: 2 });
      const [unreadable, missing] = (
        (await response.json()) as { images: Array<{ url: string; path: string }> }
      ).images as [{ url: string; path: string }, { url: string; path: string }];
      // As root, chmod 000 stops no read: a directory where the file should be does (EISDIR).
      const file = join(sluice.gateway.config.dataDir, "vault", unreadable.path);
      rmSync(file);
      mkdirSync(file);
      const failed = await fetch(unreadable.url);
      expect(failed.status).toBe(503);
      expect(failed.headers.get("retry-after")).toBe("5");
      expect(await failed.json()).toEqual({
        error: {
          code: "SERVICE_UNAVAILABLE",
          details: { retryable: true },
          message: "The image vault could not read this file",
          requestId: failed.headers.get("x-request-id"),
        },
      });
      const logged = logLinesOf(sluice);
      expect(logged.find((line) => line.msg === "vault call failed" && line.code === "EISDIR")).toMatchObject(
        {
          level: "warn",
          dependency: "vault",
          status: 503,
          requestId: failed.headers.get("x-request-id"),
          route: "/v1/vault/*",
        },
      );
      const signature = new URL(unreadable.url).searchParams.get("signature") as string;
      expect(sluice.logs.join("\n")).not.toContain(signature);
      rmSync(join(sluice.gateway.config.dataDir, "vault", missing.path));
      const gone = await fetch(missing.url);
      expect(gone.status).toBe(404);
      expect(((await gone.json()) as { error: { code: string } }).error.code).toBe("NOT_FOUND");
    } finally {
      stoppedAt = null;
    }
  });

  it("stores images for a team id with a leading _ and records the billed model and cost", async () => {
    const response = await generate(underscored, { prompt: "a cat", size: "1024x1024" });
    expect(response.status).toBe(200);
    const body = (await response.json()) as { images: Array<{ base64: string; url: string; path: string }> };
    const image = body.images[0]!;
    expect(image.path).toMatch(new RegExp(`^_team/generated-images/${underscored.projectId}/`));
    const file = join(sluice.gateway.config.dataDir, "vault", image.path);
    expect(readFileSync(file).equals(Buffer.from(image.base64, "base64"))).toBe(true);
    expect((await fetch(image.url)).status).toBe(200);
    expect(await rowFor(response)).toMatchObject({
      status: 200,
      model: "imagen-4.0-generate-001",
      cost_usd: 0.04,
    });
  });

  it("records the billed model and cost when the vault write fails after the provider answered", async () => {
    const blocked = await createTestProject(sluice.gateway, {
      provider: "provider-c",
      teamId: "blocked",
      saveImagesToVault: true,
    });
    // A file where the team's directory should be: the write fails once the images exist.
    mkdirSync(join(sluice.gateway.config.dataDir, "vault"), { recursive: true });
    writeFileSync(join(sluice.gateway.config.dataDir, "vault", "blocked"), "");
    const response = await fetch(`${sluice.url}/v1/image/${blocked.projectId}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${blocked.bearer("provider-c")}`,
        "content-type": "application/json",
      },
      body: JSON.stringify({ prompt: "a cat" }),
    });
    expect(response.status).toBe(503);
    expect(response.headers.get("retry-after")).toBe("5");
    expect(((await response.clone().json()) as { error: { code: string } }).error.code).toBe(
      "SERVICE_UNAVAILABLE",
    );
    expect(fake.requests).toHaveLength(1);
    expect(await rowFor(response)).toMatchObject({
      status: 503,
      error_code: "SERVICE_UNAVAILABLE",
      model: "imagen-4.0-generate-001",
      cost_usd: 0.04,
    });
    // The operator learns why: the file system's own error, once per code and window.
    const logged = logLinesOf(sluice);
    expect(
      logged.find((line) => line.msg === "vault call failed" && line.route === "/v1/image/:projectId"),
    ).toMatchObject({
      level: "warn",
      dependency: "vault",
      code: expect.stringMatching(/^E[A-Z]+$/),
      cause: expect.stringContaining("blocked"),
      status: 503,
      requestId: response.headers.get("x-request-id"),
      route: "/v1/image/:projectId",
    });
  });

  it("answers 503 with the billed cost recorded when the S3 vault cannot be reached", async () => {
    const s3 = await startTestGateway({
      providerCBaseUrl: `${fake.url}/c/v1beta`,
      vaultS3Endpoint: "http://127.0.0.1:1",
      vaultS3Bucket: "vault",
      vaultS3AccessKeyId: "id",
      vaultS3SecretAccessKey: "secret",
    });
    try {
      const project = await createTestProject(s3.gateway, {
        provider: "provider-c",
        teamId: "team1",
        saveImagesToVault: true,
      });
      fake.clear();
      const response = await fetch(`${s3.url}/v1/image/${project.projectId}`, {
        method: "POST",
        headers: {
          authorization: `Bearer ${project.bearer("provider-c")}`,
          "content-type": "application/json",
        },
        body: JSON.stringify({ prompt: "a cat" }),
      });
      expect(response.status).toBe(503);
      expect(((await response.json()) as { error: { code: string } }).error.code).toBe("SERVICE_UNAVAILABLE");
      expect(fake.requests).toHaveLength(1);
      expect(await usageRowOf(s3.gateway, response)).toMatchObject({
        status: 503,
        error_code: "SERVICE_UNAVAILABLE",
        cost_usd: 0.04,
      });
    } finally {
      await s3.close();
    }
  });

  it("leaves url and path out when the vault is off", async () => {
    const body = (await (await generate(c, { prompt: "x" })).json()) as {
      images: Array<Record<string, unknown>>;
    };
    expect(Object.keys(body.images[0]!).sort()).toEqual(["base64", "mediaType"]);
  });

  // The provider refuses these with a 400, which was answered 502: the client's own input, 422 here.
  describe("the documented prompt and size limits of provider A's models", () => {
    const errorOf = async (response: Response) =>
      ((await response.json()) as { error: { code: string; message: string; details: unknown } }).error;

    it("refuses a prompt longer than the model's documented limit with 422, before any call", async () => {
      for (const [model, max] of [
        ["gpt-image-2", 32000],
        ["gpt-image-2.6-sunburst", 32000],
        ["gpt-image-1-mini-2025-10-06", 32000],
        ["dall-e-3", 4000],
      ] as const) {
        fake.clear();
        const response = await generate(a, { prompt: "a".repeat(max + 1), model });
        expect(response.status).toBe(422);
        const error = await errorOf(response);
        expect(error).toMatchObject({
          code: "VALIDATION_ERROR",
          message: `\`prompt\` has ${max + 1} characters; model ${model} takes at most ${max}`,
        });
        expect(error.details).toEqual({ option: "prompt", length: max + 1, max });
        expect(fake.requests).toHaveLength(0);
        const atLimit = await generate(a, { prompt: "a".repeat(max), model });
        expect(atLimit.status).toBe(200);
        expect(fake.requests).toHaveLength(1);
      }
    });

    it("counts a prompt's characters, not its UTF-16 units: an emoji is one", async () => {
      const prompt = "🦊".repeat(32000);
      expect(prompt.length).toBe(64000);
      const response = await generate(a, { prompt, model: "gpt-image-2" });
      expect(response.status).toBe(200);
      expect(fake.last()?.json).toMatchObject({ prompt });
      const over = await generate(a, { prompt: `${prompt}🦊`, model: "gpt-image-2" });
      expect(over.status).toBe(422);
      expect((await errorOf(over)).details).toEqual({ option: "prompt", length: 32001, max: 32000 });
    });

    it.each([
      ["1000x1000", "its width and height must both be multiples of 16"],
      ["4096x2048", "its longer side must be at most 3840 pixels"],
      ["3840x1024", "its longer side must be at most 3 times its shorter side (3:1)"],
      ["800x800", "it must have from 655,360 to 8,294,400 pixels, not 640,000"],
      ["3840x2400", "it must have from 655,360 to 8,294,400 pixels, not 9,216,000"],
    ])(
      "refuses size %s for GPT Image 2 with 422 naming the limit (%s), before any call",
      async (size, rule) => {
        for (const model of ["gpt-image-2", "gpt-image-2-2026-04-21"]) {
          fake.clear();
          const response = await generate(a, { prompt: "x", model, size });
          expect(response.status).toBe(422);
          const error = await errorOf(response);
          expect(error).toMatchObject({
            code: "VALIDATION_ERROR",
            message: `\`size\` ${size} does not fit model ${model}: ${rule}`,
          });
          expect(error.details).toEqual({
            option: "size",
            multipleOf: 16,
            maxSide: 3840,
            maxAspectRatio: "3:1",
            minPixels: 655360,
            maxPixels: 8294400,
          });
          expect(fake.requests).toHaveLength(0);
        }
      },
    );

    it("sends GPT Image 2 the sizes its documented rules allow, the extremes included", async () => {
      for (const size of [
        "1536x864",
        "3840x2160",
        "2160x3840",
        "1024x1024",
        "1536x512",
        "832x832",
        "3840x1280",
      ]) {
        fake.clear();
        const response = await generate(a, { prompt: "x", model: "gpt-image-2", size });
        expect(response.status).toBe(200);
        expect(fake.last()?.json).toMatchObject({ model: "gpt-image-2", size });
      }
    });

    it("sends a model the catalogue does not know on unchecked: the provider has the last word", async () => {
      const response = await generate(a, {
        prompt: "a".repeat(40000),
        model: "gpt-image-9",
        size: "1000x10",
      });
      expect(response.status).toBe(200);
      expect(fake.last()?.json).toMatchObject({ model: "gpt-image-9", size: "1000x10" });
    });
  });
});

describe("image generation with an S3 vault that takes the upload and never answers", () => {
  let fake: FakeUpstream;
  let s3: Server;
  let sluice: TestGateway;
  let project: TestProject;
  // The same store behind a vault deadline no test waits for: only the client leaving ends an upload.
  let patient: TestGateway;
  let patientProject: TestProject;
  // What the object store saw of each upload (a PUT): its key, when it arrived and when its
  // connection closed. Apart from them, its other requests (method and key): an upload cut short
  // (by the deadline, or by the client leaving) is followed by a DELETE of its image, sent a moment
  // after the answer, which the store never answers either. Each test waits for its own: one that
  // came in the next test, taken for that test's upload, had its client leave before its image was
  // generated (a 499 without the image's cost).
  const uploads: Array<{ key: string; arrived: number; closed?: number }> = [];
  const deletes: string[] = [];

  beforeAll(async () => {
    fake = await startFakeUpstream();
    s3 = createServer((request, response) => {
      request.resume();
      const key = new URL(request.url ?? "/", "http://s3.test").pathname.replace(/^\/vault\//, "");
      if (request.method !== "PUT") {
        deletes.push(`${request.method} ${key}`);
        return;
      }
      const upload: { key: string; arrived: number; closed?: number } = { key, arrived: Date.now() };
      uploads.push(upload);
      response.on("close", () => {
        upload.closed = Date.now();
      });
    });
    await new Promise<void>((resolve) => s3.listen(0, "127.0.0.1", resolve));
    sluice = await startTestGateway({
      providerCBaseUrl: `${fake.url}/c/v1beta`,
      vaultTimeoutMs: 1500,
      vaultS3Endpoint: `http://127.0.0.1:${(s3.address() as AddressInfo).port}`,
      vaultS3Bucket: "vault",
      vaultS3AccessKeyId: "id",
      vaultS3SecretAccessKey: "secret",
    });
    project = await createTestProject(sluice.gateway, {
      provider: "provider-c",
      teamId: "team1",
      saveImagesToVault: true,
    });
    patient = await startTestGateway({
      providerCBaseUrl: `${fake.url}/c/v1beta`,
      vaultTimeoutMs: 60_000,
      vaultS3Endpoint: `http://127.0.0.1:${(s3.address() as AddressInfo).port}`,
      vaultS3Bucket: "vault",
      vaultS3AccessKeyId: "id",
      vaultS3SecretAccessKey: "secret",
    });
    patientProject = await createTestProject(patient.gateway, {
      provider: "provider-c",
      teamId: "team1",
      saveImagesToVault: true,
    });
  });

  afterAll(async () => {
    await sluice.close();
    await patient.close();
    await fake.close();
    s3.closeAllConnections();
    await new Promise((resolve) => s3.close(resolve));
  });

  beforeEach(() => {
    fake.clear();
    uploads.length = 0;
    deletes.length = 0;
  });

  const waitFor = async (done: () => boolean, ms: number) => {
    const until = Date.now() + ms;
    while (!done() && Date.now() < until) await new Promise((resolve) => setTimeout(resolve, 10));
  };

  it("answers 503 with Retry-After once SLUICE_VAULT_TIMEOUT_MS has passed, with the cost recorded", {
    timeout: 10_000,
  }, async () => {
    const started = Date.now();
    const response = await fetch(`${sluice.url}/v1/image/${project.projectId}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${project.bearer("provider-c")}`,
        "content-type": "application/json",
      },
      body: JSON.stringify({ prompt: "a cat" }),
      signal: AbortSignal.timeout(6000),
    });
    // Counted from the upload's start, when the vault's deadline starts, not from the request's
    // (an image generated first, slower on a loaded machine): the store never answers, so only the
    // deadline can have ended it, and within 4 s is far from a wait for the store.
    const answered = Date.now();
    expect(answered - (uploads[0]?.arrived ?? started)).toBeLessThan(4000);
    expect(response.status).toBe(503);
    expect(response.headers.get("retry-after")).toBe("5");
    const error = ((await response.clone().json()) as { error: { code: string; message: string } }).error;
    expect(error).toMatchObject({
      code: "SERVICE_UNAVAILABLE",
      message: expect.stringMatching(/within 1500 ms/),
    });
    expect(uploads).toHaveLength(1);
    // The upload is abandoned, not left open (seen by the store a moment after the answer).
    await waitFor(() => uploads[0]?.closed !== undefined, 5000);
    expect(uploads[0]?.closed).toBeDefined();
    expect(uploads[0]?.key).toContain(project.projectId);
    // The image whose upload the deadline cut is deleted (the store may have kept it).
    await waitFor(() => deletes.length > 0, 5000);
    expect(deletes).toEqual([`DELETE ${uploads[0]?.key}`]);
    expect(await usageRowOf(sluice.gateway, response)).toMatchObject({
      status: 503,
      error_code: "SERVICE_UNAVAILABLE",
      model: "imagen-4.0-generate-001",
      cost_usd: 0.04,
    });
  });

  it("stops the upload at once when the client leaves, and records the request as aborted with its cost", {
    timeout: 30_000,
  }, async () => {
    const { gateway } = patient;
    const body = JSON.stringify({ prompt: "a cat" });
    const socket = connect(Number(new URL(patient.url).port), "127.0.0.1");
    socket.on("error", () => {});
    socket.write(
      `POST /v1/image/${patientProject.projectId} HTTP/1.1\r\nhost: x\r\n` +
        `authorization: Bearer ${patientProject.bearer("provider-c")}\r\ncontent-type: application/json\r\n` +
        `content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    await waitFor(() => uploads.length > 0, 10_000);
    expect(uploads).toHaveLength(1);
    // This request's image, generated and billed, on its way to the store: the client leaves now.
    expect(uploads[0]?.key).toContain(patientProject.projectId);
    const left = Date.now();
    socket.destroy();
    await waitFor(() => uploads[0]?.closed !== undefined, 10_000);
    // The store never answers, and the vault's deadline is 60 s: an upload closed within 10 s was
    // stopped by the client leaving (~10 ms; 1.5 s once on a loaded machine), not by the deadline.
    expect((uploads[0]?.closed ?? Number.POSITIVE_INFINITY) - left).toBeLessThan(10_000);
    // The row is written once the gateway has seen the client leave: waited for, not assumed.
    const aborted = async () => {
      await gateway.flushUsage();
      return gateway.database.db
        .selectFrom("usage_records")
        .selectAll()
        .where("project_id", "=", patientProject.projectId)
        .where("status", "=", 499)
        .execute();
    };
    let rows = await aborted();
    for (const deadline = Date.now() + 5000; rows.length === 0 && Date.now() < deadline; ) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      rows = await aborted();
    }
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ outcome: "aborted", cost_usd: 0.04 });
    // The image whose upload the client's leaving cut is deleted as well.
    await waitFor(() => deletes.length > 0, 5000);
    expect(deletes).toEqual([`DELETE ${uploads[0]?.key}`]);
  });
});

describe("image generation with the default image models configured", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway({
      providerABaseUrl: `${fake.url}/a/v1`,
      providerCBaseUrl: `${fake.url}/c/v1beta`,
      providerAImageModel: "gpt-image-2.6-sunburst",
      providerCImageModel: "models/gemini-nano-banana-2.1",
    });
  });
  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });

  it("uses SLUICE_PROVIDER_x_IMAGE_MODEL for a call that names no model, and the request's model over it", async () => {
    const answer = providerC.imageResponse("gemini-nano-banana-2.1", {
      promptTokenCount: 5,
      candidatesTokenCount: 1120,
      candidatesTokensDetails: [{ modality: "IMAGE", tokenCount: 1120 }],
    });
    for (const [provider, body, path, model] of [
      [
        "provider-c",
        answer,
        "/c/v1beta/models/gemini-nano-banana-2.1:generateContent",
        "gemini-nano-banana-2.1",
      ],
      ["provider-a", undefined, "/a/v1/images/generations", "gpt-image-2.6-sunburst"],
    ] as const) {
      const project = await createTestProject(sluice.gateway, { provider });
      if (body) fake.enqueueResponse({ status: 200, body });
      const response = await fetch(`${sluice.url}/v1/image/${project.projectId}`, {
        method: "POST",
        headers: { authorization: `Bearer ${project.bearer(provider)}`, "content-type": "application/json" },
        body: JSON.stringify({ prompt: "a lighthouse" }),
      });
      expect(response.status).toBe(200);
      expect(fake.last()?.path).toBe(path);
      expect(await usageRowOf(sluice.gateway, response)).toMatchObject({ model });
    }
    const project = await createTestProject(sluice.gateway, { provider: "provider-a" });
    const named = await fetch(`${sluice.url}/v1/image/${project.projectId}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${project.bearer("provider-a")}`,
        "content-type": "application/json",
      },
      body: JSON.stringify({ prompt: "a lighthouse", model: "gpt-image-1", size: "1024x1024" }),
    });
    expect(named.status).toBe(200);
    expect(fake.last()?.json).toMatchObject({ model: "gpt-image-1" });
  });
});
