import { streamText } from "ai";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { FakeUpstream } from "../fakes/fake-upstream.js";
import { providerB } from "../fakes/fake-upstream-responses.js";
import { aiSdkClients } from "../support/ai-sdk-clients.js";
import { aiSdkRows } from "../support/ai-sdk-rows.js";
import { type ProxyStage, startProxyStage } from "../support/proxy-stage.js";
import { sdkClients } from "../support/sdk-clients.js";

/**
 * A stream whose last event ends without its blank line (and without its last line end), read by
 * each provider's official client and by the AI SDK, through Sluice. WHATWG does not dispatch such an
 * event, and neither do `@anthropic-ai/sdk`, `@google/genai` (which throws "Incomplete JSON segment
 * at the end") or the AI SDK (eventsource-parser); `openai` does, at a clean end of the stream only
 * (its SSEDecoder's flush). So provider A's meter reads that event at a clean end, and every row
 * records the tokens the provider's own SDK gave its user; a cut stream's last event is read by no
 * client, nor by Sluice (docs/proxy.md, "Usage").
 */
describe("a stream whose last event ends without its blank line", () => {
  let stage: ProxyStage;
  let fake: FakeUpstream;
  let sdks: ReturnType<typeof sdkClients>;
  let aiSdk: ReturnType<typeof aiSdkClients>;
  let rows: ReturnType<typeof aiSdkRows>;

  beforeAll(async () => {
    stage = await startProxyStage();
    fake = stage.fake;
    sdks = sdkClients(stage.sluice, stage.project);
    aiSdk = aiSdkClients(stage.sluice, stage.project);
    rows = aiSdkRows(stage.sluice, stage.project);
  });
  afterAll(() => stage.close());
  beforeEach(() => {
    fake.clear();
    fake.setStreamEnd("whole");
    fake.setUsage({ input: 11, output: 7, cached: 3, reasoning: 2 });
  });

  /** Runs `call`: what it returned, and the one usage row it made. */
  async function withRow<T>(call: () => Promise<T>) {
    const before = await rows.rowIds();
    const result = await call();
    const made = await rows.newRowsOnce(before, 1);
    expect(made).toHaveLength(1);
    return { result, row: made[0] as NonNullable<(typeof made)[0]> };
  }

  /** Every event an async iterable gives before it ends, and the error it ends with (if any). */
  async function drain<T>(stream: AsyncIterable<T> | Promise<AsyncIterable<T>>) {
    const seen: T[] = [];
    try {
      for await (const item of await stream) seen.push(item);
      return { seen, error: null };
    } catch (error) {
      return { seen, error: error as Error };
    }
  }

  /** Provider B's stream up to its message_delta (its usage), which is its last event: no message_stop. */
  const providerBWithoutStop = () =>
    providerB
      .events("claude-sonnet-4-5", "Hello from the fake upstream", {
        input: 11,
        output: 7,
        cached: 3,
        reasoning: 2,
      })
      .slice(0, -1);

  describe("provider A (openai reads it at a clean end)", () => {
    it("records the tokens of the Responses API's response.completed the client got", async () => {
      fake.setStreamEnd("unterminated");
      const {
        result: { seen, error },
        row,
      } = await withRow(() =>
        drain<{ type: string }>(
          sdks.openai.responses.create({ model: "gpt-4o-mini", input: "Hi", stream: true }),
        ),
      );
      expect(error).toBeNull();
      const completed = seen.at(-1) as { type: string; response: { usage: unknown } };
      expect(completed.type).toBe("response.completed");
      expect(completed.response.usage).toMatchObject({ input_tokens: 11, output_tokens: 7 });
      expect(row).toMatchObject({
        status: 200,
        outcome: "ok",
        streamed: 1,
        input_tokens: 11,
        output_tokens: 7,
        cached_tokens: 3,
        reasoning_tokens: 2,
      });
    });

    it("on a cut stream, records no tokens: the client never gets that event", async () => {
      fake.setStreamEnd("cut");
      const {
        result: { seen, error },
        row,
      } = await withRow(() =>
        drain<{ type: string }>(
          sdks.openai.responses.create({ model: "gpt-4o-mini", input: "Hi", stream: true }),
        ),
      );
      expect(error).not.toBeNull();
      expect(seen.map((event) => event.type)).not.toContain("response.completed");
      expect(seen.at(-1)?.type).toBe("response.output_item.done");
      expect(row).toMatchObject({ status: 200, outcome: "error", streamed: 1 });
      expect(row.input_tokens ?? 0).toBe(0);
      expect(row.output_tokens ?? 0).toBe(0);
    });

    it("keeps the usage chunk Sluice asked for from the client, and records its tokens", async () => {
      // No [DONE]: the usage chunk is the last event.
      const chunk = (fields: Record<string, unknown>) =>
        `data: ${JSON.stringify({ id: "c1", object: "chat.completion.chunk", created: 1, model: "gpt-4o-mini", ...fields })}\n\n`;
      fake.setStreamEnd("unterminated");
      fake.enqueueResponse({
        status: 200,
        headers: { "content-type": "text/event-stream" },
        parts: [
          chunk({ choices: [{ index: 0, delta: { content: "Hi" }, finish_reason: "stop" }], usage: null }),
          chunk({ choices: [], usage: { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 } }),
        ],
      });
      const {
        result: { seen, error },
        row,
      } = await withRow(() =>
        drain<{ choices: unknown[] }>(
          sdks.openai.chat.completions.create({
            model: "gpt-4o-mini",
            messages: [{ role: "user", content: "Hi" }],
            stream: true,
          }),
        ),
      );
      expect(error).toBeNull();
      expect(seen.map((chunk) => chunk.choices.length)).toEqual([1]);
      expect(row).toMatchObject({ status: 200, outcome: "ok", input_tokens: 11, output_tokens: 7 });
    });

    it("records the tokens the openai SDK gives, though the AI SDK drops that event", async () => {
      fake.setStreamEnd("unterminated");
      const { result: usage, row } = await withRow(async () => {
        const result = streamText({ model: aiSdk.openai("gpt-4o-mini"), prompt: "Hi", onError: () => {} });
        await drain(result.fullStream);
        return result.usage;
      });
      expect(usage.inputTokens).toBeUndefined();
      expect(row).toMatchObject({ status: 200, outcome: "ok", input_tokens: 11, output_tokens: 7 });
    });
  });

  describe("provider B (no client reads it)", () => {
    it("records only message_start's counts when message_delta is left open, as the SDK reports", async () => {
      fake.setStreamEnd("unterminated");
      fake.enqueueResponse({
        status: 200,
        headers: { "content-type": "text/event-stream" },
        parts: providerBWithoutStop(),
      });
      const {
        result: { seen, error },
        row,
      } = await withRow(() =>
        drain<{ type: string }>(
          sdks.anthropic.messages.create({
            model: "claude-sonnet-4-5",
            max_tokens: 64,
            messages: [{ role: "user", content: "Hi" }],
            stream: true,
          }),
        ),
      );
      expect(error).toBeNull();
      expect(seen.map((event) => event.type)).not.toContain("message_delta");
      expect(seen.at(-1)?.type).toBe("content_block_stop");
      expect(row).toMatchObject({ status: 200, outcome: "ok", input_tokens: 11, output_tokens: 1 });
    });

    it("with the AI SDK, which reports usage from message_delta only: none for the app, message_start's in the row", async () => {
      fake.setStreamEnd("unterminated");
      fake.enqueueResponse({
        status: 200,
        headers: { "content-type": "text/event-stream" },
        parts: providerBWithoutStop(),
      });
      const { result: usage, row } = await withRow(async () => {
        const result = streamText({
          model: aiSdk.anthropic("claude-sonnet-4-5"),
          prompt: "Hi",
          onError: () => {},
        });
        await drain(result.fullStream);
        return result.usage;
      });
      // The row keeps what @anthropic-ai/sdk gives its user (message_start's usage), as above.
      expect(usage).toMatchObject({ inputTokens: undefined, outputTokens: undefined });
      expect(row).toMatchObject({ status: 200, outcome: "ok", input_tokens: 11, output_tokens: 1 });
    });
  });

  describe("provider C (no client reads it: @google/genai throws)", () => {
    it("records the tokens of the last chunk the client got, not the open one's totals", async () => {
      fake.setStreamEnd("unterminated");
      const {
        result: { seen, error },
        row,
      } = await withRow(() =>
        drain<{ usageMetadata?: unknown }>(
          sdks.google.models.generateContentStream({ model: "gemini-2.5-flash", contents: "Hi" }),
        ),
      );
      expect(error?.message).toMatch(/Incomplete JSON segment at the end/);
      expect(seen.length).toBeGreaterThan(0);
      expect(seen.at(-1)?.usageMetadata).toEqual({ promptTokenCount: 11, totalTokenCount: 11 });
      expect(row).toMatchObject({ status: 200, outcome: "ok", input_tokens: 11, output_tokens: 0 });
    });

    it("with the AI SDK: the row has the input tokens the app was told, and none of the open chunk's", async () => {
      fake.setStreamEnd("unterminated");
      const { result: usage, row } = await withRow(async () => {
        const result = streamText({
          model: aiSdk.google("gemini-2.5-flash"),
          prompt: "Hi",
          onError: () => {},
        });
        await drain(result.fullStream);
        return result.usage;
      });
      expect(usage.inputTokens).toBe(11);
      expect(row).toMatchObject({ status: 200, outcome: "ok", input_tokens: 11, output_tokens: 0 });
    });
  });
});
