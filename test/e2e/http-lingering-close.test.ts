import { connect, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

/** Body bytes sent with the head, then once the answer is in: within what a lingering close reads. */
const bodyBytes = 512 * 1024;
const laterBytes = 2 * 1024 * 1024;
const chunk = Buffer.alloc(64 * 1024, 0x20);

interface Exchange {
  /** Everything the gateway sent, as latin1. */
  answer: string;
  /** The error the client's socket saw (ECONNRESET, EPIPE: the gateway reset the connection). */
  error: string | null;
  /** The gateway closed its side in order: the client read its FIN. */
  ended: boolean;
  /** Milliseconds from the whole answer in to the connection closed. */
  closedAfterMs: number;
  /** Milliseconds from the whole answer in to the gateway's side of the connection closed. */
  gatewayClosedAfterMs: number;
}

/** The whole answer (head and as many body bytes as its content-length says) is in `answer`. */
function wholeAnswer(answer: string): boolean {
  const end = answer.indexOf("\r\n\r\n");
  const length = /\r\ncontent-length: (\d+)/i.exec(answer.slice(0, end))?.[1];
  return end >= 0 && length !== undefined && answer.length - end - 4 >= Number(length);
}

/**
 * Sends `head` and 512 KiB of body without waiting for an answer, then, once the whole answer is in,
 * another 2 MiB (a client still uploading when its answer came, as most do), then closes its side
 * and reads until the connection closes (or 15 s pass). A gateway that closes at once after an early
 * answer resets the connection on those bytes (RFC 9112 §9.6): the client sees ECONNRESET or EPIPE,
 * and over a network the reset can discard the answer before the client read it. `withHead`: the
 * body's first 64 KiB go out in the head's own write, so Node reads them with the head and holds
 * them for the request before its answer is sent (its parser stops reading the socket then).
 */
function sendAll(sluice: TestGateway, head: string, withHead: boolean): Promise<Exchange> {
  return new Promise((resolve) => {
    const port = Number(new URL(sluice.url).port);
    let gatewayClosedAt = 0;
    let closedAt = 0;
    const settle = () => {
      if (!gatewayClosedAt || !closedAt) return;
      clearTimeout(timer);
      resolve({
        answer,
        error,
        ended,
        closedAfterMs: closedAt - answeredAt,
        gatewayClosedAfterMs: gatewayClosedAt - answeredAt,
      });
    };
    sluice.server.once("connection", (server: Socket) =>
      server.once("close", () => {
        gatewayClosedAt = Date.now();
        settle();
      }),
    );
    const socket = connect({ port, host: "127.0.0.1", allowHalfOpen: true });
    let answer = "";
    let error: string | null = null;
    let ended = false;
    let answered = false;
    let answeredAt = 0;
    const send = (bytes: number, then: () => void) => {
      let sent = 0;
      const pump = () => {
        while (sent < bytes && socket.writable) {
          sent += chunk.length;
          if (!socket.write(chunk)) {
            socket.once("drain", pump);
            return;
          }
        }
        then();
      };
      pump();
    };
    socket.on("data", (data: Buffer) => {
      answer += data.toString("latin1");
      if (answered || !wholeAnswer(answer)) return;
      answered = true;
      answeredAt = Date.now();
      send(laterBytes, () => socket.end());
    });
    socket.on("error", (cause: NodeJS.ErrnoException) => {
      error ??= cause.code ?? cause.message;
    });
    socket.on("end", () => {
      ended = true;
    });
    const timer = setTimeout(() => {
      error ??= "no close within 15 s";
      socket.destroy();
      gatewayClosedAt ||= Date.now();
      settle();
    }, 15_000);
    socket.on("close", () => {
      closedAt = Date.now();
      settle();
    });
    socket.on("connect", () => {
      if (withHead) socket.write(Buffer.concat([Buffer.from(head, "latin1"), chunk]));
      else socket.write(head);
      send(withHead ? bodyBytes - chunk.length : bodyBytes, () => {});
    });
  });
}

/** The status and error code of the whole answer: its body is as long as it says. */
function parsed(answer: string): { status: number; code: string } {
  const end = answer.indexOf("\r\n\r\n");
  const head = answer.slice(0, end);
  const body = answer.slice(end + 4);
  expect(body).toHaveLength(Number(/\r\ncontent-length: (\d+)/i.exec(head)?.[1]));
  return {
    status: Number(head.split(" ")[1]),
    code: (JSON.parse(body) as { error: { code: string } }).error.code,
  };
}

describe("a request refused early, while its client keeps sending the body", () => {
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    sluice = await startTestGateway();
    project = await createTestProject(sluice.gateway);
  });

  afterAll(async () => {
    await sluice.close();
  });

  const chat = () => `POST /v1/provider-a/${project.projectId}/chat/completions HTTP/1.1\r\nhost: x\r\n`;
  const signedIn = () =>
    `authorization: Bearer ${project.bearer("provider-a")}\r\ncontent-type: application/json\r\n`;

  it.each([
    [
      "a transfer coding it does not read (400)",
      () => `${chat()}${signedIn()}transfer-encoding: gzip\r\n\r\n`,
      400,
    ],
    [
      "content-length with transfer-encoding, refused by the parser (400)",
      () => `${chat()}${signedIn()}content-length: 5\r\ntransfer-encoding: chunked\r\n\r\n`,
      400,
    ],
    [
      "an invalid byte in a header, refused by the parser (400)",
      () => `${chat()}${signedIn()}x-note: a\x01b\r\ncontent-length: ${4 * bodyBytes}\r\n\r\n`,
      400,
    ],
    [
      "a body over the cap, by its content-length (413)",
      () => `${chat()}${signedIn()}content-length: 100000000\r\n\r\n`,
      413,
    ],
    ["no credentials (401)", () => `${chat()}content-length: 100000000\r\n\r\n`, 401],
    [
      "no credentials, a client that closes the connection (401)",
      () => `${chat()}connection: close\r\ncontent-length: 1000000\r\n\r\n`,
      401,
    ],
    [
      "no credentials over HTTP/1.0, an answer that closes the connection (401)",
      () => `${chat().replace("HTTP/1.1", "HTTP/1.0")}content-length: 100000000\r\n\r\n`,
      401,
    ],
    [
      "no credentials over HTTP/1.0, a body within what a kept connection reads (401)",
      () => `${chat().replace("HTTP/1.1", "HTTP/1.0")}content-length: 1000000\r\n\r\n`,
      401,
    ],
    [
      "CONNECT with a body (404)",
      () => `CONNECT x:443 HTTP/1.1\r\nhost: x:443\r\ncontent-length: ${4 * bodyBytes}\r\n\r\n`,
      404,
    ],
  ])(
    "gets its answer and a clean close, no reset, once it closes its side: %s",
    async (_name, head, status) => {
      // A reset depends on how the bytes race the close: a few rounds make a lucky pass unlikely.
      // The body's start comes after the head, or with it: then Node surely stopped reading the
      // socket (over 16 KiB of body held unread) before the answer went out, and the lingering
      // close must restart the read.
      for (let round = 0; round < 3; round++) {
        for (const withHead of [false, true]) {
          const exchange = await sendAll(sluice, head(), withHead);
          const how = withHead ? "the body's start with the head" : "the head alone";
          expect(parsed(exchange.answer).status, how).toBe(status);
          expect(exchange.error, how).toBeNull();
          expect(exchange.ended, how).toBe(true);
          // Its 2.5 MiB are more than the 1 MiB a kept connection reads: it closes then, and ends
          // when the client's close is read, not at the 2 s deadline (the body was left unread).
          expect(exchange.closedAfterMs, how).toBeLessThan(1000);
          // The gateway's side too: a connection whose rest Node had stopped reading was closed on
          // the client's side at once, but the gateway never read that close, and held the
          // connection (its slot under SLUICE_MAX_CONNECTIONS) to the 2 s deadline, then reset it.
          expect(exchange.gatewayClosedAfterMs, how).toBeLessThan(1000);
        }
      }
    },
  );
});

