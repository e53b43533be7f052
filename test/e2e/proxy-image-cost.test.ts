import { toFile } from "openai";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { providerA, providerC, tinyPng } from "../fakes/fake-upstream-responses.js";
import { clockAwayFromMonthEnd } from "../support/away-from-month-end.js";
import { googleGenAiV1Client, sdkClients } from "../support/sdk-clients.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowById,
} from "../support/test-gateway.js";

/**
 * Images generated through the proxies, with the official SDKs, are priced per image from the
 * catalogue, as /v1/image prices them, so they count against the monthly spend cap.
 */
describe("image generation through the proxies", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let project: TestProject;
  let clients: ReturnType<typeof sdkClients>;
  let googleV1: ReturnType<typeof googleGenAiV1Client>;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    // Within one month: the spend cap test below would see its spend start again on the 1st (UTC).
    sluice = await startTestGateway(
      { providerABaseUrl: `${fake.url}/a/v1`, providerCBaseUrl: `${fake.url}/c/v1beta` },
      { now: clockAwayFromMonthEnd() },
    );
    project = await createTestProject(sluice.gateway);
    clients = sdkClients(sluice, project);
    googleV1 = googleGenAiV1Client(sluice, project);
  });
  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });
  beforeEach(() => {
    fake.clear();
    fake.setCompression(null);
  });

  async function rowOf(headers: { get(name: string): string | null } | Record<string, string> | undefined) {
    const get = (name: string) =>
      headers === undefined
        ? null
        : typeof headers.get === "function"
          ? (headers as { get(name: string): string | null }).get(name)
          : ((headers as Record<string, string>)[name] ?? null);
    return usageRowById(sluice.gateway, get("x-sluice-request-id") ?? get("x-request-id"));
  }

  /** A gpt-image-1 answer of `count` images of `bytes` base64 characters each, as the API sends it. */
  const gptImageAnswer = (count: number, bytes: number) =>
    providerA.gptImage({
      count,
      b64: "A".repeat(bytes),
      quality: "high",
      size: "1024x1024",
      usage: {
        input_tokens: 12,
        input_tokens_details: { image_tokens: 0, text_tokens: 12 },
        output_tokens: 4160 * count,
        total_tokens: 12 + 4160 * count,
      },
    });

  describe("provider A images.generate (openai SDK)", () => {
    it("records gpt-image-1's catalogue price per image, with the answer's tokens", async () => {
      const { data, response } = await clients.openai.images
        .generate({ model: "gpt-image-1", prompt: "a cat", size: "1024x1024", quality: "low" })
        .withResponse();
      expect(data.data).toHaveLength(1);
      const row = await rowOf(response.headers);
      expect(row).toMatchObject({ model: "gpt-image-1", status: 200, input_tokens: 10, output_tokens: 100 });
      expect(row.cost_usd).toBe(0.011);
    });

    it("prices a streamed generation by its completed images, at the size and quality each event names", async () => {
      const event = (type: string, image: string, extra: Record<string, unknown>) =>
        `event: ${type}\ndata: ${JSON.stringify({ type, b64_json: image, created_at: 1_763_000_000, ...extra })}\n\n`;
      const usage = { input_tokens: 12, output_tokens: 4160, total_tokens: 4172 };
      // An image of 1.5 MB in base64: the event is past the SSE scanner's cap, read from its ends.
      for (const [bytes, quality, price] of [
        [2_000, "low", 0.011],
        [1_500_000, "medium", 0.042],
      ] as const) {
        fake.enqueueResponse({
          status: 200,
          headers: { "content-type": "text/event-stream" },
          body:
            event("image_generation.partial_image", "A".repeat(1_000), { partial_image_index: 0 }) +
            event("image_generation.completed", "A".repeat(bytes), {
              size: "1024x1024",
              quality,
              background: "opaque",
              output_format: "png",
              usage,
            }),
        });
        const { data: stream, response } = await clients.openai.images
          .generate({ model: "gpt-image-1", prompt: "a cat", stream: true, partial_images: 1 })
          .withResponse();
        const types: string[] = [];
        for await (const streamed of stream) types.push(streamed.type);
        expect(types).toEqual(["image_generation.partial_image", "image_generation.completed"]);
        const row = await rowOf(response.headers);
        expect(row).toMatchObject({
          model: "gpt-image-1",
          streamed: 1,
          input_tokens: 12,
          output_tokens: 4160,
        });
        expect(row.cost_usd).toBe(price);
      }
    });

    it("prices a streamed generation whose completed event ends without its blank line, which the SDK still gives", async () => {
      const completed = {
        type: "image_generation.completed",
        b64_json: "A".repeat(2_000),
        created_at: 1_763_000_000,
        size: "1024x1024",
        quality: "low",
        background: "opaque",
        output_format: "png",
        usage: { input_tokens: 12, output_tokens: 4160, total_tokens: 4172 },
      };
      fake.enqueueResponse({
        status: 200,
        headers: { "content-type": "text/event-stream" },
        body: `event: image_generation.completed\ndata: ${JSON.stringify(completed)}`,
      });
      const { data: stream, response } = await clients.openai.images
        .generate({ model: "gpt-image-1", prompt: "a cat", stream: true })
        .withResponse();
      const types: string[] = [];
      for await (const streamed of stream) types.push(streamed.type);
      expect(types).toEqual(["image_generation.completed"]);
      const row = await rowOf(response.headers);
      expect(row).toMatchObject({ model: "gpt-image-1", streamed: 1, input_tokens: 12, output_tokens: 4160 });
      expect(row.cost_usd).toBe(0.011);
    });

    it("records no cost, not 0, for a streamed generation that failed before any image was completed", async () => {
      const event = (type: string, data: Record<string, unknown>) =>
        `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
      const completed = {
        b64_json: "A".repeat(2_000),
        size: "1024x1024",
        quality: "low",
        usage: { input_tokens: 12, output_tokens: 4160, total_tokens: 4172 },
      };
      const failure = {
        error: { type: "server_error", code: "server_error", message: "The generation failed" },
      };
      // Failed after a partial image (billed as output tokens the catalogue has no price for): an
      // error answer, whose cost is not known; failed after one of two images: that image's price.
      for (const [events, cost] of [
        [
          [event("image_generation.partial_image", { b64_json: "A".repeat(1_000) }), event("error", failure)],
          null,
        ],
        [[event("image_generation.completed", completed), event("error", failure)], 0.011],
      ] as const) {
        fake.enqueueResponse({
          status: 200,
          headers: { "content-type": "text/event-stream" },
          body: events.join(""),
        });
        const response = await fetch(`${sluice.url}/v1/provider-a/${project.projectId}/images/generations`, {
          method: "POST",
          headers: {
            authorization: `Bearer ${project.bearer("provider-a")}`,
            "content-type": "application/json",
          },
          body: JSON.stringify({
            model: "gpt-image-1",
            prompt: "two cats",
            n: 2,
            size: "1024x1024",
            quality: "low",
            stream: true,
            partial_images: 1,
          }),
        });
        expect(response.status).toBe(200);
        await response.arrayBuffer();
        const row = await rowOf(response.headers);
        expect(row).toMatchObject({ model: "gpt-image-1", status: 200, outcome: "error", streamed: 1 });
        expect(row.cost_usd).toBe(cost);
      }
    });

    it("prices every image of n > 1 at its size and quality", async () => {
      const { data, response } = await clients.openai.images
        .generate({ model: "gpt-image-1", prompt: "cats", n: 3, size: "1536x1024", quality: "high" })
        .withResponse();
      expect(data.data).toHaveLength(3);
      expect((await rowOf(response.headers)).cost_usd).toBe(0.75);
    });

    it("prices an `auto` (or absent) size and quality at the ones the answer says were used", async () => {
      const { data, response } = await clients.openai.images
        .generate({ model: "gpt-image-1", prompt: "a dog", n: 2, quality: "auto" })
        .withResponse();
      expect(data).toMatchObject({ quality: "medium", size: "1024x1024" });
      expect((await rowOf(response.headers)).cost_usd).toBe(0.084);
      const mini = await clients.openai.images
        .generate({ model: "gpt-image-1-mini", prompt: "a dog", size: "1536x1024" })
        .withResponse();
      expect((await rowOf(mini.response.headers)).cost_usd).toBe(0.02);
    });

    it("prices dall-e-3 `url` and `b64_json` answers, with its default size and quality when none is named", async () => {
      const byUrl = await clients.openai.images
        .generate({ model: "dall-e-3", prompt: "a fox" })
        .withResponse();
      expect(byUrl.data.data?.[0]?.url).toMatch(/^https:\/\/images\.example\.com\//);
      expect(fake.last()?.json).toEqual({ model: "dall-e-3", prompt: "a fox" });
      expect((await rowOf(byUrl.response.headers)).cost_usd).toBe(0.04);
      const inline = await clients.openai.images
        .generate({
          model: "dall-e-3",
          prompt: "a fox",
          quality: "hd",
          size: "1024x1536" as "1024x1024",
          response_format: "b64_json",
        })
        .withResponse();
      expect(inline.data.data?.[0]?.b64_json).toBe(tinyPng.toString("base64"));
      expect((await rowOf(inline.response.headers)).cost_usd).toBe(0.12);
    });

    it("counts the images of an answer of several megabytes, beyond what the usage meter keeps", async () => {
      const answer = JSON.stringify(gptImageAnswer(3, 2 * 1024 * 1024));
      fake.enqueueResponse({ status: 200, body: answer });
      const { data, response } = await clients.openai.images
        .generate({ model: "gpt-image-1", prompt: "three cats", n: 3, size: "1024x1024", quality: "high" })
        .withResponse();
      expect(data.data).toHaveLength(3);
      const row = await rowOf(response.headers);
      expect(row).toMatchObject({ input_tokens: 12, output_tokens: 3 * 4160 });
      expect(row.cost_usd).toBe(0.501);
    });

    it("counts the images of a compressed answer from the decompressed copy", async () => {
      fake.setCompression("gzip");
      const { data, response } = await clients.openai.images
        .generate({ model: "gpt-image-1", prompt: "cats", n: 2, size: "1024x1536", quality: "low" })
        .withResponse();
      expect(data.data).toHaveLength(2);
      expect((await rowOf(response.headers)).cost_usd).toBe(0.032);
    });

    it("records no cost for an error answer", async () => {
      fake.failNext(400);
      const error = await clients.openai.images
        .generate({ model: "gpt-image-1", prompt: "a cat", size: "1024x1024", quality: "low" })
        .catch((caught: { status: number; headers: Headers }) => caught);
      expect(error).toMatchObject({ status: 400 });
      const row = await rowOf((error as { headers: Headers }).headers);
      expect(row).toMatchObject({ status: 400, outcome: "error", cost_usd: null });
    });
  });

  // GPT Image 2.6 Sunburst: text in $5, image in $8, image out $30 per 1M tokens. Gemini Nano Banana
  // 2.1: $1.50 in, $7.50 text out, $30 per 1M generated image tokens.
  describe("image models priced by the token", () => {
    const gptImage2Usage = {
      input_tokens: 1050,
      input_tokens_details: { image_tokens: 1000, text_tokens: 50 },
      output_tokens: 4160,
      output_tokens_details: { image_tokens: 4160, text_tokens: 0 },
      total_tokens: 5210,
    };

    it("prices a GPT Image 2 generation by its tokens, input images at their own price, JSON and streamed", async () => {
      fake.enqueueResponse({
        status: 200,
        body: { ...gptImageAnswer(1, 100), quality: "medium", usage: gptImage2Usage },
      });
      const { data, response } = await clients.openai.images
        .generate({ model: "gpt-image-2.6-sunburst", prompt: "a cat like this one" })
        .withResponse();
      expect(data.data).toHaveLength(1);
      const row = await rowOf(response.headers);
      expect(row).toMatchObject({ model: "gpt-image-2.6-sunburst", input_tokens: 1050, output_tokens: 4160 });
      // 50 text tokens at 5, 1000 image tokens at 8, 4160 image tokens out at 30.
      expect(row.cost_usd).toBe(0.13305);

      const completed = {
        type: "image_generation.completed",
        b64_json: "A".repeat(5_000),
        created_at: 1_763_000_000,
        size: "1024x1024",
        quality: "medium",
        usage: gptImage2Usage,
      };
      fake.enqueueResponse({
        status: 200,
        headers: { "content-type": "text/event-stream" },
        body: `event: image_generation.completed\ndata: ${JSON.stringify(completed)}\n\n`,
      });
      const streamed = await clients.openai.images
        .generate({ model: "gpt-image-2.6-sunburst", prompt: "a cat like this one", stream: true })
        .withResponse();
      for await (const _event of streamed.data);
      expect(await rowOf(streamed.response.headers)).toMatchObject({ streamed: 1, cost_usd: 0.13305 });
    });

    it("prices a GPT Image 2 edit by its tokens, the images it was given at the image input price", async () => {
      fake.enqueueResponse({
        status: 200,
        body: { ...gptImageAnswer(1, 100), quality: "medium", usage: gptImage2Usage },
      });
      const { data, response } = await clients.openai.images
        .edit({
          model: "gpt-image-2.6-sunburst",
          image: await toFile(tinyPng, "cat.png", { type: "image/png" }),
          prompt: "the same cat, in a hat",
        })
        .withResponse();
      expect(data.data).toHaveLength(1);
      expect(fake.last()).toMatchObject({ method: "POST", path: "/a/v1/images/edits" });
      expect(await rowOf(response.headers)).toMatchObject({
        model: "gpt-image-2.6-sunburst",
        input_tokens: 1050,
        cost_usd: 0.13305,
      });
    });

    it("prices a streamed edit (images.edit with stream: true, a form) by its image_edit.completed event's tokens, as the JSON edit", async () => {
      const image = { created_at: 1_763_000_000, size: "1024x1024", quality: "medium", output_format: "png" };
      const partial = {
        type: "image_edit.partial_image",
        b64_json: "AAAA",
        partial_image_index: 0,
        ...image,
      };
      const completed = { type: "image_edit.completed", b64_json: "AAAA", ...image, usage: gptImage2Usage };
      fake.enqueueResponse({
        status: 200,
        headers: { "content-type": "text/event-stream" },
        parts: [
          `event: image_edit.partial_image\ndata: ${JSON.stringify(partial)}\n\n`,
          `event: image_edit.completed\ndata: ${JSON.stringify(completed)}\n\n`,
        ],
      });
      const { data: stream, response } = await clients.openai.images
        .edit({
          model: "gpt-image-2.6-sunburst",
          image: await toFile(tinyPng, "cat.png", { type: "image/png" }),
          prompt: "the same cat, in a hat",
          stream: true,
          partial_images: 1,
        })
        .withResponse();
      const events: Array<{ type: string; usage?: unknown }> = [];
      for await (const event of stream) events.push(event);
      expect(events.map((event) => event.type)).toEqual(["image_edit.partial_image", "image_edit.completed"]);
      expect(events[1]!.usage).toEqual(gptImage2Usage);
      const sent = fake.last()!;
      expect(sent).toMatchObject({ method: "POST", path: "/a/v1/images/edits" });
      expect(sent.headers["content-type"]).toMatch(/^multipart\/form-data; boundary=/);
      expect(sent.body.toString("latin1")).toMatch(/name="stream"\r\n\r\ntrue\r\n/);
      // The same row as the JSON edit's above: the model from the form, the tokens from the event.
      expect(await rowOf(response.headers)).toMatchObject({
        model: "gpt-image-2.6-sunburst",
        status: 200,
        outcome: "ok",
        streamed: 1,
        input_tokens: 1050,
        output_tokens: 4160,
        cost_usd: 0.13305,
      });
    });

    it("prices an edit at the model its form names, as the provider reads the form: not one a later field's text spells", async () => {
      // A small form (kept until the answer ends) and one over 64 KiB (read as it is sent, then let go).
      for (const image of [tinyPng, Buffer.concat([tinyPng, Buffer.alloc(100_000)])]) {
        fake.enqueueResponse({
          status: 200,
          body: { ...gptImageAnswer(1, 100), quality: "medium", usage: gptImage2Usage },
        });
        // The SDK writes the fields in the order given: the prompt, after the model, spells a model part.
        const { response } = await clients.openai.images
          .edit({
            model: "gpt-image-2.6-sunburst",
            image: await toFile(image, "cat.png", { type: "image/png" }),
            prompt: 'a hat\r\nContent-Disposition: form-data; name="model"\r\n\r\ngpt-4.1-nano',
          })
          .withResponse();
        expect(fake.last()!.headers["content-type"]).toMatch(/^multipart\/form-data; boundary=/);
        expect(await rowOf(response.headers)).toMatchObject({
          model: "gpt-image-2.6-sunburst",
          input_tokens: 1050,
          cost_usd: 0.13305,
        });
      }
    });

    it("prices an edit at the model its form names whatever the image's file name holds (`;name=model;` is the file name's text)", async () => {
      fake.enqueueResponse({
        status: 200,
        body: { ...gptImageAnswer(1, 100), quality: "medium", usage: gptImage2Usage },
      });
      // The file name is often the app user's; the SDK's form quotes it, semicolons and all.
      const { response } = await clients.openai.images
        .edit({
          model: "gpt-image-2.6-sunburst",
          image: await toFile(tinyPng, "cat;name=model;.png", { type: "image/png" }),
          prompt: "the same cat, in a hat",
        })
        .withResponse();
      expect(fake.last()!.body.toString("latin1")).toContain('name="image"; filename="cat;name=model;.png"');
      expect(await rowOf(response.headers)).toMatchObject({
        model: "gpt-image-2.6-sunburst",
        input_tokens: 1050,
        cost_usd: 0.13305,
      });
    });

    it("prices a Gemini image model's generated images above its text output, JSON and streamed (@google/genai)", async () => {
      const usageMetadata = {
        promptTokenCount: 20,
        candidatesTokenCount: 1120,
        thoughtsTokenCount: 200,
        totalTokenCount: 1340,
        promptTokensDetails: [{ modality: "TEXT", tokenCount: 20 }],
        candidatesTokensDetails: [{ modality: "IMAGE", tokenCount: 1120 }],
      };
      const answer = providerC.imageResponse("gemini-nano-banana-2.1", usageMetadata);
      fake.enqueueResponse({ status: 200, body: answer });
      const generated = await clients.google.models.generateContent({
        model: "gemini-nano-banana-2.1",
        contents: "a lighthouse",
        config: { responseModalities: ["IMAGE"] },
      });
      expect(generated.candidates?.[0]?.content?.parts?.[0]?.inlineData?.mimeType).toBe("image/png");
      const row = await rowOf(generated.sdkHttpResponse?.headers);
      expect(row).toMatchObject({ model: "gemini-nano-banana-2.1", input_tokens: 20, output_tokens: 1320 });
      // 20 in at 1.50, 1120 image tokens at 30, 200 thought tokens at 7.50.
      expect(row.cost_usd).toBe(0.03513);

      fake.enqueueResponse({
        status: 200,
        headers: { "content-type": "text/event-stream" },
        body: `data: ${JSON.stringify(answer)}\r\n\r\n`,
      });
      const stream = await clients.google.models.generateContentStream({
        model: "gemini-nano-banana-2.1",
        contents: "a lighthouse",
        config: { responseModalities: ["IMAGE"] },
      });
      let headers: Headers | undefined;
      for await (const chunk of stream) headers ??= chunk.sdkHttpResponse?.headers as Headers | undefined;
      expect(await rowOf(headers)).toMatchObject({ streamed: 1, output_tokens: 1320, cost_usd: 0.03513 });
    });
  });

  // `models.generateImages` calls Imagen's `predict` on the Gemini API in @google/genai 1.x; from 2.0
  // on the SDK refuses it there (Vertex AI only), but 1.x apps, `@ai-sdk/google` and REST still call it.
  describe("provider C models.generateImages (@google/genai 1.x)", () => {
    it("records Imagen's price per image in the predictions", async () => {
      const answer = await googleV1.models.generateImages({
        model: "imagen-4.0-generate-001",
        prompt: "a lighthouse",
        config: { numberOfImages: 2 },
      });
      expect(answer.generatedImages).toHaveLength(2);
      expect(fake.last()?.path).toBe("/c/v1beta/models/imagen-4.0-generate-001:predict");
      const row = await rowOf(answer.sdkHttpResponse?.headers);
      expect(row).toMatchObject({ model: "imagen-4.0-generate-001", status: 200 });
      expect(row.cost_usd).toBe(0.08);
    });

    it("prices the images the answer holds when the request does not say how many", async () => {
      const answer = await googleV1.models.generateImages({
        model: "imagen-4.0-fast-generate-001",
        prompt: "a lighthouse",
      });
      expect(answer.generatedImages).toHaveLength(4);
      expect((await rowOf(answer.sdkHttpResponse?.headers)).cost_usd).toBe(0.08);
    });

    it("does not price an image the safety filter withheld, nor the prompt's safety attributes", async () => {
      fake.enqueueResponse({
        status: 200,
        body: {
          predictions: [
            { bytesBase64Encoded: tinyPng.toString("base64"), mimeType: "image/png" },
            { raiFilteredReason: "Your current safety filter threshold filtered out 1 generated image." },
            {
              safetyAttributes: { categories: ["Violence"], scores: [0.1] },
              contentType: "Positive Prompt",
            },
          ],
        },
      });
      const answer = await googleV1.models.generateImages({
        model: "imagen-4.0-generate-001",
        prompt: "a lighthouse",
        config: { numberOfImages: 2, includeRaiReason: true, includeSafetyAttributes: true },
      });
      expect(answer.generatedImages?.filter((image) => image.image?.imageBytes)).toHaveLength(1);
      expect((await rowOf(answer.sdkHttpResponse?.headers)).cost_usd).toBe(0.04);
    });

    it("records no cost for an error answer, and an unknown one for a model without a price", async () => {
      fake.failNext(400);
      await expect(
        googleV1.models.generateImages({ model: "imagen-4.0-generate-001", prompt: "a lighthouse" }),
      ).rejects.toThrow();
      await sluice.gateway.flushUsage();
      const rows = await sluice.gateway.database.db
        .selectFrom("usage_records")
        .selectAll()
        .where("project_id", "=", project.projectId)
        .where("status", "=", 400)
        .where("provider", "=", "provider-c")
        .execute();
      expect(rows).toHaveLength(1);
      expect(rows[0]?.cost_usd).toBeNull();
      const ultra = await googleV1.models.generateImages({
        model: "imagen-4.0-ultra-generate-001",
        prompt: "a lighthouse",
        config: { numberOfImages: 1 },
      });
      expect((await rowOf(ultra.sdkHttpResponse?.headers)).cost_usd).toBeNull();
    });
  });

  // The answer names no model: the request's is read as the provider reads it, the whole JSON.
  // Before, a quick read of the body's first 64 KiB missed it after a long prompt (openai-python
  // writes `prompt` first) or padding, missed an escaped key and took the first of two.
  it.each([
    [
      "after a 25,000-character prompt",
      JSON.stringify({
        prompt: "猫".repeat(25_000),
        model: "gpt-image-1",
        quality: "low",
        size: "1024x1024",
      }),
      0.011,
    ],
    [
      "after 70,000 spaces",
      `{"prompt":"a cat",${" ".repeat(70_000)}"model":"gpt-image-1","n":4,"quality":"high","size":"1536x1024"}`,
      1,
    ],
    [
      "named twice (the last counts)",
      '{"model":"gpt-image-1-mini","prompt":"a cat","n":2,"quality":"high","size":"1536x1024","model":"gpt-image-1"}',
      0.5,
    ],
    [
      "under an escaped key",
      '{"prompt":"a cat","mod\\u0065l":"gpt-image-1","quality":"high","size":"1024x1024"}',
      0.167,
    ],
  ])("prices a proxied image generation whose model is %s", async (_where, body, cost) => {
    const response = await fetch(`${sluice.url}/v1/provider-a/${project.projectId}/images/generations`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${project.bearer("provider-a")}`,
        "content-type": "application/json",
      },
      body,
    });
    expect(response.status).toBe(200);
    await response.arrayBuffer();
    expect(fake.last()?.json).toMatchObject({ model: "gpt-image-1" });
    expect(await rowOf(response.headers)).toMatchObject({ model: "gpt-image-1", cost_usd: cost });
  });

  it("counts images generated through the proxy against the monthly spend cap", async () => {
    // 0.25 each: the first fits the cap (a price that would pass it is refused before it runs), and
    // takes the month to it.
    const capped = await createTestProject(sluice.gateway, { monthlySpendCapUsd: 0.25 });
    const { openai } = sdkClients(sluice, capped);
    const generate = () =>
      openai.images.generate({ model: "gpt-image-1", prompt: "a cat", size: "1536x1024", quality: "high" });
    expect((await generate()).data).toHaveLength(1);
    await expect(generate()).rejects.toMatchObject({ status: 403 });
    expect(fake.requests).toHaveLength(1);
  });
});
