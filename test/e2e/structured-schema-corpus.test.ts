import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { ProviderId } from "../../src/providers/provider-id.js";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import { createTestProject, startTestGateway, type TestGateway } from "../support/test-gateway.js";

type Schema = Record<string, unknown>;
/** What provider A, B or C was sent as the schema: A's `json_schema`, B's structured output or tool, C's config. */
type Sent = Record<string, unknown>;

interface Case {
  schema: Schema;
  /** An answer that matches the schema. */
  answer: Record<string, unknown>;
  /** An answer that does not: it must never be a 200, whatever the provider was sent. */
  wrong: Record<string, unknown>;
  /** Per provider: refused when saved (the problem's text), or what the request carried. */
  expect: Record<ProviderId, { refused: string } | ((sent: Sent) => void)>;
}

const object = (properties: Record<string, unknown>, extra: Schema = {}): Schema => ({
  type: "object",
  properties,
  ...extra,
});
const closed = (properties: Record<string, unknown>, extra: Schema = {}): Schema =>
  object(properties, { required: Object.keys(properties), additionalProperties: false, ...extra });
const nested = (levels: number): Schema =>
  levels === 0 ? { type: "string" } : closed({ child: nested(levels - 1) });
const nestedAnswer = (levels: number): unknown =>
  levels === 0 ? "leaf" : { child: nestedAnswer(levels - 1) };
const hundreds = Array.from({ length: 300 }, (_, index) => `field${index}`);

const structuredOutputB = (sent: Sent) => expect(sent).toHaveProperty("format.type", "json_schema");
const jsonToolB = (sent: Sent) => expect(sent).toMatchObject({ tools: [{ name: "json" }] });
const sentAsIs = (sent: Sent) =>
  expect(sent).toMatchObject({ type: "json_schema", json_schema: { strict: false } });

/**
 * Output schemas as apps write them (by hand, or from Zod and Pydantic), each saved on every
 * provider and called through the fake, which refuses what the real provider refuses
 * (test/fakes/fake-schema-refusals.ts): what each provider is sent, and that an answer is checked
 * against the project's own schema, never only against what a provider was sent.
 */
