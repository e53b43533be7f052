import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { providerC, tinyPng } from "../fakes/fake-upstream-responses.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowOf,
} from "../support/test-gateway.js";

/**
 * Provider A's images API refusing a prompt (recorded shapes): DALL·E's `content_policy_violation`,
 * the GPT Image models' `moderation_blocked` (whose message names a request id and the categories).
 */
const dallEContentPolicy = {
  error: {
    code: "content_policy_violation",
    message:
      "Your request was rejected as a result of our safety system. Your prompt may contain text that is not allowed by our safety system.",
    param: null,
    type: "invalid_request_error",
  },
};
const gptImageModerationBlocked = {
  error: {
    message:
      "Your request was rejected by the safety system. If you believe this is an error, contact us at help.openai.com and include the request ID req_4f1e2d3c. safety_violations=[violence].",
    type: "image_generation_user_error",
    param: null,
    code: "moderation_blocked",
  },
};
/**
 * Provider A's older answer for a prompt its safety system refused: no code, only the words
 * (recorded on the images API, community.openai.com/t/232241, with the trailing space).
 */
const legacySafetyRefusal = {
  error: {
    code: null,
    message: "Your request was rejected as a result of our safety system. ",
    param: null,
    type: "invalid_request_error",
  },
};
/** Imagen's pre-filter refusing a prompt: a 400 (recorded in googleapis/js-genai#321). */
const imagenPromptRefused = {
  error: {
    code: 400,
    message:
      "Image generation failed with the following error: The prompt could not be submitted. This prompt contains sensitive words that violate Google's Responsible AI practices. Try rephrasing the prompt. If you think this was an error, send feedback. Support codes: 42876398",
    status: "INVALID_ARGUMENT",
  },
};
/** Imagen's answer when its filter withheld every image: predictions with only a reason. */
const imagenAllFiltered = {
  predictions: [
    {
      raiFilteredReason:
        "Unable to show generated images. All images were filtered out because they violated Vertex AI's usage guidelines. You will not be charged for blocked images. Try rephrasing the prompt. If you think this was an error, send feedback. Support codes: 29310472",
    },
  ],
};
/** A Gemini image model's answers when its filter stopped the image, or blocked the prompt. */
const geminiImageSafety = {
  candidates: [{ finishReason: "IMAGE_SAFETY", index: 0 }],
  usageMetadata: { promptTokenCount: 20, totalTokenCount: 20 },
  modelVersion: "gemini-nano-banana-2.1",
};
/**
 * A Gemini image model's answer whose image the filter stopped with one of its image reasons
 * (recorded, IMAGE_PROHIBITED_CONTENT: BerriAI/litellm#20357; the AI SDK calls them ordinary finishes).
 */
const geminiImageFinish = (finishReason: string) => ({
  candidates: [
    {
      content: { role: "model" },
      finishReason,
      finishMessage:
        "The model output could not be generated. This output contains sensitive words that violate Google's Responsible AI practices. If you think this was an error, send feedback. Support code: 42876398.",
      index: 0,
    },
  ],
  usageMetadata: { promptTokenCount: 20, totalTokenCount: 20 },
  modelVersion: "gemini-nano-banana-2.1",
});
const geminiPromptBlocked = {
  promptFeedback: { blockReason: "PROHIBITED_CONTENT" },
  usageMetadata: { promptTokenCount: 20, totalTokenCount: 20 },
  modelVersion: "gemini-nano-banana-2.1",
};

const refusedMessage =
  "The provider's content filter refused this prompt or the images generated for it; change the prompt rather than retry it";

