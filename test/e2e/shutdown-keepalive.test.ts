import { rmSync } from "node:fs";
import { Agent as HttpAgent, request as httpRequest } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";
import type { AddressInfo } from "node:net";
import { Pool } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createGatewayServer, shutDown } from "../../src/server.js";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { selfSigned } from "../support/self-signed.js";
import { createTestProject, startTestGateway, type TestGateway } from "../support/test-gateway.js";
import { usageRequestIdsIn } from "../support/usage-request-ids.js";

/** One request's outcome as its client saw it: an HTTP status (and request id), or an error code. */
interface Outcome {
  status?: number;
  requestId?: string;
  connection?: string;
  error?: string;
}

type Send = (body: string) => Promise<Outcome>;

const clients = 8;
const body = JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] });

/**
 * Graceful shutdown under keep-alive load, run as `serve` runs it on SIGTERM (`shutDown`): clients
 * that reuse their connections get an answer to every request they sent, each told to close its
 * connection; a request is refused only before it is sent (a new connection, refused).
 */
describe("shutdown with keep-alive clients", () => {
  let fake: FakeUpstream;

  beforeAll(async () => {
    fake = await startFakeUpstream();
  });

  afterAll(async () => {
    fake.setLatencyMs(0);
    fake.setSseDelayMs(0);
    await fake.close();
  });

  it.each([
    ["undici Pool", poolClient],
    ["node:http Agent with keepAlive", agentClient],
  ])("answers every request it received from looping clients (%s)", async (_name, clientOf) => {
    // Most requests are in flight at any moment, waiting for the upstream.
    fake.setLatencyMs(20);
    // A deadline no test waits for: a connection kept open past the stop holds the close until it.
    const sluice = await startTestGateway({
      providerABaseUrl: `${fake.url}/a/v1`,
      shutdownTimeoutMs: 60_000,
    });
    const project = await createTestProject(sluice.gateway);
    const client = clientOf(sluice.url, project.projectId, project.bearer("provider-a"));
    const outcomes: Outcome[] = [];
    let stopped = false;
    const loop = async () => {
      while (!stopped) {
        const outcome = await client.send(body);
        outcomes.push(outcome);
        if (outcome.error) return;
      }
    };
    const loops = Array.from({ length: clients }, loop);
    while (outcomes.filter((outcome) => outcome.status === 200).length < 100)
      await new Promise((resolve) => setTimeout(resolve, 5));
    const startedAt = performance.now();
    await shutDown(sluice.server, sluice.gateway);
    const took = performance.now() - startedAt;
    stopped = true;
    await Promise.all(loops);
    await client.close();

    const errors = outcomes.flatMap((outcome) => (outcome.error ? [outcome.error] : []));
    // A reset or a connection closed under a request it had sent would be ECONNRESET, UND_ERR_SOCKET
    // or "socket hang up"; a refused new connection was never sent anything.
    expect(errors.filter((error) => error !== "ECONNREFUSED")).toEqual([]);
    expect(outcomes.filter((outcome) => outcome.status !== undefined && outcome.status !== 200)).toEqual([]);
    const answered = outcomes.filter((outcome) => outcome.status === 200);
    expect(answered.length).toBeGreaterThanOrEqual(100);
    // The answers given after the stop began told their clients to close.
    expect(answered.some((outcome) => outcome.connection === "close")).toBe(true);
    // Not held until the deadline (60 s) by a kept-alive connection.
    expect(took).toBeLessThan(10_000);
    expect(await usageRequestIds(sluice)).toEqual(
      expect.arrayContaining(answered.map((outcome) => outcome.requestId)),
    );
  });

  it.each(["http", "https"] as const)(
    "answers, with Connection: close, a request sent on a kept-alive connection during the grace period (%s)",
    async (scheme) => {
      // A stream whose head (keep-alive) went out before the stop, then a second request on its
      // connection: the stop waits for it and answers it, instead of closing the idle connection.
      fake.setSseDelayMs(40);
      const sluice = await startTestGateway({
        providerABaseUrl: `${fake.url}/a/v1`,
        shutdownTimeoutMs: 5000,
      });
      const project = await createTestProject(sluice.gateway);
      const tls = scheme === "https" ? selfSigned() : undefined;
      // Over TLS, the server is built as `serve` builds it with SLUICE_TLS_CERT and SLUICE_TLS_KEY.
      const server = tls ? createGatewayServer(sluice.gateway.app, { tls }) : sluice.server;
      if (tls) await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
      const url = tls ? `https://localhost:${(server.address() as AddressInfo).port}` : sluice.url;
      const agent = tls
        ? new HttpsAgent({ keepAlive: true, maxSockets: 1, ca: tls.cert })
        : new HttpAgent({ keepAlive: true, maxSockets: 1 });
      try {
        const send = agentSender(url, project.projectId, project.bearer("provider-a"), agent);
        let stopping: Promise<void> | undefined;
        const streaming = send(JSON.stringify({ model: "gpt-4o-mini", messages: [], stream: true }), () => {
          stopping = shutDown(server, sluice.gateway);
        });
        const first = await streaming;
        fake.setSseDelayMs(0);
        const second = await send(body);
        await stopping;
        expect(first).toMatchObject({ status: 200, connection: "keep-alive" });
        expect(second).toMatchObject({ status: 200, connection: "close" });
        expect(await usageRequestIds(sluice)).toEqual(
          expect.arrayContaining([first.requestId, second.requestId]),
        );
      } finally {
        agent.destroy();
        if (tls) sluice.server.close();
        fake.setSseDelayMs(0);
      }
    },
  );

  it("answers /health asked on a kept-alive connection during the grace period 503 stopping", async () => {
    // A load balancer's health check on a connection it keeps open reaches a draining gateway: it is
    // told the instance is going away, not that it is ready.
    fake.setSseDelayMs(40);
    const sluice = await startTestGateway({ providerABaseUrl: `${fake.url}/a/v1`, shutdownTimeoutMs: 5000 });
    const project = await createTestProject(sluice.gateway);
    const agent = new HttpAgent({ keepAlive: true, maxSockets: 1 });
    try {
      const send = agentSender(sluice.url, project.projectId, project.bearer("provider-a"), agent);
      let stopping: Promise<void> | undefined;
      const first = await send(JSON.stringify({ model: "gpt-4o-mini", messages: [], stream: true }), () => {
        stopping = shutDown(sluice.server, sluice.gateway);
      });
      const health = await new Promise<{ status: number; connection: string; body: string }>(
        (resolve, reject) => {
          const request = httpRequest(`${sluice.url}/health`, { agent }, (response) => {
            let body = "";
            response.on("data", (chunk: Buffer) => {
              body += String(chunk);
            });
            response.on("end", () =>
              resolve({
                status: response.statusCode ?? 0,
                connection: String(response.headers.connection),
                body,
              }),
            );
          });
          request.on("error", reject);
          request.end();
        },
      );
      await stopping;
      expect(first).toMatchObject({ status: 200, connection: "keep-alive" });
      expect(health).toMatchObject({ status: 503, connection: "close" });
      expect(JSON.parse(health.body)).toMatchObject({
        status: "stopping",
        checks: { database: { status: "ok" } },
      });
    } finally {
      agent.destroy();
      fake.setSseDelayMs(0);
      rmSync(sluice.gateway.config.dataDir, { recursive: true, force: true });
    }
  });

  it("cuts what is still open at the deadline, and keeps its usage row", async () => {
    fake.hangStreamsAfter(1);
    const sluice = await startTestGateway({ providerABaseUrl: `${fake.url}/a/v1`, shutdownTimeoutMs: 300 });
    const project = await createTestProject(sluice.gateway);
    const agent = new HttpAgent({ keepAlive: true });
    try {
      const send = agentSender(sluice.url, project.projectId, project.bearer("provider-a"), agent);
      let startedAt = 0;
      let stopping: Promise<void> | undefined;
      const hanging = send(JSON.stringify({ model: "gpt-4o-mini", messages: [], stream: true }), () => {
        startedAt = performance.now();
        stopping = shutDown(sluice.server, sluice.gateway);
      });
      const outcome = await hanging;
      await stopping;
      const took = performance.now() - startedAt;
      // The head was sent: the cut shows as a body that ends early.
      expect(outcome).toMatchObject({ status: 200, error: "aborted" });
      expect(took).toBeGreaterThanOrEqual(250);
      // The stream hangs for ever: the deadline (300 ms) and its margin (1 s) cut it, not its end.
      expect(took).toBeLessThan(10_000);
      expect(await usageRequestIds(sluice)).toEqual([outcome.requestId]);
    } finally {
      agent.destroy();
      fake.hangStreamsAfter(null);
    }
  });
});

