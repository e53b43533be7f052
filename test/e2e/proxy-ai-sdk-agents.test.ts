import {
  generateObject,
  generateText,
  type LanguageModel,
  type LanguageModelUsage,
  stepCountIs,
  streamObject,
  streamText,
  tool,
} from "ai";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { z } from "zod";
import {
  type AgentTurn,
  chatTurn,
  geminiTurn,
  messagesFallbackTurn,
  messagesTurn,
  responsesTurn,
} from "../fakes/fake-agent-answers.js";
import type { FakeUpstream, ProgrammedResponse } from "../fakes/fake-upstream.js";
import { type FakeUsage, providerC, tinyPng } from "../fakes/fake-upstream-responses.js";
import { aiSdkClients } from "../support/ai-sdk-clients.js";
import { aiSdkRows, tokensOf, tokensOfRow } from "../support/ai-sdk-rows.js";
import { type ProxyStage, startProxyStage } from "../support/proxy-stage.js";
import type { TestGateway, TestProject } from "../support/test-gateway.js";

/**
 * The proxies driven by the Vercel AI SDK as an agent drives them: tool loops of several steps
 * (`stopWhen`), reasoning models, image input, objects, prompt caching and provider B's server-side
 * fallback. Every step is a call of its own with a usage row of its own, whose tokens are the ones
 * the SDK reports for that step. Errors and aborts: proxy-ai-sdk-failures.test.ts.
 */