describe("an image generation the provider refuses for its prompt", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let a: TestProject;
  let c: TestProject;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway({
      providerABaseUrl: `${fake.url}/a/v1`,
      providerCBaseUrl: `${fake.url}/c/v1beta`,
    });
    a = await createTestProject(sluice.gateway, { provider: "provider-a" });
    c = await createTestProject(sluice.gateway, { provider: "provider-c" });
  });
  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });
  beforeEach(() => fake.clear());

  const generate = (project: TestProject, body: unknown) =>
    fetch(`${sluice.url}/v1/image/${project.projectId}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${project.bearer(project === a ? "provider-a" : "provider-c")}`,
        "content-type": "application/json",
      },
      body: JSON.stringify(body),
    });

  it.each([
    ["provider A's content_policy_violation", "a", "dall-e-3", 400, dallEContentPolicy],
    ["provider A's moderation_blocked", "a", "gpt-image-2.6-sunburst", 400, gptImageModerationBlocked],
    ["provider A's older safety refusal, without a code", "a", "dall-e-3", 400, legacySafetyRefusal],
    // A model its provider has shut down: the refusal is not put on the model.
    [
      "provider A's moderation_blocked on a model shut down",
      "a",
      "gpt-image-1",
      400,
      gptImageModerationBlocked,
    ],
    ["Imagen's refused prompt", "c", "imagen-4.0-generate-001", 400, imagenPromptRefused],
    ["Imagen's filtered images", "c", "imagen-4.0-generate-001", 200, imagenAllFiltered],
    ["a Gemini image model's IMAGE_SAFETY", "c", "gemini-nano-banana-2.1", 200, geminiImageSafety],
    ["a Gemini image model's blocked prompt", "c", "gemini-nano-banana-2.1", 200, geminiPromptBlocked],
    [
      "a Gemini image model's IMAGE_PROHIBITED_CONTENT",
      "c",
      "gemini-nano-banana-2.1",
      200,
      geminiImageFinish("IMAGE_PROHIBITED_CONTENT"),
    ],
    [
      "a Gemini image model's IMAGE_RECITATION",
      "c",
      "gemini-nano-banana-2.1",
      200,
      geminiImageFinish("IMAGE_RECITATION"),
    ],
  ] as const)(
    "answers 422 contentPolicy for %s, without the provider's words",
    async (_, which, model, status, body) => {
      fake.enqueueResponse({ status, body });
      const response = await generate(which === "a" ? a : c, { prompt: "x", model, n: 1 });
      expect(response.status).toBe(422);
      const { error } = (await response.json()) as {
        error: { code: string; message: string; details: unknown };
      };
      expect(error.code).toBe("VALIDATION_ERROR");
      expect(error.message).toBe(refusedMessage);
      expect(error.details).toEqual({ reason: "contentPolicy", providerStatus: status, retryable: false });
      expect(JSON.stringify(error)).not.toMatch(/safety system|violence|req_4f1e|Support codes/);
      expect(fake.requests).toHaveLength(1);
      expect(await usageRowOf(sluice.gateway, response)).toMatchObject({
        status: 422,
        outcome: "error",
        error_code: "VALIDATION_ERROR",
        model,
      });
    },
  );

  it("records the tokens a Gemini image model's refused call was billed for", async () => {
    fake.enqueueResponse({ status: 200, body: geminiImageSafety });
    const response = await generate(c, { prompt: "x", model: "gemini-nano-banana-2.1" });
    expect(response.status).toBe(422);
    expect(await usageRowOf(sluice.gateway, response)).toMatchObject({ input_tokens: 20, output_tokens: 0 });
  });

  it.each([
    // The safety system's sentence, but another type: not the recorded shape.
    [{ error: { ...legacySafetyRefusal.error, type: "server_error" } }],
    // The recorded type and no code, but other words.
    [{ error: { code: null, message: "Invalid size: 5x5", param: "size", type: "invalid_request_error" } }],
    // A code other than the recorded ones, with the safety system's words.
    [{ error: { ...legacySafetyRefusal.error, code: "invalid_value" } }],
  ])("keeps provider A's other 400 (%j) the provider's failure (502)", async (body) => {
    fake.enqueueResponse({ status: 400, body });
    const response = await generate(a, { prompt: "x", model: "dall-e-3" });
    expect(response.status).toBe(502);
    expect(((await response.json()) as { error: { code: string } }).error.code).toBe("PROVIDER_ERROR");
  });

  it("answers 422 modelRefused when a Gemini image model answers with no image (NO_IMAGE)", async () => {
    fake.enqueueResponse({ status: 200, body: geminiImageFinish("NO_IMAGE") });
    const response = await generate(c, { prompt: "x", model: "gemini-nano-banana-2.1" });
    expect(response.status).toBe(422);
    const { error } = (await response.json()) as {
      error: { code: string; message: string; details: unknown };
    };
    expect(error.code).toBe("VALIDATION_ERROR");
    expect(error.message).toBe(
      "The model answered this prompt without an image; change the prompt (ask plainly for an image) rather than retry it",
    );
    expect(error.details).toEqual({ reason: "modelRefused", providerStatus: 200, retryable: false });
    expect(JSON.stringify(error)).not.toMatch(/Support code/);
    expect(await usageRowOf(sluice.gateway, response)).toMatchObject({ status: 422, input_tokens: 20 });
  });

  it("keeps a Gemini image model's IMAGE_OTHER the provider's failure (502): nothing names the prompt", async () => {
    fake.enqueueResponse({ status: 200, body: geminiImageFinish("IMAGE_OTHER") });
    const response = await generate(c, { prompt: "x", model: "gemini-nano-banana-2.1" });
    expect(response.status).toBe(502);
    expect(((await response.json()) as { error: { code: string } }).error.code).toBe("PROVIDER_ERROR");
  });

  it("keeps an answer without images and without a filter's word the provider's failure (502)", async () => {
    fake.enqueueResponse({ status: 200, body: { predictions: [] } });
    const response = await generate(c, { prompt: "x", model: "imagen-4.0-generate-001" });
    expect(response.status).toBe(502);
    expect(((await response.json()) as { error: { code: string } }).error.code).toBe("PROVIDER_ERROR");
  });

  describe("when the filter withholds only some of the images asked for", () => {
    const image = { bytesBase64Encoded: tinyPng.toString("base64"), mimeType: "image/png" };
    const warningsOf = async (response: Response) => {
      expect(response.status).toBe(200);
      return (await response.json()) as { images: unknown[]; warnings?: string[] };
    };

    it.each([
      ["a raiFilteredReason", [image, image, imagenAllFiltered.predictions[0]]],
      // Imagen leaves filtered images out when it is not asked for their reason.
      ["fewer predictions than asked", [image, image]],
    ])("warns when Imagen answers %s", async (_, predictions) => {
      fake.enqueueResponse({ status: 200, body: { predictions } });
      const answer = await warningsOf(
        await generate(c, { prompt: "x", model: "imagen-4.0-generate-001", n: 3 }),
      );
      expect(answer.images).toHaveLength(2);
      expect(answer.warnings).toEqual(["1 of 3 images was withheld by the provider's safety filter"]);
    });

    it.each([
      ["IMAGE_SAFETY", geminiImageSafety, "withheld by the provider's safety filter"],
      [
        "IMAGE_PROHIBITED_CONTENT",
        geminiImageFinish("IMAGE_PROHIBITED_CONTENT"),
        "withheld by the provider's safety filter",
      ],
      ["NO_IMAGE", geminiImageFinish("NO_IMAGE"), "not generated by the provider"],
    ])("warns when one of a Gemini image model's calls answers %s", async (_, refused, what) => {
      fake.enqueueResponse({ status: 200, body: providerC.imageResponse("gemini-nano-banana-2.1", {}) });
      fake.enqueueResponse({ status: 200, body: refused });
      fake.enqueueResponse({ status: 200, body: providerC.imageResponse("gemini-nano-banana-2.1", {}) });
      const answer = await warningsOf(
        await generate(c, { prompt: "x", model: "gemini-nano-banana-2.1", n: 3 }),
      );
      expect(answer.images).toHaveLength(2);
      expect(answer.warnings).toEqual([`1 of 3 images was ${what}`]);
    });

    it.each([
      ["moderation_blocked", "gpt-image-1", gptImageModerationBlocked, 0.022],
      ["content_policy_violation", "dall-e-3", dallEContentPolicy, 0.08],
    ])(
      "answers the images that came, with a warning, when one of provider A's calls is refused (%s)",
      async (_, model, refusal, cost) => {
        const png = tinyPng.toString("base64");
        const answered = {
          status: 200,
          body: { created: 1, data: [{ b64_json: png, revised_prompt: "revised" }] },
        };
        fake.enqueueResponse(answered);
        fake.enqueueResponse({ status: 400, body: refusal });
        fake.enqueueResponse(answered);
        const response = await generate(a, {
          prompt: "x",
          model,
          n: 3,
          size: "1024x1024",
          ...(model === "gpt-image-1"
            ? { maxImagesPerCall: 1, providerOptions: { "provider-a": { quality: "low" } } }
            : {}),
        });
        const answer = await warningsOf(response);
        expect(fake.requests).toHaveLength(3);
        expect(answer.images).toHaveLength(2);
        expect(answer.warnings).toEqual(["1 of 3 images was withheld by the provider's safety filter"]);
        // The two images that came were billed; the refused call was not.
        expect(await usageRowOf(sluice.gateway, response)).toMatchObject({ status: 200, cost_usd: cost });
      },
    );

    it("answers 422 contentPolicy, with the refusal's status, when every call is refused", async () => {
      for (let index = 0; index < 3; index++)
        fake.enqueueResponse({ status: 400, body: gptImageModerationBlocked });
      const response = await generate(a, { prompt: "x", model: "gpt-image-1", n: 3, maxImagesPerCall: 1 });
      expect(response.status).toBe(422);
      expect(((await response.json()) as { error: { details: unknown } }).error.details).toEqual({
        reason: "contentPolicy",
        providerStatus: 400,
        retryable: false,
      });
      expect(fake.requests).toHaveLength(3);
      expect(await usageRowOf(sluice.gateway, response)).toMatchObject({ status: 422, cost_usd: null });
    });

    it("says nothing when every image came", async () => {
      fake.enqueueResponse({ status: 200, body: { predictions: [image, image] } });
      const answer = await warningsOf(
        await generate(c, { prompt: "x", model: "imagen-4.0-generate-001", n: 2 }),
      );
      expect(answer.images).toHaveLength(2);
      expect(answer.warnings).toBeUndefined();
    });
  });
});
