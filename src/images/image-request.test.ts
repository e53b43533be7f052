import { describe, expect, it } from "vitest";
import { GatewayError } from "../errors.js";
import { parseImageRequest } from "./image-request.js";

function refusal(providerOptions: unknown): GatewayError {
  try {
    parseImageRequest({ prompt: "x", providerOptions });
  } catch (error) {
    if (error instanceof GatewayError) return error;
    throw error;
  }
  throw new Error("the request was accepted");
}

describe("image request provider options", () => {
  it.each([
    ["provider-a", "style", ["vivid", "natural"]],
    ["provider-a", "quality", ["low", "medium", "high", "auto", "standard", "hd"]],
    ["provider-c", "safetyFilterLevel", ["block_most", "block_fewest", "block_low_and_above", "block_none"]],
    ["provider-c", "personGeneration", ["dont_allow", "allow_adult", "allow_all"]],
  ])("keeps every documented %s %s value", (provider, name, values) => {
    for (const value of values) {
      const request = parseImageRequest({ prompt: "x", providerOptions: { [provider]: { [name]: value } } });
      expect(request.providerOptions).toEqual({ [provider]: { [name]: value } });
      expect(request.warnings).toEqual([]);
    }
  });

  it.each([
    ["provider-a", "quality", "ultra"],
    ["provider-a", "style", "bold"],
    ["provider-c", "safetyFilterLevel", "strict"],
    ["provider-c", "personGeneration", "hd"],
  ])("refuses %s %s %j with 422 naming the option and its values", (provider, name, value) => {
    const error = refusal({ [provider]: { [name]: value } });
    expect(error.code).toBe("VALIDATION_ERROR");
    expect(error.message).toContain(`providerOptions.${provider}.${name}`);
    expect(error.details).toEqual({
      option: `providerOptions.${provider}.${name}`,
      allowed: expect.arrayContaining([expect.any(String)]),
    });
  });

  it("refuses a value that is not a string with 400", () => {
    expect(refusal({ "provider-a": { quality: 1 } }).code).toBe("BAD_REQUEST");
  });

  it("ignores unknown options and providers with a warning, inherited property names included", () => {
    const request = parseImageRequest({
      prompt: "x",
      providerOptions: { "provider-a": { constructor: "x", quality: "low" }, "provider-b": { x: 1 } },
    });
    expect(request.providerOptions).toEqual({ "provider-a": { quality: "low" } });
    expect(request.warnings).toEqual([
      "providerOptions.provider-a.constructor is not supported and was ignored",
      "providerOptions.provider-b is not supported and was ignored",
    ]);
  });
});
