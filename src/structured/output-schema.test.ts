import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { Ajv } from "ajv";
import { afterEach, describe, expect, it } from "vitest";
import {
  checkOutputSchema,
  maxSchemaNesting,
  validateAgainstSchema,
  validatorCacheLimit,
} from "./output-schema.js";

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

describe("the compiled-validator cache", () => {
  // Records every Ajv instance that compiles a schema, without keeping it alive.
  const originalCompile = Ajv.prototype.compile;
  const watchAjvInstances = () => {
    const seen = new WeakSet<Ajv>();
    const instances: WeakRef<Ajv>[] = [];
    const compiles = { count: 0 };
    Ajv.prototype.compile = function (this: Ajv, ...args: Parameters<Ajv["compile"]>) {
      compiles.count++;
      if (!seen.has(this)) {
        seen.add(this);
        instances.push(new WeakRef(this));
      }
      return originalCompile.apply(this, args);
    } as Ajv["compile"];
    return { instances, compiles };
  };
  afterEach(() => {
    Ajv.prototype.compile = originalCompile;
  });

  // A project's schema; each index is another project's.
  const schemaOf = (index: number) => ({
    type: "object",
    properties: { [`field${index}`]: { type: "string", pattern: `^v${index}` }, score: { type: "integer" } },
    required: [`field${index}`],
  });
  const use = (index: number) => {
    const schema = schemaOf(index); // a new object each time, as parsed from the project row
    expect(checkOutputSchema(schema)).toEqual([]);
    expect(validateAgainstSchema(schema, { [`field${index}`]: `v${index}`, score: 1 }).valid).toBe(true);
  };

  it("compiles a schema in use once, however often it is used", () => {
    const { compiles } = watchAjvInstances();
    for (let call = 0; call < 200; call++) use(1_000_000 + (call % 3));
    expect(compiles.count).toBe(3);
  });

  // Ajv keeps every schema it compiled (and removeSchema leaves the validators and patterns in its
  // code-generation scope): before, the cache was a Map cleared past 1000 entries while the one Ajv
  // instance grew by every compile, about 5.5 KB a call once more schemas than that were in use.
  it("keeps memory bounded with more schemas in rotation than it holds", { timeout: 60_000 }, async () => {
    setFlagsFromString("--expose_gc");
    const gc = runInNewContext("gc") as () => void;
    const { instances } = watchAjvInstances();
    const distinct = 5000;
    for (let round = 0; round < 2; round++) for (let index = 0; index < distinct; index++) use(index);
    Ajv.prototype.compile = originalCompile;
    await new Promise((resolve) => setImmediate(resolve)); // WeakRefs hold their targets for a job
    gc();
    const live = instances.map((instance) => instance.deref()).filter((ajv) => ajv !== undefined);
    // What each live instance holds: its schema cache, and the schemas its generated code refers to
    // (which removeSchema does not release).
    const held = (ajv: Ajv) => {
      const internals = ajv as unknown as { _cache: Map<unknown, unknown> };
      const scope = ajv.scope as unknown as { _values: Record<string, Map<unknown, unknown> | undefined> };
      return internals._cache.size + (scope._values.schema?.size ?? 0);
    };
    // At most the current instance and the one before it, each with its meta-schemas.
    expect(live.length).toBeLessThanOrEqual(2);
    expect(live.reduce((sum, ajv) => sum + held(ajv), 0)).toBeLessThanOrEqual(
      2 * 2 * (validatorCacheLimit + 5),
    );
    expect(distinct * 2).toBeGreaterThan(2 * validatorCacheLimit);
  });

  it("keeps validating a schema in use while the Ajv instances are replaced", () => {
    for (let index = 0; index < 2.5 * validatorCacheLimit; index++) {
      use(2_000_000 + index);
      if (index % 100 === 0) use(3_000_000);
    }
    expect(validateAgainstSchema(schemaOf(3_000_000), { score: 1 }).errors).toEqual([
      "/ must have required property 'field3000000'",
    ]);
  });
});
