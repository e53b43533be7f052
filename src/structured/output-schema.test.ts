import { Ajv } from "ajv";
import { afterEach, describe, expect, it, vi } from "vitest";
import { countingRefReads } from "../../test/support/counting-ref-reads.js";
import { collectGarbage } from "../../test/support/garbage-collection.js";
import { checkOutputSchema, maxAlternatives, maxSchemaNesting, maxSchemasTried } from "./output-schema.js";
import { sdkGivesStructuredOutput, sentAsStructuredOutput } from "./provider-limits.js";
import { schemaForProvider } from "./provider-schema.js";
import {
  maxMismatchesFound,
  validateAgainstSchema,
  validatorCacheLimit,
  validatorFor,
} from "./schema-validator.js";

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

describe("a schema's patterns", () => {
  const withPattern = (pattern: string) => ({
    type: "object",
    properties: { summary: { type: "string", pattern } },
    required: ["summary"],
  });

  // The backtracking engine took seconds on 28 a's and a "!" here (doubling with each character), on
  // the event loop; the model writes the answer, and a client steers the model.
  it("matches in linear time, a pattern that backtracks exponentially included", () => {
    const nested = withPattern("^(a+)+$");
    expect(validateAgainstSchema(nested, { summary: `${"a".repeat(28)}!` }).valid).toBe(false);
    expect(validateAgainstSchema(nested, { summary: "a".repeat(30) }).valid).toBe(true);
    const words = withPattern("^(\\w+\\s?)*$");
    expect(validateAgainstSchema(words, { summary: `${"word ".repeat(16)}!` }).valid).toBe(false);
  });

  it("keeps what a pattern means: classes, anchors, bounds and escapes", () => {
    const check = (pattern: string, value: string) =>
      validateAgainstSchema(withPattern(pattern), { summary: value }).valid;
    expect(check("^\\d{3}-\\d{4}$", "555-1234")).toBe(true);
    expect(check("^\\d{3}-\\d{4}$", "555-12345")).toBe(false);
    expect(check("^[A-Z][a-z]+$", "Paris")).toBe(true);
    expect(check("caf\\u00e9", "un café")).toBe(true);
    expect(check("^[^@]+@[^@]+$", "a@b")).toBe(true);
  });

  it.each([
    ["a backreference", "^(a)\\1$"],
    ["a lookahead", "^(?=a)a$"],
    ["a lookbehind", "(?<=a)b"],
    ["a property escape", "^\\p{L}+$"],
    ["a code point escape", "^\\u{1F600}$"],
    ["a character beyond U+FFFF", "^😀$"],
    ["a pattern Unicode mode refuses", "^\\-$"],
  ])("is refused when saved with %s, which cannot be matched in linear time as written", (_, pattern) => {
    expect(checkOutputSchema(withPattern(pattern)).join("; ")).toContain("cannot be matched in linear time");
  });
});

// docs/structured.md: 10 levels below the root, an array's `items` a level as a property is, as
// OpenAI's SDK counts the "10 levels of nesting" its structured outputs document.
describe("a schema's nesting", () => {
  const objects = (count: number) => {
    let node: Record<string, unknown> = { type: "string" };
    for (let index = 0; index < count; index++) node = { type: "object", properties: { a: node } };
    return node;
  };
  const objectsOfArrays = (count: number) => {
    let node: Record<string, unknown> = { type: "string" };
    for (let index = 0; index < count; index++)
      node = { type: "object", properties: { a: { type: "array", items: node } } };
    return node;
  };

  it("takes 10 levels below the root, each property, items or branch a level, and refuses 11", () => {
    expect(checkOutputSchema(objects(10))).toEqual([]);
    expect(checkOutputSchema(objects(11))).toEqual([
      `#${"/properties/a".repeat(11)} nests deeper than 10 levels`,
    ]);
    expect(checkOutputSchema(objectsOfArrays(5))).toEqual([]);
    expect(checkOutputSchema(objectsOfArrays(6))).toEqual([
      `#${"/properties/a/items".repeat(5)}/properties/a nests deeper than 10 levels`,
    ]);
    const branches = { type: "object", properties: { a: { anyOf: [objects(9), { type: "null" }] } } };
    expect(checkOutputSchema(branches)).toEqual([expect.stringContaining("nests deeper than 10 levels")]);
  });
});

describe("a schema's alternatives", () => {
  const union = (count: number, from = 0) => ({
    anyOf: Array.from({ length: count }, (_, index) => ({ const: `v${from + index}` })),
  });

  it(`takes ${maxAlternatives} alternatives in all and refuses more, before compiling them`, () => {
    expect(checkOutputSchema({ type: "object", properties: { v: union(maxAlternatives) } })).toEqual([]);
    // Split over several lists: Ajv's code and its compile time grow with them all (~1.3 ms each).
    const split = { type: "object", properties: { a: union(300), b: { oneOf: union(201, 300).anyOf } } };
    expect(checkOutputSchema(split)).toEqual([
      `the output schema's anyOf and oneOf lists hold 501 alternatives in all: at most ${maxAlternatives}`,
    ]);
  });

  // 2,500 alternatives (44 KB, under the size limit) overflowed the stack in Ajv's compile after
  // ~3 s, answered as a $ref loop, and Ajv printed its generated code (~1 MB) to stderr. Refused
  // before Ajv sees it: counted as the compiles asked for, none, not timed.
  it("refuses a union too wide to compile with the reason, before compiling it, printing nothing", () => {
    const printed = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      const compile = vi.fn(validatorFor);
      const schema = { type: "object", properties: { v: union(2_500) } };
      const problems = checkOutputSchema(schema, undefined, undefined, compile);
      expect(compile).not.toHaveBeenCalled();
      expect(problems).toEqual([
        `the output schema's anyOf and oneOf lists hold 2500 alternatives in all: at most ${maxAlternatives}`,
      ]);
      expect(printed).not.toHaveBeenCalled();
    } finally {
      printed.mockRestore();
    }
  });
});

