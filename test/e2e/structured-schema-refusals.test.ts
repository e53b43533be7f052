import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import {
  recordedOtherStructuredOutputRefusals,
  recordedSchemaRefusals,
} from "../fakes/fake-schema-refusals.js";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import { providerA } from "../fakes/fake-upstream-responses.js";
import {
  createTestProject,
  logLinesOf,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowOf,
} from "../support/test-gateway.js";

const schema = {
  type: "object",
  properties: { secretFieldName: { type: "string" } },
  required: ["secretFieldName"],
  additionalProperties: false,
};

type Provider = "provider-a" | "provider-b" | "provider-c";

/**
 * A provider's 400 for the project's output schema (one Sluice's save-time check did not foresee):
 * every call is refused the same way, so it is the project's admin's to fix, not the provider's
 * failure (which was 502, and invited retries that were refused again for ever). The shapes are the
 * recorded ones (test/fakes/fake-schema-refusals.ts).
 */
describe("a structured analysis whose output schema the provider refuses", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway({ ...providerBaseUrls(fake), logLevel: "warn" });
  });
  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });
  beforeEach(() => fake.clear());

  const post = (project: TestProject, provider: Provider) =>
    fetch(`${sluice.url}/v1/text/${project.projectId}`, {
      method: "POST",
      headers: { authorization: `Bearer ${project.bearer(provider)}`, "content-type": "application/json" },
      body: JSON.stringify({ text: "x" }),
    });

  const refusalLines = (from: number) =>
    logLinesOf(sluice, from).filter((line) => String(line.msg).includes("output schema"));

  it.each(recordedSchemaRefusals.map((shape) => [shape.provider, shape.what, shape.body] as const))(
    "answers 422 schemaRefused on %s's 400 for %s, without its words, and logs it for the operator",
    async (provider, _what, body) => {
      const project = await createTestProject(sluice.gateway, { provider, outputSchema: schema });
      const before = sluice.logs.length;
      fake.enqueueResponse({ status: 400, body });
      const response = await post(project, provider);
      expect(response.status).toBe(422);
      const { error } = (await response.json()) as {
        error: { code: string; message: string; details: unknown };
      };
      expect(error.code).toBe("VALIDATION_ERROR");
      expect(error.message).toBe(
        "The provider refused this project's output schema (too complex for it, or a keyword or shape it does not take); the project's admin must simplify the schema, and a retry is refused the same way",
      );
      // Not repaired: the same schema is refused on every call.
      expect(fake.requests).toHaveLength(1);
      const row = await usageRowOf(sluice.gateway, response);
      expect(row).toMatchObject({ status: 422, outcome: "error", error_code: "VALIDATION_ERROR" });
      expect(error.details).toEqual({
        reason: "schemaRefused",
        providerStatus: 400,
        retryable: false,
        model: row.model,
        usage: { inputTokens: null, outputTokens: null, cachedInputTokens: null, reasoningTokens: null },
      });
      expect(JSON.stringify(error)).not.toMatch(
        /req_011|grammar|states|Invalid schema|nesting|draft|missing/,
      );
      // One line for the operator, naming the project and what kind of refusal, never the schema.
      const lines = refusalLines(before);
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatchObject({
        level: "warn",
        msg: "project output schema refused by the provider",
        projectId: project.projectId,
        provider,
        reason: expect.stringMatching(/^(tooComplex|unsupported)$/),
        model: row.model,
        route: "/v1/text",
      });
      expect(JSON.stringify(lines)).not.toMatch(/secretFieldName|req_011|grammar|Invalid schema/);
    },
  );

  it("names the refusal's kind in the log: too complex, or a shape the provider does not take", async () => {
    const kinds: Record<string, string> = {};
    for (const shape of recordedSchemaRefusals) {
      const project = await createTestProject(sluice.gateway, {
        provider: shape.provider,
        outputSchema: schema,
      });
      const before = sluice.logs.length;
      fake.enqueueResponse({ status: 400, body: shape.body });
      expect((await post(project, shape.provider)).status).toBe(422);
      kinds[`${shape.provider} ${shape.what}`] = String(refusalLines(before)[0]?.reason);
    }
    expect(kinds).toEqual({
      "provider-a a schema it does not take": "unsupported",
      "provider-b a schema too complex for its grammar compiler": "tooComplex",
      "provider-b a schema its structured output does not take": "unsupported",
      "provider-b a tool schema it does not take": "unsupported",
      "provider-c a schema with too many states": "tooComplex",
      "provider-c a schema nested too deep": "tooComplex",
      "provider-c a schema field it does not take": "unsupported",
    });
  });

  it("logs one line per project and kind per window, however many calls are refused", async () => {
    const project = await createTestProject(sluice.gateway, { provider: "provider-c", outputSchema: schema });
    const refusal = recordedSchemaRefusals.find((shape) => shape.what === "a schema with too many states");
    const before = sluice.logs.length;
    for (let call = 0; call < 3; call++) {
      fake.enqueueResponse({ status: 400, body: refusal?.body });
      expect((await post(project, "provider-c")).status).toBe(422);
    }
    expect(refusalLines(before)).toHaveLength(1);
  });

  it("answers a schema refusal of the repair the same way, with the first attempt's usage", async () => {
    const project = await createTestProject(sluice.gateway, { provider: "provider-a", outputSchema: schema });
    const usage = { input: 11, output: 7, cached: 0, reasoning: 0 };
    fake.enqueueResponse({ status: 200, body: providerA.chat("gpt-5.4-mini", '{"other":1}', usage) });
    fake.enqueueResponse({ status: 400, body: recordedSchemaRefusals[0]?.body });
    const response = await post(project, "provider-a");
    expect(response.status).toBe(422);
    const { error } = (await response.json()) as { error: { details: unknown } };
    expect(error.details).toEqual({
      reason: "schemaRefused",
      providerStatus: 400,
      retryable: false,
      model: "gpt-5.4-mini",
      usage: { inputTokens: 11, outputTokens: 7, cachedInputTokens: 0, reasoningTokens: 0 },
    });
    expect(fake.requests).toHaveLength(2);
  });

  it.each(
    recordedOtherStructuredOutputRefusals.map((shape) => [shape.provider, shape.what, shape.body] as const),
  )(
    "keeps %s's 400 for %s the provider's failure (502): not the project's schema",
    async (provider, _what, body) => {
      const project = await createTestProject(sluice.gateway, { provider, outputSchema: schema });
      fake.enqueueResponse({ status: 400, body });
      const response = await post(project, provider);
      expect(response.status).toBe(502);
      const { error } = (await response.json()) as { error: { code: string; details: unknown } };
      expect(error).toMatchObject({ code: "PROVIDER_ERROR", details: { providerStatus: 400 } });
    },
  );
});
