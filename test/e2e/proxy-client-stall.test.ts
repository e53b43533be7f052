import type { IncomingMessage, ServerResponse } from "node:http";
import { connect, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { collectGarbage } from "../support/garbage-collection.js";
import { type LocalServer, startLocalServer } from "../support/local-server.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowById,
} from "../support/test-gateway.js";

const mib = 1024 * 1024;

/** One provider answer: whether its whole request body arrived, and how the answer ended. */
interface Answer {
  bodyBytes: number;
  bodyEnded: boolean;
  /** The gateway closed the connection before the endless stream could end: it aborted the call. */
  aborted: boolean;
}

/**
 * A provider that reads each request body to its end, then answers with an SSE stream that never
 * ends, as fast as its socket takes it: only a gateway that gives up on the call stops it.
 */
async function startEndlessUpstream(): Promise<LocalServer & { answers: Answer[] }> {
  const answers: Answer[] = [];
  const chunk = Buffer.from(
    `data: ${JSON.stringify({ choices: [{ delta: { content: "x".repeat(4000) } }] })}\n\n`,
  );
  const local = await startLocalServer((incoming, response: ServerResponse) => {
    const answer: Answer = { bodyBytes: 0, bodyEnded: false, aborted: false };
    answers.push(answer);
    incoming.on("data", (data: Buffer) => {
      answer.bodyBytes += data.length;
    });
    incoming.on("end", () => {
      answer.bodyEnded = true;
      response.writeHead(200, { "content-type": "text/event-stream" });
      const pump = () => {
        while (!response.destroyed && response.write(chunk));
        if (!response.destroyed) response.once("drain", pump);
      };
      pump();
    });
    response.on("close", () => {
      answer.aborted = !response.writableFinished;
    });
  });
  return Object.assign(local, { answers });
}

/**
 * A raw client that sends a streamed chat completion, reads the answer's first bytes, then stops
 * reading (`socket.pause()`): its receive buffer fills, then the gateway's send buffer.
 */
async function pausedStream(
  sluice: TestGateway,
  project: TestProject,
  body: Buffer,
): Promise<{ socket: Socket; requestId: string; closed: Promise<void> }> {
  const socket = connect(Number(new URL(sluice.url).port), "127.0.0.1");
  socket.on("error", () => {});
  const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  socket.write(
    `POST /v1/provider-a/${project.projectId}/chat/completions HTTP/1.1\r\nhost: x\r\n` +
      `authorization: Bearer ${project.bearer("provider-a")}\r\ncontent-type: application/json\r\n` +
      `content-length: ${body.length}\r\n\r\n`,
  );
  socket.write(body);
  const head = await new Promise<string>((resolve, reject) => {
    let received = "";
    const onData = (data: Buffer) => {
      received += data.toString("latin1");
      if (!received.includes("\r\n\r\n")) return;
      socket.off("data", onData);
      socket.pause();
      resolve(received);
    };
    socket.on("data", onData);
    socket.once("close", () => reject(new Error(`closed before the answer's head: ${received}`)));
  });
  expect(head).toMatch(/^HTTP\/1\.1 200 /);
  const requestId = /\r\nx-request-id: ([^\r]+)\r\n/i.exec(head)?.[1] ?? "";
  return { socket, requestId, closed };
}

function chatBody(contentBytes: number): Buffer {
  // Streamed without asking for usage: Sluice splices the option in, a second copy of the body.
  return Buffer.from(
    JSON.stringify({
      model: "gpt-4o-mini",
      stream: true,
      messages: [{ role: "user", content: "x".repeat(contentBytes) }],
    }),
  );
}

async function until(condition: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
}

