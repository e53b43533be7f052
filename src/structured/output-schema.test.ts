import { describe, expect, it } from "vitest";
import { validateAgainstSchema } from "./output-schema.js";

const schema = {
  type: "object",
  properties: {
    title: { type: "string" },
    score: { type: "number" },
    rank: { type: "integer" },
    values: { type: "array", items: { type: "number" } },
    extra: {},
  },
  required: ["title", "score"],
};

describe("validateAgainstSchema", () => {
  it("accepts finite numbers", () => {
    expect(validateAgainstSchema(schema, { title: "A", score: 1e308, rank: -3, values: [0, -0.5] })).toEqual({
      valid: true,
      errors: [],
    });
  });

  // JSON.parse turns 1e999 into Infinity, which Ajv takes for a number; sent, it would be null.
  it("refuses a model answer whose number overflows to Infinity", () => {
    const parsed = JSON.parse('{"title":"A","score":1e999}') as unknown;
    const check = validateAgainstSchema(schema, parsed);
    expect(check.valid).toBe(false);
    expect(check.errors.join("; ")).toContain("/score");
  });

  it.each([
    ["an integer", { title: "A", score: 1, rank: Number.POSITIVE_INFINITY }, "/rank"],
    ["a negative overflow", { title: "A", score: Number.NEGATIVE_INFINITY }, "/score"],
    ["NaN", { title: "A", score: Number.NaN }, "/score"],
    ["an array item", { title: "A", score: 1, values: [1, Number.POSITIVE_INFINITY] }, "/values/1"],
    ["an untyped property", { title: "A", score: 1, extra: { deep: [Number.NaN] } }, "/extra/deep/0"],
    ["an additional property", { title: "A", score: 1, other: Number.POSITIVE_INFINITY }, "/other"],
  ])("refuses a non-finite number in %s", (_name, value, path) => {
    const check = validateAgainstSchema(schema, value);
    expect(check.valid).toBe(false);
    expect(check.errors.some((error) => error.startsWith(`${path} `))).toBe(true);
  });
});
