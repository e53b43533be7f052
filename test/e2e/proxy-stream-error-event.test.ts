import { beforeEach, describe, expect, it } from "vitest";
import { useProxyStage } from "../support/proxy-stage.js";
import { sdkClients } from "../support/sdk-clients.js";
import { usageRowById } from "../support/test-gateway.js";

/** An SSE body of `events` ([name or null, data]), as a provider writes it. */
const sse = (events: Array<[string | null, object]>) =>
  events
    .map(([name, data]) => `${name === null ? "" : `event: ${name}\n`}data: ${JSON.stringify(data)}\n\n`)
    .join("");

const eventStream = { "content-type": "text/event-stream" };

describe("a stream that begins 200 and then carries the provider's error event", () => {
  const stage = useProxyStage(sdkClients);
  beforeEach(() => {
    stage.fake.clear();
    stage.fake.setSseDelayMs(0);
  });

  /** Provider B's streamed message, through the Anthropic SDK. */
  const messagesStream = () =>
    stage.anthropic.messages
      .create({
        model: "claude-sonnet-5-5",
        max_tokens: 64,
        messages: [{ role: "user", content: "Hi" }],
        stream: true,
      })
      .withResponse();

  it("is recorded as failed (outcome error, status 200) with the tokens seen before it: provider B", async () => {
    stage.fake.enqueueResponse({
      status: 200,
      headers: eventStream,
      body: sse([
        [
          "message_start",
          {
            type: "message_start",
            message: {
              id: "msg_1",
              type: "message",
              role: "assistant",
              model: "claude-sonnet-5-5",
              content: [],
              stop_reason: null,
              usage: { input_tokens: 25, output_tokens: 1 },
            },
          },
        ],
        [
          "content_block_start",
          { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
        ],
        [
          "content_block_delta",
          { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Hel" } },
        ],
        ["error", { type: "error", error: { type: "overloaded_error", message: "Overloaded" } }],
      ]),
    });
    const { data: stream, response } = await messagesStream();
    await expect(readAll(stream)).rejects.toThrow(/Overloaded/);
    const row = await usageRowById(stage.sluice.gateway, response.headers.get("x-request-id"));
    expect(row).toMatchObject({
      status: 200,
      outcome: "error",
      streamed: 1,
      input_tokens: 25,
      model: "claude-sonnet-5-5",
    });
  });

  it("is recorded as failed: provider A's chat completion stream with an error object", async () => {
    const chunk = (content: string) => ({
      id: "chatcmpl-1",
      object: "chat.completion.chunk",
      created: 1,
      model: "gpt-4o-mini-2024-07-18",
      choices: [{ index: 0, delta: { content }, finish_reason: null }],
    });
    stage.fake.enqueueResponse({
      status: 200,
      headers: eventStream,
      body: `${sse([
        [null, chunk("Hel")],
        [
          null,
          {
            error: {
              message: "The server had an error while processing your request.",
              type: "server_error",
            },
          },
        ],
      ])}data: [DONE]\n\n`,
    });
    const { data: stream, response } = await stage.openai.chat.completions
      .create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Hi" }], stream: true })
      .withResponse();
    await expect(readAll(stream)).rejects.toThrow(/server had an error/);
    const row = await usageRowById(stage.sluice.gateway, response.headers.get("x-request-id"));
    expect(row).toMatchObject({
      status: 200,
      outcome: "error",
      streamed: 1,
      model: "gpt-4o-mini-2024-07-18",
    });
  });

  /** Provider A's Responses API object, as its stream's lifecycle events carry it. */
  const responseObject = (status: string, usage: object | null) => ({
    id: "resp_1",
    object: "response",
    created_at: 1_763_000_000,
    status,
    background: false,
    error: status === "failed" ? { code: "server_error", message: "The model failed to answer." } : null,
    incomplete_details: null,
    model: "o4-mini-2025-04-16",
    output: [],
    service_tier: "default",
    usage,
  });
  const responsesStream = () =>
    stage.openai.responses.create({ model: "o4-mini", input: "Hi", stream: true }).withResponse();

  /**
   * A Responses stream that ends in response.failed reporting `usage`, its events named by their
   * event lines (`named`) or only by their data's type, read through the SDK (which does not throw
   * on it: the app gets the failed response, with its usage); answers the call's usage row.
   */
  async function failedResponsesRow(usage: object, named: boolean) {
    const lifecycle = (type: string, sequence: number, status: string, reported: object | null) =>
      [
        named ? type : null,
        { type, sequence_number: sequence, response: responseObject(status, reported) },
      ] as [string | null, object];
    stage.fake.enqueueResponse({
      status: 200,
      headers: eventStream,
      body: sse([
        lifecycle("response.created", 0, "in_progress", null),
        lifecycle("response.in_progress", 1, "in_progress", null),
        lifecycle("response.failed", 2, "failed", usage),
      ]),
    });
    const { data: stream, response } = await responsesStream();
    const events = [];
    for await (const event of stream) events.push(event);
    expect(events.at(-1)).toMatchObject({ type: "response.failed", response: { status: "failed", usage } });
    return usageRowById(stage.sluice.gateway, response.headers.get("x-request-id"));
  }

  it("is recorded as failed: provider A's Responses API stream that ends in response.failed, with the tokens it reports", async () => {
    const usage = {
      input_tokens: 11,
      input_tokens_details: { cached_tokens: 3 },
      output_tokens: 7,
      output_tokens_details: { reasoning_tokens: 5 },
      total_tokens: 18,
    };
    const row = await failedResponsesRow(usage, true);
    expect(row).toMatchObject({
      status: 200,
      outcome: "error",
      streamed: 1,
      model: "o4-mini-2025-04-16",
      input_tokens: 11,
      cached_tokens: 3,
      output_tokens: 7,
      reasoning_tokens: 5,
    });
    // o4-mini: $1.10 input, $0.275 cached input, $4.40 output (reasoning included) per 1M tokens.
    expect(row.cost_usd).toBeCloseTo(((11 - 3) * 1.1 + 3 * 0.275 + 7 * 4.4) / 1e6, 12);
  });

  // A compatible server may send the Responses stream without event lines, each event's type only
  // in its data: response.failed was told by its event line alone, and such a stream recorded ok.
  it("is recorded as failed: a Responses API stream without event lines that ends in response.failed", async () => {
    const usage = { input_tokens: 11, output_tokens: 7, total_tokens: 18 };
    const row = await failedResponsesRow(usage, false);
    expect(row).toMatchObject({
      status: 200,
      outcome: "error",
      streamed: 1,
      model: "o4-mini-2025-04-16",
      input_tokens: 11,
      output_tokens: 7,
    });
  });

  it("is recorded as failed: provider A's Responses API stream with an error event, without tokens", async () => {
    stage.fake.enqueueResponse({
      status: 200,
      headers: eventStream,
      body: sse([
        [
          "response.created",
          { type: "response.created", sequence_number: 0, response: responseObject("in_progress", null) },
        ],
        [
          "error",
          {
            type: "error",
            code: "server_error",
            message: "The server had an error while processing your request.",
            param: null,
            sequence_number: 1,
          },
        ],
      ]),
    });
    const { data: stream, response } = await responsesStream();
    await expect(readAll(stream)).rejects.toThrow(/server had an error/);
    const row = await usageRowById(stage.sluice.gateway, response.headers.get("x-request-id"));
    expect(row).toMatchObject({
      status: 200,
      outcome: "error",
      streamed: 1,
      model: "o4-mini-2025-04-16",
      input_tokens: null,
      output_tokens: null,
      cost_usd: null,
    });
  });

  it("is recorded as failed: provider C's ?alt=sse stream with an error object", async () => {
    stage.fake.enqueueResponse({
      status: 200,
      headers: eventStream,
      body: sse([
        [
          null,
          {
            candidates: [{ content: { role: "model", parts: [{ text: "Hel" }] }, index: 0 }],
            usageMetadata: { promptTokenCount: 9, candidatesTokenCount: 1, totalTokenCount: 10 },
            modelVersion: "gemini-2.5-flash",
          },
        ],
        [null, { error: { code: 503, message: "The model is overloaded.", status: "UNAVAILABLE" } }],
      ]),
    });
    // The way @google/genai asks for a stream; fetch, for the answer's x-request-id.
    const response = await fetch(
      `${stage.sluice.url}/v1/provider-c/${stage.project.projectId}/models/gemini-2.5-flash:streamGenerateContent?alt=sse`,
      {
        method: "POST",
        headers: { "x-goog-api-key": stage.project.bearer("provider-c"), "content-type": "application/json" },
        body: JSON.stringify({ contents: [{ role: "user", parts: [{ text: "Hi" }] }] }),
      },
    );
    expect(await response.text()).toContain("The model is overloaded.");
    const row = await usageRowById(stage.sluice.gateway, response.headers.get("x-request-id"));
    expect(row).toMatchObject({ status: 200, outcome: "error", streamed: 1, input_tokens: 9 });
  });

  /**
   * Provider C's stream as one JSON array (no ?alt=sse). @google/genai's generateContentStream
   * always asks for ?alt=sse (it sets `alt=sse` on every stream's URL and reads SSE only), so the
   * array form is asked for with fetch, as Google's REST API documents it.
   */
  const arrayStream = () =>
    fetch(
      `${stage.sluice.url}/v1/provider-c/${stage.project.projectId}/v1beta/models/gemini-2.5-flash:streamGenerateContent`,
      {
        method: "POST",
        headers: { "x-goog-api-key": stage.project.bearer("provider-c"), "content-type": "application/json" },
        body: JSON.stringify({ contents: [{ role: "user", parts: [{ text: "Hi" }] }] }),
      },
    );

  it("is recorded as failed: provider C's JSON-array stream (no ?alt=sse) with an error element", async () => {
    // The array as Google streams it: one write per element, the error the last element.
    const parts = [
      `[${JSON.stringify({
        candidates: [{ content: { role: "model", parts: [{ text: "Hel" }] }, index: 0 }],
        usageMetadata: { promptTokenCount: 9, candidatesTokenCount: 1, totalTokenCount: 10 },
        modelVersion: "gemini-2.5-flash",
      })}`,
      ',\r\n{\n  "error": {\n    "code": 503,\n    "message": "The model is overloaded.",\n    "status": "UNAVAILABLE"\n  }\n}\r\n',
      "]",
    ];
    stage.fake.setSseDelayMs(20);
    stage.fake.enqueueResponse({
      status: 200,
      headers: { "content-type": "application/json; charset=UTF-8" },
      parts,
    });
    const response = await arrayStream();
    expect(response.status).toBe(200);
    expect(await response.text()).toBe(parts.join(""));
    const row = await usageRowById(stage.sluice.gateway, response.headers.get("x-request-id"));
    expect(row).toMatchObject({
      status: 200,
      outcome: "error",
      streamed: 1,
      input_tokens: 9,
      output_tokens: 1,
      model: "gemini-2.5-flash",
    });
  });

  it("is not taken for an error when it carries none: the same streams end ok", async () => {
    const { data: stream, response } = await messagesStream();
    await readAll(stream);
    const row = await usageRowById(stage.sluice.gateway, response.headers.get("x-request-id"));
    expect(row).toMatchObject({ status: 200, outcome: "ok", streamed: 1 });
    const array = await arrayStream();
    expect((JSON.parse(await array.text()) as unknown[]).length).toBeGreaterThan(1);
    const arrayRow = await usageRowById(stage.sluice.gateway, array.headers.get("x-request-id"));
    expect(arrayRow).toMatchObject({ status: 200, outcome: "ok", streamed: 1 });
  });
});

/** Reads a stream to its end (an SDK's stream throws there on the provider's error event). */
async function readAll(stream: AsyncIterable<unknown>): Promise<void> {
  for await (const _ of stream);
}
