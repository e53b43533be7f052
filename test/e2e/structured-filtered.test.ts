import { describe, expect, it } from "vitest";
import { providerA } from "../fakes/fake-upstream-responses.js";
import { structuredOnEachProvider } from "../support/structured-on-each-provider.js";
import { titleSchema as schema, usageRowOf } from "../support/test-gateway.js";

/** Each provider's answer when its filter stopped the output, as its API sends one (recorded shapes). */
const filtered = {
  "provider-a": {
    id: "chatcmpl-filtered",
    object: "chat.completion",
    created: 1_700_000_000,
    model: "gpt-5.4-mini",
    choices: [{ index: 0, message: { role: "assistant", content: null }, finish_reason: "content_filter" }],
    usage: { prompt_tokens: 11, completion_tokens: 0, total_tokens: 11 },
  },
  "provider-b": {
    id: "msg_refused",
    type: "message",
    role: "assistant",
    model: "claude-sonnet-5-5",
    content: [],
    stop_reason: "refusal",
    stop_sequence: null,
    usage: { input_tokens: 11, output_tokens: 0 },
  },
  "provider-c": {
    candidates: [{ finishReason: "SAFETY", index: 0, safetyRatings: [] }],
    usageMetadata: { promptTokenCount: 11, totalTokenCount: 11 },
    modelVersion: "gemini-3.5-flash-lite",
  },
} as const;

/** Provider C's answer to a prompt its filter blocked: no candidates at all. */
const promptBlocked = {
  promptFeedback: { blockReason: "PROHIBITED_CONTENT" },
  usageMetadata: { promptTokenCount: 11, totalTokenCount: 11 },
  modelVersion: "gemini-3.5-flash-lite",
};

/**
 * Provider A's structured outputs when the model refuses: the explanation in `refusal`, no
 * `content`, and the finish reason `stop` (recorded shape, OpenAI's "Refusals with Structured Outputs").
 */
const providerARefusal = {
  id: "chatcmpl-refused",
  object: "chat.completion",
  created: 1_700_000_000,
  model: "gpt-5.4-mini",
  choices: [
    {
      index: 0,
      message: { role: "assistant", content: null, refusal: "I'm sorry, I cannot assist with that request." },
      logprobs: null,
      finish_reason: "stop",
    },
  ],
  usage: { prompt_tokens: 11, completion_tokens: 10, total_tokens: 21 },
};

describe("a structured analysis the provider's content filter stopped", () => {
  const on = structuredOnEachProvider(schema, { title: "repaired" });
  const post = on.postText;

  it.each([
    ["provider-a", filtered["provider-a"], "contentPolicy"],
    ["provider-a", providerARefusal, "modelRefused"],
    ["provider-b", filtered["provider-b"], "modelRefused"],
    ["provider-c", filtered["provider-c"], "contentPolicy"],
    ["provider-c", promptBlocked, "contentPolicy"],
  ] as const)("answers 422 on %s (%s), not repaired, its tokens recorded", async (provider, body, reason) => {
    // A repair would be answered with a valid object (and counted).
    on.fake.enqueueResponse({ status: 200, body });
    const response = await post(provider);
    expect(response.status).toBe(422);
    const { error } = (await response.json()) as {
      error: { code: string; message: string; details: Record<string, unknown> };
    };
    expect(error.code).toBe("VALIDATION_ERROR");
    expect(error.message).toBe(
      reason === "modelRefused"
        ? "The model refused to analyse this input; change the input rather than retry it"
        : "The provider's content filter refused this input or the model's answer to it; change the input rather than retry it",
    );
    expect(error.details).toMatchObject({ reason, providerStatus: 200, retryable: false });
    // The provider's own words (provider A's refusal text) are not passed on.
    expect(JSON.stringify(error)).not.toContain("sorry");
    // The same conversation is refused again (provider B documents it): one billed call, not two.
    expect(on.fake.requests).toHaveLength(1);
    const row = await usageRowOf(on.sluice.gateway, response);
    expect(row).toMatchObject({
      status: 422,
      outcome: "error",
      error_code: "VALIDATION_ERROR",
      input_tokens: 11,
    });
  });

  it("answers 422 when the repair's answer is refused, with the tokens of both attempts", async () => {
    const usage = { input: 11, output: 7, cached: 0, reasoning: 0 };
    on.fake.enqueueResponse({ status: 200, body: providerA.chat("gpt-5.4-mini", '{"other":1}', usage) });
    on.fake.enqueueResponse({ status: 200, body: providerARefusal });
    const response = await post("provider-a");
    expect(response.status).toBe(422);
    const { error } = (await response.json()) as { error: { details: unknown } };
    expect(error.details).toMatchObject({
      reason: "modelRefused",
      usage: { inputTokens: 22, outputTokens: 17 },
    });
    expect(on.fake.requests).toHaveLength(2);
    expect(await usageRowOf(on.sluice.gateway, response)).toMatchObject({ status: 422, input_tokens: 22 });
  });

  it("answers the repair's 400 refusal with the first attempt's tokens in its details, as its row", async () => {
    const usage = { input: 11, output: 7, cached: 0, reasoning: 0 };
    on.fake.enqueueResponse({ status: 200, body: providerA.chat("gpt-5.4-mini", '{"other":1}', usage) });
    on.fake.enqueueResponse({
      status: 400,
      body: {
        error: {
          message: "This model's maximum context length is 128000 tokens.",
          type: "invalid_request_error",
          param: "messages",
          code: "context_length_exceeded",
        },
      },
    });
    const response = await post("provider-a");
    expect(response.status).toBe(422);
    const { error } = (await response.json()) as { error: { code: string; details: unknown } };
    expect(error.code).toBe("VALIDATION_ERROR");
    // The refused repair was not billed: the sum of both attempts is the first attempt's.
    expect(error.details).toEqual({
      reason: "inputTooLong",
      providerStatus: 400,
      retryable: false,
      model: "gpt-5.4-mini",
      usage: { inputTokens: 11, outputTokens: 7, cachedInputTokens: 0, reasoningTokens: 0 },
    });
    expect(on.fake.requests).toHaveLength(2);
    expect(await usageRowOf(on.sluice.gateway, response)).toMatchObject({
      status: 422,
      input_tokens: 11,
      output_tokens: 7,
    });
  });
});