// Each definition's two alternatives name the next one: 1.5 KB of schema, 46 alternatives as written,
// but an answer that fits none is checked against every path through them (2^22 of them at 22
// levels): 149 ms at 16 levels, 1,096 ms at 20, 5,060 ms at 22, on the event loop.
describe("the schemas checking an answer may try, through $ref", () => {
  const doubling = (levels: number) => {
    const $defs: Record<string, unknown> = { [`d${levels}`]: { type: "string" } };
    for (let index = 0; index < levels; index++)
      $defs[`d${index}`] = {
        anyOf: [{ $ref: `#/$defs/d${index + 1}` }, { $ref: `#/$defs/d${index + 1}` }],
      };
    return { type: "object", properties: { x: { $ref: "#/$defs/d0" } }, required: ["x"], $defs };
  };

  it("refuses a schema whose $refs multiply the schemas tried past the limit, reading each $ref a few times", () => {
    // 200 levels, 401 $refs, 2^202 - 1 schemas: the count is not computed by trying each path, which
    // would read the $refs 2^200 times. Counted as reads of a $ref, not timed: at most 50 each.
    const counted = countingRefReads(doubling(200), 50 * 401);
    expect(checkOutputSchema(counted.schema)).toEqual([
      `the output schema's $ref references make checking an answer try more than ${Number.MAX_SAFE_INTEGER} schemas: at most ${maxSchemasTried}`,
    ]);
    expect(counted.reads()).toBeGreaterThan(401);
    const schema = doubling(22);
    expect(Buffer.byteLength(JSON.stringify(schema))).toBeLessThan(1600);
    expect(checkOutputSchema(schema)).toEqual([
      expect.stringMatching(
        new RegExp(
          `^the output schema's \\$ref references make checking an answer try \\d+ schemas: at most ${maxSchemasTried}$`,
        ),
      ),
    ]);
  });

  // The root, x, and each level's definition and its two $refs: 2^(levels + 2) - 1 schemas.
  it("counts each schema a $ref reaches, and takes a count up to the limit", () => {
    expect(maxSchemasTried).toBeGreaterThan(2 ** 16 - 1);
    expect(maxSchemasTried).toBeLessThan(2 ** 17 - 1);
    expect(checkOutputSchema(doubling(14))).toEqual([]);
    expect(validateAgainstSchema(doubling(14), { x: 1 }).valid).toBe(false);
    expect(checkOutputSchema(doubling(15))).toEqual([
      `the output schema's $ref references make checking an answer try 131071 schemas: at most ${maxSchemasTried}`,
    ]);
  });

  it("takes a recursive tree whose $ref leads back to its own definition", () => {
    const tree = {
      type: "object",
      $defs: {
        node: {
          type: "object",
          properties: {
            label: { anyOf: [{ type: "string" }, { type: "null" }] },
            children: { type: "array", items: { $ref: "#/$defs/node" } },
          },
          required: ["label", "children"],
        },
      },
      properties: { root: { $ref: "#/$defs/node" } },
      required: ["root"],
    };
    expect(checkOutputSchema(tree)).toEqual([]);
    expect(checkOutputSchema({ type: "object", properties: { self: { $ref: "#" } } })).toEqual([]);
  });

  it("takes a wide, shallow schema of plain properties near the size limit", () => {
    const properties = Object.fromEntries(
      Array.from({ length: 1180 }, (_, index) => [
        `field${index}`,
        { type: "string", description: `field ${index}` },
      ]),
    );
    const schema = { type: "object", properties };
    const bytes = Buffer.byteLength(JSON.stringify(schema));
    expect(bytes).toBeGreaterThan(60 * 1024);
    expect(bytes).toBeLessThanOrEqual(64 * 1024);
    expect(checkOutputSchema(schema)).toEqual([]);
  });
});

