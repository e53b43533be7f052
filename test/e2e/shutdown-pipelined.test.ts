import { rmSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { shutDown } from "../../src/server.js";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { createTestProject, startTestGateway, type TestGateway } from "../support/test-gateway.js";
import { usageColumnIn, usageRequestIdsIn } from "../support/usage-request-ids.js";

/** A raw connection to `url` and what it has received, until the server closes it. */
function rawConnection(url: string): { socket: Socket; received(): string; closed: Promise<void> } {
  const socket = connect(Number(new URL(url).port), "127.0.0.1");
  let received = "";
  socket.on("data", (chunk) => {
    received += chunk;
  });
  socket.on("error", () => {});
  const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  return { socket, received: () => received, closed };
}

/** The status line and Connection header of each answer in `raw`, in order. */
function answersIn(raw: string): string[] {
  return [...raw.matchAll(/HTTP\/1\.1 (\d{3})[\s\S]*?\r\nconnection: (\S+)\r\n/gi)].map(
    (match) => `${match[1]} ${match[2]?.toLowerCase()}`,
  );
}

async function until(done: () => boolean): Promise<void> {
  const by = Date.now() + 5000;
  while (!done() && Date.now() < by) await new Promise((resolve) => setTimeout(resolve, 5));
}

/**
 * HTTP/1.1 pipelining during the shutdown: a request a client sent behind another on the same
 * connection is answered if the connection can still carry its answer, and otherwise not served at
 * all (RFC 9112 §9.6), never served with its answer dropped when the connection closes.
 */
describe("shutdown with pipelined requests", () => {
  let fake: FakeUpstream;

  beforeAll(async () => {
    fake = await startFakeUpstream();
  });
  afterEach(() => {
    fake.setLatencyMs(0);
    fake.setSseDelayMs(0);
    fake.clear();
  });
  afterAll(async () => {
    await fake.close();
  });

  async function gateway(shutdownTimeoutMs = 5000) {
    const sluice = await startTestGateway({ providerABaseUrl: `${fake.url}/a/v1`, shutdownTimeoutMs });
    const project = await createTestProject(sluice.gateway);
    const chat = (stream: boolean) => {
      const body = JSON.stringify({ model: "gpt-4o-mini", messages: [], stream });
      return (
        `POST /v1/provider-a/${project.projectId}/chat/completions HTTP/1.1\r\nhost: x\r\n` +
        `authorization: Bearer ${project.bearer("provider-a")}\r\ncontent-type: application/json\r\n` +
        `content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`
      );
    };
    return { sluice, chat };
  }

  it("answers a request pipelined behind one whose answer had not begun when the drain did", async () => {
    const { sluice, chat } = await gateway();
    fake.setLatencyMs(300);
    const connection = rawConnection(sluice.url);
    connection.socket.write(chat(false));
    await until(() => fake.requests.length === 1);
    const stopping = shutDown(sluice.server, sluice.gateway);
    connection.socket.write(chat(false));
    await stopping;
    await connection.closed;
    // The first answer keeps the connection open for the second, which closes it.
    expect(answersIn(connection.received())).toEqual(["200 keep-alive", "200 close"]);
    expect(await usageRowCount(sluice)).toBe(2);
  });

  it("does not serve a request pipelined behind an answer that has said Connection: close", async () => {
    const { sluice, chat } = await gateway();
    fake.setSseDelayMs(60);
    const connection = rawConnection(sluice.url);
    connection.socket.write("GET /health HTTP/1.1\r\nhost: x\r\n\r\n");
    await until(() => answersIn(connection.received()).length === 1);
    const stopping = shutDown(sluice.server, sluice.gateway);
    // A stream that begins during the drain: its head says close.
    connection.socket.write(chat(true));
    await until(() => answersIn(connection.received()).length === 2);
    connection.socket.write(chat(false));
    await stopping;
    await connection.closed;
    expect(answersIn(connection.received())).toEqual(["200 keep-alive", "200 close"]);
    expect(connection.received()).toContain("data: [DONE]");
    // The provider never saw the pipelined call, and it has no row: it was not processed.
    expect(fake.requests).toHaveLength(1);
    expect(await usageRowCount(sluice)).toBe(1);
  });

  it("refuses at the deadline a pipelined call still waiting for its provider, as the one ahead of it", async () => {
    const { sluice, chat } = await gateway(300);
    fake.setLatencyMs(10_000);
    const connection = rawConnection(sluice.url);
    connection.socket.write(chat(false) + chat(false));
    await until(() => fake.requests.length === 2);
    await shutDown(sluice.server, sluice.gateway);
    await connection.closed;
    // The connection carries one answer: the refusal of the call ahead, which closes it.
    expect(answersIn(connection.received())).toEqual(["503 close"]);
    // Neither call is recorded as one its client left (499): the gateway refused both.
    expect(await usageRowStatuses(sluice)).toEqual([503, 503]);
  });
});

/** The status of each usage row the closed gateway wrote; removes its data dir. */
async function usageRowStatuses(sluice: TestGateway): Promise<number[]> {
  const dataDir = sluice.gateway.config.dataDir;
  try {
    return usageColumnIn<number>(dataDir, "status", true);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/** How many usage rows the closed gateway wrote; removes its data dir. */
async function usageRowCount(sluice: TestGateway): Promise<number> {
  const dataDir = sluice.gateway.config.dataDir;
  try {
    return usageRequestIdsIn(dataDir).length;
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}
