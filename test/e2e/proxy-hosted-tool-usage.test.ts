import type OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { LocalServer } from "../support/local-server.js";
import { type Programmed, sse, startProgrammedUpstream } from "../support/programmed-upstream.js";
import { sdkClients } from "../support/sdk-clients.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowById,
} from "../support/test-gateway.js";

/**
 * Provider A's Responses API reports what its hosted tools used in `tool_usage`, "separate from base
 * model `usage`" (openai 7.x, `Response.tool_usage`): the image generation tool's tokens
 * (`image_gen`, billed at the image model's prices) and the web search tool's billable searches
 * (`web_search.num_requests`, billed per search). The catalogue prices neither for provider A, so
 * such a call's cost is unknown (null), never the price of its model tokens alone; a `tool_usage`
 * of zero counts (every tool family is listed, with zeros where it was not used) changes nothing.
 */
const usage = {
  input_tokens: 2_000,
  input_tokens_details: { cached_tokens: 0 },
  output_tokens: 300,
  output_tokens_details: { reasoning_tokens: 100 },
  total_tokens: 2_300,
};

const toolUsage = (imageInput: number, imageOutput: number, searches: number) => ({
  image_gen: {
    input_tokens: imageInput,
    input_tokens_details: { image_tokens: 0, text_tokens: imageInput },
    output_tokens: imageOutput,
    output_tokens_details: { image_tokens: imageOutput, text_tokens: 0 },
    total_tokens: imageInput + imageOutput,
  },
  web_search: { num_requests: searches },
});

/** A function tool whose JSON Schema (the app's) spells a `tool_usage` with counts, in its example. */
const appTool = {
  type: "function",
  name: "report",
  description: null,
  strict: false,
  parameters: {
    type: "object",
    properties: { tool_usage: { type: "object" } },
    examples: [{ tool_usage: toolUsage(10, 10, 10) }],
  },
};

function responses(tools: unknown): Programmed {
  const response = (status: string, reported: unknown) => ({
    id: "resp_1",
    object: "response",
    created_at: 1,
    status,
    error: null,
    incomplete_details: null,
    instructions: null,
    model: "gpt-5-2025-08-07",
    output: [
      {
        type: "message",
        id: "msg_1",
        status: "completed",
        role: "assistant",
        content: [{ type: "output_text", text: "Here it is", annotations: [] }],
      },
    ],
    parallel_tool_calls: true,
    previous_response_id: null,
    reasoning: { effort: "medium", summary: null },
    service_tier: "default",
    store: true,
    temperature: 1,
    text: { format: { type: "text" } },
    tool_choice: "auto",
    ...(tools === undefined ? {} : { tool_usage: tools }),
    tools: [appTool],
    top_p: 1,
    truncation: "disabled",
    usage: reported,
    user: null,
    metadata: {},
  });
  return {
    json: response("completed", usage),
    events: [
      sse(
        { type: "response.created", sequence_number: 0, response: response("in_progress", null) },
        "response.created",
      ),
      sse(
        { type: "response.completed", sequence_number: 1, response: response("completed", usage) },
        "response.completed",
      ),
    ],
  };
}

describe("metering: provider A's hosted tools (Responses API `tool_usage`)", () => {
  let upstream: LocalServer;
  let programmed: Programmed;
  let sluice: TestGateway;
  let project: TestProject;
  let openai: OpenAI;

  beforeAll(async () => {
    upstream = await startProgrammedUpstream(() => programmed);
    const base = upstream.url;
    sluice = await startTestGateway({ providerABaseUrl: `${base}/a/v1` });
    project = await createTestProject(sluice.gateway);
    ({ openai } = sdkClients(sluice, project));
  });

  afterAll(async () => {
    await sluice.close();
    await upstream.close();
  });

  /** The rows of one call made JSON and streamed; they agree on every metered column. */
  async function bothWays() {
    const body = { model: "gpt-5", input: "Draw a cat", tools: [{ type: "image_generation" as const }] };
    const buffered = await openai.responses.create(body).withResponse();
    const { data, response } = await openai.responses.create({ ...body, stream: true }).withResponse();
    for await (const _ of data);
    const json = await usageRowById(sluice.gateway, buffered.response.headers.get("x-request-id"));
    const streamed = await usageRowById(sluice.gateway, response.headers.get("x-request-id"));
    expect([json.streamed, streamed.streamed]).toEqual([0, 1]);
    for (const column of ["input_tokens", "output_tokens", "reasoning_tokens", "cost_usd"] as const)
      expect(streamed[column], column).toEqual(json[column]);
    return streamed;
  }

  // gpt-5 per 1M: $1.25 in, $10 out.
  const modelTokensCost = (2_000 * 1.25 + 300 * 10) / 1e6;

  it("leaves the cost unknown when the image generation tool ran, its tokens billed apart from the model's", async () => {
    programmed = responses(toolUsage(50, 4_160, 0));
    const row = await bothWays();
    expect(row).toMatchObject({ input_tokens: 2_000, output_tokens: 300, reasoning_tokens: 100 });
    expect(row.cost_usd).toBeNull();
  });

  it("leaves the cost unknown when the web search tool ran billable searches, billed per search", async () => {
    programmed = responses(toolUsage(0, 0, 3));
    const row = await bothWays();
    expect(row).toMatchObject({ input_tokens: 2_000, output_tokens: 300 });
    expect(row.cost_usd).toBeNull();
  });

  it("prices the model's tokens when tool_usage reports zeros, or is absent, whatever the tools' schemas spell", async () => {
    programmed = responses(toolUsage(0, 0, 0));
    expect((await bothWays()).cost_usd).toBeCloseTo(modelTokensCost, 12);
    programmed = responses(undefined);
    expect((await bothWays()).cost_usd).toBeCloseTo(modelTokensCost, 12);
  });
});
