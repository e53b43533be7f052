import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { tinyPng } from "../fakes/fake-upstream-responses.js";
import {
  createTestProject,
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

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway({
      providerABaseUrl: `${fake.url}/a/v1`,
      providerCBaseUrl: `${fake.url}/c/v1beta`,
      vaultUrlTtlSeconds: 2,
    });
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
    [{ model: "gpt-image-1-mini", size: "1536x1024" }, 0.02],
    [{ model: "gpt-image-1" }, null],
    // Provider A takes no aspect ratio (the SDK drops it with a warning): the size is the model's default.
    [{ model: "dall-e-3", aspectRatio: "2:3" }, null],
    [
      { model: "gpt-image-1", aspectRatio: "3:2", providerOptions: { "provider-a": { quality: "low" } } },
      null,
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

  it("refuses image generation for provider B with 422", async () => {
    const response = await generate(b, { prompt: "x" });
    expect(response.status).toBe(422);
    expect(fake.requests).toHaveLength(0);
  });

  it("answers 502 when the provider fails, and records which model failed", async () => {
    fake.failNext(500);
    const response = await generate(a, { prompt: "x" });
    expect(response.status).toBe(502);
    const row = await rowFor(response);
    expect(row).toMatchObject({ status: 502, error_code: "PROVIDER_ERROR", cost_usd: null });
    expect(row.model).toEqual(expect.any(String));
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

  it("stores images in the vault with a signed URL that serves the same bytes until it expires", async () => {
    const response = await generate(vaulted, { prompt: "x", n: 2 });
    const body = (await response.json()) as { images: Array<{ base64: string; url: string; path: string }> };
    expect(body.images).toHaveLength(2);
    const today = new Date().toISOString();
    for (const image of body.images) {
      expect(image.path).toMatch(
        new RegExp(
          `^team42/generated-images/${vaulted.projectId}/${today.slice(0, 4)}/${today.slice(5, 7)}/${today.slice(8, 10)}/[0-9a-f-]{36}\\.png$`,
        ),
      );
      const file = join(sluice.gateway.config.dataDir, "vault", image.path);
      expect(existsSync(file)).toBe(true);
      expect(readFileSync(file).equals(Buffer.from(image.base64, "base64"))).toBe(true);
      const fetched = await fetch(image.url);
      expect(fetched.status).toBe(200);
      expect(fetched.headers.get("content-type")).toBe("image/png");
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
    await new Promise((resolve) => setTimeout(resolve, 3100));
    const expired = await fetch(url);
    expect(expired.status).toBe(403);
    expect(((await expired.json()) as { error: { message: string } }).error.message).toContain("expired");
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
    expect(response.status).toBe(500);
    expect(fake.requests).toHaveLength(1);
    expect(await rowFor(response)).toMatchObject({
      status: 500,
      error_code: "INTERNAL_ERROR",
      model: "imagen-4.0-generate-001",
      cost_usd: 0.04,
    });
  });

  it("leaves url and path out when the vault is off", async () => {
    const body = (await (await generate(c, { prompt: "x" })).json()) as {
      images: Array<Record<string, unknown>>;
    };
    expect(Object.keys(body.images[0]!).sort()).toEqual(["base64", "mediaType"]);
  });
});
