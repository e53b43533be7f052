import { describe, expect, it } from "vitest";
import { structuredOnEachProvider } from "../support/structured-on-each-provider.js";
import { titleSchema as schema, usageRowOf } from "../support/test-gateway.js";

type Provider = "provider-a" | "provider-b" | "provider-c";

/**
 * Each provider's 400 for an input longer than the model takes, as its API sends it (recorded
 * shapes: OpenAI's `context_length_exceeded`; Anthropic's "prompt is too long: N tokens > M maximum"
 * and its PDF page limit of a 200k-context model; Gemini's "The input token count (N) exceeds the
 * maximum number of tokens allowed (M).").
 */
const tooLong: Array<[Provider, unknown]> = [
  [
    "provider-a",
    {
      error: {
        message:
          "This model's maximum context length is 128000 tokens. However, your messages resulted in 5242881 tokens. Please reduce the length of the messages.",
        type: "invalid_request_error",
        param: "messages",
        code: "context_length_exceeded",
      },
    },
  ],
  [
    "provider-b",
    {
      type: "error",
      error: {
        type: "invalid_request_error",
        message: "prompt is too long: 5242881 tokens > 200000 maximum",
      },
      request_id: "req_011CVjxiYzEFcAQC4Fk87zw2",
    },
  ],
  [
    "provider-b",
    {
      type: "error",
      error: {
        type: "invalid_request_error",
        message:
          "messages.0.content.1.document.source.base64.data: A maximum of 100 PDF pages may be provided.",
      },
      request_id: "req_011CVjxiYzEFcAQC4Fk87zw3",
    },
  ],
  [
    "provider-c",
    {
      error: {
        code: 400,
        message: "The input token count (5242881) exceeds the maximum number of tokens allowed (1048576).",
        status: "INVALID_ARGUMENT",
      },
    },
  ],
];

describe("a structured analysis the provider refuses for its input", () => {
  const on = structuredOnEachProvider(schema);
  const post = on.postText;

  it.each(tooLong)(
    "answers 422 inputTooLong on %s's 400 for a too long input, without its body",
    async (provider, body) => {
      on.fake.enqueueResponse({ status: 400, body });
      const response = await post(provider);
      expect(response.status).toBe(422);
      const { error } = (await response.json()) as {
        error: { code: string; message: string; details: unknown };
      };
      expect(error.code).toBe("VALIDATION_ERROR");
      expect(error.message).toBe(
        "The input is longer than the model takes (its context window, or its page limit for a PDF); send a shorter input rather than retry it",
      );
      expect(JSON.stringify(error)).not.toMatch(/5242881|req_011|maximum/);
      expect(on.fake.requests).toHaveLength(1);
      const row = await usageRowOf(on.sluice.gateway, response);
      expect(row).toMatchObject({
        status: 422,
        outcome: "error",
        error_code: "VALIDATION_ERROR",
        input_tokens: null,
        output_tokens: null,
      });
      // The model and usage as the row records them (the refused call was not billed: no tokens
      // known), as a refusal on the repair or inside an answer gives them.
      expect(row.model).toEqual(expect.any(String));
      expect(error.details).toEqual({
        reason: "inputTooLong",
        providerStatus: 400,
        retryable: false,
        model: row.model,
        usage: { inputTokens: null, outputTokens: null, cachedInputTokens: null, reasoningTokens: null },
      });
    },
  );

  it("keeps another 400 of the provider a 502: not known to be the input's fault", async () => {
    on.fake.enqueueResponse({
      status: 400,
      body: {
        error: {
          message: "Invalid value for 'response_format'",
          type: "invalid_request_error",
          param: "response_format",
          code: "invalid_value",
        },
      },
    });
    const response = await post("provider-a");
    expect(response.status).toBe(502);
    const { error } = (await response.json()) as { error: { code: string; details: unknown } };
    expect(error).toMatchObject({
      code: "PROVIDER_ERROR",
      details: { providerStatus: 400, retryable: false },
    });
  });
});
