import type { IncomingMessage, ServerResponse } from "node:http";
import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LocalServer, startLocalServer } from "../support/local-server.js";
import { dechunk } from "../support/raw-exchange.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowById,
} from "../support/test-gateway.js";

const events = 2000;
const usage = { prompt_tokens: 3, completion_tokens: 5, total_tokens: 8 };

/**
 * A provider that streams a long chat completion (`stream: true`, as fast as its socket takes it)
 * and answers any other call with a chat completion of its own after 300 ms: by then the stream
 * ahead of it on the client's connection waits for its client to read.
 */
async function startProvider(): Promise<LocalServer> {
  const chunk = (index: number) =>
    `data: ${JSON.stringify({ id: "s", object: "chat.completion.chunk", model: "gpt-4o-mini", choices: [{ index: 0, delta: { content: `${index}`.padEnd(16_000, "x") } }] })}\n\n`;
  const last = `data: ${JSON.stringify({ id: "s", object: "chat.completion.chunk", model: "gpt-4o-mini", choices: [], usage })}\n\ndata: [DONE]\n\n`;
  return startLocalServer((request: IncomingMessage, response: ServerResponse) => {
    let body = "";
    request.on("data", (data: Buffer) => {
      body += data.toString();
    });
    request.on("end", () => {
      if ((JSON.parse(body) as { stream?: boolean }).stream !== true) {
        setTimeout(() => {
          const answer = JSON.stringify({
            id: "c",
            object: "chat.completion",
            model: "gpt-4o-mini",
            choices: [{ index: 0, message: { role: "assistant", content: "y".repeat(40_000) } }],
            usage,
          });
          response
            .writeHead(200, {
              "content-type": "application/json",
              "content-length": Buffer.byteLength(answer),
            })
            .end(answer);
        }, 300);
        return;
      }
      response.writeHead(200, { "content-type": "text/event-stream" });
      let sent = 0;
      const pump = () => {
        while (sent < events) if (!response.write(chunk(sent++))) return void response.once("drain", pump);
        response.end(last);
      };
      pump();
    });
  });
}

describe("a call pipelined behind a stream its client reads late", () => {
  let provider: LocalServer;
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    provider = await startProvider();
    sluice = await startTestGateway({
      providerABaseUrl: `${provider.url}/v1`,
      upstreamIdleTimeoutMs: 15_000,
    });
    project = await createTestProject(sluice.gateway);
  });
  afterAll(async () => {
    await sluice.close();
    await provider.close();
  });

  // Node tells the answer being written that its client has room (`drain`) also from inside a write
  // of the answer queued behind it, on the same connection. That write came from the provider's
  // answer to the queued call, inside undici's parser, and resuming the stream's provider from there
  // ran a second parser inside the first, which undici refuses: the queued call failed (cut,
  // outcome `error`), and the stream, its provider still paused, stopped until the idle timeout.
  it("sends both answers whole once the client reads, and records both as ok", async () => {
    const call = (body: string, last: boolean) =>
      `POST /v1/provider-a/${project.projectId}/chat/completions HTTP/1.1\r\nhost: x\r\n` +
      `authorization: Bearer ${project.bearer("provider-a")}\r\ncontent-type: application/json\r\n` +
      `content-length: ${Buffer.byteLength(body)}\r\n${last ? "connection: close\r\n" : ""}\r\n${body}`;
    const socket = connect(Number(new URL(sluice.url).port), "127.0.0.1");
    socket.on("error", () => {});
    socket.pause();
    socket.write(
      call(
        JSON.stringify({ model: "gpt-4o-mini", stream: true, stream_options: { include_usage: true } }),
        false,
      ) + call(JSON.stringify({ model: "gpt-4o-mini" }), true),
    );
    // The stream fills the client's buffers meanwhile; the second answer comes at 300 ms.
    await new Promise((resolve) => setTimeout(resolve, 800));
    const chunks: Buffer[] = [];
    socket.on("data", (data: Buffer) => chunks.push(data));
    const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
    socket.resume();
    await Promise.race([closed, new Promise((resolve) => setTimeout(resolve, 10_000))]);
    socket.destroy();

    // Sluice forwards the provider's bytes as they come, so a chunk may end inside an event: the
    // events are counted in the stream's body, its chunks joined.
    const raw = Buffer.concat(chunks);
    const headEnd = raw.indexOf("\r\n\r\n") + 4;
    const stream = raw.subarray(0, headEnd).toString("latin1");
    const body = dechunk(raw.subarray(headEnd));
    const data = body?.body.toString("latin1") ?? "";
    const end = body?.end == null ? 0 : headEnd + body.end;
    const second = raw.subarray(end).toString("latin1");
    const answer = second.slice(second.indexOf("\r\n\r\n") + 4);
    // Compared as a summary: the answers themselves run to megabytes.
    expect({
      streamStatus: stream.slice(0, 12),
      streamEvents: data.match(/"delta":/g)?.length ?? 0,
      streamEnded: end > 0 && data.endsWith("data: [DONE]\n\n"),
      secondStatus: second.slice(0, 12),
      secondWhole: answer.length === Number(/\r\ncontent-length: (\d+)\r\n/i.exec(second)?.[1]),
    }).toEqual({
      streamStatus: "HTTP/1.1 200",
      streamEvents: events,
      streamEnded: true,
      secondStatus: "HTTP/1.1 200",
      secondWhole: true,
    });
    expect(JSON.parse(answer)).toMatchObject({ object: "chat.completion", usage });
    for (const head of [stream, second]) {
      const requestId = /\r\nx-request-id: ([^\r]+)\r\n/i.exec(head)?.[1];
      expect(await usageRowById(sluice.gateway, requestId)).toMatchObject({
        status: 200,
        outcome: "ok",
        input_tokens: 3,
        output_tokens: 5,
      });
    }
  });
});
