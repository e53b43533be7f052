import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startLocalTcpServer } from "../support/local-server.js";
import { rawExchange } from "../support/raw-exchange.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

/** `caf` then 0xE9 0xFF: latin-1, not UTF-8. */
const latin1Value = Buffer.from([0x63, 0x61, 0x66, 0xe9, 0xff]);
/** `ünï` in UTF-8. */
const utf8Value = Buffer.from("\u00fcn\u00ef", "utf8");

/** The value bytes of header `name` (matched in any case) in the head `raw`, if present. */
function valueBytes(raw: Buffer, name: string): string | undefined {
  const headEnd = raw.indexOf("\r\n\r\n");
  const lines = raw
    .subarray(0, headEnd < 0 ? raw.length : headEnd)
    .toString("latin1")
    .split("\r\n");
  const line = lines.find((text) => text.toLowerCase().startsWith(`${name}:`));
  return line === undefined
    ? undefined
    : Buffer.from(line.slice(name.length + 1).trim(), "latin1").toString("hex");
}

/**
 * Header values with bytes past ASCII (RFC 9110 §5.5: obs-text), on raw sockets at both ends: Node
 * reads them as latin-1 and undici and Node write them as latin-1, so the bytes arrive as sent. (A
 * Node `http` fake or client that ends with a string body writes its head UTF-8 encoded with it: a
 * harness built so sees the bytes change where Sluice changed none.)
 */
describe("header values with bytes past ASCII through the proxy", () => {
  let upstream: { port: number; close(): Promise<void> };
  let received = Buffer.alloc(0);
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    upstream = await startLocalTcpServer((socket) => {
      let bytes = Buffer.alloc(0);
      socket.on("data", (data: Buffer) => {
        bytes = Buffer.concat([bytes, data]);
        const headEnd = bytes.indexOf("\r\n\r\n");
        if (headEnd < 0) return;
        const length = Number(
          /content-length:\s*(\d+)/i.exec(bytes.subarray(0, headEnd).toString())?.[1] ?? 0,
        );
        if (bytes.length < headEnd + 4 + length) return;
        received = bytes;
        const body = JSON.stringify({
          id: "c",
          object: "chat.completion",
          model: "gpt-4o-mini",
          choices: [],
          usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
        });
        socket.end(
          Buffer.concat([
            Buffer.from("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-latin1: "),
            latin1Value,
            Buffer.from("\r\nx-utf8: "),
            utf8Value,
            Buffer.from(`\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`),
          ]),
        );
      });
    });
    sluice = await startTestGateway({ providerABaseUrl: `http://127.0.0.1:${upstream.port}/v1` });
    project = await createTestProject(sluice.gateway);
  });
  afterAll(async () => {
    await sluice?.close();
    await upstream?.close();
  });

  it("forwards a request header's bytes, latin-1 or UTF-8, and passes a response header's back, unchanged", async () => {
    const body = JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Hi" }] });
    const request = Buffer.concat([
      Buffer.from(
        `POST /v1/provider-a/${project.projectId}/chat/completions HTTP/1.1\r\nhost: x\r\n` +
          `authorization: Bearer ${project.bearer("provider-a")}\r\ncontent-type: application/json\r\n` +
          `content-length: ${body.length}\r\nconnection: close\r\nx-stainless-a: `,
      ),
      latin1Value,
      Buffer.from("\r\nuser-agent: "),
      utf8Value,
      Buffer.from(`\r\n\r\n${body}`),
    ]);
    const port = Number(new URL(sluice.url).port);
    // The client's reply, kept as bytes: rawExchange's headers are latin-1 strings of them.
    const reply = await rawExchange(port, request, { timeoutMs: 5000 });
    expect(reply.status).toBe(200);
    expect({
      forwarded: {
        "x-stainless-a": valueBytes(received, "x-stainless-a"),
        "user-agent": valueBytes(received, "user-agent"),
      },
      answered: {
        "x-latin1": Buffer.from(reply.headers["x-latin1"] ?? "", "latin1").toString("hex"),
        "x-utf8": Buffer.from(reply.headers["x-utf8"] ?? "", "latin1").toString("hex"),
      },
    }).toEqual({
      forwarded: { "x-stainless-a": latin1Value.toString("hex"), "user-agent": utf8Value.toString("hex") },
      answered: { "x-latin1": latin1Value.toString("hex"), "x-utf8": utf8Value.toString("hex") },
    });
  });
});
