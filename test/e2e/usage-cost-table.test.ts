import { beforeEach, describe, expect, it } from "vitest";
import { useProxyStage } from "../support/proxy-stage.js";
import { sdkClients } from "../support/sdk-clients.js";
import { type UsageCostCase, usageCostCases, usdOf } from "../support/usage-cost-cases.js";

/**
 * The usage shapes of test/support/usage-cost-cases.ts through the gateway: the fake upstream
 * answers each call with the case's JSON body, or streams the case's events, and the call's usage
 * row records the cost computed by hand from the catalogue's prices, the same either way.
 */
describe("a usage row's cost through the gateway, JSON and streamed", () => {
  const stage = useProxyStage(sdkClients);

  beforeEach(() => stage.fake.clear());

  function call(c: UsageCostCase, streaming: boolean) {
    const base = `${stage.sluice.url}/v1/${c.provider}/${stage.project.projectId}`;
    const headers: Record<string, string> = {
      "content-type": "application/json",
      authorization: `Bearer ${stage.project.bearer(c.provider)}`,
    };
    switch (c.provider) {
      case "provider-a":
        return c.responses
          ? { url: `${base}/responses`, headers, body: { model: c.model, input: "hi", stream: streaming } }
          : {
              url: `${base}/chat/completions`,
              headers,
              body: { model: c.model, messages: [{ role: "user", content: "hi" }], stream: streaming },
            };
      case "provider-b":
        return {
          url: `${base}/v1/messages`,
          headers: { ...headers, "anthropic-version": "2023-06-01" },
          body: {
            model: c.model,
            max_tokens: 64,
            messages: [{ role: "user", content: "hi" }],
            stream: streaming,
          },
        };
      case "provider-c":
        return {
          url: `${base}/v1beta/models/${c.model}:${streaming ? "streamGenerateContent?alt=sse" : "generateContent"}`,
          headers,
          body: { contents: [{ role: "user", parts: [{ text: "hi" }] }] },
        };
    }
  }

  async function rowOf(c: UsageCostCase, streaming: boolean) {
    stage.fake.enqueueResponse(
      streaming
        ? { status: 200, headers: { "content-type": "text/event-stream" }, parts: [c.sse as string] }
        : { status: 200, body: c.json },
    );
    const { url, headers, body } = call(c, streaming);
    return stage.rowAddedBy(async () => {
      const response = await fetch(url, { method: "POST", headers, body: JSON.stringify(body) });
      expect(response.status).toBe(200);
      await response.arrayBuffer();
    });
  }

  for (const c of usageCostCases) {
    it(`${c.name}`, async () => {
      const json = await rowOf(c, false);
      const streamed = await rowOf(c, true);
      expect(json.cost_usd).toBe(usdOf(c.micro));
      expect(streamed.cost_usd).toBe(usdOf(c.micro));
      const counts = (row: typeof json) => ({
        input: row.input_tokens,
        output: row.output_tokens,
        cached: row.cached_tokens,
        reasoning: row.reasoning_tokens,
        cost: row.cost_usd,
      });
      expect(counts(streamed)).toEqual(counts(json));
      expect(streamed.streamed).toBe(1);
    });
  }
});