describe("a proxied stream whose client stops reading", () => {
  let upstream: Awaited<ReturnType<typeof startEndlessUpstream>>;
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    upstream = await startEndlessUpstream();
    // The idle timeout also bounds how long a client may leave a write waiting.
    sluice = await startTestGateway({
      providerABaseUrl: `${upstream.url}/v1`,
      upstreamIdleTimeoutMs: 1000,
    });
    project = await createTestProject(sluice.gateway);
  });

  afterAll(async () => {
    await sluice.close();
    await upstream.close();
  });

  it("is cut once a write has waited the idle timeout for the client: upstream aborted, row aborted", async () => {
    upstream.answers.length = 0;
    const startedAt = Date.now();
    const { socket, requestId, closed } = await pausedStream(sluice, project, chatBody(100));
    // Without the cut the stream never ends (the provider is paused, so its idle timer is too).
    await until(() => upstream.answers[0]?.aborted === true, 15_000);
    expect(upstream.answers).toHaveLength(1);
    expect(upstream.answers[0]?.aborted).toBe(true);
    // Not before the timeout: at least a second after the answer began.
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(1000);
    // The client's connection was closed too: reading again, it sees the end after what was sent.
    socket.resume();
    await closed;
    const row = await usageRowById(sluice.gateway, requestId);
    expect(row).toMatchObject({ status: 200, outcome: "aborted", streamed: 1, model: "gpt-4o-mini" });
  }, 30_000);

  it("keeps no copy of a large request body once the provider has it, only the model it names", async () => {
    // The default idle timeout: the streams stay paused, uncut, while the memory is measured.
    const patient = await startTestGateway({ providerABaseUrl: `${upstream.url}/v1` });
    try {
      const patientProject = await createTestProject(patient.gateway);
      upstream.answers.length = 0;
      // Made before the baseline and kept to the end: the client's own copy is counted in both.
      const body = chatBody(16 * mib);
      collectGarbage();
      const before = process.memoryUsage().arrayBuffers;
      const streams = [
        await pausedStream(patient, patientProject, body),
        await pausedStream(patient, patientProject, body),
      ];
      await until(() => upstream.answers.filter((answer) => answer.bodyEnded).length === 2, 10_000);
      // With the usage option spliced in: a few bytes more than sent.
      for (const answer of upstream.answers) expect(answer.bodyBytes).toBeGreaterThan(body.length);
      // undici lets the body go once its socket has taken the last byte, a moment after the
      // provider read it: measured until it is gone, for five seconds at most.
      let held = Number.POSITIVE_INFINITY;
      for (const deadline = Date.now() + 5000; held >= 8 * mib && Date.now() < deadline; ) {
        await new Promise((resolve) => setTimeout(resolve, 50));
        collectGarbage();
        held = process.memoryUsage().arrayBuffers - before;
      }
      expect(upstream.answers.some((answer) => answer.aborted)).toBe(false);
      for (const stream of streams) stream.socket.destroy();
      // Kept, each stream held its body twice (as read, and with the usage option spliced in): 64
      // MiB. Let go, what is left is the paused answers' socket buffers, far below one body.
      expect(held).toBeLessThan(8 * mib);
      // What the rows need was read before the body went: the model it names.
      for (const stream of streams)
        expect(await usageRowById(patient.gateway, stream.requestId)).toMatchObject({
          outcome: "aborted",
          model: "gpt-4o-mini",
        });
    } finally {
      await patient.close();
    }
  }, 30_000);
});

/**
 * A provider whose stream the test paces event by event: each event is sent once the gateway has
 * written the one before to its client, until the gateway's own buffer for that client holds bytes
 * its socket could not take (the client reads nothing, its kernel buffers are full); then one short
 * last event and the end. The gateway's buffer then holds a few KiB, under its high-water mark: no
 * write of the gateway's ever waited for `drain`.
 */
