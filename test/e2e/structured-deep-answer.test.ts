import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ProviderId } from "../../src/providers/provider-id.js";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import { structuredOnEachProvider } from "../support/structured-on-each-provider.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  usageRowOf,
} from "../support/test-gateway.js";

/** Arrays nested `depth` deep (the outermost one counted), as a model may write them when asked. */
const nested = (depth: number) => `${"[".repeat(depth)}${"]".repeat(depth)}`;
/** Each provider's fake reports 11 input and 7 output tokens a call. */
const perCall = 11;

/** The fake's first structured answer is `first`, every later one a valid `{"title":"t"}`. */
function answerFirst(fake: FakeUpstream, first: string): void {
  let calls = 0;
  fake.setStructuredOutput(() => (calls++ === 0 ? first : '{"title":"t"}'));
}

/**
 * An answer nested thousands deep (a client can ask the model for one) is parsed by the AI SDK, but
 * JSON.stringify and a recursive validator overflow the stack on it: the call failed as 502 with
 * no tokens or cost recorded though the provider billed it. Such an answer, like any that does not
 * match the schema, is repaired once, and both attempts are recorded.
 */
describe("a structured answer nested deeper than JSON answers go", () => {
  const closed = {
    type: "object",
    properties: { title: { type: "string" }, data: { type: "array", items: { type: "string" } } },
    required: ["title"],
    additionalProperties: false,
  };
  const on = structuredOnEachProvider(closed);

  it.each(["provider-a", "provider-b", "provider-c"] satisfies ProviderId[])(
    "%s: repaired, and both attempts' tokens and cost recorded",
    async (provider) => {
      answerFirst(on.fake, `{"title":"t","data":${nested(6000)}}`);
      const response = await on.postText(provider);
      expect(response.status).toBe(200);
      expect(await response.json()).toEqual({ title: "t" });
      expect(on.fake.requests).toHaveLength(2);
      const row = await usageRowOf(on.sluice.gateway, response);
      expect(row).toMatchObject({ status: 200, input_tokens: 2 * perCall });
      expect(row.cost_usd).toBeGreaterThan(0);
    },
  );
});

describe("a structured answer valid by a free-form property but nested past 64 levels", () => {
  // An array without items: provider C takes none, so the projects are on provider A alone.
  const open = {
    type: "object",
    properties: { title: { type: "string" }, data: { type: "array" } },
    required: ["title"],
    additionalProperties: false,
  };
  let fake: FakeUpstream;
  let sluice: TestGateway;
  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway(providerBaseUrls(fake));
  });
  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });

  const post = async () => {
    const project = await createTestProject(sluice.gateway, { provider: "provider-a", outputSchema: open });
    return fetch(`${sluice.url}/v1/text/${project.projectId}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${project.bearer("provider-a")}`,
        "content-type": "application/json",
      },
      body: JSON.stringify({ text: "x" }),
    });
  };

  it("is repaired, the model told how deep it went, and one of 64 levels is taken", async () => {
    answerFirst(fake, `{"title":"t","data":${nested(64)}}`);
    const response = await post();
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ title: "t" });
    expect(fake.requests).toHaveLength(2);
    expect(JSON.stringify(fake.requests[1]?.json)).toContain("nests objects and arrays more than 64 deep");

    fake.clear();
    const taken = `{"title":"t","data":${nested(63)}}`;
    answerFirst(fake, taken);
    const ok = await post();
    expect(ok.status).toBe(200);
    expect(await ok.json()).toEqual(JSON.parse(taken));
    expect(fake.requests).toHaveLength(1);
  });
});