const corpus: Record<string, Case> = {
  "optional properties, as Zod writes them": {
    schema: {
      $schema: "https://json-schema.org/draft/2020-12/schema",
      ...object(
        { title: { type: "string" }, note: { type: "string", description: "Only when given" } },
        { required: ["title"], additionalProperties: false },
      ),
    },
    answer: { title: "t" },
    wrong: { note: "no title" },
    expect: {
      "provider-a": (sent) => {
        sentAsIs(sent);
        expect(sent).not.toHaveProperty("json_schema.schema.$schema");
      },
      "provider-b": structuredOutputB,
      "provider-c": (sent) =>
        expect(sent).toMatchObject({ responseSchema: { required: ["title"], properties: { note: {} } } }),
    },
  },
  "anyOf of objects told apart by a const": {
    schema: closed({
      shape: {
        anyOf: [
          closed({ kind: { const: "circle" }, radius: { type: "number" } }),
          closed({ kind: { const: "square" }, side: { type: "number" } }),
        ],
      },
    }),
    answer: { shape: { kind: "square", side: 2 } },
    wrong: { shape: { kind: "square", radius: 2 } },
    expect: {
      "provider-a": sentAsIs,
      "provider-b": structuredOutputB,
      "provider-c": (sent) =>
        expect(sent).toMatchObject({
          responseSchema: {
            properties: { shape: { anyOf: [{ properties: { kind: { enum: ["circle"] } } }, {}] } },
          },
        }),
    },
  },
  // Sent as anyOf, which every provider takes (decision 0021); the answer is held to the oneOf.
  "oneOf, as Zod writes a discriminated union": {
    schema: {
      $schema: "https://json-schema.org/draft/2020-12/schema",
      ...closed({
        shape: {
          oneOf: [
            closed({ kind: { type: "string", const: "circle" }, radius: { type: "number" } }),
            closed({ kind: { type: "string", const: "square" }, side: { type: "number" } }),
          ],
        },
      }),
    },
    answer: { shape: { kind: "square", side: 2 } },
    wrong: { shape: { kind: "square", radius: 2 } },
    expect: {
      "provider-a": (sent) => {
        sentAsIs(sent);
        expect(sent).toHaveProperty("json_schema.schema.properties.shape.anyOf.1.properties.side");
        expect(JSON.stringify(sent)).not.toContain("oneOf");
      },
      "provider-b": (sent) => {
        structuredOutputB(sent);
        expect(sent).toHaveProperty("format.schema.properties.shape.anyOf.1.properties.side");
      },
      "provider-c": (sent) => {
        expect(sent).toMatchObject({
          responseSchema: {
            properties: { shape: { anyOf: [{ properties: { kind: { enum: ["circle"] } } }, {}] } },
          },
        });
        expect(JSON.stringify(sent)).not.toContain("oneOf");
      },
    },
  },
  "a record, as Zod writes it (propertyNames of strings)": {
    schema: closed({
      scores: { type: "object", propertyNames: { type: "string" }, additionalProperties: { type: "number" } },
    }),
    answer: { scores: { a: 1, b: 2 } },
    wrong: { scores: { a: "one" } },
    expect: {
      "provider-a": (sent) => {
        expect(sent).toHaveProperty("json_schema.schema.properties.scores.additionalProperties", {
          type: "number",
        });
        expect(JSON.stringify(sent)).not.toContain("propertyNames");
      },
      "provider-b": (sent) => {
        jsonToolB(sent);
        expect(JSON.stringify(sent)).not.toContain("propertyNames");
      },
      "provider-c": { refused: "provider C takes an object only with properties" },
    },
  },
  "a tuple, as Zod writes it": {
    schema: closed({
      pair: {
        type: "array",
        prefixItems: [{ type: "string" }, { type: "number" }],
        items: false,
        minItems: 2,
        maxItems: 2,
      },
    }),
    answer: {},
    wrong: {},
    expect: {
      "provider-a": { refused: "a tuple (prefixItems" },
      "provider-b": { refused: "a tuple (prefixItems" },
      "provider-c": { refused: "a tuple (prefixItems" },
    },
  },
  "$ref to $defs, as Pydantic writes a model it uses twice": {
    schema: {
      ...closed({ home: { $ref: "#/$defs/Address" }, work: { $ref: "#/$defs/Address" } }),
      $defs: { Address: closed({ city: { type: "string" } }, { title: "Address" }) },
    },
    answer: { home: { city: "a" }, work: { city: "b" } },
    wrong: { home: { city: "a" }, work: { town: "b" } },
    expect: {
      "provider-a": (sent) => expect(sent).toHaveProperty("json_schema.schema.$defs.Address"),
      "provider-b": structuredOutputB,
      // The AI SDK writes each use out in full: the Gemini API takes no $ref.
      "provider-c": (sent) => {
        expect(sent).toMatchObject({
          responseSchema: { properties: { work: { properties: { city: {} } } } },
        });
        expect(JSON.stringify(sent)).not.toContain("$ref");
      },
    },
  },
  "a recursive $ref": {
    schema: {
      ...closed({ root: { $ref: "#/$defs/Node" } }),
      $defs: {
        Node: object(
          { name: { type: "string" }, children: { type: "array", items: { $ref: "#/$defs/Node" } } },
          {
            required: ["name"],
          },
        ),
      },
    },
    answer: { root: { name: "a", children: [{ name: "b" }] } },
    wrong: { root: { name: "a", children: [{ label: "b" }] } },
    expect: {
      "provider-a": sentAsIs,
      "provider-b": jsonToolB,
      "provider-c": { refused: "no recursive $ref" },
    },
  },
  "enums of strings and of numbers": {
    schema: closed({
      color: { type: "string", enum: ["red", "blue"] },
      stars: { type: "integer", enum: [1, 2, 3] },
    }),
    answer: { color: "red", stars: 3 },
    wrong: { color: "red", stars: 4 },
    expect: {
      "provider-a": (sent) =>
        expect(sent).toHaveProperty("json_schema.schema.properties.stars.enum", [1, 2, 3]),
      "provider-b": structuredOutputB,
      "provider-c": (sent) =>
        expect(sent).toMatchObject({
          responseSchema: { properties: { color: { enum: ["red", "blue"] }, stars: { type: "integer" } } },
        }),
    },
  },
  "formats, a pattern and bounds": {
    schema: closed({
      at: { type: "string", format: "date-time" },
      email: { type: "string", format: "email" },
      site: { type: "string", format: "uri" },
      code: { type: "string", pattern: "^[A-Z]{3}$" },
      score: { type: "number", minimum: 0, maximum: 10 },
    }),
    answer: {
      at: "2026-11-30T00:00:00Z",
      email: "a@example.com",
      site: "https://example.com",
      code: "ABC",
      score: 7,
    },
    wrong: {
      at: "2026-11-30T00:00:00Z",
      email: "a@example.com",
      site: "https://example.com",
      code: "abc",
      score: 11,
    },
    expect: {
      "provider-a": (sent) => expect(sent).toHaveProperty("json_schema.schema.properties.score.maximum", 10),
      "provider-b": (sent) => {
        structuredOutputB(sent);
        expect(sent).toHaveProperty("format.schema.properties.email.format", "email");
        expect(sent).toHaveProperty("format.schema.properties.score.description", "minimum: 0; maximum: 10.");
      },
      "provider-c": (sent) =>
        expect(sent).toMatchObject({
          responseSchema: {
            properties: {
              at: { format: "date-time" },
              email: { description: "format: email." },
              code: { description: "pattern: ^[A-Z]{3}$." },
              score: { description: "minimum: 0; maximum: 10." },
            },
          },
        }),
    },
  },
  "nullable properties: a type list, nullable, anyOf with null": {
    schema: closed({
      a: { type: ["string", "null"] },
      b: { type: "integer", nullable: true },
      c: { anyOf: [{ type: "string" }, { type: "null" }] },
      rows: { type: "array", items: closed({ label: { type: "string" } }) },
    }),
    answer: { a: null, b: null, c: null, rows: [{ label: "x" }] },
    wrong: { a: null, b: "one", c: null, rows: [{ label: "x" }] },
    expect: {
      "provider-a": (sent) =>
        expect(sent).toHaveProperty("json_schema.schema.properties.b.type", ["integer", "null"]),
      "provider-b": (sent) =>
        expect(sent).toHaveProperty("format.schema.properties.b.type", ["integer", "null"]),
      "provider-c": (sent) =>
        expect(sent).toMatchObject({
          responseSchema: {
            properties: {
              a: { type: "string", nullable: true },
              b: { type: "integer", nullable: true },
              c: { type: "string", nullable: true },
            },
          },
        }),
    },
  },
  "a top-level array": {
    schema: { type: "array", items: { type: "string" } },
    answer: {},
    wrong: {},
    expect: {
      "provider-a": { refused: '"type": "object"' },
      "provider-b": { refused: '"type": "object"' },
      "provider-c": { refused: '"type": "object"' },
    },
  },
  "additionalProperties left out": {
    schema: object({ title: { type: "string" } }, { required: ["title"] }),
    answer: { title: "t", extra: 1 },
    wrong: { extra: 1 },
    expect: {
      "provider-a": (sent) => expect(sent).not.toHaveProperty("json_schema.schema.additionalProperties"),
      // The AI SDK closes every object of provider B's structured output.
      "provider-b": (sent) => expect(sent).toHaveProperty("format.schema.additionalProperties", false),
      "provider-c": (sent) => expect(sent).toHaveProperty("responseSchema.required", ["title"]),
    },
  },
  "additionalProperties true": {
    schema: object({ title: { type: "string" } }, { required: ["title"], additionalProperties: true }),
    answer: { title: "t", extra: 1 },
    wrong: { extra: 1 },
    expect: {
      "provider-a": (sent) => expect(sent).toHaveProperty("json_schema.schema.additionalProperties", true),
      "provider-b": jsonToolB,
      "provider-c": (sent) => expect(sent).toHaveProperty("responseSchema.required", ["title"]),
    },
  },
  "additionalProperties a schema (a map)": {
    schema: closed({ scores: { type: "object", additionalProperties: { type: "number" } } }),
    answer: { scores: { a: 1, b: 2 } },
    wrong: { scores: { a: "one" } },
    expect: {
      "provider-a": (sent) =>
        expect(sent).toHaveProperty("json_schema.schema.properties.scores.additionalProperties", {
          type: "number",
        }),
      "provider-b": jsonToolB,
      "provider-c": { refused: "provider C takes an object only with properties" },
    },
  },
  "ten levels of nesting": {
    schema: nested(10),
    answer: nestedAnswer(10) as Record<string, unknown>,
    wrong: nestedAnswer(9) as Record<string, unknown>,
    expect: { "provider-a": sentAsIs, "provider-b": structuredOutputB, "provider-c": () => {} },
  },
  "eleven levels of nesting": {
    schema: nested(11),
    answer: {},
    wrong: {},
    expect: {
      "provider-a": { refused: "nests deeper than 10 levels" },
      "provider-b": { refused: "nests deeper than 10 levels" },
      "provider-c": { refused: "nests deeper than 10 levels" },
    },
  },
  "300 properties": {
    schema: closed(Object.fromEntries(hundreds.map((name) => [name, { type: "string" }]))),
    answer: Object.fromEntries(hundreds.map((name) => [name, "v"])),
    wrong: Object.fromEntries(hundreds.slice(1).map((name) => [name, "v"])),
    expect: {
      "provider-a": (sent) =>
        expect(
          Object.keys(
            (sent as { json_schema: { schema: { properties: object } } }).json_schema.schema.properties,
          ),
        ).toHaveLength(300),
      "provider-b": (sent) => {
        structuredOutputB(sent);
        expect(sent).toHaveProperty("format.schema.required", hundreds);
      },
      "provider-c": (sent) => expect(sent).toHaveProperty("responseSchema.required", hundreds),
    },
  },
};

