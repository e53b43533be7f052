import { connect, createServer, type Server, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowById,
} from "../support/test-gateway.js";

/** What the provider does once its early answer is written. */
type After = "keeps the connection open, reading nothing" | "closes its side" | "resets the connection";

/** One connection the provider took: how much it had read when it answered, and the socket. */
interface Taken {
  readAtAnswer: number;
  socket: Socket;
  closed: Promise<void>;
}

/**
 * A provider (or its load balancer) that answers as soon as it has read 2 KiB of a request, head
 * included, and then stops reading: it keeps the connection, closes its side, or resets it.
 */
async function earlyProvider() {
  let answer = "";
  let after: After = "keeps the connection open, reading nothing";
  const taken: Taken[] = [];
  const server: Server = createServer((socket) => {
    socket.on("error", () => {});
    const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
    let read = 0;
    const onData = (data: Buffer) => {
      read += data.length;
      if (read < 2048) return;
      socket.off("data", onData);
      socket.pause();
      taken.push({ readAtAnswer: read, socket, closed });
      const then = after;
      socket.write(answer, () => {
        if (then === "closes its side") socket.end();
        else if (then === "resets the connection") socket.resetAndDestroy();
      });
    };
    socket.on("data", onData);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}/v1`,
    taken,
    answer(status: number, body: string, next: After) {
      answer = `HTTP/1.1 ${status} Whatever\r\ncontent-type: application/json\r\nx-provider-note: early\r\ncontent-length: ${body.length}\r\n\r\n${body}`;
      after = next;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const { socket } of taken) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

/**
 * More than the loopback's socket buffers take while the provider reads nothing (Sluice's send
 * buffer grows to tcp_wmem's 4 MiB, the provider's unread receive buffer stays small): so undici is
 * still writing the body when the early answer comes, and drops the connection. A 4 MiB body fitted
 * in them now and then, on a loaded machine: undici had written it all before it read the answer,
 * and rightly kept the connection, whose provider would read the rest as a whole request.
 */
const bodyBytes = 16 * 1024 * 1024;
const piece = 64 * 1024;
const body = Buffer.alloc(bodyBytes, 0x20);
body.write('{"model":"gpt-4o-mini","messages":[],"note":"', 0);
body.write('"}', bodyBytes - 2);

/** The first answer in `raw`: its status, head and body; null until it is all in. */
function firstAnswer(raw: Buffer) {
  const end = raw.indexOf("\r\n\r\n");
  if (end < 0) return null;
  const head = raw.subarray(0, end).toString("latin1");
  const length = Number(/\r\ncontent-length: (\d+)/i.exec(head)?.[1]);
  if (raw.length < end + 4 + length) return null;
  return {
    status: Number(head.split(" ")[1]),
    head,
    body: raw.subarray(end + 4, end + 4 + length).toString("latin1"),
    /** Its length in bytes, head and body. */
    size: end + 4 + length,
  };
}

interface Upload {
  status: number;
  head: string;
  body: string;
  /** The status of a second request sent on the same connection once the first answer was in. */
  nextStatus: number | null;
  /** ECONNRESET or EPIPE when the gateway reset the client's connection. */
  error: string | null;
  /** The gateway closed its side in order (FIN) after the client closed its own. */
  ended: boolean;
}

/**
 * Uploads the body on a socket of its own (with content-length or chunked), reads the
 * answer, then sends a GET /health on the same connection, reads it, and closes its side.
 */
function rawUpload(sluice: TestGateway, head: string, chunked: boolean): Promise<Upload> {
  return new Promise((resolve, reject) => {
    const socket = connect({
      port: Number(new URL(sluice.url).port),
      host: "127.0.0.1",
      allowHalfOpen: true,
    });
    let received = Buffer.alloc(0);
    let first: ReturnType<typeof firstAnswer> = null;
    let nextStatus: number | null = null;
    let error: string | null = null;
    let ended = false;
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no close within 10 s; got ${received.toString("latin1").slice(0, 300)}`));
    }, 10_000);
    socket.on("data", (data: Buffer) => {
      received = Buffer.concat([received, data]);
      if (first === null) {
        first = firstAnswer(received);
        if (first !== null) socket.write("GET /health HTTP/1.1\r\nhost: sluice.test\r\n\r\n");
      }
      if (first !== null && nextStatus === null) {
        const next = firstAnswer(received.subarray(first.size));
        if (next !== null) {
          nextStatus = next.status;
          socket.end();
        }
      }
    });
    socket.on("error", (cause: NodeJS.ErrnoException) => {
      error ??= cause.code ?? cause.message;
    });
    socket.on("end", () => {
      ended = true;
    });
    socket.on("close", () => {
      clearTimeout(timer);
      if (first === null)
        reject(new Error(`closed before the answer (${error}): ${received.toString("latin1")}`));
      else resolve({ status: first.status, head: first.head, body: first.body, nextStatus, error, ended });
    });
    socket.on("connect", async () => {
      socket.write(
        `${head}${chunked ? "transfer-encoding: chunked" : `content-length: ${bodyBytes}`}\r\n\r\n`,
      );
      for (let at = 0; at < bodyBytes && socket.writable; at += piece) {
        const part = body.subarray(at, at + piece);
        const framed = chunked
          ? Buffer.concat([Buffer.from(`${part.length.toString(16)}\r\n`), part, Buffer.from("\r\n")])
          : part;
        if (!socket.write(framed)) await new Promise((resume) => socket.once("drain", resume));
      }
      if (chunked && socket.writable) socket.write("0\r\n\r\n");
    });
  });
}

