import type Anthropic from "@anthropic-ai/sdk";
import { type GoogleGenAI, ServiceTier } from "@google/genai";
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
 * The same call streamed and buffered, on each wire format, through the official SDKs: the two
 * usage rows hold the same tokens and cost, and the cost is the catalogue's prices applied by hand.
 * The upstream answers each call with the JSON body or the events a test programs, in the shapes
 * the providers send (recorded ones: see test/fakes/fake-upstream-responses.ts).
 */
describe("metering: the same call streamed and buffered records the same tokens and cost", () => {
  let upstream: LocalServer;
  let programmed: Programmed;
  let sluice: TestGateway;
  let project: TestProject;
  let openai: OpenAI;
  let anthropic: Anthropic;
  let google: GoogleGenAI;

  beforeAll(async () => {
    upstream = await startProgrammedUpstream(() => programmed);
    const base = upstream.url;
    sluice = await startTestGateway({
      providerABaseUrl: `${base}/a/v1`,
      providerBBaseUrl: `${base}/b/v1`,
      providerCBaseUrl: `${base}/c/v1beta`,
    });
    project = await createTestProject(sluice.gateway);
    ({ openai, anthropic, google } = sdkClients(sluice, project));
  });

  afterAll(async () => {
    await sluice.close();
    await upstream.close();
  });

  const row = (requestId: string | null | undefined) => usageRowById(sluice.gateway, requestId);

  /**
   * An answer not streamed that the provider cuts after `bytes`, which end inside a tool call whose
   * input (the model's, which a prompt can steer) spells a usage object: the row records no tokens
   * and an unknown cost, as for any answer cut before its usage, never the counts the model wrote.
   */
  async function cutBeforeUsage(provider: "provider-b" | "provider-c", path: string, bytes: string) {
    programmed = { json: null, events: [], cutJson: bytes };
    const headers: Record<string, string> =
      provider === "provider-b"
        ? { "x-api-key": project.bearer(provider) }
        : { "x-goog-api-key": project.bearer(provider) };
    const cut = await fetch(`${sluice.url}/v1/${provider}/${project.projectId}/${path}`, {
      method: "POST",
      headers: { ...headers, "content-type": "application/json" },
      body: JSON.stringify({ model: "claude-sonnet-4-6", max_tokens: 64, messages: [] }),
    });
    await cut.text().catch(() => "");
    expect(await row(cut.headers.get("x-request-id"))).toMatchObject({
      streamed: 0,
      outcome: "error",
      input_tokens: null,
      output_tokens: null,
      cost_usd: null,
    });
  }
  const metered = ["input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens", "cost_usd"] as const;

  /** The two rows agree on every metered column and on the model; returns the streamed one. */
  async function sameRows(bufferedId: string | null, streamedId: string | null) {
    const buffered = await row(bufferedId);
    const streamed = await row(streamedId);
    expect([buffered.streamed, streamed.streamed]).toEqual([0, 1]);
    for (const column of [...metered, "model"] as const)
      expect(streamed[column], column).toEqual(buffered[column]);
    return streamed;
  }

  describe("provider A", () => {
    const chatUsage = (input: number, cached: number, output: number, reasoning: number) => ({
      prompt_tokens: input,
      completion_tokens: output,
      total_tokens: input + output,
      prompt_tokens_details: { cached_tokens: cached, audio_tokens: 0 },
      completion_tokens_details: {
        reasoning_tokens: reasoning,
        audio_tokens: 0,
        accepted_prediction_tokens: 0,
        rejected_prediction_tokens: 0,
      },
    });
    /** `tier`: the service tier the answer and each chunk name (`default` when not given, and no chunk names it). */
    const chat = (model: string, usage: unknown, tier?: string): Programmed => {
      const base = {
        id: "chatcmpl-1",
        object: "chat.completion.chunk",
        created: 1,
        model,
        ...(tier === undefined ? {} : { service_tier: tier }),
      };
      const choice = (delta: unknown, finish: string | null) => [
        { index: 0, delta, logprobs: null, finish_reason: finish },
      ];
      return {
        json: {
          id: "chatcmpl-1",
          object: "chat.completion",
          created: 1,
          model,
          choices: [
            {
              index: 0,
              message: { role: "assistant", content: "Hi", refusal: null, annotations: [] },
              logprobs: null,
              finish_reason: "stop",
            },
          ],
          usage,
          service_tier: tier ?? "default",
        },
        events: [
          sse({ ...base, choices: choice({ role: "assistant", content: "" }, null), usage: null }),
          sse({ ...base, choices: choice({ content: "Hi" }, null), usage: null }),
          sse({ ...base, choices: choice({}, "stop"), usage: null }),
          sse({ ...base, choices: [], usage }),
          "data: [DONE]\n\n",
        ],
      };
    };

    async function chatBothWays(model: string, asked?: "flex" | "priority" | "auto") {
      const messages = [{ role: "user" as const, content: "Hi" }];
      const tier = asked === undefined ? {} : { service_tier: asked };
      const buffered = await openai.chat.completions.create({ model, messages, ...tier }).withResponse();
      const { data, response } = await openai.chat.completions
        .create({ model, messages, ...tier, stream: true })
        .withResponse();
      for await (const _ of data);
      return sameRows(buffered.response.headers.get("x-request-id"), response.headers.get("x-request-id"));
    }

    it("chat completions: cached input at its price, reasoning billed as output (gpt-5)", async () => {
      programmed = chat("gpt-5-2025-08-07", chatUsage(12_000, 8_000, 3_000, 2_000));
      const streamed = await chatBothWays("gpt-5");
      expect(streamed).toMatchObject({
        model: "gpt-5-2025-08-07",
        input_tokens: 12_000,
        cached_tokens: 8_000,
        output_tokens: 3_000,
        reasoning_tokens: 2_000,
      });
      // gpt-5 per 1M: $1.25 in, $0.125 cached, $10 out (reasoning is part of the output).
      expect(streamed.cost_usd).toBeCloseTo((4_000 * 1.25 + 8_000 * 0.125 + 3_000 * 10) / 1e6, 12);
    });

    it("chat completions: priced at the tier the answer says served the call, not the one asked for", async () => {
      const usage = chatUsage(12_000, 8_000, 3_000, 2_000);
      programmed = chat("gpt-5-2025-08-07", usage, "flex");
      const flex = await chatBothWays("gpt-5", "flex");
      // gpt-5 flex (Batch API rates): half of 4,000 x $1.25 + 8,000 x $0.125 + 3,000 x $10.
      expect(flex.cost_usd).toBeCloseTo((4_000 * 0.625 + 8_000 * 0.0625 + 3_000 * 5) / 1e6, 12);
      // Asked for priority, served (and billed) at the standard tier.
      programmed = chat("gpt-5-2025-08-07", usage, "default");
      const downgraded = await chatBothWays("gpt-5", "priority");
      expect(downgraded.cost_usd).toBeCloseTo((4_000 * 1.25 + 8_000 * 0.125 + 3_000 * 10) / 1e6, 12);
      // Asked for auto, served at priority: $2.50 in, $0.25 cached, $20 out.
      programmed = chat("gpt-5-2025-08-07", usage, "priority");
      const priority = await chatBothWays("gpt-5", "auto");
      expect(priority.cost_usd).toBeCloseTo((4_000 * 2.5 + 8_000 * 0.25 + 3_000 * 20) / 1e6, 12);
      // A tier with no published price for the model: unknown, never the standard price.
      programmed = chat("gpt-4.1-2025-04-14", usage, "flex");
      expect(await chatBothWays("gpt-4.1", "flex")).toMatchObject({ input_tokens: 12_000, cost_usd: null });
    });

    it("prices an alias and its dated snapshot alike, and an unknown model as unknown (null), not 0", async () => {
      programmed = chat("gpt-4o-mini-2024-07-18", chatUsage(1_000, 200, 100, 0));
      const alias = await chatBothWays("gpt-4o-mini");
      programmed = chat("gpt-4o-mini-2024-07-18", chatUsage(1_000, 200, 100, 0));
      const snapshot = await chatBothWays("gpt-4o-mini-2024-07-18");
      expect(alias.cost_usd).toBeCloseTo((800 * 0.15 + 200 * 0.075 + 100 * 0.6) / 1e6, 12);
      expect(snapshot.cost_usd).toBe(alias.cost_usd);
      programmed = chat("gpt-9-unreleased", chatUsage(1_000, 200, 100, 0));
      const unknown = await chatBothWays("gpt-9-unreleased");
      expect(unknown).toMatchObject({ input_tokens: 1_000, output_tokens: 100, cost_usd: null });
    });

    const responsesUsage = (input: number, cached: number, output: number, reasoning: number) => ({
      input_tokens: input,
      input_tokens_details: { cached_tokens: cached },
      output_tokens: output,
      output_tokens_details: { reasoning_tokens: reasoning },
      total_tokens: input + output,
    });
    /** `tier`: the service tier response.completed and the JSON answer name (response.created: `auto`). */
    const responses = (model: string, usage: unknown, tier?: string): Programmed => {
      const response = (status: string, usage: unknown, output: unknown[], served = tier) => ({
        id: "resp_1",
        object: "response",
        created_at: 1,
        status,
        error: null,
        incomplete_details: null,
        instructions: null,
        model,
        output,
        parallel_tool_calls: true,
        previous_response_id: null,
        reasoning: { effort: "medium", summary: null },
        ...(served === undefined ? {} : { service_tier: served }),
        store: true,
        temperature: 1,
        text: { format: { type: "text" } },
        tool_choice: "auto",
        tools: [],
        top_p: 1,
        truncation: "disabled",
        usage,
        user: null,
        metadata: {},
      });
      const message = {
        type: "message",
        id: "msg_1",
        status: "completed",
        role: "assistant",
        content: [{ type: "output_text", text: "Hi", annotations: [] }],
      };
      return {
        json: response("completed", usage, [message]),
        events: [
          sse(
            {
              type: "response.created",
              sequence_number: 0,
              response: response("in_progress", null, [], tier && "auto"),
            },
            "response.created",
          ),
          sse(
            {
              type: "response.output_text.delta",
              sequence_number: 1,
              item_id: "msg_1",
              output_index: 0,
              content_index: 0,
              delta: "Hi",
            },
            "response.output_text.delta",
          ),
          sse(
            {
              type: "response.completed",
              sequence_number: 2,
              response: response("completed", usage, [message]),
            },
            "response.completed",
          ),
        ],
      };
    };

    it("Responses API: a prompt over 272k input tokens at gpt-5.4's long-context prices", async () => {
      programmed = responses("gpt-5.4-2026-03-05", responsesUsage(300_000, 100_000, 5_000, 4_000));
      const buffered = await openai.responses.create({ model: "gpt-5.4", input: "Hi" }).withResponse();
      const { data, response } = await openai.responses
        .create({ model: "gpt-5.4", input: "Hi", stream: true })
        .withResponse();
      for await (const _ of data);
      const streamed = await sameRows(
        buffered.response.headers.get("x-request-id"),
        response.headers.get("x-request-id"),
      );
      expect(streamed).toMatchObject({
        input_tokens: 300_000,
        cached_tokens: 100_000,
        output_tokens: 5_000,
        reasoning_tokens: 4_000,
      });
      // Over 272k, the whole call at $5 in, $0.50 cached, $22.50 out.
      expect(streamed.cost_usd).toBeCloseTo((200_000 * 5 + 100_000 * 0.5 + 5_000 * 22.5) / 1e6, 12);
    });

    it("Responses API: priority at the model's priority prices, read from response.completed", async () => {
      programmed = responses("gpt-5.4-2026-03-05", responsesUsage(200_000, 50_000, 1_000, 0), "priority");
      const asked = { model: "gpt-5.4", input: "Hi", service_tier: "priority" as const };
      const buffered = await openai.responses.create(asked).withResponse();
      const { data, response } = await openai.responses.create({ ...asked, stream: true }).withResponse();
      for await (const _ of data);
      const streamed = await sameRows(
        buffered.response.headers.get("x-request-id"),
        response.headers.get("x-request-id"),
      );
      // gpt-5.4 priority: $5 in, $0.50 cached, $30 out.
      expect(streamed.cost_usd).toBeCloseTo((150_000 * 5 + 50_000 * 0.5 + 1_000 * 30) / 1e6, 12);
    });

    it("Responses API: a stream cut after response.completed keeps its tokens and cost", async () => {
      programmed = {
        ...responses("gpt-5.4-2026-03-05", responsesUsage(272_000, 0, 1_000, 0)),
        cut: true,
      };
      const cut = await fetch(`${sluice.url}/v1/provider-a/${project.projectId}/responses`, {
        method: "POST",
        headers: {
          authorization: `Bearer ${project.bearer("provider-a")}`,
          "content-type": "application/json",
        },
        body: JSON.stringify({ model: "gpt-5.4", input: "Hi", stream: true }),
      });
      await cut.text().catch(() => "");
      const seen = await row(cut.headers.get("x-request-id"));
      // 272k exactly is not over the threshold: $2.50 in, $15 out.
      expect(seen).toMatchObject({
        streamed: 1,
        outcome: "error",
        input_tokens: 272_000,
        output_tokens: 1_000,
      });
      expect(seen.cost_usd).toBeCloseTo((272_000 * 2.5 + 1_000 * 15) / 1e6, 12);
    });

    it("embeddings: input tokens at the model's price, no output", async () => {
      programmed = {
        json: {
          object: "list",
          data: [{ object: "embedding", index: 0, embedding: [0.1, 0.2] }],
          model: "text-embedding-3-large",
          usage: { prompt_tokens: 5_000, total_tokens: 5_000 },
        },
        events: [],
      };
      const { response } = await openai.embeddings
        .create({ model: "text-embedding-3-large", input: "Hi" })
        .withResponse();
      const seen = await row(response.headers.get("x-request-id"));
      expect(seen).toMatchObject({ input_tokens: 5_000, output_tokens: 0, streamed: 0 });
      expect(seen.cost_usd).toBeCloseTo((5_000 * 0.13) / 1e6, 12);
    });
  });

  describe("provider B", () => {
    /** A message's answer and stream, with `usage` the final counts (message_delta's, cumulative). */
    const messages = (
      model: string,
      usage: Record<string, unknown>,
      cacheCreation: unknown,
      tier = "standard",
    ): Programmed => {
      const { output_tokens_details, ...counts } = usage;
      const message = (content: unknown[], usage: unknown, stop: string | null) => ({
        id: "msg_1",
        type: "message",
        role: "assistant",
        model,
        content,
        stop_reason: stop,
        stop_sequence: null,
        usage,
      });
      return {
        json: message(
          [
            { type: "thinking", thinking: "Hm.", signature: "sig" },
            { type: "text", text: "Hi" },
          ],
          { ...usage, cache_creation: cacheCreation, service_tier: tier },
          "end_turn",
        ),
        events: [
          sse(
            {
              type: "message_start",
              message: message(
                [],
                { ...counts, output_tokens: 1, cache_creation: cacheCreation, service_tier: tier },
                null,
              ),
            },
            "message_start",
          ),
          sse(
            {
              type: "content_block_start",
              index: 0,
              content_block: { type: "thinking", thinking: "", signature: "" },
            },
            "content_block_start",
          ),
          sse(
            { type: "content_block_delta", index: 0, delta: { type: "thinking_delta", thinking: "Hm." } },
            "content_block_delta",
          ),
          sse(
            { type: "content_block_delta", index: 0, delta: { type: "signature_delta", signature: "sig" } },
            "content_block_delta",
          ),
          sse({ type: "content_block_stop", index: 0 }, "content_block_stop"),
          sse(
            { type: "content_block_start", index: 1, content_block: { type: "text", text: "" } },
            "content_block_start",
          ),
          sse(
            { type: "content_block_delta", index: 1, delta: { type: "text_delta", text: "Hi" } },
            "content_block_delta",
          ),
          sse({ type: "content_block_stop", index: 1 }, "content_block_stop"),
          // message_delta's usage has the cumulative counts, without the cache_creation breakdown.
          sse(
            {
              type: "message_delta",
              delta: { stop_reason: "end_turn", stop_sequence: null },
              usage: { ...usage, server_tool_use: null },
            },
            "message_delta",
          ),
          sse({ type: "message_stop" }, "message_stop"),
        ],
      };
    };

    async function bothWays(model: string) {
      const body = { model, max_tokens: 1024, messages: [{ role: "user" as const, content: "Hi" }] };
      const buffered = await anthropic.messages.create(body).withResponse();
      const { data, response } = await anthropic.messages.create({ ...body, stream: true }).withResponse();
      for await (const _ of data);
      return sameRows(buffered.response.headers.get("x-request-id"), response.headers.get("x-request-id"));
    }

    const cachedUsage = {
      input_tokens: 500,
      cache_creation_input_tokens: 3_000,
      cache_read_input_tokens: 2_000,
      output_tokens: 800,
      output_tokens_details: { thinking_tokens: 600 },
    };
    const cacheCreation = { ephemeral_5m_input_tokens: 1_000, ephemeral_1h_input_tokens: 2_000 };

    it("messages: cache reads, five-minute and one-hour cache writes, thinking as output", async () => {
      programmed = messages("claude-sonnet-4-6", cachedUsage, cacheCreation);
      const streamed = await bothWays("claude-sonnet-4-6");
      expect(streamed).toMatchObject({
        model: "claude-sonnet-4-6",
        input_tokens: 5_500,
        cached_tokens: 2_000,
        output_tokens: 800,
        reasoning_tokens: 600,
      });
      // Sonnet 4.6 per 1M: $3 in, $0.30 read, $3.75 five-minute and $6 one-hour writes, $15 out.
      const expected = (500 * 3 + 2_000 * 0.3 + 1_000 * 3.75 + 2_000 * 6 + 800 * 15) / 1e6;
      expect(streamed.cost_usd).toBeCloseTo(expected, 12);
    });

    it("messages: over 100k input tokens (cache included) at Haiku 5.5's long-context prices", async () => {
      const usage = { ...cachedUsage, input_tokens: 150_000, cache_read_input_tokens: 60_000 };
      programmed = messages("claude-haiku-5-5", usage, cacheCreation);
      const streamed = await bothWays("claude-haiku-5-5");
      expect(streamed).toMatchObject({ input_tokens: 213_000, cached_tokens: 60_000 });
      // Over 100k: $0.50 in, $0.05 read, $0.625 and $1 writes, $2.50 out.
      const expected = (150_000 * 0.5 + 60_000 * 0.05 + 1_000 * 0.625 + 2_000 * 1 + 800 * 2.5) / 1e6;
      expect(streamed.cost_usd).toBeCloseTo(expected, 12);
    });

    it("prices the -latest alias as the snapshot it answers with, and an unknown model as null", async () => {
      const usage = { ...cachedUsage, cache_creation_input_tokens: 0, output_tokens_details: null };
      programmed = messages("claude-3-5-haiku-20241022", usage, null);
      const alias = await bothWays("claude-3-5-haiku-latest");
      // Haiku 3.5 per 1M: $0.80 in, $0.08 read, $4 out.
      expect(alias.cost_usd).toBeCloseTo((500 * 0.8 + 2_000 * 0.08 + 800 * 4) / 1e6, 12);
      const snapshot = await bothWays("claude-3-5-haiku-20241022");
      expect(snapshot.cost_usd).toBe(alias.cost_usd);
      programmed = messages("claude-unreleased-9", usage, null);
      expect(await bothWays("claude-unreleased-9")).toMatchObject({ input_tokens: 2_500, cost_usd: null });
    });

    it("messages served on Priority Tier: tokens recorded, cost unknown (billed against a commitment)", async () => {
      programmed = messages("claude-sonnet-4-6", cachedUsage, cacheCreation, "priority");
      expect(await bothWays("claude-sonnet-4-6")).toMatchObject({ input_tokens: 5_500, cost_usd: null });
    });

    it("an answer cut inside a tool_use block records no tokens, not a usage its input spells", async () => {
      const input = { usage: { input_tokens: 1, output_tokens: 1 } };
      await cutBeforeUsage(
        "provider-b",
        "v1/messages",
        `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-6","content":[{"type":"tool_use","id":"toolu_1","name":"report","input":${JSON.stringify(input)}},{"type":"text","text":"Done`,
      );
    });

    it("a stream cut after message_delta keeps its tokens and cost", async () => {
      const whole = messages("claude-sonnet-4-6", cachedUsage, cacheCreation);
      programmed = { ...whole, events: whole.events.slice(0, -1), cut: true };
      const cut = await fetch(`${sluice.url}/v1/provider-b/${project.projectId}/messages`, {
        method: "POST",
        headers: { "x-api-key": project.bearer("provider-b"), "content-type": "application/json" },
        body: JSON.stringify({ model: "claude-sonnet-4-6", max_tokens: 64, messages: [], stream: true }),
      });
      await cut.text().catch(() => "");
      const seen = await row(cut.headers.get("x-request-id"));
      expect(seen).toMatchObject({ streamed: 1, outcome: "error", input_tokens: 5_500, output_tokens: 800 });
      const expected = (500 * 3 + 2_000 * 0.3 + 1_000 * 3.75 + 2_000 * 6 + 800 * 15) / 1e6;
      expect(seen.cost_usd).toBeCloseTo(expected, 12);
    });
  });

  describe("provider C", () => {
    interface Counts {
      prompt: number;
      cached: number;
      candidates: number;
      thoughts: number;
      toolUse: number;
    }
    const usageMetadata = (counts: Counts) => ({
      promptTokenCount: counts.prompt,
      candidatesTokenCount: counts.candidates,
      totalTokenCount: counts.prompt + counts.candidates + counts.thoughts + counts.toolUse,
      cachedContentTokenCount: counts.cached,
      toolUsePromptTokenCount: counts.toolUse,
      thoughtsTokenCount: counts.thoughts,
      promptTokensDetails: [{ modality: "TEXT", tokenCount: counts.prompt }],
      cacheTokensDetails: [{ modality: "TEXT", tokenCount: counts.cached }],
      toolUsePromptTokensDetails: [{ modality: "TEXT", tokenCount: counts.toolUse }],
    });
    const gemini = (model: string, counts: Counts, tier?: string): Programmed => {
      const chunk = (text: string, usage: unknown, finish: boolean) => ({
        candidates: [
          {
            content: { parts: [{ text }], role: "model" },
            ...(finish ? { finishReason: "STOP" } : {}),
            index: 0,
          },
        ],
        usageMetadata: usage,
        modelVersion: model,
        responseId: "resp-1",
      });
      const served = tier === undefined ? {} : { serviceTier: tier };
      // The stream's first chunks report the prompt (and thoughts so far); the last one, everything.
      const early = {
        promptTokenCount: counts.prompt,
        totalTokenCount: counts.prompt + counts.thoughts,
        cachedContentTokenCount: counts.cached,
        thoughtsTokenCount: counts.thoughts,
      };
      return {
        json: chunk("Hello there", { ...usageMetadata(counts), ...served }, true),
        events: [
          `data: ${JSON.stringify(chunk("Hello", { ...early, ...served }, false))}\r\n\r\n`,
          `data: ${JSON.stringify(chunk(" there", { ...usageMetadata(counts), ...served }, true))}\r\n\r\n`,
        ],
      };
    };

    async function bothWays(model: string, serviceTier?: ServiceTier) {
      const config = serviceTier === undefined ? {} : { config: { serviceTier } };
      const buffered = await google.models.generateContent({ model, contents: "Hi", ...config });
      let streamedId: string | null = null;
      for await (const chunk of await google.models.generateContentStream({
        model,
        contents: "Hi",
        ...config,
      }))
        streamedId ??= chunk.sdkHttpResponse?.headers?.["x-request-id"] ?? null;
      return sameRows(buffered.sdkHttpResponse?.headers?.["x-request-id"] ?? null, streamedId);
    }

    it("generateContent and ?alt=sse: flex at half the input and output prices, priority unknown", async () => {
      const counts = { prompt: 10_000, cached: 0, candidates: 500, thoughts: 1_500, toolUse: 200 };
      programmed = gemini("gemini-2.5-flash", counts, "flex");
      const flex = await bothWays("gemini-2.5-flash", ServiceTier.FLEX);
      // Half of 10,200 x $0.30 in and 2,000 x $2.50 out.
      expect(flex.cost_usd).toBeCloseTo((10_200 * 0.15 + 2_000 * 1.25) / 1e6, 12);
      programmed = gemini("gemini-2.5-flash", counts, "priority");
      expect(await bothWays("gemini-2.5-flash", ServiceTier.PRIORITY)).toMatchObject({
        input_tokens: 10_200,
        cost_usd: null,
      });
    });

    it("generateContent and ?alt=sse: cached input, thoughts as output, tool-use prompt as input", async () => {
      programmed = gemini("gemini-2.5-flash", {
        prompt: 10_000,
        cached: 4_000,
        candidates: 500,
        thoughts: 1_500,
        toolUse: 200,
      });
      const streamed = await bothWays("gemini-2.5-flash");
      expect(streamed).toMatchObject({
        model: "gemini-2.5-flash",
        input_tokens: 10_200,
        cached_tokens: 4_000,
        output_tokens: 2_000,
        reasoning_tokens: 1_500,
      });
      // 2.5 Flash per 1M: $0.30 in, $0.075 cached, $2.50 out.
      expect(streamed.cost_usd).toBeCloseTo((6_200 * 0.3 + 4_000 * 0.075 + 2_000 * 2.5) / 1e6, 12);
    });

    it("a gemini-2.5-pro prompt over 200k tokens at its long-context prices", async () => {
      programmed = gemini("gemini-2.5-pro", {
        prompt: 250_000,
        cached: 100_000,
        candidates: 2_000,
        thoughts: 3_000,
        toolUse: 1_000,
      });
      const streamed = await bothWays("gemini-2.5-pro");
      expect(streamed).toMatchObject({
        input_tokens: 251_000,
        output_tokens: 5_000,
        reasoning_tokens: 3_000,
      });
      // Over 200k: $2.50 in, $0.625 cached, $15 out.
      expect(streamed.cost_usd).toBeCloseTo((151_000 * 2.5 + 100_000 * 0.625 + 5_000 * 15) / 1e6, 12);
    });

    it("prices a numbered stable version as its model, and an unknown model as null", async () => {
      const counts = { prompt: 1_000, cached: 0, candidates: 100, thoughts: 0, toolUse: 0 };
      programmed = gemini("gemini-2.0-flash-001", counts);
      const version = await bothWays("gemini-2.0-flash-001");
      expect(version.cost_usd).toBeCloseTo((1_000 * 0.1 + 100 * 0.4) / 1e6, 12);
      programmed = gemini("gemini-9-unreleased", counts);
      expect(await bothWays("gemini-9-unreleased")).toMatchObject({ input_tokens: 1_000, cost_usd: null });
    });

    it("a stream cut inside a chunk records the chunk before it, not a usageMetadata that function call arguments spell, as SSE and as a JSON array", async () => {
      const counts = { prompt: 10_000, cached: 4_000, candidates: 500, thoughts: 1_500, toolUse: 200 };
      const [first] = gemini("gemini-2.5-flash", counts).events;
      const whole = JSON.parse((first as string).slice("data: ".length)) as unknown;
      // The next chunk cut after a function call whose arguments (the model's text) spell a usageMetadata.
      const forged = { usageMetadata: { promptTokenCount: 1, candidatesTokenCount: 1, totalTokenCount: 2 } };
      const cutChunk = `{"candidates":[{"content":{"parts":[{"functionCall":{"name":"f","args":${JSON.stringify(forged)}}}]`;
      const cutCall = async (query: string) => {
        const cut = await fetch(
          `${sluice.url}/v1/provider-c/${project.projectId}/models/gemini-2.5-flash:streamGenerateContent${query}`,
          {
            method: "POST",
            headers: { "x-goog-api-key": project.bearer("provider-c"), "content-type": "application/json" },
            body: JSON.stringify({ contents: [{ role: "user", parts: [{ text: "Hi" }] }] }),
          },
        );
        await cut.text().catch(() => "");
        return row(cut.headers.get("x-request-id"));
      };
      programmed = {
        json: null,
        events: [`data: ${JSON.stringify(whole)}\r\n\r\n`, `data: ${cutChunk}`],
        cut: true,
      };
      const sse = await cutCall("?alt=sse");
      programmed = {
        json: null,
        // As Google writes the array: each element indented, after a comma and a line break.
        events: [`[${JSON.stringify(whole, null, 2)}`, `,\r\n${cutChunk}`],
        cut: true,
        contentType: "application/json; charset=UTF-8",
      };
      const array = await cutCall("");
      // The first chunk's counts: the prompt, and the thoughts so far.
      const firstChunk = {
        streamed: 1,
        outcome: "error",
        input_tokens: 10_000,
        cached_tokens: 4_000,
        output_tokens: 1_500,
        reasoning_tokens: 1_500,
      };
      expect(sse).toMatchObject(firstChunk);
      expect(array).toMatchObject(firstChunk);
      // 2.5 Flash per 1M: $0.30 in, $0.075 cached, $2.50 out.
      expect(sse.cost_usd).toBeCloseTo((6_000 * 0.3 + 4_000 * 0.075 + 1_500 * 2.5) / 1e6, 12);
      expect(array.cost_usd).toBe(sse.cost_usd);
    });

    it("an answer cut after a function call records no tokens, not a usageMetadata its arguments spell", async () => {
      const args = { usageMetadata: { promptTokenCount: 1, candidatesTokenCount: 1, totalTokenCount: 2 } };
      await cutBeforeUsage(
        "provider-c",
        "v1beta/models/gemini-2.5-flash:generateContent",
        `{"candidates":[{"content":{"parts":[{"functionCall":{"name":"report","args":${JSON.stringify(args)}}},{"text":"Done`,
      );
    });

    it("a stream cut after its last chunk keeps its tokens and cost", async () => {
      const counts = { prompt: 10_000, cached: 4_000, candidates: 500, thoughts: 1_500, toolUse: 200 };
      programmed = { ...gemini("gemini-2.5-flash", counts), cut: true };
      const cut = await fetch(
        `${sluice.url}/v1/provider-c/${project.projectId}/models/gemini-2.5-flash:streamGenerateContent?alt=sse`,
        {
          method: "POST",
          headers: { "x-goog-api-key": project.bearer("provider-c"), "content-type": "application/json" },
          body: JSON.stringify({ contents: [{ role: "user", parts: [{ text: "Hi" }] }] }),
        },
      );
      await cut.text().catch(() => "");
      const seen = await row(cut.headers.get("x-request-id"));
      expect(seen).toMatchObject({
        streamed: 1,
        outcome: "error",
        input_tokens: 10_200,
        output_tokens: 2_000,
      });
      expect(seen.cost_usd).toBeCloseTo((6_200 * 0.3 + 4_000 * 0.075 + 2_000 * 2.5) / 1e6, 12);
    });
  });
});
