import type { ServerResponse } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { collectGarbage } from "../support/garbage-collection.js";
import { type LocalServer, startLocalServer } from "../support/local-server.js";
import { useProxyStage } from "../support/proxy-stage.js";
import { sdkClients } from "../support/sdk-clients.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowOf,
} from "../support/test-gateway.js";

const mib = 1024 * 1024;

/** Buffer memory (outside V8's heap, where a Buffer's bytes are) once everything unreachable is collected. */
function bufferBytesAfterGc(): number {
  collectGarbage();
  collectGarbage();
  return process.memoryUsage().arrayBuffers;
}

/**
 * A metered call (a POST) whose answer's Content-Type names a format that holds no JSON, so no
 * usage: the usage meter keeps none of its bytes (docs/proxy.md, Usage). Measured while the answer
 * is under way: the provider sends 3 MiB, the client reads them all, and the provider holds its last
 * bytes until the measurement is taken. The gateway runs in this process, so what its meter keeps
 * is in this process's buffer memory.
 */
describe("the usage meter and an answer that can carry no usage", () => {
  const stage = useProxyStage(sdkClients);

  /** The growth of buffer memory while `contentType`'s 3 MiB answer waits for its last bytes, and the row. */
  async function heldWhileUnderWay(contentType: string, call: () => Promise<Response>) {
    const body = Buffer.alloc(3 * mib, 0x41);
    const last = Buffer.from("end");
    let sendRest = () => {};
    const rest = new Promise<void>((resolve) => {
      sendRest = resolve;
    });
    stage.fake.clear();
    stage.fake.setPlan(() => ({ restSentAfter: rest }));
    stage.fake.enqueueResponse({
      status: 200,
      parts: [body, last],
      headers: { "content-type": contentType },
    });
    const before = bufferBytesAfterGc();
    let grown = 0;
    try {
      const row = await stage.rowAddedBy(async () => {
        const answer = await call();
        const reader = (answer.body as ReadableStream<Uint8Array>).getReader();
        let received = 0;
        while (received < body.length) {
          const read = await reader.read();
          if (read.done) throw new Error(`the answer ended after ${received} bytes`);
          received += read.value.length;
        }
        grown = bufferBytesAfterGc() - before;
        sendRest();
        for (let read = await reader.read(); !read.done; read = await reader.read())
          received += read.value.length;
        expect(received).toBe(body.length + last.length);
        expect(answer.headers.get("content-type")).toBe(contentType);
      });
      return { grown, row };
    } finally {
      sendRest();
      stage.fake.setPlan(null);
    }
  }

  const speech = () =>
    stage.openai.audio.speech.create({ model: "gpt-4o-mini-tts", voice: "alloy", input: "Hi" });

  it("keeps none of speech's audio bytes (audio/mpeg), and still writes the call's row", async () => {
    const { grown, row } = await heldWhileUnderWay("audio/mpeg", speech);
    // Before: the meter kept the 3 MiB it would never read a token from (grown ≈ 3 MiB).
    expect(grown).toBeLessThan(1 * mib);
    expect(row).toMatchObject({
      status: 200,
      outcome: "ok",
      streamed: 0,
      model: "gpt-4o-mini-tts",
      input_tokens: null,
      output_tokens: null,
      cached_tokens: null,
      reasoning_tokens: null,
      cost_usd: null,
    });
  });

  it("keeps none of a binary (octet-stream, image, JSONL) answer's bytes either", async () => {
    for (const contentType of ["application/octet-stream", "image/png", "application/jsonl; charset=utf-8"]) {
      const { grown, row } = await heldWhileUnderWay(contentType, speech);
      expect({ contentType, held: grown >= 1 * mib }).toEqual({ contentType, held: false });
      expect(row).toMatchObject({ status: 200, outcome: "ok", model: "gpt-4o-mini-tts", input_tokens: null });
    }
  });

  it("still keeps what may be JSON: the measurement sees a meter's bytes (JSON, text/plain)", async () => {
    // A compatible server may send its JSON as text/plain, or with no Content-Type at all: those
    // are read for usage as before, and kept (up to 4 MiB) to be.
    for (const contentType of ["application/json", "text/plain; charset=utf-8"]) {
      const { grown } = await heldWhileUnderWay(contentType, speech);
      expect({ contentType, held: grown >= 2.5 * mib }).toEqual({ contentType, held: true });
    }
  });
});

/**
 * Which answers are read for usage, by their Content-Type: a compatible server's chat completion
 * sent as `text/plain`, or with no Content-Type at all, is read as JSON (as before); the same bytes
 * sent as audio are not (a type that holds no JSON reports no usage).
 */
describe("the usage of a JSON answer, by the Content-Type it comes with", () => {
  let upstream: LocalServer;
  let sluice: TestGateway;
  let project: TestProject;
  /** The Content-Type the upstream answers the next call with; null: none. */
  let answerType: string | null = null;
  const completion = JSON.stringify({
    id: "chatcmpl-1",
    object: "chat.completion",
    model: "gpt-4o-mini-2024-07-18",
    choices: [{ index: 0, message: { role: "assistant", content: "hi" }, finish_reason: "stop" }],
    usage: { prompt_tokens: 12, completion_tokens: 5, total_tokens: 17 },
  });

  beforeAll(async () => {
    upstream = await startLocalServer((incoming, response: ServerResponse) => {
      incoming.resume();
      incoming.on("end", () => {
        // Node adds no Content-Type of its own: without one set, none is sent.
        if (answerType !== null) response.setHeader("content-type", answerType);
        response.end(completion);
      });
    });
    sluice = await startTestGateway({ providerABaseUrl: `${upstream.url}/v1` });
    project = await createTestProject(sluice.gateway);
  });

  afterAll(async () => {
    await sluice?.close();
    await upstream?.close();
  });

  async function rowFor(type: string | null) {
    answerType = type;
    const answer = await fetch(`${sluice.url}/v1/provider-a/${project.projectId}/chat/completions`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${project.bearer("provider-a")}`,
        "content-type": "application/json",
      },
      body: JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] }),
    });
    expect(answer.status).toBe(200);
    expect(answer.headers.get("content-type")).toBe(type);
    expect(await answer.text()).toBe(completion);
    return usageRowOf(sluice.gateway, answer);
  }

  it("reads it sent as JSON, as text/plain, or with no Content-Type", async () => {
    for (const type of ["application/json", "text/plain; charset=utf-8", null])
      expect({ type, row: await rowFor(type) }).toMatchObject({
        type,
        row: { status: 200, model: "gpt-4o-mini-2024-07-18", input_tokens: 12, output_tokens: 5 },
      });
  });

  it("does not read it sent as audio or as a file's bytes: the row has the request's model and no tokens", async () => {
    for (const type of ["audio/mpeg", "Application/Octet-Stream"])
      expect({ type, row: await rowFor(type) }).toMatchObject({
        type,
        row: { status: 200, outcome: "ok", model: "gpt-4o-mini", input_tokens: null, output_tokens: null },
      });
  });
});
