import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import { proxiedChat } from "../support/proxied-chat.js";
import {
  adminToken,
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowOf,
} from "../support/test-gateway.js";

/**
 * The admin usage report over calls made through the gateway (DESIGN: `GET …/usage?from&to&groupBy`
 * → counts, tokens, cost): a structured call, an image generation, a proxied call and a refusal,
 * on two UTC days either side of midnight, read back by day, model and endpoint, with `from`
 * inclusive and `to` exclusive. The fake upstream reports 11 input tokens (3 cached, 2 reasoning)
 * and 7 output tokens per call.
 */
describe("the usage report, end to end", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let project: TestProject;
  // The project is created a minute before its first call: the clock stands still while the call
  // runs, and a call whose row's time less its length comes before the project's creation is a
  // project's deleted under its id (left out of the report). A second before was too little: on a
  // loaded machine the first call took longer than that, and the report left it out.
  let clock = new Date("2026-11-27T23:59:00.000Z");
  const schema = { type: "object", properties: { title: { type: "string" } }, required: ["title"] };
  // gpt-5.4-mini ($0.75 in, $0.075 cached, $4.50 out) and gpt-4.1 ($2, $0.50, $8) per 1M tokens.
  const textCost = ((11 - 3) * 0.75 + 3 * 0.075 + 7 * 4.5) / 1e6;
  const chatCost = ((11 - 3) * 2 + 3 * 0.5 + 7 * 8) / 1e6;
  // SPEC's price table: provider A model 2 (dall-e-3), HD, 1024x1024 (its default size).
  const imageCost = 0.08;
  const tokens = { inputTokens: 11, outputTokens: 7, cachedTokens: 3, reasoningTokens: 2 };
  const noTokens = { inputTokens: 0, outputTokens: 0, cachedTokens: 0, reasoningTokens: 0 };

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway({ ...providerBaseUrls(fake) }, { now: () => clock });
    project = await createTestProject(sluice.gateway, { provider: "provider-a", outputSchema: schema });
    fake.setStructuredOutput({ title: "t" });
    clock = new Date("2026-11-27T23:59:59.000Z");
    const post = (path: string, body: unknown, bearer = project.bearer("provider-a")) =>
      fetch(`${sluice.url}${path}/${project.projectId}`, {
        method: "POST",
        headers: { authorization: `Bearer ${bearer}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
    const settled = async (response: Response, status: number) => {
      expect(response.status).toBe(status);
      await usageRowOf(sluice.gateway, response);
    };
    await settled(await post("/v1/text", { text: "a calm lake" }), 200);
    clock = new Date("2026-11-28T00:00:00.000Z");
    await settled(
      await post("/v1/image", {
        prompt: "a lighthouse",
        model: "dall-e-3",
        providerOptions: { "provider-a": { quality: "hd" } },
      }),
      200,
    );
    await settled(await proxiedChat(sluice.url, project, { body: { model: "gpt-4.1", messages: [] } }), 200);
    await settled(
      await post("/v1/text", { text: "x" }, `${project.partialKeys["provider-a"]}.tk_wrong`),
      401,
    );
  });

  afterAll(async () => {
    await sluice?.close();
    await fake?.close();
  });

  async function report(query: string) {
    const response = await fetch(`${sluice.url}/admin/v1/projects/${project.projectId}/usage?${query}`, {
      headers: { authorization: `Bearer ${adminToken}` },
    });
    expect(response.status).toBe(200);
    return (await response.json()) as { from: string; to: string; groupBy: string; rows: unknown[] };
  }

  it("groups by UTC day, a date-only `to` taking in its whole day", async () => {
    expect(await report("from=2026-11-27&to=2026-11-28&groupBy=day")).toEqual({
      from: "2026-11-27T00:00:00.000Z",
      to: "2026-11-29T00:00:00.000Z",
      groupBy: "day",
      rows: [
        { group: "2026-11-27", requests: 1, errors: 0, ...tokens, costUsd: textCost, unpricedRequests: 0 },
        {
          group: "2026-11-28",
          requests: 3,
          errors: 1,
          ...tokens,
          costUsd: imageCost + chatCost,
          unpricedRequests: 0,
        },
      ],
    });
  });

  it("takes `from` as inclusive and `to` as exclusive, to the millisecond", async () => {
    const before = await report("from=2026-11-27T00:00:00Z&to=2026-11-28T00:00:00Z");
    expect(before.rows).toMatchObject([{ group: "2026-11-27", requests: 1 }]);
    const after = await report("from=2026-11-28T00:00:00Z&to=2026-11-28T00:00:00.001Z");
    expect(after.rows).toMatchObject([{ group: "2026-11-28", requests: 3 }]);
    expect((await report("from=2026-11-29&to=2026-11-30")).rows).toEqual([]);
  });

  it("groups by endpoint and by model, a refusal (no model) last", async () => {
    const window = "from=2026-11-27&to=2026-11-28";
    expect((await report(`${window}&groupBy=endpoint`)).rows).toEqual([
      { group: "image", requests: 1, errors: 0, ...noTokens, costUsd: imageCost, unpricedRequests: 0 },
      { group: "proxy", requests: 1, errors: 0, ...tokens, costUsd: chatCost, unpricedRequests: 0 },
      { group: "text", requests: 2, errors: 1, ...tokens, costUsd: textCost, unpricedRequests: 0 },
    ]);
    expect((await report(`${window}&groupBy=model`)).rows).toEqual([
      { group: "dall-e-3", requests: 1, errors: 0, ...noTokens, costUsd: imageCost, unpricedRequests: 0 },
      { group: "gpt-4.1", requests: 1, errors: 0, ...tokens, costUsd: chatCost, unpricedRequests: 0 },
      { group: "gpt-5.4-mini", requests: 1, errors: 0, ...tokens, costUsd: textCost, unpricedRequests: 0 },
      { group: null, requests: 1, errors: 1, ...noTokens, costUsd: null, unpricedRequests: 0 },
    ]);
  });
});
