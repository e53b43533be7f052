import { describe, expect, it } from "vitest";
import { refusalOfFailedCall } from "./provider-refusal.js";

describe("refusalOfFailedCall", () => {
  const tooLong = { error: { message: "x", type: "invalid_request_error", code: "context_length_exceeded" } };

  it("reads the provider's body when the AI SDK parsed none (data undefined)", () => {
    const responseBody = JSON.stringify(tooLong);
    expect(refusalOfFailedCall("provider-a", { statusCode: 400, responseBody })).toBe("inputTooLong");
    const gemini = {
      error: {
        code: 400,
        status: "INVALID_ARGUMENT",
        message: "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
      },
    };
    expect(refusalOfFailedCall("provider-c", { statusCode: 400, responseBody: JSON.stringify(gemini) })).toBe(
      "inputTooLong",
    );
  });

  it("takes only a 400: the same body on another status stays the provider's failure", () => {
    for (const statusCode of [401, 413, 429, 500, 503])
      expect(refusalOfFailedCall("provider-a", { statusCode, data: tooLong })).toBeNull();
    expect(refusalOfFailedCall("provider-a", { data: tooLong })).toBeNull();
  });

  it("does not parse a body over 64 KiB", () => {
    const padded = JSON.stringify({ ...tooLong, padding: "x".repeat(70_000) });
    expect(refusalOfFailedCall("provider-a", { statusCode: 400, responseBody: padded })).toBeNull();
  });
});