async function startPacedUpstream(
  clientSide: () => Socket | undefined,
): Promise<LocalServer & { answers: Answer[]; ended: () => boolean }> {
  const answers: Answer[] = [];
  let ended = false;
  const event = Buffer.from(
    `data: ${JSON.stringify({ choices: [{ delta: { content: "x".repeat(4000) } }], usage: null })}\n\n`,
  );
  const local = await startLocalServer((incoming: IncomingMessage, response: ServerResponse) => {
    const answer: Answer = { bodyBytes: 0, bodyEnded: false, aborted: false };
    answers.push(answer);
    response.on("close", () => {
      answer.aborted = !response.writableFinished;
    });
    incoming.resume();
    incoming.on("end", async () => {
      answer.bodyEnded = true;
      response.writeHead(200, { "content-type": "text/event-stream" });
      for (let sent = 0; sent < 64 * mib && !response.destroyed; sent += event.length) {
        const socket = clientSide();
        const before = socket?.bytesWritten ?? 0;
        response.write(event);
        // The gateway wrote it on (its socket counts what it buffers too): looked at every turn of
        // the event loop, so that the kernel's buffers, megabytes, fill within a few seconds.
        for (const deadline = Date.now() + 5000; Date.now() < deadline; ) {
          if ((clientSide()?.bytesWritten ?? 0) >= before + event.length) break;
          await new Promise((resolve) => setImmediate(resolve));
        }
        if ((clientSide()?.writableLength ?? 0) > 0) break;
      }
      response.end("data: [DONE]\n\n", () => {
        ended = true;
      });
    });
  });
  return Object.assign(local, { answers, ended: () => ended });
}

describe("a proxied stream whose client stops reading just before its end", () => {
  let sockets: Socket[] = [];
  let clientPort = 0;
  const clientSide = () => sockets.find((socket) => socket.remotePort === clientPort);
  let upstream: Awaited<ReturnType<typeof startPacedUpstream>>;
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    upstream = await startPacedUpstream(clientSide);
    sluice = await startTestGateway({
      providerABaseUrl: `${upstream.url}/v1`,
      upstreamIdleTimeoutMs: 1000,
    });
    sluice.server.on("connection", (socket: Socket) => sockets.push(socket));
    project = await createTestProject(sluice.gateway);
  });

  afterAll(async () => {
    await sluice.close();
    await upstream.close();
    sockets = [];
  });

  it("closes the connection once the answer's last bytes have waited the idle timeout unread", async () => {
    // Asks for usage itself: its stream passes byte for byte, no event held back.
    const body = Buffer.from(
      JSON.stringify({
        model: "gpt-4o-mini",
        stream: true,
        stream_options: { include_usage: true },
        messages: [{ role: "user", content: "hi" }],
      }),
    );
    const socket = connect(Number(new URL(sluice.url).port), "127.0.0.1");
    socket.on("error", () => {});
    // Reads nothing at all: the gateway's writes fill the kernel's buffers, then its own.
    socket.pause();
    await new Promise((resolve) => socket.once("connect", resolve));
    clientPort = socket.localPort as number;
    socket.write(
      `POST /v1/provider-a/${project.projectId}/chat/completions HTTP/1.1\r\nhost: x\r\n` +
        `authorization: Bearer ${project.bearer("provider-a")}\r\ncontent-type: application/json\r\n` +
        `content-length: ${body.length}\r\n\r\n`,
    );
    socket.write(body);
    try {
      // The provider's answer ended whole, while the client still had its last bytes to read.
      await until(upstream.ended, 30_000);
      expect(upstream.ended()).toBe(true);
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(upstream.answers[0]?.aborted).toBe(false);
      const gatewaySide = clientSide() as Socket;
      expect(gatewaySide.writableLength).toBeGreaterThan(0);
      const endedAt = Date.now();
      // Without a bound the connection, its kernel buffers and the gateway's, stays for as long as
      // the client keeps it (no server timer runs: the response never finishes).
      await until(() => gatewaySide.destroyed, 5000);
      expect(gatewaySide.destroyed).toBe(true);
      expect(Date.now() - endedAt).toBeGreaterThanOrEqual(500);
    } finally {
      socket.destroy();
    }
  }, 60_000);
});
