import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { afterEach, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import {
  type AgentTurn,
  chatTurn,
  geminiTurn,
  messagesTurn,
  responsesTurn,
} from "../fakes/fake-agent-answers.js";
import type { FakeUsage } from "../fakes/fake-upstream-responses.js";
import { useProxyStage } from "../support/proxy-stage.js";
import { sdkClients } from "../support/sdk-clients.js";

/**
 * What an app's agent loop sends through the proxies with the official SDKs' own helpers, beyond
 * plain text (proxy-sdk.test.ts): a streamed tool call after the model's thinking on each wire
 * format, and a Responses API answer stopped at its output limit. Each checks both ends: the body
 * the SDK sent reaches the provider byte for byte with the injected key, and the usage row holds
 * the tokens the provider reported, by kind, priced from the catalogue by hand. (The AI SDK's tool
 * loops: proxy-ai-sdk-agents.test.ts.)
 */
describe("the official SDKs' tool calls and thinking through the proxies", () => {
  const stage = useProxyStage(sdkClients);
  const usage: FakeUsage = { input: 11, output: 7, cached: 3, reasoning: 2 };
  const call: AgentTurn = {
    thought: "The user wants Paris's weather.",
    call: { name: "weather", input: { city: "Paris" } },
  };

  /** The bodies the SDKs sent to Sluice, in order (what the provider must get, byte for byte). */
  const sent: Buffer[] = [];
  const original = globalThis.fetch;
  const recording: typeof fetch = async (input, init) => {
    const url = input instanceof Request ? input.url : String(input);
    if (url.startsWith(stage.sluice.url) && typeof init?.body === "string") sent.push(Buffer.from(init.body));
    return original(input, init);
  };
  let openai: OpenAI;
  let anthropic: Anthropic;

  beforeAll(() => {
    const base = (provider: string) => `${stage.sluice.url}/v1/${provider}/${stage.project.projectId}`;
    openai = new OpenAI({
      baseURL: base("provider-a"),
      apiKey: stage.project.bearer("provider-a"),
      maxRetries: 0,
      fetch: recording,
    });
    anthropic = new Anthropic({
      baseURL: base("provider-b"),
      apiKey: stage.project.bearer("provider-b"),
      maxRetries: 0,
      fetch: recording,
    });
  });
  beforeEach(() => {
    stage.fake.clear();
    stage.fake.setUsage({ ...usage, thinking: undefined });
    sent.length = 0;
  });
  afterEach(() => {
    vi.restoreAllMocks();
  });

  const rowOf = (run: () => Promise<unknown>) => stage.rowAddedBy(run);

  /** The provider got the one body the SDK sent, byte for byte. */
  function expectSentAsIs() {
    expect(sent).toHaveLength(1);
    expect(stage.fake.requests).toHaveLength(1);
    expect(stage.fake.last()!.body.equals(sent[0]!)).toBe(true);
  }

  const tokens = { input_tokens: 11, output_tokens: 7, cached_tokens: 3, reasoning_tokens: 2 };

  describe("provider A (openai)", () => {
    const weather = {
      type: "function" as const,
      function: {
        name: "weather",
        description: "The weather in a city",
        parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
      },
    };

    it("streams a chat completion's tool call (chat.completions.stream) and records the usage Sluice asked for", async () => {
      stage.fake.enqueueResponse(chatTurn("gpt-4o-mini", { call: call.call }, usage, true));
      const row = await rowOf(async () => {
        const stream = openai.chat.completions.stream({
          model: "gpt-4o-mini",
          messages: [{ role: "user", content: "Weather in Paris?" }],
          tools: [weather],
        });
        const completion = await stream.finalChatCompletion();
        expect(completion.choices[0]).toMatchObject({
          finish_reason: "tool_calls",
          message: {
            tool_calls: [{ type: "function", function: { name: "weather", arguments: '{"city":"Paris"}' } }],
          },
        });
        // The usage chunk Sluice asked for is the provider's to Sluice, not the app's.
        expect(completion.usage ?? null).toBeNull();
      });
      const upstream = stage.fake.last()!;
      expect(upstream.headers.authorization).toBe(`Bearer ${stage.project.providerKeys["provider-a"]}`);
      // The body as sent, with the one option Sluice sets so the stream reports its usage.
      expect(upstream.json).toEqual({
        ...JSON.parse(sent[0]!.toString()),
        stream_options: { include_usage: true },
      });
      expect(row).toMatchObject({ model: "gpt-4o-mini", status: 200, outcome: "ok", streamed: 1, ...tokens });
      expect(row.cost_usd).toBeCloseTo(((11 - 3) * 0.15 + 3 * 0.075 + 7 * 0.6) / 1e6, 12);
    });

    it("streams a Responses API function call after a reasoning summary (responses.stream), usage from response.completed", async () => {
      stage.fake.enqueueResponse(responsesTurn("o4-mini", call, usage, true));
      const row = await rowOf(async () => {
        const stream = openai.responses.stream({
          model: "o4-mini",
          input: "Weather in Paris?",
          reasoning: { effort: "low", summary: "auto" },
          tools: [
            { type: "function", name: "weather", parameters: weather.function.parameters, strict: true },
          ],
        });
        const response = await stream.finalResponse();
        expect(response.output.map((item) => item.type)).toEqual(["reasoning", "function_call"]);
        expect(response.output[1]).toMatchObject({ name: "weather", arguments: '{"city":"Paris"}' });
        expect(response.usage).toMatchObject({
          input_tokens: 11,
          input_tokens_details: { cached_tokens: 3 },
          output_tokens: 7,
          output_tokens_details: { reasoning_tokens: 2 },
        });
      });
      expectSentAsIs();
      expect(stage.fake.last()!.headers.authorization).toBe(
        `Bearer ${stage.project.providerKeys["provider-a"]}`,
      );
      expect(row).toMatchObject({ model: "o4-mini", status: 200, outcome: "ok", streamed: 1, ...tokens });
      // o4-mini: $1.10 input, $0.275 cached input, $4.40 output (reasoning included) per 1M tokens.
      expect(row.cost_usd).toBeCloseTo(((11 - 3) * 1.1 + 3 * 0.275 + 7 * 4.4) / 1e6, 12);
    });

    it("records a Responses API answer stopped at max_output_tokens (incomplete), streamed (response.incomplete) and not", async () => {
      // All its output went on reasoning before the limit: billed, though the app gets no text.
      const stopped = (status: string, withUsage: boolean) => ({
        id: "resp_fake_incomplete",
        object: "response",
        created_at: 1_763_000_000,
        status,
        error: null,
        incomplete_details: status === "incomplete" ? { reason: "max_output_tokens" } : null,
        max_output_tokens: 7,
        model: "o4-mini-2025-04-16",
        output: withUsage ? [{ id: "rs_fake1", type: "reasoning", summary: [] }] : [],
        usage: withUsage
          ? {
              input_tokens: 11,
              input_tokens_details: { cached_tokens: 3 },
              output_tokens: 7,
              output_tokens_details: { reasoning_tokens: 7 },
              total_tokens: 18,
            }
          : null,
      });
      const event = (type: string, index: number, fields: object) =>
        `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: index, ...fields })}\n\n`;
      const item = { id: "rs_fake1", type: "reasoning", summary: [] };
      stage.fake.enqueueResponse({ status: 200, body: stopped("incomplete", true) });
      stage.fake.enqueueResponse({
        status: 200,
        headers: { "content-type": "text/event-stream" },
        parts: [
          event("response.created", 0, { response: stopped("in_progress", false) }),
          event("response.in_progress", 1, { response: stopped("in_progress", false) }),
          event("response.output_item.added", 2, { output_index: 0, item }),
          event("response.output_item.done", 3, { output_index: 0, item }),
          event("response.incomplete", 4, { response: stopped("incomplete", true) }),
        ],
      });
      const ask = { model: "o4-mini", input: "Think hard", max_output_tokens: 7 };
      const buffered = await rowOf(async () => {
        const response = await openai.responses.create(ask);
        expect(response).toMatchObject({ status: "incomplete", output_text: "" });
      });
      const streamed = await rowOf(async () => {
        const types: string[] = [];
        for await (const each of await openai.responses.create({ ...ask, stream: true }))
          types.push(each.type);
        expect(types.at(-1)).toBe("response.incomplete");
      });
      const reported = { input_tokens: 11, output_tokens: 7, cached_tokens: 3, reasoning_tokens: 7 };
      const cost = ((11 - 3) * 1.1 + 3 * 0.275 + 7 * 4.4) / 1e6;
      for (const [row, streamedFlag] of [
        [buffered, 0],
        [streamed, 1],
      ] as const) {
        expect(row).toMatchObject({
          model: "o4-mini-2025-04-16",
          status: 200,
          streamed: streamedFlag,
          ...reported,
        });
        expect(row.cost_usd).toBeCloseTo(cost, 12);
      }
      expect(streamed.outcome).toBe(buffered.outcome);
    });

    it("forwards files.list and files.retrieve (GETs, no body) with the injected key, and records them as free", async () => {
      const free = { status: 200, outcome: "ok", input_tokens: null, output_tokens: null, cost_usd: 0 };
      const listed = await rowOf(async () => {
        const ids: string[] = [];
        for await (const file of openai.files.list({ purpose: "batch" })) ids.push(file.id);
        expect(ids).toEqual(["file-abc123"]);
      });
      expect(stage.fake.last()).toMatchObject({ method: "GET", path: "/a/v1/files?purpose=batch" });
      const retrieved = await rowOf(async () => {
        expect(await openai.files.retrieve("file-abc123")).toMatchObject({
          id: "file-abc123",
          object: "file",
        });
      });
      const upstream = stage.fake.last()!;
      expect(upstream).toMatchObject({ method: "GET", path: "/a/v1/files/file-abc123" });
      expect(upstream.body).toHaveLength(0);
      expect(upstream.headers.authorization).toBe(`Bearer ${stage.project.providerKeys["provider-a"]}`);
      expect(listed).toMatchObject(free);
      expect(retrieved).toMatchObject(free);
    });
  });

  describe("provider B (@anthropic-ai/sdk)", () => {
    const ask = {
      model: "claude-sonnet-4-5",
      max_tokens: 2048,
      thinking: { type: "enabled" as const, budget_tokens: 1024 },
      tools: [
        {
          name: "weather",
          description: "The weather in a city",
          input_schema: {
            type: "object" as const,
            properties: { city: { type: "string" } },
            required: ["city"],
          },
        },
      ],
      messages: [{ role: "user" as const, content: "Weather in Paris?" }],
    };

    it.each([false, true])(
      "answers thinking then a tool use (input_json_delta when streamed: %s) and records the thinking as reasoning",
      async (streamed) => {
        const thinking = { ...usage, thinking: 4 };
        stage.fake.enqueueResponse(messagesTurn("claude-sonnet-4-5", call, thinking, streamed));
        const row = await rowOf(async () => {
          const message = streamed
            ? await anthropic.messages.stream(ask).finalMessage()
            : await anthropic.messages.create(ask);
          expect(message.stop_reason).toBe("tool_use");
          expect(message.content).toMatchObject([
            { type: "thinking", thinking: call.thought },
            { type: "tool_use", name: "weather", input: { city: "Paris" } },
          ]);
          expect(message.usage).toMatchObject({
            input_tokens: 8,
            cache_read_input_tokens: 3,
            output_tokens: 7,
          });
        });
        expectSentAsIs();
        expect(stage.fake.last()!.headers["x-api-key"]).toBe(stage.project.providerKeys["provider-b"]);
        expect(row).toMatchObject({
          model: "claude-sonnet-4-5",
          status: 200,
          outcome: "ok",
          streamed: streamed ? 1 : 0,
          input_tokens: 11,
          cached_tokens: 3,
          output_tokens: 7,
          reasoning_tokens: 4,
        });
        // claude-sonnet-4-5: $3 input, $0.30 cache read, $15 output (thinking included) per 1M tokens.
        expect(row.cost_usd).toBeCloseTo(((11 - 3) * 3 + 3 * 0.3 + 7 * 15) / 1e6, 12);
      },
    );
  });

  describe("provider C (@google/genai)", () => {
    it("records the tokens an embedding's answer reports (usageMetadata), one text and a batch, at the model's price", async () => {
      const usageMetadata = (tokens: number) => ({
        promptTokenCount: tokens,
        promptTokenDetails: [{ modality: "TEXT", tokenCount: tokens }],
      });
      const vector = { values: [0.013168523, -0.008711934, -0.046782676] };
      stage.fake.enqueueResponse({
        status: 200,
        body: { embedding: vector, usageMetadata: usageMetadata(5) },
      });
      stage.fake.enqueueResponse({
        status: 200,
        body: { embeddings: [vector, vector], usageMetadata: usageMetadata(9) },
      });
      const one = await rowOf(() =>
        stage.google.models.embedContent({ model: "gemini-embedding-001", contents: "Hi" }),
      );
      const batch = await rowOf(() =>
        stage.google.models.embedContent({ model: "gemini-embedding-001", contents: ["Hi", "there"] }),
      );
      // gemini-embedding-001: $0.15 per 1M input tokens.
      for (const [row, input] of [
        [one, 5],
        [batch, 9],
      ] as const) {
        expect(row).toMatchObject({
          model: "gemini-embedding-001",
          status: 200,
          outcome: "ok",
          input_tokens: input,
          output_tokens: 0,
        });
        expect(row.cost_usd).toBeCloseTo((input * 0.15) / 1e6, 12);
      }
    });

    it.each([false, true])(
      "answers thought parts and a function call (streamed: %s) and records cachedContentTokenCount and thoughtsTokenCount",
      async (streamed) => {
        vi.spyOn(globalThis, "fetch").mockImplementation(recording);
        stage.fake.enqueueResponse(geminiTurn("gemini-2.5-flash", call, usage, streamed));
        const ask = {
          model: "gemini-2.5-flash",
          contents: "Weather in Paris?",
          config: {
            thinkingConfig: { includeThoughts: true },
            tools: [
              {
                functionDeclarations: [
                  {
                    name: "weather",
                    description: "The weather in a city",
                    parametersJsonSchema: {
                      type: "object",
                      properties: { city: { type: "string" } },
                      required: ["city"],
                    },
                  },
                ],
              },
            ],
          },
        };
        const row = await rowOf(async () => {
          const chunks = [];
          if (!streamed) chunks.push(await stage.google.models.generateContent(ask));
          else
            for await (const chunk of await stage.google.models.generateContentStream(ask))
              chunks.push(chunk);
          const parts = chunks.flatMap((chunk) => chunk.candidates?.[0]?.content?.parts ?? []);
          expect(parts).toMatchObject([
            { text: call.thought, thought: true },
            { functionCall: { name: "weather", args: { city: "Paris" } } },
          ]);
          expect(chunks.at(-1)!.usageMetadata).toMatchObject({
            promptTokenCount: 11,
            cachedContentTokenCount: 3,
            candidatesTokenCount: 5,
            thoughtsTokenCount: 2,
          });
        });
        expectSentAsIs();
        const upstream = stage.fake.last()!;
        expect(upstream.path).toBe(
          streamed
            ? "/c/v1/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
            : "/c/v1/models/gemini-2.5-flash:generateContent",
        );
        expect(upstream.headers["x-goog-api-key"]).toBe(stage.project.providerKeys["provider-c"]);
        expect(row).toMatchObject({
          model: "gemini-2.5-flash",
          status: 200,
          outcome: "ok",
          streamed: streamed ? 1 : 0,
          ...tokens,
        });
        // gemini-2.5-flash: $0.30 input, $0.075 cached input, $2.50 output (thoughts included) per 1M tokens.
        expect(row.cost_usd).toBeCloseTo(((11 - 3) * 0.3 + 3 * 0.075 + 7 * 2.5) / 1e6, 12);
      },
    );
  });
});
