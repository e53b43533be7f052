import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import { providerB } from "../fakes/fake-upstream-responses.js";
import { createTestProject, startTestGateway, type TestGateway } from "../support/test-gateway.js";

// Open object schema: the AI SDK sends Sonnet 5.5 a `json` tool with tool_choice auto.
const outputSchema = {
  type: "object",
  properties: {
    title: { type: "string" },
    meta: { type: "object", additionalProperties: { type: "string" } },
  },
  required: ["title"],
};
let fake: FakeUpstream;
let sluice: TestGateway;
beforeEach(async () => {
  fake = await startFakeUpstream();
  sluice = await startTestGateway(providerBaseUrls(fake));
});
afterEach(async () => {
  await sluice.close();
  await fake.close();
});

const textAnswer = (text: string) => ({
  status: 200,
  body: providerB.message("claude-sonnet-5-5", [{ type: "text", text }], {
    input: 10,
    output: 5,
    cached: 0,
    reasoning: 0,
  }),
});

async function call() {
  const project = await createTestProject(sluice.gateway, { provider: "provider-b", outputSchema });
  const response = await fetch(`${sluice.url}/v1/text/${project.projectId}`, {
    method: "POST",
    headers: { authorization: `Bearer ${project.bearer("provider-b")}`, "content-type": "application/json" },
    body: JSON.stringify({ text: "x" }),
  });
  return { status: response.status, body: await response.json() };
}

/**
 * Provider B's newer models take no forced tool use: for a schema its structured outputs cannot take
 * (an open object here), the AI SDK offers the `json` tool without forcing it, and the model may
 * answer in text: the JSON alone, in a code fence, or after a line of prose. Each is read on the
 * first attempt; an answer that does not match the schema still gets the one repair, then 502.
 */
describe("structured answers given as text (provider B, tool not forced)", () => {
  it.each([
    ["plain JSON", '{"title":"t"}', 200, 1],
    ["JSON in a code fence", '```json\n{"title":"t"}\n```', 200, 1],
    ["JSON in a bare code fence", '```\n{"title":"t"}\n```', 200, 1],
    ["JSON after a line of prose", 'Here is the JSON:\n{"title":"t"}', 200, 1],
    ["JSON that does not match the schema", '{"title":1}', 502, 2],
  ])("%s", async (_name, text, status, calls) => {
    fake.enqueueResponse(textAnswer(text));
    fake.enqueueResponse(textAnswer(text));
    const result = await call();
    expect(result.status).toBe(status);
    if (status === 200) expect(result.body).toEqual({ title: "t" });
    expect(fake.requests.filter((request) => request.provider === "b")).toHaveLength(calls);
  });
});
