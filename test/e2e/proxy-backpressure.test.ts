import { createHash } from "node:crypto";
import { createServer, request, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowById,
} from "../support/test-gateway.js";

const chunkBytes = 64 * 1024;
const totalBytes = 64 * 1024 * 1024;

/**
 * A provider answering with a large SSE body as fast as its socket takes it, counting the bytes
 * it managed to write: while the client reads nothing, the gateway must stop reading from the
 * provider, so the count stays far below the body's size.
 */
function startFloodingUpstream(): Promise<{
  server: Server;
  url: string;
  written: () => number;
  sendLength: (send: boolean) => void;
}> {
  let written = 0;
  let withLength = true;
  const server = createServer((incoming, response) => {
    incoming.resume();
    response.writeHead(200, {
      "content-type": "text/event-stream",
      // Each run on new connections (here and the client's agent: false): a connection the run
      // before grew its TCP windows on holds several MiB more in flight while the client is paused.
      connection: "close",
      ...(withLength ? { "content-length": String(totalBytes) } : {}),
    });
    let sent = 0;
    const pump = () => {
      while (sent < totalBytes) {
        const chunk = Buffer.alloc(chunkBytes, sent / chunkBytes);
        sent += chunk.length;
        written = sent;
        if (!response.write(chunk)) {
          response.once("drain", pump);
          return;
        }
      }
      response.end();
    };
    pump();
  });
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () =>
      resolve({
        server,
        url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
        written: () => written,
        sendLength: (send) => {
          withLength = send;
        },
      }),
    ),
  );
}

function expectedDigest(): string {
  const hash = createHash("sha256");
  for (let sent = 0; sent < totalBytes; sent += chunkBytes)
    hash.update(Buffer.alloc(chunkBytes, sent / chunkBytes));
  return hash.digest("hex");
}

describe("proxy backpressure", () => {
  let upstream: Awaited<ReturnType<typeof startFloodingUpstream>>;
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    upstream = await startFloodingUpstream();
    sluice = await startTestGateway({ providerABaseUrl: `${upstream.url}/v1` });
    project = await createTestProject(sluice.gateway);
  });

  afterAll(async () => {
    await sluice.close();
    upstream.server.closeAllConnections();
    await new Promise((resolve) => upstream.server.close(resolve));
  });

  // Chunked, the stream passes the filter that keeps back the usage chunk Sluice asked for (the
  // request does not ask): it holds back at most one unfinished event's start, and no more.
  it.each([
    ["sent with a content-length", true],
    ["sent chunked", false],
  ])(
    "stops reading from the provider while the client reads nothing, then delivers every byte (%s)",
    async (_name, withLength) => {
      upstream.sendLength(withLength);
      const body = JSON.stringify({ model: "gpt-4o-mini", messages: [], stream: true });
      const { response, release } = await new Promise<{
        response: import("node:http").IncomingMessage;
        release: () => void;
      }>((resolve, reject) => {
        const outgoing = request(
          `${sluice.url}/v1/provider-a/${project.projectId}/chat/completions`,
          {
            agent: false,
            method: "POST",
            headers: {
              authorization: `Bearer ${project.bearer("provider-a")}`,
              "content-type": "application/json",
              "content-length": Buffer.byteLength(body),
            },
          },
          (incoming) => {
            // Read nothing yet: the socket's receive buffer fills, then the gateway's send buffer.
            incoming.pause();
            incoming.socket.pause();
            resolve({
              response: incoming,
              release: () => {
                incoming.socket.resume();
              },
            });
          },
        );
        outgoing.once("error", reject);
        outgoing.end(body);
      });
      expect(response.statusCode).toBe(200);

      await new Promise((resolve) => setTimeout(resolve, 750));
      const writtenWhilePaused = upstream.written();
      // Socket buffers on three hops hold a few MiB at most; without backpressure all 64 MiB go out.
      expect(writtenWhilePaused).toBeLessThan(totalBytes / 4);

      const hash = createHash("sha256");
      let received = 0;
      release();
      await new Promise<void>((resolve, reject) => {
        response.on("data", (chunk: Buffer) => {
          received += chunk.length;
          hash.update(chunk);
        });
        response.once("end", resolve);
        response.once("error", reject);
        response.resume();
      });
      expect(received).toBe(totalBytes);
      expect(hash.digest("hex")).toBe(expectedDigest());

      const row = await usageRowById(sluice.gateway, String(response.headers["x-request-id"]));
      expect(row).toMatchObject({ status: 200, outcome: "ok", streamed: 1 });
    },
    30_000,
  );
});