describe("a corpus of output schemas, on every provider", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway({ ...providerBaseUrls(fake) });
  });

  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });

  beforeEach(() => fake.clear());

  /** The schema part of the request a provider received. */
  const sentSchema = (provider: ProviderId): Sent => {
    const json = fake.last()?.json as Record<string, Sent | undefined>;
    if (provider === "provider-a") return json.response_format ?? {};
    if (provider === "provider-b") return json.output_config ?? { tools: json.tools };
    return json.generationConfig ?? {};
  };

  const cases = Object.entries(corpus).flatMap(([name, entry]) =>
    (["provider-a", "provider-b", "provider-c"] as const).map((provider) => [name, provider, entry] as const),
  );

  it.each(cases)("%s on %s", async (_name, provider, { schema, answer, wrong, expect: expected }) => {
    const outcome = expected[provider];
    if (typeof outcome !== "function") {
      await expect(
        sluice.gateway.admin.createProject({ name: "p", provider, outputSchema: schema }),
      ).rejects.toMatchObject({
        code: "VALIDATION_ERROR",
        message: expect.stringContaining(outcome.refused),
      });
      return;
    }
    const project = await createTestProject(sluice.gateway, { provider, outputSchema: schema });
    const call = () =>
      fetch(`${sluice.url}/v1/text/${project.projectId}`, {
        method: "POST",
        headers: { authorization: `Bearer ${project.bearer(provider)}`, "content-type": "application/json" },
        body: JSON.stringify({ text: "x" }),
      });
    fake.setStructuredOutput(answer);
    const response = await call();
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual(answer);
    expect(fake.requests).toHaveLength(1);
    outcome(sentSchema(provider));
    // The answer is checked against the project's schema itself: asked once more, then 502.
    fake.clear();
    fake.setStructuredOutput(wrong);
    const refused = await call();
    expect(refused.status).toBe(502);
    expect(fake.requests).toHaveLength(2);
  });

  // The providers are sent a oneOf as anyOf, under which an answer may match two branches: the
  // project's oneOf refuses it, and the model is asked once more, told why.
  it.each(["provider-a", "provider-b", "provider-c"] as const)(
    "repairs an answer that matches two branches of a oneOf, on %s",
    async (provider) => {
      const schema = closed({ n: { oneOf: [{ type: "number" }, { type: "integer" }] } });
      const project = await createTestProject(sluice.gateway, { provider, outputSchema: schema });
      let answers = 0;
      fake.setStructuredOutput(() => (++answers === 1 ? { n: 3 } : { n: 2.5 }));
      const response = await fetch(`${sluice.url}/v1/text/${project.projectId}`, {
        method: "POST",
        headers: { authorization: `Bearer ${project.bearer(provider)}`, "content-type": "application/json" },
        body: JSON.stringify({ text: "x" }),
      });
      expect(response.status).toBe(200);
      expect(await response.json()).toEqual({ n: 2.5 });
      expect(fake.requests).toHaveLength(2);
      expect(JSON.stringify(sentSchema(provider))).not.toContain("oneOf");
      expect(fake.requests[1]?.body.toString()).toContain("must match exactly one schema in oneOf");
    },
  );
});
