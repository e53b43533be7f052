import { subscribe, unsubscribe } from "node:diagnostics_channel";
import { createServer, type Server, type Socket } from "node:net";
import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startLocalServer } from "../support/local-server.js";
import { proxiedChat } from "../support/proxied-chat.js";
import {
  createTestProject,
  logLinesOf,
  startTestGateway,
  type TestGateway,
  usageRowOf,
} from "../support/test-gateway.js";

/** An upstream that reads a request and then does `answer` with the socket: no HTTP server in between. */
async function rawUpstream(
  answer: (socket: Socket) => void,
): Promise<{ url: string; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => {});
    socket.once("data", () => answer(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}/v1`,
    close: () =>
      new Promise((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

const notHttp = "The provider's answer could not be read as HTTP";
const closed = "The provider closed the connection before answering";
const notItsLength = "The provider's answer was not the length its content-length announced";

/**
 * The 502 a client gets says what went wrong before the provider's answer began, and whether the
 * same call may pass later: a provider not reached or that closed the connection may answer the
 * next try (retryable, `Retry-After: 1`); an answer that is not HTTP, or HTTP Sluice will not
 * read, comes back the same on every try (a server on the wrong port, a middlebox): not retryable,
 * no `Retry-After`, until the base URL or the server is mended. undici reports a head announcing a
 * body the connection then lacks (`connection: close`) as a content-length mismatch, as it does two
 * content-lengths: the one error may be a cut, so it stays retryable, named by the length.
 */
describe("proxied call that fails before the provider's answer", () => {
  const cases = [
    ["not HTTP", (socket: Socket) => socket.end("SSH-2.0-OpenSSH_9.2\r\n"), notHttp, false],
    ["closed on the request", (socket: Socket) => socket.destroy(), closed, true],
    // RFC 9110 15.2 has a client parse a 1xx it did not ask for; undici refuses an unasked 100 or
    // 101 (Sluice sends no `Expect` and no `Upgrade`) and closes the connection itself, with no
    // setting to take them: the 502 and its log line name which it was.
    [
      "answering 100 Continue unasked",
      (socket: Socket) =>
        socket.write(
          "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
        ),
      `${notHttp}: it sent an interim 100 Continue, which Sluice did not ask for (it sends no Expect) and does not take`,
      false,
      "SLUICE_UNASKED_CONTINUE",
    ],
    [
      "switching protocols unasked",
      (socket: Socket) =>
        socket.write("HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: h2c\r\n\r\n"),
      `${notHttp}: it switched protocols (101), which Sluice did not ask for (it sends no Upgrade)`,
      false,
      "SLUICE_UNASKED_UPGRADE",
    ],
    // Sluice offers no transfer coding but chunked (it sends no `TE`, RFC 9110 10.1.4), and undici
    // undoes none other: forwarded, the body would reach the client still gzipped, with nothing
    // saying so (`transfer-encoding` is hop-by-hop), and its usage would go unread.
    [
      "sending a transfer coding it was not offered",
      (socket: Socket) => {
        const body = gzipSync('{"model":"gpt-4o-mini","usage":{"prompt_tokens":11,"completion_tokens":7}}');
        socket.write(
          Buffer.concat([
            Buffer.from(
              `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: gzip, chunked\r\n\r\n${body.length.toString(16)}\r\n`,
            ),
            body,
            Buffer.from("\r\n0\r\n\r\n"),
          ]),
        );
      },
      notHttp,
      false,
    ],
    // A 200's head and then the connection closed before the body it announced: a cut. With
    // `connection: close`, undici calls it a content-length mismatch, as it calls two content-lengths.
    [
      "cutting the body it announced, connection: close",
      (socket: Socket) =>
        socket.end(
          "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\nconnection: close\r\n\r\n",
        ),
      notItsLength,
      true,
    ],
    [
      "cutting the body it announced, kept alive",
      (socket: Socket) =>
        socket.end("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n"),
      closed,
      true,
    ],
  ] as const;
  const upstreams: Array<{ url: string; close(): Promise<void> }> = [];
  const gateways: TestGateway[] = [];

  beforeAll(async () => {
    for (const [, answer] of cases) {
      const upstream = await rawUpstream(answer);
      upstreams.push(upstream);
      gateways.push(await startTestGateway({ providerABaseUrl: upstream.url }));
    }
    gateways.push(await startTestGateway({ providerABaseUrl: "http://127.0.0.1:1/v1" }));
  });
  afterAll(async () => {
    for (const gateway of gateways) await gateway.close();
    for (const upstream of upstreams) await upstream.close();
  });

  it.each([
    ...cases.map(
      ([name, , message, retryable, logged], index) =>
        [name, index, message, retryable, logged as string | undefined] as const,
    ),
    ["not reached", cases.length, "The provider could not be reached", true, "ECONNREFUSED"] as const,
  ])(
    "answers 502 naming what happened when the provider is %s, with its row",
    async (_name, index, message, retryable, logged) => {
      const sluice = gateways[index]!;
      const before = sluice.logs.length;
      const project = await createTestProject(sluice.gateway);
      const response = await proxiedChat(sluice.url, project);
      expect(response.status).toBe(502);
      expect(response.headers.get("retry-after")).toBe(retryable ? "1" : null);
      expect(((await response.clone().json()) as { error: unknown }).error).toMatchObject({
        code: "PROVIDER_ERROR",
        message,
        details: { retryable },
      });
      expect(await usageRowOf(sluice.gateway, response)).toMatchObject({
        status: 502,
        error_code: "PROVIDER_ERROR",
      });
      if (logged !== undefined)
        expect(logLinesOf(sluice, before).find((line) => line.msg === "provider call failed")).toMatchObject({
          code: logged,
          status: 502,
        });
    },
  );
});

/**
 * How many times a call is sent: once more only when the connection could not be opened (nothing
 * reached the provider), never after the request went out; and no timeout bounds a stream's whole
 * length, only the silence between its chunks.
 */
describe("how often and how long Sluice calls the provider", () => {
  it("tries a provider that refuses the connection twice, then answers 502", async () => {
    const sluice = await startTestGateway({ providerABaseUrl: "http://127.0.0.1:1/v1" });
    const attempts: string[] = [];
    const onConnect = (message: unknown) => {
      const { port } = (message as { connectParams: { port: string | number } }).connectParams;
      if (Number(port) === 1) attempts.push(String(port));
    };
    subscribe("undici:client:beforeConnect", onConnect);
    try {
      const response = await proxiedChat(sluice.url, await createTestProject(sluice.gateway));
      expect(response.status).toBe(502);
      expect(attempts).toHaveLength(2);
    } finally {
      unsubscribe("undici:client:beforeConnect", onConnect);
      await sluice.close();
    }
  });

  it("never sends a call again once its request reached the provider, whatever happens then", async () => {
    let requests = 0;
    const upstream = await rawUpstream((socket) => {
      requests++;
      socket.destroy();
    });
    const sluice = await startTestGateway({ providerABaseUrl: upstream.url });
    try {
      const response = await proxiedChat(sluice.url, await createTestProject(sluice.gateway), {
        // Over 64 KiB: sent as an iterable, not a Buffer undici could write again.
        body: { model: "gpt-4o-mini", messages: [{ role: "user", content: "x".repeat(100_000) }] },
      });
      expect(response.status).toBe(502);
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(requests).toBe(1);
    } finally {
      await sluice.close();
      await upstream.close();
    }
  });

  it("keeps a stream going past the idle timeout while the provider sends more often than it", async () => {
    const upstream = await startLocalServer((incoming, response) => {
      incoming.resume();
      response.writeHead(200, { "content-type": "text/event-stream" });
      const started = Date.now();
      const drip = setInterval(() => {
        if (Date.now() - started < 3000) response.write(": still working\n\n");
        else {
          clearInterval(drip);
          response.end('data: {"choices":[{"delta":{"content":"done"}}]}\n\ndata: [DONE]\n\n');
        }
      }, 200);
      response.on("close", () => clearInterval(drip));
    });
    const sluice = await startTestGateway({
      providerABaseUrl: `${upstream.url}/v1`,
      upstreamIdleTimeoutMs: 1000,
    });
    try {
      const response = await proxiedChat(sluice.url, await createTestProject(sluice.gateway), {
        body: { model: "gpt-4o-mini", stream: true, stream_options: { include_usage: true }, messages: [] },
      });
      expect(await response.text()).toContain('"done"');
      expect(await usageRowOf(sluice.gateway, response)).toMatchObject({ status: 200, outcome: "ok" });
    } finally {
      await sluice.close();
      await upstream.close();
    }
  });
});
