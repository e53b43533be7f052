import { describe, expect, it } from "vitest";
import { checkOutputSchema, maxSchemaNesting, validateAgainstSchema } from "./output-schema.js";

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

describe("checkOutputSchema nesting and references", () => {
  const nested = (levels: number) => {
    let value: unknown = 1;
    for (let level = 0; level < levels; level++) value = [value];
    return value;
  };

  it.each(["default", "const"])(
    "refuses a %s nested 4,500 levels deep with a reason, not a stack overflow",
    (keyword) => {
      const schema = { type: "object", properties: { x: { type: "array", [keyword]: nested(4500) } } };
      const problems = checkOutputSchema(schema);
      expect(problems).toHaveLength(1);
      expect(problems[0]).toMatch(
        new RegExp(
          `^#/properties/x/${keyword}(/0)+ nests objects and arrays deeper than ${maxSchemaNesting} levels$`,
        ),
      );
    },
  );

  it("takes a value nested up to the limit", () => {
    // The root object, properties, x, default: four levels before the arrays.
    const schema = {
      type: "object",
      properties: { x: { type: "array", default: nested(maxSchemaNesting - 4) } },
    };
    expect(checkOutputSchema(schema)).toEqual([]);
  });

  it.each([
    [{ type: "object", $ref: "#" }, '#/$ref "#" leads back to itself through $ref alone: it names no schema'],
    [
      { type: "object", $defs: { a: { $ref: "#/$defs/a" } }, properties: { x: { $ref: "#/$defs/a" } } },
      '#/$defs/a/$ref "#/$defs/a" leads back to itself through $ref alone: it names no schema',
    ],
  ])("refuses a reference that leads back to itself with a clear reason (%j)", (schema, problem) => {
    expect(checkOutputSchema(schema)).toEqual([problem]);
  });

  it("takes a recursive schema whose $ref goes through a schema", () => {
    const schema = {
      type: "object",
      $defs: {
        node: {
          type: "object",
          properties: { children: { type: "array", items: { $ref: "#/$defs/node" } } },
        },
      },
      properties: { root: { $ref: "#/$defs/node" } },
    };
    expect(checkOutputSchema(schema)).toEqual([]);
  });
});
