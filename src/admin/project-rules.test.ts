import { describe, expect, it } from "vitest";
import { GatewayError } from "../errors.js";
import { applyChanges, blankProject, checkNewProject, notSealed } from "./project-rules.js";
import { sameName } from "./project-values.js";

/** An object of `count` required properties that may be null: provider B compiles at most 16. */
function unions(count: number): Record<string, unknown> {
  const names = Array.from({ length: count }, (_, index) => `field${index}`);
  return {
    type: "object",
    properties: Object.fromEntries(names.map((name) => [name, { type: "string", nullable: true }])),
    required: names,
  };
}

function refusal(check: () => unknown): GatewayError {
  try {
    check();
  } catch (error) {
    if (error instanceof GatewayError) return error;
    throw error;
  }
  throw new Error("the check passed");
}

// The CLI and the projects file run checkNewProject before anything is opened; the admin API runs
// the same rules (applyChanges) on a create or an update.
describe("an output schema checked for each structured route's model", () => {
  it("refuses a schema that only the model /v1/pdf sends cannot take, naming the route", () => {
    // Claude 3.5 Haiku reads no PDFs, so /v1/pdf sends Claude Sonnet 5.5, which the AI SDK gives
    // structured output (at most 16 unions); Haiku's text and vision calls go as a `json` tool.
    const error = refusal(() =>
      checkNewProject({
        name: "p",
        provider: "provider-b",
        model: "claude-3-5-haiku-latest",
        outputSchema: unions(17),
      }),
    );
    expect(error.code).toBe("VALIDATION_ERROR");
    expect(error.message).toMatch(
      /^The output schema is invalid for provider-b on \/v1\/pdf \(model claude-sonnet-5-5\): #: provider B's structured outputs take at most 16 /,
    );
    expect(error.details).toEqual({
      problems: [expect.stringContaining("this schema has 17")],
      provider: "provider-b",
      routes: [{ route: "/v1/pdf", model: "claude-sonnet-5-5", problems: [expect.stringContaining("17")] }],
    });
    expect(() =>
      checkNewProject({
        name: "p",
        provider: "provider-b",
        model: "claude-3-5-haiku-latest",
        outputSchema: unions(16),
      }),
    ).not.toThrow();
  });

  it("refuses on a change of model that leaves /v1/pdf a model the schema does not suit", () => {
    const stored = applyChanges(
      blankProject("p", new Date(0).toISOString()),
      { name: "p", provider: "provider-b", model: "claude-sonnet-4-20250514", outputSchema: unions(17) },
      notSealed,
      sameName,
    );
    expect(() => applyChanges(stored, { model: "claude-3-5-haiku-latest" }, notSealed, sameName)).toThrow(
      /on \/v1\/pdf \(model claude-sonnet-5-5\)/,
    );
  });

  it("names every route once where they all send the same model", () => {
    const error = refusal(() =>
      checkNewProject({ name: "p", provider: "provider-b", outputSchema: unions(17) }),
    );
    expect(error.message).toMatch(
      /^The output schema is invalid for provider-b on \/v1\/text, \/v1\/vision and \/v1\/pdf \(model claude-sonnet-5-5\): #: /,
    );
    expect((error.details as { problems: string[] }).problems).toHaveLength(1);
    expect((error.details as { routes: Array<{ route: string }> }).routes.map(({ route }) => route)).toEqual([
      "/v1/text",
      "/v1/vision",
      "/v1/pdf",
    ]);
  });
});
