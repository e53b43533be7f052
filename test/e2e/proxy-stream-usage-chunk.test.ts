import { createServer, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type OpenAI from "openai";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { providerA } from "../fakes/fake-upstream-responses.js";
import { proxiedChat } from "../support/proxied-chat.js";
import { sdkClients } from "../support/sdk-clients.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowOf,
} from "../support/test-gateway.js";

/**
 * Sluice asks provider A for usage on every streamed chat completion (stream_options.include_usage),
 * so it can record it. The usage chunk (`choices: []`) that adds to the stream is read by the meter
 * and kept from a client that did not ask for it; a client that asked gets the provider's stream
 * byte for byte.
 */
describe("provider A's usage chunk on a stream, driven by the openai SDK", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let project: TestProject;
  let openai: OpenAI;

  const model = "gpt-4o-mini";
  const text = "Hello from the fake upstream";
  const messages = [{ role: "user" as const, content: "Hi" }];
  /** The stream the fake provider sends when usage is asked for (always, through Sluice). */
  const providerEvents = providerA.chunks(
    model,
    text,
    { input: 11, output: 7, cached: 3, reasoning: 2 },
    true,
  );
  const usageEvent = providerEvents.at(-2) as string;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway({ providerABaseUrl: `${fake.url}/a/v1` });
    project = await createTestProject(sluice.gateway);
    ({ openai } = sdkClients(sluice, project));
  });

  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });

  beforeEach(() => fake.clear());

  const tokens = { streamed: 1, input_tokens: 11, output_tokens: 7, cached_tokens: 3, reasoning_tokens: 2 };

  describe.each([
    ["without stream_options", {}],
    ["with include_usage: false", { stream_options: { include_usage: false } }],
  ])("a client that did not ask for usage (%s)", (_name, asked) => {
    it("gets no chunk without choices, and its usage row still has the tokens", async () => {
      const { data: stream, response } = await openai.chat.completions
        .create({ model, messages, stream: true, ...asked })
        .withResponse();
      let content = "";
      let chunks = 0;
      for await (const chunk of stream) {
        chunks++;
        expect(chunk.choices, JSON.stringify(chunk)).not.toHaveLength(0);
        // OpenAI's own example, which raises on the usage chunk in Python.
        content += chunk.choices[0]!.delta.content ?? "";
      }
      expect(content).toBe(text);
      expect(chunks).toBe(providerEvents.length - 2);
      expect((fake.last()!.json as { stream_options?: unknown }).stream_options).toEqual({
        include_usage: true,
      });
      const row = await usageRowOf(sluice.gateway, response);
      expect(row).toMatchObject({ ...tokens, outcome: "ok", model });
      expect(row.cost_usd).toBeGreaterThan(0);
    });

    it("gets every other byte of the provider's stream unchanged", async () => {
      const response = await openai.chat.completions
        .create({ model, messages, stream: true, ...asked })
        .asResponse();
      // The other chunks keep the `"usage":null` that asking for usage adds to them.
      expect(await response.text()).toBe(providerEvents.filter((event) => event !== usageEvent).join(""));
      expect(await usageRowOf(sluice.gateway, response)).toMatchObject(tokens);
    });
  });

  describe("a client that asked for usage itself", () => {
    const asked = { stream_options: { include_usage: true } };

    it("gets the provider's stream byte for byte, usage chunk included", async () => {
      const response = await openai.chat.completions
        .create({ model, messages, stream: true, ...asked })
        .asResponse();
      expect(await response.text()).toBe(providerEvents.join(""));
      expect(await usageRowOf(sluice.gateway, response)).toMatchObject(tokens);
    });

    it("reads the usage chunk through the SDK", async () => {
      const stream = await openai.chat.completions.create({ model, messages, stream: true, ...asked });
      let last: OpenAI.ChatCompletionChunk | undefined;
      for await (const chunk of stream) last = chunk;
      expect(last?.choices).toEqual([]);
      expect(last?.usage).toMatchObject({ prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 });
    });
  });
});

describe("provider A's usage chunk on a stream that is cut or sent whole", () => {
  let upstream: Server;
  let answer: (response: ServerResponse) => void;
  let sluice: TestGateway;
  let project: TestProject;

  const chunk = (fields: Record<string, unknown>) =>
    `data: ${JSON.stringify({ id: "chatcmpl-1", object: "chat.completion.chunk", created: 1, model: "gpt-4o-mini", ...fields })}\n\n`;
  const content = chunk({
    choices: [{ index: 0, delta: { content: "hi" }, finish_reason: "stop" }],
    usage: null,
  });
  const usage = chunk({
    choices: [],
    usage: { prompt_tokens: 1000, completion_tokens: 5000, total_tokens: 6000 },
  });
  const done = "data: [DONE]\n\n";

  beforeAll(async () => {
    upstream = createServer((request, response) => {
      request.resume();
      request.on("end", () => answer(response));
    });
    await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
    sluice = await startTestGateway({
      providerABaseUrl: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/v1`,
    });
    project = await createTestProject(sluice.gateway);
  });

  afterAll(async () => {
    await sluice.close();
    upstream.closeAllConnections();
    await new Promise((resolve) => upstream.close(resolve));
  });

  /** A streamed completion that does not ask for usage; the body as far as it came, and whether it ended or broke. */
  async function call() {
    const response = await proxiedChat(sluice.url, project, {
      body: { model: "gpt-4o-mini", messages: [], stream: true },
    });
    const reader = response.body!.getReader();
    const received: Uint8Array[] = [];
    const read = async (): Promise<"ended" | "broke"> => {
      try {
        for (let next = await reader.read(); !next.done; next = await reader.read())
          received.push(next.value);
        return "ended";
      } catch {
        return "broke";
      }
    };
    const hung = new Promise<"hung">((resolve) => setTimeout(() => resolve("hung"), 5000).unref());
    const how = await Promise.race([read(), hung]);
    return { response, how, body: Buffer.concat(received).toString() };
  }

  /** Sends `parts` as separate writes, then cuts the connection mid-body. */
  const cutAfter = (parts: string[]) => (response: ServerResponse) => {
    response.writeHead(200, { "content-type": "text/event-stream" });
    for (const part of parts) response.write(part);
    setTimeout(() => response.socket?.destroy(), 50);
  };

  it.each([
    ["in the event after the usage chunk", [content, usage, done.slice(0, 9)], 1000],
    ["inside the usage chunk, split across writes", [content, usage.slice(0, 40), usage.slice(40, 90)], null],
  ])(
    "a stream cut %s records what it saw, forwards nothing of the usage chunk and ends",
    async (_name, parts, input) => {
      answer = cutAfter(parts);
      const { response, how, body } = await call();
      expect(how).toBe("broke");
      expect(body).toBe(content);
      expect(await usageRowOf(sluice.gateway, response)).toMatchObject({
        outcome: "error",
        streamed: 1,
        model: "gpt-4o-mini",
        input_tokens: input,
        output_tokens: input === null ? null : 5000,
      });
    },
  );

  it("forwards a stream sent with a content-length as it is, usage chunk included", async () => {
    // Dropping an event would leave the client short of the length it was promised.
    const whole = `${content}${usage}${done}`;
    answer = (response) => {
      response.writeHead(200, {
        "content-type": "text/event-stream",
        "content-length": Buffer.byteLength(whole),
      });
      response.end(whole);
    };
    const { response, how, body } = await call();
    expect(how).toBe("ended");
    expect(body).toBe(whole);
    expect(await usageRowOf(sluice.gateway, response)).toMatchObject({
      input_tokens: 1000,
      output_tokens: 5000,
    });
  });
});