describe("the lingering close of a refused request", () => {
  let sluice: TestGateway;

  beforeAll(async () => {
    sluice = await startTestGateway();
  });

  afterAll(async () => {
    await sluice.close();
  });

  const refused = "POST /v1/x HTTP/1.1\r\nhost: x\r\nx-note: a\x01b\r\ncontent-length: 10000000000\r\n\r\n";

  /**
   * Opens a connection, sends `refused` (and, with `keepSending`, body bytes at about 13 MB/s) and
   * resolves once the gateway's side of the connection closed, or 15 s passed. The client never
   * closes its side.
   */
  function held(keepSending: boolean): Promise<{ answer: string; sent: number; closed: boolean }> {
    return new Promise((resolve) => {
      let closed = false;
      const timer = setTimeout(() => settle(), 15_000);
      sluice.server.once("connection", (server: Socket) => {
        server.once("close", () => {
          closed = true;
          settle();
        });
      });
      const socket = connect({
        port: Number(new URL(sluice.url).port),
        host: "127.0.0.1",
        allowHalfOpen: true,
      });
      let answer = "";
      let sent = 0;
      socket.on("data", (data: Buffer) => {
        answer += data.toString("latin1");
      });
      // Cut at the bound while bytes still come: a reset is expected then.
      socket.on("error", () => {});
      const interval = keepSending
        ? setInterval(() => {
            if (!socket.writable) return;
            socket.write(chunk, (error) => {
              if (!error) sent += chunk.length;
            });
          }, 5)
        : undefined;
      function settle() {
        clearTimeout(timer);
        clearInterval(interval);
        // What was still on its way in is read first.
        setImmediate(() => {
          socket.destroy();
          resolve({ answer, sent, closed });
        });
      }
      socket.write(refused);
    });
  }

  it("is cut when the client neither sends nor closes its side", async () => {
    const { answer, closed } = await held(false);
    expect(answer).toMatch(/^HTTP\/1\.1 400 /);
    expect(closed).toBe(true);
  });

  it("is cut when the client keeps sending, having read a bounded part", async () => {
    const { answer, sent, closed } = await held(true);
    expect(answer).toMatch(/^HTTP\/1\.1 400 /);
    expect(closed).toBe(true);
    // 64 KiB every 5 ms (about 13 MB/s) for 15 s is ~190 MB: the close came long before.
    expect(sent).toBeLessThan(64 * 1024 * 1024);
  });
  it("reads a bounded part of a body refused on a kept connection, however fast it comes", async () => {
    const project = await createTestProject(sluice.gateway);
    const head =
      `POST /v1/provider-a/${project.projectId}/chat/completions HTTP/1.1\r\nhost: x\r\n` +
      `authorization: Bearer ${project.bearer("provider-a")}\r\ncontent-type: application/json\r\n` +
      "content-length: 10000000000\r\n\r\n";
    const big = Buffer.alloc(1024 * 1024, 0x20);
    const { answer, sent, closed, read, heldMs } = await new Promise<{
      answer: string;
      sent: number;
      closed: boolean;
      read: number;
      heldMs: number;
    }>((resolve) => {
      let closed = false;
      let answer = "";
      let sent = 0;
      let read = 0;
      const opened = Date.now();
      let heldMs = 0;
      const socket = connect({ port: Number(new URL(sluice.url).port), host: "127.0.0.1" });
      const settle = () => {
        clearTimeout(timer);
        socket.destroy();
        resolve({ answer, sent, closed, read, heldMs });
      };
      const timer = setTimeout(settle, 15_000);
      sluice.server.once("connection", (server: Socket) =>
        server.once("close", () => {
          closed = true;
          read = server.bytesRead;
          heldMs = Date.now() - opened;
          setImmediate(settle);
        }),
      );
      socket.on("data", (data: Buffer) => {
        answer += data.toString("latin1");
      });
      socket.on("error", () => {});
      // As fast as the connection takes it: up to 1 GiB.
      const pump = () => {
        while (socket.writable && sent < 1024 * big.length) {
          sent += big.length;
          if (!socket.write(big)) {
            socket.once("drain", pump);
            return;
          }
        }
      };
      socket.write(head);
      pump();
    });
    expect(answer).toMatch(/^HTTP\/1\.1 413 /);
    expect(closed).toBe(true);
    // Closed once the 1 MiB a kept connection reads was read (then this client closes its side on
    // the gateway's), not at the 2 s deadlines having read nothing (as it was, reset after 4 s).
    expect(read).toBeGreaterThan(1024 * 1024);
    expect(heldMs).toBeLessThan(1000);
    // 1 MiB read on the kept connection, 4 MiB on its lingering close, and what the kernels buffer.
    expect(sent).toBeLessThan(64 * 1024 * 1024);
  });
});