describe("proxies driven by the AI SDK, as an agent", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let project: TestProject;
  let stage: ProxyStage;
  let clients: ReturnType<typeof aiSdkClients>;
  let recorded: ReturnType<typeof aiSdkRows>;
  const rowFor = (headers: Record<string, string> | undefined) => recorded.rowFor(headers);
  const greeting = "Hello from the fake upstream";
  const usage: FakeUsage = { input: 11, output: 7, cached: 3, reasoning: 2 };

  beforeAll(async () => {
    stage = await startProxyStage();
    ({ fake, sluice, project } = stage);
    clients = aiSdkClients(sluice, project);
    recorded = aiSdkRows(sluice, project);
  });
  afterAll(() => stage.close());
  beforeEach(() => {
    fake.clear();
    fake.setUsage({ ...usage, thinking: undefined });
  });

  type Turn = (model: string, turn: AgentTurn, usage: FakeUsage, stream: boolean) => ProgrammedResponse;
  const apis: Array<[string, () => LanguageModel, string, Turn]> = [
    ["A, the Responses API", () => clients.openai("gpt-4o-mini"), "gpt-4o-mini", responsesTurn],
    ["A, chat completions", () => clients.openai.chat("gpt-4o-mini"), "gpt-4o-mini", chatTurn],
    ["B, messages", () => clients.anthropic("claude-sonnet-4-5"), "claude-sonnet-4-5", messagesTurn],
    ["C, generateContent", () => clients.google("gemini-2.5-flash"), "gemini-2.5-flash", geminiTurn],
  ];

  const weather = tool({
    description: "The weather in a city",
    inputSchema: z.object({ city: z.string() }),
    execute: async ({ city }) => ({ city, forecast: "sunny-and-22C" }),
  });

  describe.each(apis)("provider %s", (_name, model, modelId, turn) => {
    it.each([false, true])(
      "runs a two-step tool loop (streamed: %s), a row per step with the step's tokens",
      async (streamed) => {
        fake.enqueueResponse(
          turn(modelId, { call: { name: "weather", input: { city: "Paris" } } }, usage, streamed),
        );
        const options = {
          model: model(),
          prompt: "Weather in Paris?",
          tools: { weather },
          stopWhen: stepCountIs(3),
          maxRetries: 0,
        };
        let steps: Array<{
          usage: LanguageModelUsage;
          toolCalls: unknown[];
          response: { headers?: Record<string, string> };
        }>;
        let total: LanguageModelUsage;
        let text: string;
        if (streamed) {
          const result = streamText(options);
          text = await result.text;
          steps = await result.steps;
          total = await result.totalUsage;
        } else {
          const result = await generateText(options);
          ({ text, steps, totalUsage: total } = result);
        }
        expect(text).toBe(greeting);
        expect(steps).toHaveLength(2);
        expect(steps[0]!.toolCalls).toMatchObject([{ toolName: "weather", input: { city: "Paris" } }]);
        expect(fake.requests).toHaveLength(2);
        // The tool's result went back to the provider in the second step.
        expect(fake.requests[1]!.body.toString()).toContain("sunny-and-22C");
        const rows = [];
        for (const step of steps) {
          const row = await rowFor(step.response.headers);
          expect(row).toMatchObject({
            model: modelId,
            status: 200,
            outcome: "ok",
            streamed: streamed ? 1 : 0,
          });
          expect(tokensOfRow(row), "a step's row has the step's tokens").toEqual(tokensOf(step.usage));
          expect(row.cost_usd).not.toBeNull();
          rows.push(row);
        }
        expect(rows[0]!.request_id).not.toBe(rows[1]!.request_id);
        expect(rows.reduce((sum, row) => sum + (row.input_tokens ?? 0), 0)).toBe(total.inputTokens);
        expect(rows.reduce((sum, row) => sum + (row.output_tokens ?? 0), 0)).toBe(total.outputTokens);
      },
    );

    it("passes an image part through, and records the call", async () => {
      const result = await generateText({
        model: model(),
        messages: [
          {
            role: "user",
            content: [
              { type: "text", text: "What is this?" },
              { type: "image", image: tinyPng, mediaType: "image/png" },
            ],
          },
        ],
        maxRetries: 0,
      });
      expect(result.text).toBe(greeting);
      expect(fake.last()!.body.toString()).toContain(tinyPng.toString("base64"));
      const row = await rowFor(result.response.headers);
      expect(row).toMatchObject({ status: 200, outcome: "ok" });
      expect(tokensOfRow(row)).toEqual(tokensOf(result.usage));
    });
  });

  type ProviderOptions = NonNullable<Parameters<typeof generateText>[0]["providerOptions"]>;
  /** Each provider's reasoning model as an app asks it to show its reasoning, and what that asks the provider. */
  const thinkers: Array<
    [string, () => LanguageModel, string, Turn, Partial<FakeUsage>, ProviderOptions, object]
  > = [
    [
      "A (o4-mini, a reasoning summary)",
      () => clients.openai("o4-mini"),
      "o4-mini",
      responsesTurn,
      {},
      { openai: { reasoningSummary: "auto", reasoningEffort: "low" } },
      { reasoning: { summary: "auto", effort: "low" } },
    ],
    [
      "B (thinking)",
      () => clients.anthropic("claude-sonnet-4-5"),
      "claude-sonnet-4-5",
      messagesTurn,
      { thinking: 5 },
      { anthropic: { thinking: { type: "enabled", budgetTokens: 1024 } } },
      { thinking: { type: "enabled", budget_tokens: 1024 } },
    ],
    [
      "C (thoughts)",
      () => clients.google("gemini-2.5-flash"),
      "gemini-2.5-flash",
      geminiTurn,
      {},
      { google: { thinkingConfig: { includeThoughts: true, thinkingBudget: 1024 } } },
      { generationConfig: { thinkingConfig: { includeThoughts: true, thinkingBudget: 1024 } } },
    ],
  ];

  it.each(thinkers)(
    "gives the reasoning of %s to the app and records its tokens, streamed or not",
    async (_name, model, modelId, turn, extra, providerOptions, asked) => {
      const reasoned = { ...usage, ...extra };
      const thought = "The user greets me; I should greet back.";
      const rows = [];
      for (const streamed of [false, true]) {
        fake.enqueueResponse(turn(modelId, { thought, text: greeting }, reasoned, streamed));
        const options = { model: model(), prompt: "Hi", providerOptions, maxRetries: 0 };
        const result = streamed ? streamText(options) : await generateText(options);
        expect(await result.text).toBe(greeting);
        expect(fake.last()!.json).toMatchObject(asked);
        expect(await result.reasoningText).toBe(thought);
        const sdkUsage = await result.usage;
        const row = await rowFor((await result.response).headers);
        expect(tokensOfRow(row)).toEqual(tokensOf(sdkUsage));
        expect(row.reasoning_tokens).toBe(extra.thinking ?? usage.reasoning);
        expect(row).toMatchObject({ model: modelId, streamed: streamed ? 1 : 0, outcome: "ok" });
        rows.push(row);
      }
      expect(rows[1]!.cost_usd).not.toBeNull();
      expect(rows[1]!.cost_usd).toBe(rows[0]!.cost_usd);
    },
  );

  it.each(apis)(
    "answers generateObject and streamObject on %s, with the SDK's tokens in the rows",
    async (_name, model) => {
      const schema = z.object({ answer: z.string() });
      fake.setStructuredOutput({ answer: "fake" });
      const buffered = await generateObject({ model: model(), schema, prompt: "Hi", maxRetries: 0 });
      expect(buffered.object).toEqual({ answer: "fake" });
      const streamed = streamObject({ model: model(), schema, prompt: "Hi", maxRetries: 0 });
      // streamObject's promises settle once its stream has been read.
      for await (const _partial of streamed.partialObjectStream);
      expect(await streamed.object).toEqual({ answer: "fake" });
      const rows = [await rowFor(buffered.response.headers), await rowFor((await streamed.response).headers)];
      expect(rows.map((row) => row.streamed)).toEqual([0, 1]);
      expect(tokensOfRow(rows[0]!)).toEqual(tokensOf(buffered.usage));
      expect(tokensOfRow(rows[1]!)).toEqual(tokensOf(await streamed.usage));
      expect(rows[1]!.cost_usd).toBe(rows[0]!.cost_usd);
    },
  );

  it("records B's prompt-cache writes in the input tokens, as the SDK counts them, priced at the write price", async () => {
    const cachedUsage = {
      input_tokens: 5,
      cache_creation_input_tokens: 100,
      cache_read_input_tokens: 3,
      cache_creation: { ephemeral_5m_input_tokens: 100, ephemeral_1h_input_tokens: 0 },
      output_tokens: 7,
    };
    fake.enqueueResponse({
      status: 200,
      body: {
        id: "msg_fake_cache",
        type: "message",
        role: "assistant",
        model: "claude-sonnet-4-5",
        content: [{ type: "text", text: greeting }],
        stop_reason: "end_turn",
        stop_sequence: null,
        usage: cachedUsage,
      },
    });
    const result = await generateText({
      model: clients.anthropic("claude-sonnet-4-5"),
      messages: [
        {
          role: "system",
          content: "A long system prompt worth caching.",
          providerOptions: { anthropic: { cacheControl: { type: "ephemeral" } } },
        },
        { role: "user", content: "Hi" },
      ],
      allowSystemInMessages: true,
      maxRetries: 0,
    });
    expect(fake.last()!.json).toMatchObject({ system: [{ cache_control: { type: "ephemeral" } }] });
    expect(result.usage.inputTokens).toBe(108);
    expect(result.usage.inputTokenDetails.cacheWriteTokens).toBe(100);
    const row = await rowFor(result.response.headers);
    expect(tokensOfRow(row)).toEqual(tokensOf(result.usage));
    // claude-sonnet-4-5, per 1M: 3 input, 0.3 cache read, 3.75 five-minute cache write, 15 output.
    expect(row.cost_usd).toBeCloseTo((5 * 3 + 3 * 0.3 + 100 * 3.75 + 7 * 15) / 1e6, 12);
  });

  it("counts C's tool-use prompt tokens as input, which the SDK's inputTokens leaves out", async () => {
    fake.setUsage({ toolUse: 5 });
    try {
      const result = await generateText({
        model: clients.google("gemini-2.5-flash"),
        prompt: "Hi",
        maxRetries: 0,
      });
      const row = await rowFor(result.response.headers);
      // Google bills toolUsePromptTokenCount as input; @ai-sdk/google reports promptTokenCount alone.
      expect(result.usage.inputTokens).toBe(11);
      expect(row.input_tokens).toBe(16);
      expect({ ...tokensOfRow(row), input: 11 }).toEqual(tokensOf(result.usage));
    } finally {
      fake.setUsage({ toolUse: 0 });
    }
  });

  it("records a B answer its server-side fallback served as the fallback model's, priced so, streamed or not", async () => {
    const rows = [];
    for (const streamed of [false, true]) {
      fake.enqueueResponse(
        messagesFallbackTurn("claude-fable-5", "claude-opus-4-8", greeting, usage, streamed),
      );
      const options = {
        model: clients.anthropic("claude-fable-5"),
        prompt: "Hi",
        providerOptions: { anthropic: { fallbacks: [{ model: "claude-opus-4-8" }] } },
        maxRetries: 0,
      };
      const result = streamed ? streamText(options) : await generateText(options);
      expect(await result.text).toBe(greeting);
      expect(fake.last()!.json).toMatchObject({
        model: "claude-fable-5",
        fallbacks: [{ model: "claude-opus-4-8" }],
      });
      const row = await rowFor((await result.response).headers);
      expect(tokensOfRow(row)).toEqual(tokensOf(await result.usage));
      rows.push(row);
    }
    // claude-opus-4-8, per 1M: 5 input, 0.5 cache read, 25 output; the refused attempt is not billed.
    const opusCost = ((11 - 3) * 5 + 3 * 0.5 + 7 * 25) / 1e6;
    for (const row of rows) {
      expect(row.model).toBe("claude-opus-4-8");
      expect(row.cost_usd).toBeCloseTo(opusCost, 12);
    }
  });

  it("records each request of a C answer the SDK continues (finishReason CONTINUATION), which add up to its usage", async () => {
    const continued = providerC.response("gemini-2.5-flash", "Hello from ", usage);
    const first = continued.candidates[0]!;
    fake.enqueueResponse({
      status: 200,
      body: {
        ...continued,
        candidates: [{ ...first, finishReason: "CONTINUATION", continuationToken: "fake-continuation-1" }],
      },
    });
    const before = await recorded.rowIds();
    const result = await generateText({
      model: clients.google("gemini-2.5-flash"),
      prompt: "Hi",
      maxRetries: 0,
    });
    expect(result.text).toBe(`Hello from ${greeting}`);
    expect(fake.requests).toHaveLength(2);
    expect(fake.requests[1]!.json).toMatchObject({ continuationToken: "fake-continuation-1" });
    const rows = await recorded.newRows(before);
    expect(rows).toHaveLength(2);
    // The SDK's usage is the two requests' summed; its response headers name the last one's row.
    expect(result.usage.inputTokens).toBe(rows.reduce((sum, row) => sum + (row.input_tokens ?? 0), 0));
    expect(result.usage.outputTokens).toBe(rows.reduce((sum, row) => sum + (row.output_tokens ?? 0), 0));
    expect(rows.map((row) => row.request_id)).toContain((await rowFor(result.response.headers)).request_id);
  });
});
