import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

const declaredBytes = 10_000_000_000;
const chunk = Buffer.alloc(64 * 1024, 0x20);

interface Refusal {
  /** Everything the gateway sent, as latin1. */
  answer: string;
  /** Bytes of the body the client got onto the connection before it was closed. */
  sent: number;
  /** The gateway closed the connection before the test gave up (10 s). */
  closed: boolean;
}

/**
 * Sends a request declaring a 10 GB body, then keeps sending it, 64 KiB every 5 ms (about 13 MB/s,
 * so the 10 GB would take minutes), reading whatever comes back, until the connection is closed or
 * 10 seconds have passed.
 */
async function keepSending(sluice: TestGateway, head: string): Promise<Refusal> {
  const socket = connect(Number(new URL(sluice.url).port), "127.0.0.1");
  let answer = "";
  let sent = 0;
  socket.on("data", (data: Buffer) => {
    answer += data.toString("latin1");
  });
  // The gateway closes while bytes are on their way: the client sees a reset, or EPIPE.
  socket.on("error", () => {});
  const closed = new Promise<boolean>((resolve) => {
    socket.once("close", () => resolve(true));
    setTimeout(() => resolve(false), 10_000);
  });
  socket.write(`${head}content-length: ${declaredBytes}\r\n\r\n`);
  const timer = setInterval(() => {
    if (!socket.writable) return;
    socket.write(chunk, (error) => {
      if (!error) sent += chunk.length;
    });
  }, 5);
  const wasClosed = await closed;
  clearInterval(timer);
  socket.destroy();
  return { answer, sent, closed: wasClosed };
}

/** The answer's status, headers and body, checked whole: its body is as long as it says. */
function parsed(answer: string) {
  const end = answer.indexOf("\r\n\r\n");
  const head = answer.slice(0, end);
  const body = answer.slice(end + 4);
  const length = Number(/\r\ncontent-length: (\d+)/i.exec(head)?.[1]);
  expect(body).toHaveLength(length);
  return { head, body: JSON.parse(body) as { error: { code: string } } };
}

describe("a request refused before its body was read", () => {
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    sluice = await startTestGateway();
    project = await createTestProject(sluice.gateway);
  });

  afterAll(async () => {
    await sluice.close();
  });

  it.each([
    ["without credentials (401)", () => "", "UNAUTHORIZED", 401],
    [
      "signed in, for its declared size (413)",
      () => `authorization: Bearer ${project.bearer("provider-a")}\r\ncontent-type: application/json\r\n`,
      "PAYLOAD_TOO_LARGE",
      413,
    ],
  ])("is answered, and its body is not read to its end: %s", async (_name, auth, code, status) => {
    const refusal = await keepSending(
      sluice,
      `POST /v1/provider-a/${project.projectId}/chat/completions HTTP/1.1\r\nhost: x\r\n${auth()}`,
    );
    const { head, body } = parsed(refusal.answer);
    expect(head).toMatch(new RegExp(`^HTTP/1\\.1 ${status} `));
    expect(body.error.code).toBe(code);
    // Closed by the gateway within seconds of the answer (not at once: a reset could overtake the
    // answer), having taken a sliver of the 10 GB (before: all of it, read and thrown away until
    // the request timeout, 300 s).
    expect(refusal.closed).toBe(true);
    expect(refusal.sent).toBeLessThan(64 * 1024 * 1024);
  });

  it("is answered, and its connection closed, on the admin API and an unknown route too", async () => {
    for (const [head, status] of [
      ["POST /admin/v1/projects HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n", 401],
      ["POST /nowhere HTTP/1.1\r\nhost: x\r\n", 404],
    ] as const) {
      const refusal = await keepSending(sluice, head);
      expect(parsed(refusal.answer).head).toMatch(new RegExp(`^HTTP/1\\.1 ${status} `));
      expect(refusal.closed).toBe(true);
      expect(refusal.sent).toBeLessThan(64 * 1024 * 1024);
    }
  });

  it.each([
    ["a small body, read and dropped", "POST /nowhere HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}"],
    ["no body", "GET /nowhere HTTP/1.1\r\nhost: x\r\n\r\n"],
  ])("keeps the connection of a refused request with %s", async (_name, request) => {
    const socket = connect(Number(new URL(sluice.url).port), "127.0.0.1");
    let answer = "";
    socket.on("data", (data: Buffer) => {
      answer += data.toString("latin1");
    });
    // Two requests on one connection: the second is answered too.
    socket.write(`${request}${request}`);
    const deadline = Date.now() + 5000;
    while ((answer.match(/HTTP\/1\.1 404 /g) ?? []).length < 2 && Date.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 10));
    socket.destroy();
    expect(answer.match(/HTTP\/1\.1 404 /g)).toHaveLength(2);
    expect(answer).not.toMatch(/connection: close/i);
  });
});
