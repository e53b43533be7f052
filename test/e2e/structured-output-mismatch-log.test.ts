import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
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
const usage = { input: 11, output: 7, cached: 0, reasoning: 0 };
/** What the model wrote and what the client sent: neither is ever logged (they may hold personal data). */
const answer = '{"jane.doe@example.com":"Jane Doe, born 1980-01-02"}';
const input = "Patient Jane Doe, 1980-01-02, diagnosis: confidential";

/**
 * A structured call whose model output still fails the project's schema after the repair is answered
 * 502 PROVIDER_ERROR: the error has no `provider` (the provider answered; its model's answer was
 * wrong), so the provider failure log passed over it and no line was written at any level. The
 * operator gets one warning per project, provider and kind per window, as for a schema refusal.
 */
describe("a structured analysis whose output does not match the schema after the repair", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    // At debug: no line at any level was written before.
    sluice = await startTestGateway({ ...providerBaseUrls(fake), logLevel: "debug" });
  });
  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });
  beforeEach(() => fake.clear());

  const post = (gateway: TestGateway, project: TestProject) =>
    fetch(`${gateway.url}/v1/text/${project.projectId}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${project.bearer("provider-a")}`,
        "content-type": "application/json",
      },
      body: JSON.stringify({ text: input }),
    });
  const mismatchLines = (gateway: TestGateway, from: number) =>
    logLinesOf(gateway, from).filter((line) => String(line.msg).includes("did not match"));

  it("logs a warning naming the request, project, provider, model and the first mismatch's keyword", async () => {
    const project = await createTestProject(sluice.gateway, { provider: "provider-a", outputSchema: schema });
    const before = sluice.logs.length;
    fake.enqueueResponse({ status: 200, body: providerA.chat("gpt-5.4-mini", answer, usage) });
    fake.enqueueResponse({ status: 200, body: providerA.chat("gpt-5.4-mini", answer, usage) });
    const response = await post(sluice, project);
    expect(response.status).toBe(502);
    const row = await usageRowOf(sluice.gateway, response);
    expect(row).toMatchObject({ status: 502, error_code: "PROVIDER_ERROR" });
    // Of the lines at debug naming this request, besides the access log's, the one is the warning.
    const requestId = response.headers.get("x-request-id");
    const ofRequest = logLinesOf(sluice, before).filter(
      (line) => line.requestId === requestId && line.msg !== "request",
    );
    expect(ofRequest.map(({ level, msg }) => [level, msg])).toEqual([
      ["warn", "model output did not match the project's output schema after the repair"],
    ]);
    const lines = mismatchLines(sluice, before);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toEqual({
      level: "warn",
      time: expect.any(String),
      service: "sluice",
      msg: "model output did not match the project's output schema after the repair",
      requestId,
      projectId: project.projectId,
      provider: "provider-a",
      model: "gpt-5.4-mini",
      route: "/v1/text",
      status: 502,
      reason: "schema",
      keyword: "required",
      mismatches: 1,
    });
    // Never the answer, the input, the schema's field names, or a key.
    const logged = sluice.logs.slice(before).join("\n");
    expect(logged).not.toMatch(/jane|Jane|1980|confidential|secretFieldName|real-provider-a-key/);
    expect(logged).not.toContain(project.testKey);
  });

  it("names an answer that is no JSON, and one cut off at the output token limit", async () => {
    const project = await createTestProject(sluice.gateway, { provider: "provider-a", outputSchema: schema });
    const before = sluice.logs.length;
    const prose = providerA.chat("gpt-5.4-mini", "Jane Doe was born in 1980.", usage);
    fake.enqueueResponse({ status: 200, body: prose });
    fake.enqueueResponse({ status: 200, body: prose });
    expect((await post(sluice, project)).status).toBe(502);
    const cut = providerA.chat("gpt-5.4-mini", '{"secretFieldName":"Jane Do', usage);
    cut.choices[0] = { ...(cut.choices[0] as (typeof cut.choices)[0]), finish_reason: "length" };
    fake.enqueueResponse({ status: 200, body: cut });
    fake.enqueueResponse({ status: 200, body: cut });
    expect((await post(sluice, project)).status).toBe(502);
    const lines = mismatchLines(sluice, before);
    expect(lines.map(({ reason, keyword, mismatches }) => [reason, keyword, mismatches])).toEqual([
      ["notJson", undefined, undefined],
      ["cutOff", undefined, undefined],
    ]);
    expect(sluice.logs.slice(before).join("\n")).not.toMatch(/jane|Jane|1980|secretFieldName/);
  });

  it("is bounded whatever the schema, the answer and the model's name", async () => {
    const wide = {
      type: "object",
      properties: Object.fromEntries(
        Array.from({ length: 200 }, (_, i) => [`field${i}${"x".repeat(200)}`, { type: "integer" }]),
      ),
      additionalProperties: false,
    };
    const project = await createTestProject(sluice.gateway, { provider: "provider-a", outputSchema: wide });
    const wrong = JSON.stringify(
      Object.fromEntries(Object.keys(wide.properties).map((name) => [name, "y".repeat(1000)])),
    );
    const model = `gpt-5.4-mini-${"m".repeat(5_000)}`;
    const before = sluice.logs.length;
    fake.enqueueResponse({ status: 200, body: providerA.chat(model, wrong, usage) });
    fake.enqueueResponse({ status: 200, body: providerA.chat(model, wrong, usage) });
    expect((await post(sluice, project)).status).toBe(502);
    const lines = sluice.logs.slice(before).filter((line) => line.includes("did not match"));
    expect(lines).toHaveLength(1);
    expect(lines[0]?.length).toBeLessThan(1024);
    expect(JSON.parse(lines[0] ?? "{}")).toMatchObject({ keyword: "type", mismatches: 200 });
  });

  it("logs one line per project, provider and kind per window, and at the close how many it left out", async () => {
    const own = await startTestGateway({ ...providerBaseUrls(fake), logLevel: "warn" });
    const project = await createTestProject(own.gateway, { provider: "provider-a", outputSchema: schema });
    const other = await createTestProject(own.gateway, { provider: "provider-a", outputSchema: schema });
    const ids: (string | null)[] = [];
    for (const caller of [project, project, project, other]) {
      fake.enqueueResponse({ status: 200, body: providerA.chat("gpt-5.4-mini", answer, usage) });
      fake.enqueueResponse({ status: 200, body: providerA.chat("gpt-5.4-mini", answer, usage) });
      const response = await post(own, caller);
      expect(response.status).toBe(502);
      ids.push(response.headers.get("x-request-id"));
    }
    await own.close();
    const lines = logLinesOf(own).filter((line) => String(line.msg).includes("output schema"));
    expect(
      lines.map(({ msg, projectId, requestId, suppressed }) => [msg, projectId, requestId, suppressed]),
    ).toEqual([
      [
        "model output did not match the project's output schema after the repair",
        project.projectId,
        ids[0],
        undefined,
      ],
      [
        "model output did not match the project's output schema after the repair",
        other.projectId,
        ids[3],
        undefined,
      ],
      ["model output schema mismatches suppressed", project.projectId, undefined, 2],
    ]);
    expect(lines[2]).toMatchObject({
      level: "warn",
      provider: "provider-a",
      reason: "schema",
      windowMs: 60_000,
    });
  });
});