/** The request ids of every usage row, read from the closed gateway's database; removes the data dir. */
async function usageRequestIds(sluice: TestGateway): Promise<string[]> {
  const dataDir = sluice.gateway.config.dataDir;
  try {
    return usageRequestIdsIn(dataDir);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}

function chatPath(projectId: string): string {
  return `/v1/provider-a/${projectId}/chat/completions`;
}

/** undici's keep-alive Pool, one connection per looping client; POST is never retried by it. */
function poolClient(url: string, projectId: string, bearer: string): { send: Send; close(): Promise<void> } {
  const pool = new Pool(url, { connections: clients });
  return {
    async send(payload) {
      try {
        const response = await pool.request({
          path: chatPath(projectId),
          method: "POST",
          headers: { authorization: `Bearer ${bearer}`, "content-type": "application/json" },
          body: payload,
        });
        await response.body.text();
        return {
          status: response.statusCode,
          requestId: String(response.headers["x-request-id"]),
          connection: String(response.headers.connection),
        };
      } catch (error) {
        return { error: String((error as NodeJS.ErrnoException).code ?? error) };
      }
    },
    close: () => pool.destroy(),
  };
}

/** node:http with a keep-alive Agent, one socket per looping client. */
function agentClient(url: string, projectId: string, bearer: string): { send: Send; close(): Promise<void> } {
  const agent = new HttpAgent({ keepAlive: true, maxSockets: clients });
  return {
    send: agentSender(url, projectId, bearer, agent),
    async close() {
      agent.destroy();
    },
  };
}

/** Sends one POST through `agent` (http: or https:); `onHead` runs when the response head arrives. */
function agentSender(url: string, projectId: string, bearer: string, agent: HttpAgent) {
  const send = url.startsWith("https:") ? httpsRequest : httpRequest;
  return (payload: string, onHead?: () => void): Promise<Outcome> =>
    new Promise((resolve) => {
      const request = send(`${url}${chatPath(projectId)}`, {
        method: "POST",
        agent,
        headers: {
          authorization: `Bearer ${bearer}`,
          "content-type": "application/json",
          "content-length": Buffer.byteLength(payload),
        },
      });
      request.on("error", (error: NodeJS.ErrnoException) => resolve({ error: error.code ?? error.message }));
      request.on("response", (response) => {
        onHead?.();
        const head = {
          status: response.statusCode ?? 0,
          requestId: String(response.headers["x-request-id"]),
          connection: String(response.headers.connection),
        };
        response.on("aborted", () => resolve({ ...head, error: "aborted" }));
        response.on("error", () => resolve({ ...head, error: "aborted" }));
        response.on("end", () => resolve(head));
        response.resume();
      });
      request.end(payload);
    });
}