describe("a schema's properties named as what every object inherits", () => {
  // A race result's `constructor` (the team), say: Ajv read the member every object inherits
  // (`constructor`, `toString`: a function) as the value of a property so named.
  const inherited = {
    type: "object",
    properties: {
      driver: { type: "string" },
      constructor: { type: "string" },
      toString: { type: "string" },
      hasOwnProperty: { type: "boolean" },
    },
    required: ["driver"],
    additionalProperties: false,
  };

  it("takes an answer that leaves them out, and checks them when it has them", () => {
    expect(checkOutputSchema(inherited)).toEqual([]);
    expect(validateAgainstSchema(inherited, { driver: "Lewis" })).toEqual({ valid: true, errors: [] });
    expect(validateAgainstSchema(inherited, { driver: "Lewis", constructor: "Ferrari" }).valid).toBe(true);
    expect(validateAgainstSchema(inherited, JSON.parse('{"driver":"Lewis","constructor":1}'))).toMatchObject({
      valid: false,
      errors: ["/constructor must be string"],
    });
  });

  it("refuses an answer that leaves out a required one", () => {
    const required = { ...inherited, required: ["driver", "constructor"] };
    expect(validateAgainstSchema(required, { driver: "Lewis" })).toMatchObject({
      valid: false,
      errors: ["/ must have required property 'constructor'"],
    });
  });

  it("refuses a $ref that names a definition or property the schema lacks by an inherited member's name", () => {
    // The validator found `constructor` (a function) on the object every schema object inherits
    // from, took it for a schema that any value matches, and the providers were sent the $ref dangling.
    const problems = checkOutputSchema(
      {
        type: "object",
        properties: { a: { $ref: "#/properties/constructor" }, b: { $ref: "#/$defs/x/valueOf" } },
        $defs: { x: { type: "string" } },
      },
      "provider-a",
    );
    expect(problems).toEqual([
      '#/properties/a/$ref "#/properties/constructor" names nothing in the schema',
      '#/properties/b/$ref "#/$defs/x/valueOf" names nothing in the schema',
    ]);
    // One the schema holds is taken, by that name too.
    expect(
      checkOutputSchema({
        type: "object",
        properties: { constructor: { type: "string" }, a: { $ref: "#/properties/constructor" } },
      }),
    ).toEqual([]);
  });

  it("refuses a property named __proto__, which no answer can hold, naming where", () => {
    // The providers' SDKs refuse an answer with a `__proto__` member as a prototype pollution
    // attempt, and their schema converters drop the property: every call would fail, twice billed.
    const problem = (path: string) =>
      `${path}: a property named "__proto__" is not supported (JSON parsers refuse the member in an answer): rename it`;
    expect(
      checkOutputSchema(
        JSON.parse('{"type":"object","properties":{"__proto__":{"type":"string"}},"required":["__proto__"]}'),
      ),
    ).toEqual([problem("#/properties/__proto__")]);
    expect(
      checkOutputSchema(
        JSON.parse(
          '{"type":"object","properties":{"a":{"type":"object","properties":{"b":{}},"required":["__proto__"]}}}',
        ),
      ),
    ).toEqual([problem("#/properties/a/required/0")]);
  });
});

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

  // The AI SDK parses an answer of any depth; a recursive schema's validator recursed as deep, and
  // JSON.stringify (the repair's text, the 200 body) overflows the stack a few thousand levels down.
  it("refuses an answer nested more than 64 deep without reading below it, and takes one of 64", () => {
    const tree = {
      type: "object",
      $defs: {
        node: { type: "object", properties: { kids: { type: "array", items: { $ref: "#/$defs/node" } } } },
      },
      properties: { root: { $ref: "#/$defs/node" } },
    };
    // `levels` objects and arrays in all, the outermost object counted.
    const nestedTo = (levels: number): unknown => {
      let node: unknown = {};
      for (let level = 2; level < levels; level += 2) node = { kids: [node] };
      return { root: node };
    };
    expect(validateAgainstSchema(tree, nestedTo(64))).toEqual({ valid: true, errors: [] });
    expect(validateAgainstSchema(tree, nestedTo(66))).toEqual({
      valid: false,
      errors: [`/root${"/kids/0".repeat(31)}/kids nests objects and arrays more than 64 deep`],
      keyword: "maxDepth",
      tooDeep: true,
    });
    expect(validateAgainstSchema(tree, nestedTo(20_000))).toMatchObject({ valid: false, tooDeep: true });
  });

  // The operator's log names the first mismatch by its kind alone: no path (the schema's names, the
  // answer's keys) and no value.
  it("names the first mismatch's keyword", () => {
    const keywordOf = (value: unknown) => validateAgainstSchema(schema, value).keyword;
    expect(keywordOf({ score: 1 })).toBe("required");
    expect(keywordOf({ title: 1, score: 1 })).toBe("type");
    expect(keywordOf({ title: "A", score: Number.NaN, rank: "x" })).toBe("finite");
    expect(keywordOf({ title: "A", score: 1 })).toBeUndefined();
  });

  // A model may write an integer as 3.0 (Gemini and GPT models do); JSON has one number type.
  it("takes an integer written with a zero fraction, and refuses one with a fraction", () => {
    expect(validateAgainstSchema(schema, JSON.parse('{"title":"A","score":1,"rank":3.0}'))).toEqual({
      valid: true,
      errors: [],
    });
    expect(validateAgainstSchema(schema, JSON.parse('{"title":"A","score":1,"rank":3.5}')).errors).toEqual([
      "/rank must be integer",
    ]);
  });

  // Ajv with allErrors built one error object per wrong item (and Sluice a string for each): 100,000
  // wrong items were 100,000 errors, ~370 ms of the event loop and ~36 MiB, on every attempt.
  it(`finds at most ${maxMismatchesFound} mismatches of a large wrong answer, and says there are more`, () => {
    const counts = { type: "object", properties: { counts: { type: "array", items: { type: "integer" } } } };
    const check = validateAgainstSchema(counts, { counts: Array.from({ length: 100_000 }, () => "x") });
    expect(check.valid).toBe(false);
    expect(check.errors).toHaveLength(maxMismatchesFound);
    expect(check.errors.slice(0, 2)).toEqual(["/counts/0 must be integer", "/counts/1 must be integer"]);
    expect(check.moreErrors).toBe(true);
    // At the limit, every one is found, and none is said to be left.
    const atLimit = validateAgainstSchema(counts, {
      counts: Array.from({ length: maxMismatchesFound }, () => "x"),
    });
    expect(atLimit.errors).toHaveLength(maxMismatchesFound);
    expect(atLimit.moreErrors).toBeUndefined();
  });

  // The alternatives an answer fails before one it matches count for nothing: more than the limit of
  // them leave the answer valid.
  it("takes an answer that matches a later alternative after more mismatches than the limit in an earlier one", () => {
    const either = {
      type: "object",
      properties: {
        values: {
          anyOf: [
            { type: "array", items: { type: "string" } },
            { type: "array", items: { type: "integer" } },
          ],
        },
      },
    };
    const value = { values: Array.from({ length: 3 * maxMismatchesFound }, (_, index) => index) };
    expect(validateAgainstSchema(either, value)).toEqual({ valid: true, errors: [] });
  });

  // A `format` is a hint to the provider (docs/structured.md): Sluice does not check it.
  it("leaves a string's format unchecked", () => {
    const formats = {
      type: "object",
      properties: { on: { type: "string", format: "date" }, to: { type: "string", format: "email" } },
    };
    expect(validateAgainstSchema(formats, { on: "next Tuesday", to: "nobody" }).valid).toBe(true);
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

  // The check runs before every structured call, with the compiled validator cached. Following each
  // node's $ref chain to its end read a chain of n definitions n²/2 times: a 64 KiB schema of 2,000
  // chained definitions held the event loop ~2 s per call. Counted as reads of a $ref, not timed:
  // 2,001 $refs read at most 50 times each, with and without each provider's rules, where the
  // quadratic walk read them two million times.
  it("checks a long chain of $ref-only definitions reading each $ref a few times, and still finds a loop at its end", () => {
    const chain = (length: number, loops: boolean) => {
      const $defs: Record<string, unknown> = {};
      for (let index = 0; index < length; index++)
        $defs[`d${index}`] = { $ref: `#/$defs/d${index + 1 < length || loops ? index + 1 : index}` };
      $defs[`d${length - 1}`] = loops ? { $ref: `#/$defs/d${length - 3}` } : { type: "string" };
      return { type: "object", properties: { a: { $ref: "#/$defs/d0" } }, required: ["a"], $defs };
    };
    const schema = chain(2000, false);
    expect(Buffer.byteLength(JSON.stringify(schema))).toBeLessThan(64 * 1024);
    expect(checkOutputSchema(schema)).toEqual([]); // compiles the validator, cached from here on
    for (const provider of [undefined, "provider-a", "provider-b", "provider-c"] as const) {
      const counted = countingRefReads(schema, 50 * 2000);
      expect(checkOutputSchema(counted.schema, provider)).toEqual([]);
      expect(counted.reads()).toBeGreaterThan(2000);
    }
    expect(checkOutputSchema(chain(10, true))).toEqual(
      [9, 8, 7].map(
        (index) =>
          `#/$defs/d${index}/$ref "#/$defs/d${index === 9 ? 7 : index + 1}" leads back to itself through $ref alone: it names no schema`,
      ),
    );
  });

  // A loop through anyOf or oneOf applies each schema on it to the same value again: checking any
  // answer recursed without end (a RangeError), though no $ref on it pointed at itself alone.
  it("refuses a reference that leads back to itself through anyOf or oneOf, never reaching into the answer", () => {
    const schema = {
      type: "object",
      $defs: {
        a: { anyOf: [{ $ref: "#/$defs/b" }, { type: "string" }] },
        b: { oneOf: [{ $ref: "#/$defs/a" }] },
      },
      properties: { x: { $ref: "#/$defs/a" } },
    };
    expect(checkOutputSchema(schema)).toEqual(
      ["#/$defs/b/oneOf/0", "#/$defs/a/anyOf/0"].map(
        (path) =>
          `${path}/$ref ${JSON.stringify(path.startsWith("#/$defs/b") ? "#/$defs/a" : "#/$defs/b")} leads back to itself through $ref, anyOf and oneOf alone: checking an answer would never end`,
      ),
    );
    const self = {
      type: "object",
      $defs: { a: { anyOf: [{ $ref: "#/$defs/a" }, { type: "string" }] } },
      properties: { x: { $ref: "#/$defs/a" } },
    };
    expect(checkOutputSchema(self)).toEqual([
      '#/$defs/a/anyOf/0/$ref "#/$defs/a" leads back to itself through $ref, anyOf and oneOf alone: checking an answer would never end',
    ]);
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

describe("checkOutputSchema's problems, for names that may be keys", () => {
  const key = `AIza${"Xy7".repeat(12)}`;
  const masked = `"AIza…" (${key.length} characters)`;

  it("show a keyword, a property or a required name of a key's form, or over 64 characters, by its start and length", () => {
    const long = "n".repeat(65);
    const problems = checkOutputSchema({
      type: "object",
      [long]: 1,
      properties: { [key]: { type: "object", [key]: true }, [long]: { type: "nonsense" } },
      required: [key, "b"],
      additionalProperties: false,
    });
    expect(problems).toEqual([
      `#: keyword "nnnn…" (65 characters) is not supported by the providers' structured output`,
      `#/properties/${masked}: keyword ${masked} is not supported by the providers' structured output`,
      `#/properties/"nnnn…" (65 characters): unknown type "nonsense"`,
      `#/required/1: "b" is not among the properties and additionalProperties is false, so no answer can have it`,
    ]);
  });

  it("show a key's form anywhere else in a problem (a $ref) by its start and length", () => {
    const problems = checkOutputSchema({
      type: "object",
      properties: { a: { $ref: `#/$defs/${key}` } },
      $defs: { [key]: { $ref: `#/$defs/${key}` } },
    });
    expect(problems.join("\n")).not.toContain(key.slice(0, 12));
    expect(problems).toContain(
      `#/$defs/${masked}/$ref "#/$defs/${masked}" leads back to itself through $ref alone: it names no schema`,
    );
  });

  it("name a short name or one of no key's form as written", () => {
    expect(checkOutputSchema({ type: "object", "sk-demo": 1 })).toEqual([
      `#: keyword "sk-demo" is not supported by the providers' structured output`,
    ]);
  });
});

describe("validation problems, as the repair prompt gives them", () => {
  it("name the extra key to drop and the values allowed", () => {
    const schema = {
      type: "object",
      properties: { mood: { type: "string", enum: ["calm", "busy"] } },
      additionalProperties: false,
    };
    expect(validateAgainstSchema(schema, { mood: "sleepy", extra: 1 }).errors).toEqual([
      '/ must NOT have additional properties: "extra"',
      '/mood must be equal to one of the allowed values: "calm", "busy"',
    ]);
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
  // 6,000 schemas compiled (~25 s of CPU for 10,000, near the old 60 s timeout on a loaded machine):
  // three instances' worth, and one instance keeping them all would hold 12,000, over the bound.
  it("keeps memory bounded with more schemas in rotation than it holds", { timeout: 120_000 }, async () => {
    const { instances } = watchAjvInstances();
    const distinct = 3000;
    for (let round = 0; round < 2; round++) for (let index = 0; index < distinct; index++) use(index);
    Ajv.prototype.compile = originalCompile;
    await new Promise((resolve) => setImmediate(resolve)); // WeakRefs hold their targets for a job
    collectGarbage();
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

  // 5,000 schemas compiled (~6 s alone, over 20 on a loaded machine).
  it("keeps validating a schema in use while the Ajv instances are replaced", { timeout: 120_000 }, () => {
    for (let index = 0; index < 2.5 * validatorCacheLimit; index++) {
      use(2_000_000 + index);
      if (index % 100 === 0) use(3_000_000);
    }
    expect(validateAgainstSchema(schemaOf(3_000_000), { score: 1 }).errors).toEqual([
      "/ must have required property 'field3000000'",
    ]);
  });
});

/**
 * Schemas the Gemini API refuses on every call (400 INVALID_ARGUMENT, Sluice's 502) once the AI
 * SDK's Google converter has sent them: provider C's rules refuse them when saved and before use.
 * Providers A and B take them (maps and free-form objects work there).
 */
describe("checkOutputSchema with provider C's rules", () => {
  const object = (properties: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
    type: "object",
    properties,
    ...extra,
  });
  const refusedByProviderC: Array<[string, Record<string, unknown>, string]> = [
    ["an enum holding an object", object({ v: { enum: [{ a: 1 }, "b"] } }), "#/properties/v/enum"],
    ["a const array", object({ v: { const: [1, 2] } }), "#/properties/v/const"],
    [
      "a map",
      object({ scores: { type: "object", additionalProperties: { type: "number" } } }),
      "#/properties/scores:",
    ],
    ["a free-form nested object", object({ meta: { type: "object" } }), "#/properties/meta:"],
    [
      "a free-form object in an array",
      object({ list: { type: "array", items: { type: "object" } } }),
      "#/properties/list/items:",
    ],
    ["a map at the root", { type: "object", additionalProperties: { type: "string" } }, "#:"],
    ["an open root without properties", { type: "object", additionalProperties: true }, "#:"],
    [
      "a required name without a property",
      object({ a: { type: "string" } }, { required: ["a", "b"] }),
      "#/required/1:",
    ],
    ["an array without items", object({ tags: { type: "array" } }), "#/properties/tags:"],
    ["a property without a type", object({ extra: {} }), "#/properties/extra:"],
    [
      "array items with only a description",
      object({ l: { type: "array", items: { description: "x" } } }),
      "#/properties/l/items:",
    ],
    [
      "an array in a type list",
      object({ v: { type: ["array", "string"], items: { type: "string" } } }),
      "#/properties/v/type:",
    ],
    [
      "a $ref below the root's $defs",
      {
        type: "object",
        $defs: { g: { type: "string", $defs: { i: { type: "string" } } } },
        properties: { i: { $ref: "#/$defs/g/$defs/i" } },
      },
      "#/properties/i/$ref:",
    ],
    [
      "a recursive $ref",
      {
        type: "object",
        $defs: { n: object({ kids: { type: "array", items: { $ref: "#/$defs/n" } } }) },
        properties: { root: { $ref: "#/$defs/n" } },
      },
      "#/properties/root/properties/kids/items/$ref:",
    ],
    [
      "a map's required key",
      { type: "object", properties: { m: { type: "object", additionalProperties: {}, required: ["k"] } } },
      "#/properties/m/required/0:",
    ],
  ];

  it.each(refusedByProviderC)("refuses %s for provider C, naming its path", (_name, schema, path) => {
    const problems = checkOutputSchema(schema, "provider-c");
    expect(problems.length).toBeGreaterThan(0);
    expect(problems.some((problem) => problem.startsWith(path))).toBe(true);
  });

  it.each(refusedByProviderC)("takes %s for providers A and B, and with no provider", (name, schema) => {
    expect(checkOutputSchema(schema)).toEqual([]);
    expect(checkOutputSchema(schema, "provider-a")).toEqual([]);
    // Provider B's structured outputs refuse these too (its limits, below).
    if (name !== "an enum holding an object" && name !== "a required name without a property")
      expect(checkOutputSchema(schema, "provider-b")).toEqual([]);
  });

  it.each([
    ["a date-time", object({ at: { type: "string", format: "date-time" } })],
    // Sent to the model in the description instead of as an enum (provider-schema.ts).
    [
      "enums and consts of numbers and booleans",
      object({
        stars: { type: "integer", enum: [1, 2, 3] },
        ok: { enum: [true, false] },
        version: { const: 2 },
        kind: { enum: [1, "two", null] },
      }),
    ],
    // Sent to the model in the description instead (provider-schema.ts), and not checked by Sluice.
    [
      "formats its API refuses",
      object({
        contact: { type: "string", format: "email" },
        due: { type: "string", format: "date" },
        id: { type: ["string", "null"], format: "uuid" },
        n: { type: "integer", format: "double" },
      }),
    ],
    ["Gemini's own enum format", object({ kind: { type: "string", format: "enum", enum: ["a", "b"] } })],
    [
      "number formats",
      object({ n: { type: "number", format: "double" }, i: { type: "integer", format: "int64" } }),
    ],
    ["a string enum with null", object({ kind: { type: ["string", "null"], enum: ["a", null] } })],
    ["a string const", object({ kind: { const: "fixed" } })],
    ["a free-form root (sent as no schema: plain JSON mode)", { type: "object" }],
    [
      "a nullable type list",
      object({ n: { type: ["string", "null"] }, m: { type: "integer", nullable: true } }),
    ],
    ["an anyOf without a type", object({ v: { anyOf: [{ type: "string" }, { type: "integer" }] } })],
    ["an enum or const without a type", object({ e: { enum: ["a", "b"] }, c: { const: "x" } })],
    [
      "a nullable array of objects",
      object({ l: { type: ["array", "null"], items: object({ x: { type: "string" } }) } }),
    ],
    [
      "a nested object with properties",
      object({ o: { type: "object", properties: { x: { type: "string" } }, required: ["x"] } }),
    ],
    [
      "a $ref to an object",
      {
        type: "object",
        $defs: { p: object({ x: { type: "string" } }) },
        properties: { p: { $ref: "#/$defs/p" } },
      },
    ],
  ])("takes %s for provider C", (_name, schema) => {
    expect(checkOutputSchema(schema, "provider-c")).toEqual([]);
  });

  it("sends provider C a format its API refuses in the description, and one it takes as it is", () => {
    const schema = object({
      n: { type: "integer", format: "double", minimum: 0 },
      m: { type: ["number", "null"], format: "double" },
      s: { type: "string", format: "uuid", description: "An id" },
      t: { type: "string", format: "date-time" },
    });
    expect(schemaForProvider(schema, "provider-c")).toEqual(
      object({
        n: { type: "integer", minimum: 0, description: "minimum: 0; format: double." },
        m: { type: ["number", "null"], format: "double" },
        s: { type: "string", description: "An id\nformat: uuid." },
        t: { type: "string", format: "date-time" },
      }),
    );
    expect(schemaForProvider(schema, "provider-a")).toEqual(schema);
  });

  // No answer can have a property it requires while additionalProperties forbids it: the schema can
  // never be met, whatever the provider.
  it("refuses, for every provider, a required name a closed object does not define", () => {
    const schema = object({ a: { type: "string" } }, { required: ["a", "b"], additionalProperties: false });
    for (const provider of [undefined, "provider-a", "provider-b", "provider-c"] as const)
      expect(checkOutputSchema(schema, provider)).toEqual([
        expect.stringContaining('#/required/1: "b" is not among the properties'),
      ]);
  });
});

/**
 * A schema object no value can match on its own keywords can never be met by an answer: every call
 * would be two billed calls (the answer, its repair) and a 502. Refused when saved, for every provider.
 */
describe("a schema no value can match", () => {
  const withScore = (score: Record<string, unknown>) => ({
    type: "object",
    properties: { score },
    required: ["score"],
    additionalProperties: false,
  });

  it.each([
    [{ type: "integer", minimum: 10, maximum: 0 }, "minimum 10 with maximum 0 leaves no whole number"],
    [
      { type: "number", exclusiveMinimum: 1, maximum: 1 },
      "exclusiveMinimum 1 with maximum 1 leaves no number",
    ],
    [
      { type: "number", minimum: 1, exclusiveMaximum: 1 },
      "minimum 1 with exclusiveMaximum 1 leaves no number",
    ],
    [{ type: "integer", minimum: 1.2, maximum: 1.8 }, "minimum 1.2 with maximum 1.8 leaves no whole number"],
    [{ type: "integer", exclusiveMinimum: 1, exclusiveMaximum: 2 }, "leaves no whole number"],
    [{ type: "string", minLength: 5, maxLength: 2 }, "minLength 5 is above maxLength 2"],
    [
      { type: "array", items: { type: "string" }, minItems: 3, maxItems: 1 },
      "minItems 3 is above maxItems 1",
    ],
    [{ type: "string", const: 5 }, "its const does not have its type"],
    [{ type: "integer", const: 1.5 }, "its const does not have its type"],
    [{ type: "string", enum: [1, 2] }, "none of its enum values has its type"],
    [{ type: "string", enum: ["long", "longer"], maxLength: 3 }, "none of its enum values"],
    [{ type: "integer", enum: [1, 2], minimum: 5 }, "none of its enum values"],
    [{ enum: [1, 2], minimum: 5 }, "none of its enum values"],
  ])("refuses %j", (score, reason) => {
    for (const provider of [undefined, "provider-a", "provider-b", "provider-c"] as const)
      expect(checkOutputSchema(withScore(score), provider)).toContainEqual(
        expect.stringMatching(new RegExp(`^#/properties/score: .*${reason}.*so no value can match it$`)),
      );
  });

  it("refuses it wherever it is: inside items, anyOf branches and $defs", () => {
    const never = { type: "integer", minimum: 2, maximum: 1 };
    const schema = {
      type: "object",
      properties: {
        list: { type: "array", items: never },
        either: { anyOf: [{ type: "string" }, never] },
        ref: { $ref: "#/$defs/never" },
      },
      $defs: { never },
    };
    expect(checkOutputSchema(schema)).toEqual([
      expect.stringContaining("#/properties/list/items: minimum 2 with maximum 1"),
      expect.stringContaining("#/properties/either/anyOf/1: minimum 2 with maximum 1"),
      expect.stringContaining("#/$defs/never: minimum 2 with maximum 1"),
    ]);
  });

  it.each([
    [{ type: "integer", minimum: 1, maximum: 1 }],
    [{ type: "number", minimum: 1.2, maximum: 1.8 }],
    [{ type: "integer", minimum: 1.2, maximum: 2 }],
    [{ type: ["integer", "null"], minimum: 10, maximum: 0 }],
    [{ type: "integer", nullable: true, minimum: 10, maximum: 0 }],
    [{ minimum: 10, maximum: 0 }],
    [{ type: ["string", "number"], minLength: 5, maxLength: 2 }],
    [{ type: "string", minLength: 2, maxLength: 2 }],
    [{ type: "string", enum: ["a", 1] }],
    [{ type: "string", enum: ["é"], maxLength: 1 }],
    [{ type: "string", enum: [null, "a"], nullable: true, minLength: 2 }],
    [{ type: "integer", const: 2, minimum: 2 }],
    [{ type: "integer", enum: [1, 2, 6], minimum: 5 }],
  ])("takes %j, which some value matches", (score) => {
    expect(checkOutputSchema(withScore(score))).toEqual([]);
  });
});

/**
 * Annotation keywords users paste in from their existing schemas describe and constrain nothing:
 * they are taken when saved, the validator ignores them, and each provider is sent only those its
 * structured mode takes (description everywhere, since it guides the model).
 */
describe("annotation keywords", () => {
  const annotated = {
    $schema: "https://json-schema.org/draft/2020-12/schema",
    $id: "https://example.com/review.schema.json",
    $comment: "Version 2",
    title: "Review",
    description: "A product review",
    type: "object",
    examples: [{ title: "Good", stars: 5 }],
    // Properties named like annotation keywords are properties, not keywords.
    properties: {
      title: { type: "string", description: "Its headline", examples: ["Good"], default: "Untitled" },
      description: {
        type: "string",
        nullable: true,
        title: "Body",
        deprecated: true,
        readOnly: true,
        writeOnly: false,
      },
      stars: { $ref: "#/$defs/stars", $comment: "1 to 5" },
      author: {
        type: "object",
        properties: { name: { type: "string" } },
        default: { name: "anonymous", $comment: "a value, not a keyword" },
      },
    },
    required: ["title", "stars"],
    $defs: { stars: { $id: "stars.json", type: "integer", minimum: 1, maximum: 5 } },
  };
  const providers = [undefined, "provider-a", "provider-b", "provider-c"] as const;

  it.each(providers)("are taken when saved (provider %s)", (provider) => {
    expect(checkOutputSchema(annotated, provider)).toEqual([]);
  });

  it("leave validation to the keywords that constrain", () => {
    expect(validateAgainstSchema(annotated, { title: "Good", description: null, stars: 5 })).toEqual({
      valid: true,
      errors: [],
    });
    expect(validateAgainstSchema(annotated, { title: 1, stars: 9 }).errors).toEqual([
      "/title must be string",
      "/stars must be <= 5",
    ]);
  });

  // One Ajv instance compiles every project's schema: it would refuse a second schema with an $id
  // it already holds, and an $id below the root would change where a $ref inside it points.
  it("let two projects' schemas share an $id, and resolve every $ref from the root as providers do", () => {
    const other = { $id: annotated.$id, type: "object", properties: { ok: { type: "boolean" } } };
    expect(checkOutputSchema(other)).toEqual([]);
    expect(validateAgainstSchema(other, { ok: "yes" }).errors).toEqual(["/ok must be boolean"]);
    const nested = {
      type: "object",
      $defs: {
        word: { type: "string" },
        box: { $id: "box.json", type: "object", properties: { inner: { $ref: "#/$defs/word" } } },
      },
      properties: { box: { $ref: "#/$defs/box" } },
    };
    expect(checkOutputSchema(nested)).toEqual([]);
    expect(validateAgainstSchema(nested, { box: { inner: 1 } }).errors).toEqual([
      "/box/inner must be string",
    ]);
  });

  it.each([
    [{ $comment: 1 }, "#/properties/x/$comment must be a string"],
    [{ title: ["T"] }, "#/properties/x/title must be a string"],
    [{ description: null }, "#/properties/x/description must be a string"],
    [{ $id: 5 }, "#/properties/x/$id must be a string"],
    [{ examples: "Good" }, "#/properties/x/examples must be an array"],
    [{ deprecated: "yes" }, "#/properties/x/deprecated must be a boolean"],
    [{ readOnly: 1 }, "#/properties/x/readOnly must be a boolean"],
  ])("refuses an annotation of the wrong kind (%j), naming its path", (annotation, problem) => {
    const schema = { type: "object", properties: { x: { type: "string", ...annotation } } };
    expect(checkOutputSchema(schema)).toEqual([problem]);
  });

  // Provider A's strict structured outputs refuse `default`, `examples` and other annotations
  // ("'examples' is not permitted"); B's structured outputs and C's responseSchema take `default`.
  const sentToProviderA = {
    title: "Review",
    description: "A product review",
    type: "object",
    properties: {
      title: { type: "string", description: "Its headline" },
      description: { type: ["string", "null"], title: "Body" },
      stars: { $ref: "#/$defs/stars" },
      author: { type: "object", properties: { name: { type: "string" } } },
    },
    required: ["title", "stars"],
    $defs: { stars: { type: "integer", minimum: 1, maximum: 5 } },
  };
  const sentToProvidersBAndC = {
    ...sentToProviderA,
    properties: {
      ...sentToProviderA.properties,
      title: { ...sentToProviderA.properties.title, default: "Untitled" },
      author: { ...sentToProviderA.properties.author, default: annotated.properties.author.default },
    },
  };

  // Provider C's responseSchema, as the AI SDK builds it, carries no bounds: they go into the description.
  const sentToProviderC = {
    ...sentToProvidersBAndC,
    $defs: { stars: { ...sentToProvidersBAndC.$defs.stars, description: "minimum: 1; maximum: 5." } },
  };

  it.each([
    ["provider-a", sentToProviderA],
    ["provider-b", sentToProvidersBAndC],
    ["provider-c", sentToProviderC],
  ] as const)(
    "are sent to %s only where it takes them; the project's schema is unchanged",
    (provider, sent) => {
      const before = structuredClone(annotated);
      expect(schemaForProvider(annotated, provider)).toEqual(sent);
      expect(annotated).toEqual(before);
    },
  );
});

describe("checkOutputSchema with provider B's limits", () => {
  const nullables = (count: number, optional = 0) => {
    const properties = Object.fromEntries(
      Array.from({ length: count + optional }, (_, index) => [
        `f${index}`,
        { type: "string", nullable: true },
      ]),
    );
    return { type: "object", properties, required: Object.keys(properties).slice(0, count) };
  };

  it("refuses more than 16 union-typed properties where the AI SDK sends structured output", () => {
    expect(checkOutputSchema(nullables(16), "provider-b")).toEqual([]);
    expect(checkOutputSchema(nullables(17), "provider-b")).toEqual([
      expect.stringMatching(/^#: provider B's structured outputs take at most 16 .* this schema has 17$/),
    ]);
    // Sent as a `json` tool (over 10 optional properties), which has no such limit.
    expect(checkOutputSchema(nullables(17, 11), "provider-b")).toEqual([]);
    for (const provider of [undefined, "provider-a", "provider-c"] as const)
      expect(checkOutputSchema(nullables(17), provider)).toEqual([]);
  });

  it("applies the limit only to a model the AI SDK gives structured output", () => {
    expect(checkOutputSchema(nullables(17), "provider-b", "claude-sonnet-5-5")).toHaveLength(1);
    expect(checkOutputSchema(nullables(17), "provider-b", "claude-haiku-4-5-20251001")).toHaveLength(1);
    expect(checkOutputSchema(nullables(17), "provider-b", "claude-sonnet-4-20250514")).toEqual([]);
    expect(checkOutputSchema(nullables(17), "provider-b", "claude-3-5-haiku-latest")).toEqual([]);
  });

  it("refuses an enum holding an object or array where the AI SDK sends structured output", () => {
    const schema = {
      type: "object",
      $defs: {
        corner: {
          type: "array",
          items: { type: "integer" },
          enum: [
            [0, 0],
            [1, 1],
          ],
        },
      },
      properties: {
        size: { enum: [{ w: 1 }, "none"] },
        corner: { $ref: "#/$defs/corner" },
        mode: { enum: ["a", 1, true, null] },
      },
      required: ["size", "corner", "mode"],
    };
    expect(checkOutputSchema(schema, "provider-b")).toEqual([
      expect.stringMatching(/^#\/properties\/size\/enum: provider B's structured outputs take enum values/),
      expect.stringMatching(/^#\/\$defs\/corner\/enum: provider B's/),
    ]);
    expect(checkOutputSchema(schema, "provider-b", "claude-sonnet-5-5")).toHaveLength(2);
    // As a `json` tool (an open object, or a model the SDK gives no structured output) it is taken.
    expect(checkOutputSchema({ ...schema, additionalProperties: true }, "provider-b")).toEqual([]);
    expect(checkOutputSchema(schema, "provider-b", "claude-sonnet-4-20250514")).toEqual([]);
    expect(checkOutputSchema(schema, "provider-a")).toEqual([]);
  });

  // The AI SDK closes every object it sends as provider B's structured output
  // (`additionalProperties: false`), so a required name the object does not list cannot be answered.
  it("refuses a required name that is not a property where the AI SDK sends structured output", () => {
    const schema = {
      type: "object",
      properties: {
        a: { type: "string" },
        m: { type: "object", properties: { x: { type: "number" } }, required: ["y"] },
      },
      required: ["a", "k", "m"],
    };
    expect(checkOutputSchema(schema, "provider-b")).toEqual([
      expect.stringMatching(
        /^#\/required\/1: "k" is not among the properties; provider B's structured outputs/,
      ),
      expect.stringMatching(/^#\/properties\/m\/required\/0: "y" is not among the properties/),
    ]);
    // A map or a free-form object makes the AI SDK send a `json` tool, which leaves them open.
    const withMap = {
      ...schema,
      properties: { ...schema.properties, map: { type: "object", additionalProperties: { type: "number" } } },
    };
    expect(checkOutputSchema(withMap, "provider-b")).toEqual([]);
    expect(checkOutputSchema(schema, "provider-b", "claude-sonnet-4-20250514")).toEqual([]);
    expect(checkOutputSchema(schema, "provider-a")).toEqual([]);
  });

  it("knows which models the installed AI SDK gives structured output", async () => {
    const { getModelCapabilities } = await import("@ai-sdk/anthropic/internal");
    const models = [
      "claude-sonnet-5-5",
      "claude-opus-5-5",
      "claude-haiku-5-5",
      "claude-opus-5",
      "claude-fable-5-1",
      "claude-sonnet-5",
      "claude-opus-4-8",
      "claude-opus-4-7",
      "claude-sonnet-4-6",
      "claude-opus-4-6",
      "claude-sonnet-4-5",
      "claude-sonnet-4-5-20250929",
      "claude-opus-4-5",
      "claude-haiku-4-5",
      "claude-opus-4-1",
      "claude-opus-4-1-20250805",
      "claude-sonnet-4-0",
      "claude-sonnet-4-20250514",
      "claude-opus-4-0",
      "claude-opus-4-20250514",
      "claude-3-haiku-20240307",
      "claude-3-5-haiku-latest",
      "claude-3-7-sonnet-20250219",
      "claude-3-opus-latest",
      "claude-2.1",
      "claude-instant-1.2",
      "claude-next",
      "custom-model",
    ];
    for (const model of models)
      expect(sdkGivesStructuredOutput(model), model).toBe(
        getModelCapabilities(model).supportsStructuredOutput,
      );
  });

  // The mirror of the SDK's choice must not drift from the SDK on an upgrade.
  it("decides structured output or json tool as the installed AI SDK does", async () => {
    const { supportsNativeStructuredOutputSchema } = await import("@ai-sdk/anthropic/internal");
    const closed = (properties: Record<string, unknown>, required = Object.keys(properties)) => ({
      type: "object",
      properties,
      required,
    });
    const schemas: Record<string, unknown>[] = [
      nullables(3),
      nullables(3, 10),
      nullables(3, 11),
      { type: "object" },
      closed({ m: { type: "object", additionalProperties: { type: "number" } } }),
      closed({ m: { type: "object", properties: { x: { type: "string" } }, additionalProperties: true } }),
      closed({ m: { type: "object", additionalProperties: false } }),
      closed({ l: { type: "array", items: { type: "object" } } }),
      closed({ v: { anyOf: [{ type: "object" }, { type: "null" }] } }),
      {
        type: "object",
        $defs: { n: closed({ kids: { type: "array", items: { $ref: "#/$defs/n" } } }) },
        properties: { root: { $ref: "#/$defs/n" } },
        required: ["root"],
      },
      {
        type: "object",
        $defs: { p: nullables(0, 4) },
        properties: { a: { $ref: "#/$defs/p" }, b: { $ref: "#/$defs/p" }, c: { $ref: "#/$defs/p" } },
        required: ["a", "b", "c"],
      },
      {
        type: "object",
        definitions: { p: nullables(0, 5) },
        properties: { a: { $ref: "#/definitions/p" }, b: { $ref: "#/definitions/p" } },
        required: ["a", "b"],
      },
      // A $ref may step into an array by index (RFC 6901): here to 11 optional properties.
      {
        type: "object",
        $defs: { u: { anyOf: [nullables(0, 11), { type: "null" }] } },
        properties: { a: { $ref: "#/$defs/u/anyOf/0" } },
        required: ["a"],
      },
      // … and here back into the schema it is inside: recursive.
      closed({
        x: { anyOf: [closed({ y: { $ref: "#/properties/x/anyOf/0" } }, []), { type: "null" }] },
      }),
    ];
    for (const schema of schemas)
      expect(sentAsStructuredOutput(schema), JSON.stringify(schema)).toBe(
        supportsNativeStructuredOutputSchema(schema as never),
      );
  });
});

/**
 * What Zod v4's `z.toJSONSchema` writes for a discriminated union (`oneOf`), a record
 * (`propertyNames: {"type": "string"}`) and a tuple (`prefixItems`, `items: false`): the union and the
 * record are served (decision 0021), the tuple refused with what to write instead.
 */
describe("oneOf, propertyNames and tuples, as Zod writes them", () => {
  const closed = (properties: Record<string, unknown>) => ({
    type: "object",
    properties,
    required: Object.keys(properties),
    additionalProperties: false,
  });
  const union = closed({
    shape: {
      oneOf: [
        closed({ kind: { type: "string", const: "circle" }, radius: { type: "number" } }),
        closed({ kind: { type: "string", const: "square" }, side: { type: "number" } }),
      ],
    },
  });
  const providers = [undefined, "provider-a", "provider-b", "provider-c"] as const;

  it.each(providers)("takes a discriminated union written as oneOf (provider %s)", (provider) => {
    expect(checkOutputSchema(union, provider)).toEqual([]);
  });

  it("sends every provider a oneOf as anyOf, and validates the answer against the oneOf", () => {
    for (const provider of ["provider-a", "provider-b", "provider-c"] as const) {
      const sent = schemaForProvider(union, provider);
      expect(JSON.stringify(sent), provider).not.toContain("oneOf");
      expect(sent, provider).toHaveProperty("properties.shape.anyOf.1.properties.side");
    }
    expect(validateAgainstSchema(union, { shape: { kind: "square", side: 2 } }).valid).toBe(true);
    // An answer that matches both branches does not match a oneOf, though it matches the anyOf sent.
    const overlapping = closed({ n: { oneOf: [{ type: "number" }, { type: "integer" }] } });
    expect(validateAgainstSchema(schemaForProvider(overlapping, "provider-a"), { n: 3 }).valid).toBe(true);
    expect(validateAgainstSchema(overlapping, { n: 3 })).toEqual({
      valid: false,
      errors: [expect.stringContaining("/n must match exactly one schema in oneOf")],
      keyword: "oneOf",
    });
  });

  it("keeps a $ref that points into a oneOf's branches pointing at the branch sent", () => {
    const schema = {
      ...closed({ a: { $ref: "#/$defs/u/oneOf/1" }, b: { $ref: "#/$defs/u" } }),
      $defs: {
        u: { oneOf: [{ type: "string" }, closed({ oneOf: { type: "number" } })] },
      },
    };
    expect(checkOutputSchema(schema, "provider-a")).toEqual([]);
    const sent = schemaForProvider(schema, "provider-a");
    expect(sent).toHaveProperty("properties.a.$ref", "#/$defs/u/anyOf/1");
    // A property named oneOf is a property: its name stays.
    expect(sent).toHaveProperty("$defs.u.anyOf.1.properties.oneOf.type", "number");
  });

  it("refuses anyOf and oneOf side by side, which no provider is sent as one list", () => {
    const schema = closed({
      v: { anyOf: [{ type: "string" }, { type: "number" }], oneOf: [{ minLength: 1 }, { minimum: 1 }] },
    });
    expect(checkOutputSchema(schema)).toEqual([expect.stringContaining("#/properties/v: anyOf and oneOf")]);
  });

  it("checks a provider's rules inside a oneOf's branches too", () => {
    const schema = closed({ v: { oneOf: [closed({ m: { type: "object" } }), { type: "null" }] } });
    expect(checkOutputSchema(schema, "provider-c")).toEqual([
      expect.stringContaining("#/properties/v/oneOf/0/properties/m: provider C takes an object only"),
    ]);
  });

  it("counts a oneOf among provider B's union-typed parameters", () => {
    const properties = Object.fromEntries(
      Array.from({ length: 17 }, (_, index) => [
        `f${index}`,
        { oneOf: [{ type: "string" }, { type: "null" }] },
      ]),
    );
    expect(checkOutputSchema(closed(properties), "provider-b")).toEqual([
      expect.stringContaining("this schema has 17"),
    ]);
  });

  it("decides structured output or json tool with a oneOf as the installed AI SDK does", async () => {
    const { supportsNativeStructuredOutputSchema } = await import("@ai-sdk/anthropic/internal");
    const optional = (count: number) => ({
      type: "object",
      properties: Object.fromEntries(
        Array.from({ length: count }, (_, index) => [`o${index}`, { type: "string" }]),
      ),
    });
    for (const schema of [
      closed({ v: { oneOf: [optional(11), { type: "null" }] } }),
      closed({ v: { oneOf: [{ type: "object", additionalProperties: true }, { type: "null" }] } }),
      union,
    ])
      expect(sentAsStructuredOutput(schema), JSON.stringify(schema)).toBe(
        supportsNativeStructuredOutputSchema(schema as never),
      );
  });

  it("takes a record's propertyNames of strings, and sends it to no provider", () => {
    const record = closed({
      scores: { type: "object", propertyNames: { type: "string" }, additionalProperties: { type: "number" } },
    });
    for (const provider of [undefined, "provider-a", "provider-b"] as const)
      expect(checkOutputSchema(record, provider)).toEqual([]);
    for (const provider of ["provider-a", "provider-b"] as const)
      expect(JSON.stringify(schemaForProvider(record, provider)), provider).not.toContain("propertyNames");
    expect(validateAgainstSchema(record, { scores: { a: 1 } }).valid).toBe(true);
  });

  it("refuses propertyNames that constrain the names", () => {
    const record = closed({
      scores: {
        type: "object",
        propertyNames: { type: "string", enum: ["a", "b"] },
        additionalProperties: { type: "number" },
      },
    });
    expect(checkOutputSchema(record, "provider-a")).toEqual([
      expect.stringContaining('#/properties/scores: keyword "propertyNames"'),
    ]);
  });

  it("refuses a tuple, naming what to write instead", () => {
    const tuple = closed({
      pair: {
        type: "array",
        prefixItems: [{ type: "string" }, { type: "number" }],
        items: false,
        minItems: 2,
        maxItems: 2,
      },
    });
    for (const provider of providers)
      expect(checkOutputSchema(tuple, provider)).toEqual([
        expect.stringMatching(
          /^#\/properties\/pair: a tuple \(prefixItems.*an object with a property for each position/,
        ),
      ]);
  });
});

describe("the output schema's size cap", () => {
  const withDescription = (description: string) => ({
    type: "object",
    properties: { title: { type: "string", description } },
  });
  const overhead = JSON.stringify(withDescription("")).length;

  it("counts the UTF-8 bytes of its JSON, as its message says", () => {
    // 30,000 "é" are 30,000 UTF-16 code units and 60,000 bytes: with 6,000 more, over 64 KiB.
    const schema = withDescription("é".repeat(30_000) + "x".repeat(6_000));
    expect(JSON.stringify(schema).length).toBeLessThan(64 * 1024);
    expect(checkOutputSchema(schema)).toEqual([
      "the output schema must be at most 65536 bytes of JSON (UTF-8)",
    ]);
  });

  it("takes a schema of exactly 64 KiB", () => {
    expect(checkOutputSchema(withDescription("x".repeat(64 * 1024 - overhead)))).toEqual([]);
    expect(checkOutputSchema(withDescription("x".repeat(64 * 1024 - overhead + 1)))).toEqual([
      "the output schema must be at most 65536 bytes of JSON (UTF-8)",
    ]);
  });
});