const answers = {
  413: '{"error":{"message":"Request too large","type":"invalid_request_error","code":null}}',
  400: '{"error":{"message":"Unexpected input","type":"invalid_request_error","code":null}}',
  429: '{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}',
  200: '{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}}',
} as const;

/**
 * A provider may answer before it has read the whole request body: a 413 or 400 after the first
 * bytes, a 429, even a 200, and then stop reading, close or reset the connection. The client gets
 * that answer as the provider sent it (SPEC: provider errors are forwarded as they are), and its row
 * the status. Its own upload is not involved: Sluice reads the body whole before it calls the
 * provider, so the client's connection has nothing left unread and serves its next request; the
 * upstream connection, its request half written, is dropped rather than reused.
 */
describe("a provider that answers before it read the whole request body", () => {
  let provider: Awaited<ReturnType<typeof earlyProvider>>;
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    provider = await earlyProvider();
    sluice = await startTestGateway({ providerABaseUrl: provider.url });
    project = await createTestProject(sluice.gateway);
  });
  afterAll(async () => {
    await sluice.close();
    await provider.close();
  });

  const chat = () =>
    `POST /v1/provider-a/${project.projectId}/chat/completions HTTP/1.1\r\nhost: sluice.test\r\n` +
    `authorization: Bearer ${project.bearer("provider-a")}\r\ncontent-type: application/json\r\n`;

  const afters: After[] = [
    "keeps the connection open, reading nothing",
    "closes its side",
    "resets the connection",
  ];
  const cases = ([413, 400, 429, 200] as const).flatMap((status) =>
    afters.map((after) => [status, after] as const),
  );

  it.each(cases)(
    "forwards its %i as it is, with its row, and the client's connection serves its next request: the provider %s",
    async (status, after) => {
      provider.answer(status, answers[status], after);
      for (const chunked of [false, true]) {
        const framing = chunked ? "chunked" : "content-length";
        const took = provider.taken.length;
        const upload = await rawUpload(sluice, chat(), chunked);
        expect(upload.status, framing).toBe(status);
        expect(upload.body, framing).toBe(answers[status]);
        expect(upload.head, framing).toMatch(/\r\nx-provider-note: early\r\n/);
        expect(upload.nextStatus, framing).toBe(200);
        expect(upload.error, framing).toBeNull();
        expect(upload.ended, framing).toBe(true);
        const row = await usageRowById(sluice.gateway, /\r\nx-request-id: (\S+)/.exec(upload.head)?.[1]);
        expect(row, framing).toMatchObject({
          status,
          outcome: status === 200 ? "ok" : "error",
          input_tokens: status === 200 ? 11 : null,
        });
        // The provider answered early, on one connection, which Sluice then closed: the provider,
        // reading again, gets its end.
        expect(provider.taken).toHaveLength(took + 1);
        const taken = provider.taken[took] as Taken;
        expect(taken.readAtAnswer, framing).toBeLessThan(bodyBytes);
        taken.socket.resume();
        await taken.closed;
      }
    },
  );

  it.each([413, 200] as const)(
    "forwards its early %i to a fetch client streaming its body slowly",
    async (status) => {
      provider.answer(status, answers[status], "keeps the connection open, reading nothing");
      let at = 0;
      const stream = new ReadableStream<Uint8Array>({
        async pull(controller) {
          if (at >= bodyBytes) return controller.close();
          await new Promise((wait) => setTimeout(wait, 2));
          controller.enqueue(body.subarray(at, at + piece));
          at += piece;
        },
      });
      const response = await fetch(`${sluice.url}/v1/provider-a/${project.projectId}/chat/completions`, {
        method: "POST",
        headers: {
          authorization: `Bearer ${project.bearer("provider-a")}`,
          "content-type": "application/json",
        },
        body: stream,
        duplex: "half",
      } as RequestInit);
      expect(response.status).toBe(status);
      expect(await response.text()).toBe(answers[status]);
      expect(response.headers.get("x-provider-note")).toBe("early");
      const row = await usageRowById(sluice.gateway, response.headers.get("x-request-id"));
      expect(row).toMatchObject({ status });
    },
  );
});
