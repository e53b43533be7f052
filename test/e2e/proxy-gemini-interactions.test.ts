import { GoogleGenAI } from "@google/genai";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { FakeUpstream } from "../fakes/fake-upstream.js";
import { providerC } from "../fakes/fake-upstream-responses.js";
import { type ProxyStage, startProxyStage } from "../support/proxy-stage.js";
import { type TestGateway, type TestProject, usageRowById } from "../support/test-gateway.js";

/**
 * Provider C's Interactions API (`client.interactions.create` in `@google/genai`, `POST
 * v1/interactions` from 3.x on, `v1beta/interactions` before) through Sluice: its usage, reported as `usage` with `total_*` counts, is
 * recorded and priced as generateContent's usageMetadata is, streamed or not.
 */
describe("the Gemini Interactions API through provider C's proxy", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let project: TestProject;
  let google: GoogleGenAI;
  /** The headers of every answer `google` got, newest last. */
  const answerHeaders: Headers[] = [];
  /** Sluice's request id of the SDK's last call. */
  const lastRequestId = () => answerHeaders.at(-1)?.get("x-request-id") ?? null;
  const model = "gemini-2.5-flash";
  /** gemini-2.5-flash: $0.30 input, $0.075 cached input, $2.50 output per 1M tokens. */
  const cost = (input: number, cached: number, output: number) =>
    ((input - cached) * 0.3 + cached * 0.075 + output * 2.5) / 1e6;

  let stage: ProxyStage;
  beforeAll(async () => {
    stage = await startProxyStage();
    ({ fake, sluice, project } = stage);
    // As sdkClients sets it up, with a fetch that keeps each answer's headers: from 3.x on the SDK's
    // streams no longer expose them (1.x's `.withResponse()` is gone).
    google = new GoogleGenAI({
      apiKey: project.bearer("provider-c"),
      httpOptions: {
        baseUrl: `${sluice.url}/v1/provider-c/${project.projectId}`,
        fetch: async (input, init) => {
          const response = await fetch(input, init);
          answerHeaders.push(response.headers);
          return response;
        },
      },
    });
  });

  afterAll(() => stage.close());

  beforeEach(() => {
    fake.clear();
    fake.setSseDelayMs(0);
    fake.hangStreamsAfter(null);
    fake.setUsage({ input: 11, output: 7, cached: 3, reasoning: 2, toolUse: 0 });
  });

  // A call the client left is recorded once Sluice has seen the upstream request end.
  const rowFor = (requestId: string | null) => usageRowById(sluice.gateway, requestId);

  const tokenColumns = [
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "reasoning_tokens",
    "cost_usd",
  ] as const;

  /** A POST to provider C's proxy with the project's key in the SDK's header, as a client without the SDK sends it. */
  const postInteraction = (body: string | Buffer, init: RequestInit = {}) =>
    fetch(`${sluice.url}/v1/provider-c/${project.projectId}/v1beta/interactions`, {
      method: "POST",
      headers: { "x-goog-api-key": project.bearer("provider-c"), "content-type": "application/json" },
      body,
      ...init,
    });

  it("answers interactions.create with the injected key and the body byte for byte, and records its tokens and cost", async () => {
    const params = { model, input: "Tell me a story.", store: false };
    const data = await google.interactions.create(params);
    expect(data.status).toBe("completed");
    expect(data.steps.find((step) => step.type === "model_output")).toEqual({
      type: "model_output",
      content: [{ type: "text", text: "Hello from the fake upstream" }],
    });
    expect(data.usage).toMatchObject({
      total_input_tokens: 11,
      total_output_tokens: 5,
      total_thought_tokens: 2,
      total_cached_tokens: 3,
      total_tokens: 18,
    });
    const upstream = fake.last()!;
    expect(upstream.method).toBe("POST");
    expect(upstream.path).toBe("/c/v1/interactions");
    expect(upstream.headers["x-goog-api-key"]).toBe(project.providerKeys["provider-c"]);
    expect(upstream.headers["x-goog-api-client"]).toMatch(/^sluice\//);
    // The SDK sends JSON.stringify of the parameters; Sluice forwards those bytes unchanged.
    expect(upstream.body.equals(Buffer.from(JSON.stringify(params)))).toBe(true);
    const row = await rowFor(data.sdkHttpResponse?.headers?.["x-request-id"] ?? null);
    expect(row).toMatchObject({
      endpoint: "proxy",
      provider: "provider-c",
      model,
      status: 200,
      outcome: "ok",
      streamed: 0,
      input_tokens: 11,
      output_tokens: 7,
      cached_tokens: 3,
      reasoning_tokens: 2,
    });
    expect(row.cost_usd).toBeCloseTo(cost(11, 3, 7), 12);
  });

  it("streams interactions.create and records the same tokens and cost as the unstreamed call and as generateContent", async () => {
    const stream = await google.interactions.create({ model, input: "Tell me a story.", stream: true });
    const response = { headers: answerHeaders.at(-1)! };
    const types: string[] = [];
    let text = "";
    let usage: unknown;
    for await (const event of stream) {
      types.push(event.event_type);
      if (event.event_type === "step.delta" && event.delta.type === "text") text += event.delta.text;
      if (event.event_type === "interaction.completed") usage = event.interaction.usage;
    }
    // The step-based stream @google/genai 3.x reads (1.x: interaction.start, content.*, interaction.complete).
    expect(text).toBe("Hello from the fake upstream");
    expect(types[0]).toBe("interaction.created");
    expect(types.at(-1)).toBe("interaction.completed");
    expect(types).toContain("step.stop");
    expect(usage).toMatchObject({ total_input_tokens: 11, total_output_tokens: 5, total_thought_tokens: 2 });
    expect(response.headers.get("content-type")).toMatch(/^text\/event-stream/);
    expect((fake.last()!.json as { stream?: unknown }).stream).toBe(true);
    const streamed = await rowFor(response.headers.get("x-request-id"));
    expect(streamed).toMatchObject({ streamed: 1, outcome: "ok", model, input_tokens: 11, output_tokens: 7 });

    await google.interactions.create({ model, input: "Tell me a story." });
    const bufferedRow = await rowFor(lastRequestId());
    const generated = await google.models.generateContent({ model, contents: "Tell me a story." });
    const generatedRow = await rowFor(generated.sdkHttpResponse?.headers?.["x-request-id"] ?? null);
    expect(bufferedRow.streamed).toBe(0);
    for (const column of tokenColumns) {
      expect(streamed[column], column).toEqual(bufferedRow[column]);
      expect(generatedRow[column], column).toEqual(bufferedRow[column]);
    }
    expect(streamed.cost_usd).toBeCloseTo(cost(11, 3, 7), 12);
  });

  it("counts tool-use tokens as input, as generateContent's toolUsePromptTokenCount", async () => {
    fake.setUsage({ toolUse: 5 });
    await google.interactions.create({ model, input: "Search for it." });
    const buffered = lastRequestId();
    const stream = await google.interactions.create({ model, input: "Search for it.", stream: true });
    const streamed = lastRequestId();
    for await (const _event of stream);
    const generated = await google.models.generateContent({ model, contents: "Search for it." });
    const rows = [
      await rowFor(buffered),
      await rowFor(streamed),
      await rowFor(generated.sdkHttpResponse?.headers?.["x-request-id"] ?? null),
    ];
    for (const row of rows) {
      expect(row).toMatchObject({
        input_tokens: 16,
        output_tokens: 7,
        cached_tokens: 3,
        reasoning_tokens: 2,
      });
      expect(row.cost_usd).toBeCloseTo(cost(16, 3, 7), 12);
    }
  });

  it("records a stream the client leaves before the interaction completed as aborted, with what it saw: no tokens yet", async () => {
    fake.setSseDelayMs(30);
    const stream = await google.interactions.create({ model, input: "Tell me a story.", stream: true });
    const requestId = lastRequestId();
    const seen: string[] = [];
    for await (const event of stream) {
      seen.push(event.event_type);
      if (event.event_type === "step.delta") break; // the SDK aborts the request
    }
    expect(seen).not.toContain("interaction.completed");
    const upstream = await fake.waitForAbort(5000);
    expect(upstream.path).toBe("/c/v1/interactions");
    const row = await rowFor(requestId);
    expect(row).toMatchObject({
      outcome: "aborted",
      streamed: 1,
      model,
      input_tokens: null,
      output_tokens: null,
      cost_usd: null,
    });
  });

  it("records the usage of a stream cut after interaction.completed, before its end", async () => {
    // The provider sends every event and then stops without ending the answer.
    const events = providerC.interactionEvents(
      { model },
      "Hello from the fake upstream",
      { input: 11, output: 7, cached: 3, reasoning: 2 },
      true,
    );
    fake.hangStreamsAfter(events.length);
    const stream = await google.interactions.create({ model, input: "Tell me a story.", stream: true });
    const requestId = lastRequestId();
    for await (const event of stream) if (event.event_type === "interaction.completed") break;
    await fake.waitForAbort(5000);
    const row = await rowFor(requestId);
    expect(row).toMatchObject({
      outcome: "aborted",
      streamed: 1,
      model,
      input_tokens: 11,
      output_tokens: 7,
      cached_tokens: 3,
      reasoning_tokens: 2,
    });
    expect(row.cost_usd).toBeCloseTo(cost(11, 3, 7), 12);
  });

  it("records a background interaction without tokens: its work runs later and is polled with GET, which the proxy refuses", async () => {
    const data = await google.interactions.create({ model, input: "Research this.", background: true });
    expect(data.status).toBe("in_progress");
    expect(data.usage).toBeUndefined();
    expect(await rowFor(data.sdkHttpResponse?.headers?.["x-request-id"] ?? null)).toMatchObject({
      status: 200,
      outcome: "ok",
      model,
      input_tokens: null,
      output_tokens: null,
      cost_usd: null,
    });
    const calls = fake.requests.length;
    await expect(google.interactions.get(data.id)).rejects.toMatchObject({ status: 405 });
    expect(fake.requests).toHaveLength(calls);
    // A cancel answers with the interaction it stopped, usage included: those tokens are not counted,
    // and the cancel itself is free (the run's unknown cost stays on the creation's row).
    const cancelled = await google.interactions.cancel(data.id);
    expect(cancelled.status).toBe("cancelled");
    expect(cancelled.usage?.total_input_tokens).toBe(11);
    expect(fake.last()!.path).toBe(`/c/v1/interactions/${data.id}/cancel`);
    expect(await rowFor(cancelled.sdkHttpResponse?.headers?.["x-request-id"] ?? null)).toMatchObject({
      status: 200,
      input_tokens: null,
      output_tokens: null,
      cost_usd: 0,
    });
  });

  it("records the agent an interaction runs in the model column, with its tokens and an unknown cost", async () => {
    const agent = "deep-research-pro-preview-12-2025";
    const data = await google.interactions.create({ agent, input: "Research this." });
    expect(data.agent).toBe(agent);
    expect(await rowFor(data.sdkHttpResponse?.headers?.["x-request-id"] ?? null)).toMatchObject({
      model: agent,
      input_tokens: 11,
      output_tokens: 7,
      cost_usd: null,
    });
  });

  it("reads the model as the provider reads the body: the top-level member, after a long input, escapes decoded", async () => {
    const body = Buffer.from(
      `{ "tools": [{"type": "function", "name": "pick", "parameters": {"type": "object", "properties": {"model": {"type": "string"}}}}],\n` +
        `  "input": ${JSON.stringify("a".repeat(100_000))},\n  "\\u006dodel" : "${model}" }`,
    );
    const response = await postInteraction(body);
    expect(response.status).toBe(200);
    expect(
      ((await response.json()) as { usage: { total_input_tokens: number } }).usage.total_input_tokens,
    ).toBe(11);
    expect(fake.last()!.body.equals(body)).toBe(true);
    const row = await rowFor(response.headers.get("x-request-id"));
    expect(row).toMatchObject({ model, input_tokens: 11, output_tokens: 7 });
    expect(row.cost_usd).toBeCloseTo(cost(11, 3, 7), 12);
  });
});
