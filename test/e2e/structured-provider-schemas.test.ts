import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { ProviderId } from "../../src/providers/provider-id.js";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowOf,
} from "../support/test-gateway.js";

/**
 * Schemas a project can save against what each provider's structured mode takes, with a fake that
 * refuses what the real provider refuses (test/fakes/fake-schema-refusals.ts): a schema the provider
 * would refuse on every call is refused when saved (422), never sent and answered 502 call after call.
 */
describe("output schemas per provider", () => {
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

  const call = (project: TestProject, provider: ProviderId) =>
    fetch(`${sluice.url}/v1/text/${project.projectId}`, {
      method: "POST",
      headers: { authorization: `Bearer ${project.bearer(provider)}`, "content-type": "application/json" },
      body: JSON.stringify({ text: "x" }),
    });

  /** A project holding `outputSchema` without the save-time checks, as one saved before a rule. */
  async function savedBeforeTheRule(provider: ProviderId, outputSchema: Record<string, unknown>) {
    const project = await createTestProject(sluice.gateway, { provider });
    await sluice.gateway.database.db
      .updateTable("projects")
      .set({ output_schema: JSON.stringify(outputSchema) })
      .where("id", "=", project.projectId)
      .execute();
    return project;
  }

  async function expectRefusedBeforeAnyCall(project: TestProject, provider: ProviderId, says: string) {
    const response = await call(project, provider);
    const body = (await response.json()) as { error: { code: string; message: string } };
    expect({ status: response.status, code: body.error.code }).toEqual({
      status: 422,
      code: "VALIDATION_ERROR",
    });
    expect(body.error.message).toContain(says);
    expect(fake.requests).toHaveLength(0);
    expect(await usageRowOf(sluice.gateway, response)).toMatchObject({ status: 422, cost_usd: null });
  }

  const object = (properties: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
    type: "object",
    properties,
    ...extra,
  });

  // Before, each was saved and every call was provider C's 400, Sluice's 502.
  const refusedByProviderC: Array<[string, Record<string, unknown>, Record<string, unknown>]> = [
    ["an array without items", object({ tags: { type: "array" } }), { tags: ["a"] }],
    ["a property without a type", object({ extra: {} }), { extra: 1 }],
    ["a property with only a description", object({ note: { description: "anything" } }), { note: "n" }],
    [
      "array items without a type",
      object({ list: { type: "array", items: { description: "x" } } }),
      { list: [1] },
    ],
    [
      "a $ref to a definition below the root's $defs",
      {
        type: "object",
        $defs: { group: { $defs: { item: { type: "string" } } } },
        properties: { item: { $ref: "#/$defs/group/$defs/item" } },
      },
      { item: "i" },
    ],
    [
      "a recursive $ref",
      {
        type: "object",
        $defs: {
          node: object({
            name: { type: "string" },
            kids: { type: "array", items: { $ref: "#/$defs/node" } },
          }),
        },
        properties: { root: { $ref: "#/$defs/node" } },
      },
      { root: { name: "r", kids: [] } },
    ],
  ];

  it.each(refusedByProviderC)("refuses %s for provider C when saved", async (_name, outputSchema) => {
    await expect(
      sluice.gateway.admin.createProject({ name: "c", provider: "provider-c", outputSchema }),
    ).rejects.toMatchObject({ code: "VALIDATION_ERROR", message: expect.stringContaining("provider-c") });
  });

  it.each(refusedByProviderC)(
    "answers 422 for %s on a provider C project saved before the rule, without a provider call",
    async (_name, outputSchema) => {
      const project = await savedBeforeTheRule("provider-c", outputSchema);
      await expectRefusedBeforeAnyCall(project, "provider-c", "provider-c");
    },
  );

  it.each(refusedByProviderC)("takes %s on providers A and B", async (_name, outputSchema, answer) => {
    for (const provider of ["provider-a", "provider-b"] as const) {
      const project = await createTestProject(sluice.gateway, { provider, outputSchema });
      fake.setStructuredOutput(answer);
      const response = await call(project, provider);
      expect(response.status, provider).toBe(200);
      expect(await response.json()).toEqual(answer);
    }
  });

  // What an extraction schema commonly holds, on each provider against a fake that refuses what the
  // provider refuses: nullable and optional fields, string enums, nested arrays of objects, $defs and
  // $ref, integers and numbers, a date-time string.
  it.each(["provider-a", "provider-b", "provider-c"] as const)(
    "takes and answers a typical extraction schema on %s",
    async (provider) => {
      const outputSchema = {
        type: "object",
        $defs: {
          money: object(
            { amount: { type: "number" }, currency: { type: "string", enum: ["EUR", "USD"] } },
            {
              required: ["amount", "currency"],
            },
          ),
        },
        properties: {
          issuedAt: { type: "string", format: "date-time" },
          vendor: { type: ["string", "null"] },
          note: { type: "string", nullable: true },
          total: { $ref: "#/$defs/money" },
          lines: {
            type: "array",
            items: object(
              {
                label: { type: "string" },
                quantity: { type: "integer", minimum: 1 },
                price: { $ref: "#/$defs/money" },
                tags: { type: "array", items: { type: "string" } },
              },
              { required: ["label", "quantity"] },
            ),
          },
          status: { anyOf: [{ type: "string", enum: ["paid", "open"] }, { type: "null" }] },
        },
        required: ["issuedAt", "vendor", "total", "lines", "status"],
        additionalProperties: false,
      };
      const project = await createTestProject(sluice.gateway, { provider, outputSchema });
      const answer = {
        issuedAt: "2026-11-29T10:00:00Z",
        vendor: null,
        total: { amount: 12.5, currency: "EUR" },
        lines: [{ label: "tea", quantity: 2, price: { amount: 6.25, currency: "EUR" }, tags: [] }],
        status: "paid",
      };
      fake.setStructuredOutput(answer);
      const response = await call(project, provider);
      expect(response.status).toBe(200);
      expect(await response.json()).toEqual(answer);
      expect(fake.requests).toHaveLength(1);
    },
  );

  const nullables = (count: number, optional = 0) => {
    const properties = Object.fromEntries(
      Array.from({ length: count + optional }, (_, index) => [
        `field${index}`,
        { type: "string", nullable: true },
      ]),
    );
    return object(properties, { required: Object.keys(properties).slice(0, count) });
  };
  const nullAnswer = (count: number) =>
    Object.fromEntries(Array.from({ length: count }, (_, index) => [`field${index}`, null]));

  // Before, the schema was saved, sent as provider B's structured output (every `nullable` a type
  // list) and refused by its grammar compiler on every call: Sluice's 502.
  it("refuses for provider B a schema with more than 16 properties that may be null or of several types", async () => {
    await expect(
      sluice.gateway.admin.createProject({ name: "b", provider: "provider-b", outputSchema: nullables(17) }),
    ).rejects.toMatchObject({ code: "VALIDATION_ERROR", message: expect.stringContaining("provider-b") });
    const properties = {
      ...nullables(8).properties,
      ...Object.fromEntries(
        Array.from({ length: 9 }, (_, index) => [
          `either${index}`,
          { anyOf: [{ type: "string" }, { type: "integer" }] },
        ]),
      ),
    };
    const unions = object(properties, { required: Object.keys(properties) });
    await expect(
      sluice.gateway.admin.createProject({ name: "b", provider: "provider-b", outputSchema: unions }),
    ).rejects.toMatchObject({ code: "VALIDATION_ERROR" });
    const project = await savedBeforeTheRule("provider-b", nullables(17));
    await expectRefusedBeforeAnyCall(project, "provider-b", "provider-b");
  });

  it("takes 16 such properties on provider B, and more where the schema goes as a tool", async () => {
    const sixteen = await createTestProject(sluice.gateway, {
      provider: "provider-b",
      outputSchema: nullables(16),
    });
    fake.setStructuredOutput(nullAnswer(16));
    expect((await call(sixteen, "provider-b")).status).toBe(200);
    // Over 10 optional properties, the AI SDK sends the schema as a `json` tool, which has no such limit.
    const asTool = await createTestProject(sluice.gateway, {
      provider: "provider-b",
      outputSchema: nullables(17, 11),
    });
    fake.setStructuredOutput(nullAnswer(17));
    expect((await call(asTool, "provider-b")).status).toBe(200);
    expect((fake.last()?.json as { tools?: unknown[] } | undefined)?.tools).toHaveLength(1);
    for (const provider of ["provider-a", "provider-c"] as const) {
      const project = await createTestProject(sluice.gateway, { provider, outputSchema: nullables(17) });
      expect((await call(project, provider)).status, provider).toBe(200);
    }
  });

  // Provider B documents enum values as strings, numbers, booleans or null only ("complex types in
  // enums" are not supported) and refuses an unsupported schema with a 400 before inference. Before,
  // such a schema was saved, and every call was that 400, Sluice's 502.
  it("refuses for provider B an enum holding an object or array where the AI SDK sends structured output", async () => {
    const outputSchema = object(
      {
        size: {
          enum: [
            { w: 1, h: 1 },
            { w: 2, h: 2 },
          ],
        },
        pair: {
          type: "array",
          items: { type: "integer" },
          enum: [
            [1, 2],
            [3, 4],
          ],
        },
      },
      { required: ["size", "pair"] },
    );
    await expect(
      sluice.gateway.admin.createProject({ name: "b", provider: "provider-b", outputSchema }),
    ).rejects.toMatchObject({
      code: "VALIDATION_ERROR",
      details: {
        provider: "provider-b",
        problems: [
          expect.stringContaining("#/properties/size/enum"),
          expect.stringContaining("#/properties/pair/enum"),
        ],
      },
    });
    const project = await savedBeforeTheRule("provider-b", outputSchema);
    await expectRefusedBeforeAnyCall(project, "provider-b", "provider-b");
    // Sent as a `json` tool (an open object), which takes it; so do providers A (non-strict) and B's
    // models the AI SDK gives no structured output.
    const answer = { size: { w: 2, h: 2 }, pair: [3, 4] };
    const open = { ...outputSchema, additionalProperties: true };
    const asTool = await createTestProject(sluice.gateway, { provider: "provider-b", outputSchema: open });
    fake.setStructuredOutput(answer);
    expect((await call(asTool, "provider-b")).status).toBe(200);
    expect((fake.last()?.json as { tools?: unknown[] } | undefined)?.tools).toHaveLength(1);
    const olderModel = await createTestProject(sluice.gateway, {
      provider: "provider-b",
      model: "claude-sonnet-4-20250514",
      outputSchema,
    });
    expect((await call(olderModel, "provider-b")).status).toBe(200);
    const onA = await createTestProject(sluice.gateway, { provider: "provider-a", outputSchema });
    const response = await call(onA, "provider-a");
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual(answer);
  });

  // The AI SDK sends provider B's structured output with every object closed (`additionalProperties:
  // false`), so a required name an object does not list can never be answered. Before, such a schema
  // was saved, and every call failed: two billed attempts, then 502.
  it("refuses for provider B a required name that is not a property where the AI SDK sends structured output", async () => {
    const outputSchema = object({ title: { type: "string" } }, { required: ["title", "summary"] });
    await expect(
      sluice.gateway.admin.createProject({ name: "b", provider: "provider-b", outputSchema }),
    ).rejects.toMatchObject({
      code: "VALIDATION_ERROR",
      details: { provider: "provider-b", problems: [expect.stringContaining("#/required/1")] },
    });
    const project = await savedBeforeTheRule("provider-b", outputSchema);
    await expectRefusedBeforeAnyCall(project, "provider-b", "provider-b");
    const answer = { title: "t", summary: "s" };
    // Provider A is sent the object open, and answers it.
    const onA = await createTestProject(sluice.gateway, { provider: "provider-a", outputSchema });
    fake.setStructuredOutput(answer);
    const response = await call(onA, "provider-a");
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual(answer);
  });

  // The AI SDK gives Claude Sonnet 4.0 no structured output: the schema goes as a `json` tool.
  it("takes more on a provider B model the AI SDK sends a json tool, and refuses a change to one it does not", async () => {
    const project = await createTestProject(sluice.gateway, {
      provider: "provider-b",
      model: "claude-sonnet-4-20250514",
      outputSchema: nullables(17),
    });
    fake.setStructuredOutput(nullAnswer(17));
    expect((await call(project, "provider-b")).status).toBe(200);
    expect((fake.last()?.json as { tools?: unknown[] } | undefined)?.tools).toHaveLength(1);
    await expect(
      sluice.gateway.admin.updateProject(project.projectId, { model: "claude-sonnet-5-5" }),
    ).rejects.toMatchObject({ code: "VALIDATION_ERROR", message: expect.stringContaining("provider-b") });
  });

  // /v1/pdf sends provider B's PDF model when the project's model reads no PDFs (model-choice.ts): Claude
  // 3.5 Haiku's text and vision calls go as a `json` tool, which takes 17 unions, while the PDF
  // calls go to Claude Sonnet 5.5 as structured output, which does not. Before, the save checked the
  // text route's model alone: the schema was saved, and every PDF call answered 422.
  it("checks a schema against the model each structured route sends, and names the route it fails on", async () => {
    const pdf = `data:application/pdf;base64,${Buffer.from("%PDF-1.4\n%%EOF\n").toString("base64")}`;
    const fields = { name: "b", provider: "provider-b", model: "claude-3-5-haiku-latest" } as const;
    await expect(
      sluice.gateway.admin.createProject({ ...fields, outputSchema: nullables(17) }),
    ).rejects.toMatchObject({
      code: "VALIDATION_ERROR",
      message: expect.stringMatching(/provider-b on \/v1\/pdf \(model claude-sonnet-5-5\): #: provider B's/),
      details: {
        provider: "provider-b",
        problems: [expect.stringContaining("at most 16")],
        routes: [{ route: "/v1/pdf", model: "claude-sonnet-5-5", problems: [expect.stringContaining("16")] }],
      },
    });
    const project = await createTestProject(sluice.gateway, {
      provider: "provider-b",
      outputSchema: nullables(16),
    });
    await expect(
      sluice.gateway.admin.updateProject(project.projectId, {
        model: "claude-3-5-haiku-latest",
        outputSchema: nullables(17),
      }),
    ).rejects.toMatchObject({ code: "VALIDATION_ERROR", message: expect.stringContaining("/v1/pdf") });
    // Stored before the rule: the text route still answers, the PDF route refuses before any call.
    const stored = await createTestProject(sluice.gateway, { ...fields });
    await sluice.gateway.database.db
      .updateTable("projects")
      .set({ output_schema: JSON.stringify(nullables(17)) })
      .where("id", "=", stored.projectId)
      .execute();
    fake.setStructuredOutput(nullAnswer(17));
    expect((await call(stored, "provider-b")).status).toBe(200);
    fake.clear();
    const response = await fetch(`${sluice.url}/v1/pdf/${stored.projectId}`, {
      method: "POST",
      headers: { authorization: `Bearer ${stored.bearer("provider-b")}`, "content-type": "application/json" },
      body: JSON.stringify({ pdf }),
    });
    expect(response.status).toBe(422);
    expect(((await response.json()) as { error: { message: string } }).error.message).toContain(
      "for provider-b on /v1/pdf (model claude-sonnet-5-5): #: provider B's",
    );
    expect(fake.requests).toHaveLength(0);
  });

  // Provider C cannot be told to leave other properties out (its schema has no additionalProperties),
  // nor is provider A's non-strict mode held to it: before, one extra key failed the answer, the
  // repair answered it again, and the call was 502 after two billed attempts (docs/decisions/0019).
  describe("an answer holding properties a closed object does not list", () => {
    const closedSchema = {
      type: "object",
      $defs: {
        person: {
          type: "object",
          properties: { name: { type: "string" } },
          required: ["name"],
          additionalProperties: false,
        },
      },
      properties: {
        title: { type: "string" },
        author: { $ref: "#/$defs/person" },
        items: {
          type: "array",
          items: {
            type: "object",
            properties: { label: { type: "string" }, count: { type: "integer" } },
            required: ["label"],
            additionalProperties: false,
          },
        },
        meta: { type: "object", properties: { source: { type: "string" } } },
      },
      required: ["title", "author", "items"],
      additionalProperties: false,
    };
    const listed = {
      title: "t",
      author: { name: "n" },
      items: [{ label: "a", count: 3 }, { label: "b" }],
      meta: { source: "s", open: true },
    };
    const answered = {
      ...listed,
      summary: "extra at the root",
      author: { name: "n", email: "x@example.com" },
      items: [
        { label: "a", count: 3, note: "extra" },
        { label: "b", confidence: 0.5 },
      ],
    };

    it.each(["provider-a", "provider-b", "provider-c"] as const)(
      "on %s, answers without them at the first attempt; an open object keeps its own",
      async (provider) => {
        const project = await createTestProject(sluice.gateway, { provider, outputSchema: closedSchema });
        fake.setStructuredOutput(answered);
        const response = await call(project, provider);
        expect(response.status).toBe(200);
        expect(await response.json()).toEqual(listed);
        expect(fake.requests).toHaveLength(1);
      },
    );

    it("keeps them inside anyOf, where the branch that applies is not known, and repairs as before", async () => {
      const outputSchema = {
        type: "object",
        properties: {
          shape: {
            anyOf: [
              {
                type: "object",
                properties: { r: { type: "number" } },
                required: ["r"],
                additionalProperties: false,
              },
              {
                type: "object",
                properties: { w: { type: "number" } },
                required: ["w"],
                additionalProperties: false,
              },
            ],
          },
        },
        required: ["shape"],
      };
      const project = await createTestProject(sluice.gateway, { provider: "provider-c", outputSchema });
      fake.setStructuredOutput({ shape: { r: 1, w: 2 } });
      const response = await call(project, "provider-c");
      expect(response.status).toBe(502);
      expect(fake.requests).toHaveLength(2);
    });
  });

  // The AI SDK sends provider C's responseSchema without the bounds (only minLength), so the model
  // was never told them and an answer out of range cost a repair; provider B's SDK moves them into the
  // description the same way.
  it("tells provider C's model the bounds its schema cannot carry, in the description", async () => {
    const outputSchema = object(
      {
        score: { type: "integer", minimum: 0, maximum: 10, description: "How good" },
        code: { type: "string", pattern: "^[A-Z]{3}$", maxLength: 3 },
        tags: { type: "array", items: { type: "string" }, minItems: 1, maxItems: 5 },
        plain: { type: "string" },
      },
      { required: ["score"] },
    );
    const project = await createTestProject(sluice.gateway, { provider: "provider-c", outputSchema });
    fake.setStructuredOutput({ score: 7 });
    expect((await call(project, "provider-c")).status).toBe(200);
    type Sent = {
      generationConfig: { responseSchema: { properties: Record<string, { description?: string }> } };
    };
    const sent = (fake.last()!.json as Sent).generationConfig.responseSchema.properties;
    expect(sent.score?.description).toBe("How good\nminimum: 0; maximum: 10.");
    expect(sent.code?.description).toBe("max length: 3; pattern: ^[A-Z]{3}$.");
    expect(sent.tags?.description).toBe("min items: 1; max items: 5.");
    expect(sent.plain?.description).toBeUndefined();
  });

  // Before, provider C refused such a schema when saved (its API answers "only 'enum' and 'date-time'
  // are supported for STRING type"), though providers A and B take it and Sluice checks no format.
  it("takes a string format provider C has no room for, and tells its model in the description", async () => {
    const outputSchema = object(
      {
        contact: { type: "string", format: "email", description: "Who to write to" },
        due: { type: ["string", "null"], format: "date" },
        at: { type: "string", format: "date-time" },
        id: { type: "integer", format: "int64" },
      },
      { required: ["contact"] },
    );
    const project = await createTestProject(sluice.gateway, { provider: "provider-c", outputSchema });
    fake.setStructuredOutput({ contact: "someone@example.com", due: null });
    const response = await call(project, "provider-c");
    expect(response.status).toBe(200);
    type Sent = {
      generationConfig: {
        responseSchema: { properties: Record<string, { format?: string; description?: string }> };
      };
    };
    const sent = (fake.last()!.json as Sent).generationConfig.responseSchema.properties;
    expect(sent.contact).toMatchObject({ description: "Who to write to\nformat: email." });
    expect(sent.contact?.format).toBeUndefined();
    expect(sent.due).toMatchObject({ description: "format: date." });
    expect(sent.due?.format).toBeUndefined();
    expect(sent.at?.format).toBe("date-time");
    expect(sent.id?.format).toBe("int64");
  });

  // Before, provider C refused these when saved: the AI SDK sends a number's or boolean's enum as
  // strings, which the API refuses ("enum: only allowed for STRING type").
  it("takes an enum or const of numbers or booleans on provider C, and tells its model the values", async () => {
    const outputSchema = object(
      {
        stars: { type: "integer", enum: [1, 2, 3, 4, 5], description: "The rating" },
        ok: { enum: [true, false] },
        version: { const: 2 },
        kind: { enum: [1, "two", null] },
        label: { type: "string", enum: ["a", "b"] },
      },
      { required: ["stars", "ok", "version", "kind"] },
    );
    const project = await createTestProject(sluice.gateway, { provider: "provider-c", outputSchema });
    const answer = { stars: 4, ok: true, version: 2, kind: null, label: "a" };
    fake.setStructuredOutput(answer);
    const response = await call(project, "provider-c");
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual(answer);
    type Sent = {
      generationConfig: { responseSchema: { properties: Record<string, Record<string, unknown>> } };
    };
    const sent = (fake.last()!.json as Sent).generationConfig.responseSchema.properties;
    expect(sent.stars).toEqual({ type: "integer", description: "The rating\none of: 1, 2, 3, 4, 5." });
    expect(sent.ok).toEqual({ type: "boolean", description: "one of: true, false." });
    expect(sent.version).toEqual({ type: "integer", description: "one of: 2." });
    expect(sent.kind).toMatchObject({ nullable: true, description: 'one of: 1, "two", null.' });
    expect(sent.label).toEqual({ type: "string", enum: ["a", "b"] });
    // A wrong value is still refused, and repaired.
    fake.setStructuredOutput({ ...answer, stars: 6 });
    expect((await call(project, "provider-c")).status).toBe(502);
  });
});
