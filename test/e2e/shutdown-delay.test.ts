import { Agent as HttpAgent, request as httpRequest } from "node:http";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { afterFirstChunk, proxiedChat } from "../support/proxied-chat.js";
import { type SpawnedGateway, spawnGateway } from "../support/spawned-gateway.js";

/** The log line that says the delay began, as written after a SIGTERM. */
const delayLine = '"signal":"SIGTERM","delayMs":30000,"msg":"shutdown delayed';

/** Waits for `text` in the gateway's output: a fixed wait could end first on a loaded machine. */
async function logged(gateway: SpawnedGateway, text: string): Promise<void> {
  await vi.waitFor(() => expect(gateway.output()).toContain(text), { timeout: 10_000, interval: 10 });
}

/**
 * Every request here closes its connection (`Connection: close`), so the next one opens a new
 * connection: what the delay is for is that a load balancer's new connections are still accepted.
 */
const fresh = { connection: "close" };

/**
 * SLUICE_SHUTDOWN_DELAY_MS: after SIGTERM the gateway keeps accepting and serving while /health
 * says it is stopping, so a load balancer takes it out before it stops listening.
 */
describe("the shutdown delay", () => {
  let fake: FakeUpstream;

  beforeAll(async () => {
    fake = await startFakeUpstream();
  });

  afterAll(async () => {
    fake.hangStreamsAfter(null);
    fake.setSseDelayMs(0);
    await fake.close();
  });

  it("keeps accepting and serving during the delay, /health 503 stopping; a second SIGTERM ends it and hurries the shutdown", async () => {
    const gateway = await spawnGateway({
      env: {
        SLUICE_PROVIDER_A_BASE_URL: `${fake.url}/a/v1`,
        SLUICE_SHUTDOWN_DELAY_MS: "30000",
        SLUICE_SHUTDOWN_TIMEOUT_MS: "10000",
      },
    });
    try {
      const project = await gateway.createProject();
      // A stream that never ends, open when the second signal comes: the hurried shutdown cuts it
      // at once, where the delay's 30 s and then the 10 s drain would hold the process past the test.
      // Begun before the signal, its answer says keep-alive (the delay's say close: see the cut
      // of a stream begun during the delay, below).
      fake.hangStreamsAfter(1);
      const stream = await proxiedChat(gateway.url, project, {
        body: { model: "gpt-4o-mini", messages: [], stream: true },
      });
      expect(stream.status).toBe(200);
      expect(stream.headers.get("connection")).toBe("keep-alive");
      const { rest: read } = await afterFirstChunk(stream);

      gateway.child.kill("SIGTERM");
      await logged(gateway, delayLine);

      // A new connection is accepted and a proxied call served, as before the signal.
      const chat = await proxiedChat(gateway.url, project, { headers: fresh });
      expect(chat.status).toBe(200);
      expect(((await chat.json()) as { object: string }).object).toBe("chat.completion");

      const health = await fetch(`${gateway.url}/health`, { headers: fresh });
      expect(health.status).toBe(503);
      expect(health.headers.get("cache-control")).toBe("no-store");
      const body = (await health.json()) as Record<string, unknown>;
      expect(body).toEqual({
        status: "stopping",
        version: expect.any(String),
        uptimeSeconds: expect.any(Number),
        checks: { database: { status: "ok", latencyMs: expect.any(Number) } },
      });

      gateway.child.kill("SIGTERM");
      expect(await gateway.exit).toEqual({ code: 0, signal: null });
      expect(await read).toBe("cut");
      const output = gateway.output();
      expect(output).toContain(
        '"signal":"SIGTERM","msg":"signal repeated: cutting what is still open, writing the usage rows, exiting"',
      );
      expect(output).toContain('"connections":1,"msg":"shutdown hurried: connections cut"');
      expect(output).toContain('"msg":"stopped"');
      expect(gateway.usageRequestIds()).toContain(stream.headers.get("x-request-id"));
    } finally {
      fake.hangStreamsAfter(null);
      await gateway.remove();
    }
  }, 25_000);

  it("answers every call during the delay with Connection: close, so kept-alive clients move to a new connection before the drain", async () => {
    // A client behind a TCP load balancer (or none) keeps its connection to this instance: the load
    // balancer only stops sending it new ones. Told to close after each answer of the delay, it
    // reconnects through the load balancer meanwhile; kept alive, it would still be here when the
    // drain closes idle connections, and a request it sends as one is closed is reset.
    const gateway = await spawnGateway({
      env: {
        SLUICE_PROVIDER_A_BASE_URL: `${fake.url}/a/v1`,
        SLUICE_SHUTDOWN_DELAY_MS: "30000",
        SLUICE_SHUTDOWN_TIMEOUT_MS: "10000",
      },
    });
    const agent = new HttpAgent({ keepAlive: true, maxSockets: 1 });
    try {
      const project = await gateway.createProject();
      const send = () =>
        new Promise<{ status: number; connection: string; reused: boolean }>((resolve, reject) => {
          const request = httpRequest(`${gateway.url}/v1/provider-a/${project.projectId}/chat/completions`, {
            method: "POST",
            agent,
            headers: { authorization: `Bearer ${project.bearer}`, "content-type": "application/json" },
          });
          request.on("error", reject);
          request.on("response", (response) => {
            response.resume();
            response.on("end", () =>
              resolve({
                status: response.statusCode ?? 0,
                connection: String(response.headers.connection),
                reused: request.reusedSocket,
              }),
            );
          });
          request.end(JSON.stringify({ model: "gpt-4o-mini", messages: [] }));
        });
      expect(await send()).toEqual({ status: 200, connection: "keep-alive", reused: false });
      gateway.child.kill("SIGTERM");
      await logged(gateway, delayLine);
      // On the connection kept alive before the signal: served, and told to close.
      expect(await send()).toEqual({ status: 200, connection: "close", reused: true });
      // A new connection is still accepted, and its answer closes it too.
      expect(await send()).toEqual({ status: 200, connection: "close", reused: false });
      gateway.child.kill("SIGTERM");
      expect(await gateway.exit).toEqual({ code: 0, signal: null });
    } finally {
      agent.destroy();
      await gateway.remove();
    }
  }, 25_000);

  it("ends the delay at once on an uncaught error: the shutdown runs and the process exits with 1", async () => {
    const gateway = await spawnGateway({
      env: { SLUICE_SHUTDOWN_DELAY_MS: "30000", SLUICE_SHUTDOWN_TIMEOUT_MS: "10000" },
      imports: ["./test/support/crash-on-signal.ts"],
    });
    try {
      gateway.child.kill("SIGTERM");
      await logged(gateway, delayLine);
      // Within the test's time, where the delay would hold the process for 30 s.
      gateway.child.kill("SIGUSR2");
      expect(await gateway.exit).toEqual({ code: 1, signal: null });
      expect(gateway.output()).toContain('"msg":"uncaught error: shutting down"');
      expect(gateway.output()).toContain(
        '"reason":"uncaught error","msg":"shutting down: no new connections',
      );
      expect(gateway.output()).toContain('"msg":"stopped"');
    } finally {
      await gateway.remove();
    }
  }, 25_000);

  it("runs the normal shutdown once the delay is over: the call in flight finishes, its row is written, the process exits", async () => {
    fake.setSseDelayMs(100);
    const gateway = await spawnGateway({
      env: {
        SLUICE_PROVIDER_A_BASE_URL: `${fake.url}/a/v1`,
        SLUICE_SHUTDOWN_DELAY_MS: "300",
        SLUICE_SHUTDOWN_TIMEOUT_MS: "10000",
      },
    });
    try {
      const project = await gateway.createProject();
      const stream = await proxiedChat(gateway.url, project, {
        body: { model: "gpt-4o-mini", messages: [], stream: true },
        headers: fresh,
      });
      const streamed = stream.text();
      gateway.child.kill("SIGTERM");
      expect(await gateway.exit).toEqual({ code: 0, signal: null });
      expect(await streamed).toContain("[DONE]");
      const output = gateway.output();
      const delayed = output.indexOf('"signal":"SIGTERM","delayMs":300,"msg":"shutdown delayed');
      const shuttingDown = output.indexOf('"msg":"shutting down: no new connections');
      expect(delayed).toBeGreaterThan(-1);
      expect(shuttingDown).toBeGreaterThan(delayed);
      expect(output.indexOf('"msg":"stopped"')).toBeGreaterThan(shuttingDown);
      expect(output).not.toContain("signal repeated");
      expect(gateway.usageRequestIds()).toContain(stream.headers.get("x-request-id"));
    } finally {
      fake.setSseDelayMs(0);
      await gateway.remove();
    }
  }, 25_000);

  it("cuts a stream begun during the delay at the deadline so that its client sees the cut, fetch and the OpenAI SDK alike, and writes its row", async () => {
    // Begun during the delay, the streams' answers say `Connection: close`, whose close undici
    // (Node 20's fetch, under the SDK too) takes for the answer's end, even a chunked one's before
    // its last chunk: an app then had a cut answer for a whole one.
    const gateway = await spawnGateway({
      env: {
        SLUICE_PROVIDER_A_BASE_URL: `${fake.url}/a/v1`,
        SLUICE_SHUTDOWN_DELAY_MS: "3000",
        SLUICE_SHUTDOWN_TIMEOUT_MS: "500",
      },
    });
    try {
      const project = await gateway.createProject();
      fake.hangStreamsAfter(1);
      gateway.child.kill("SIGTERM");
      await logged(gateway, '"delayMs":3000,"msg":"shutdown delayed');
      const stream = await proxiedChat(gateway.url, project, {
        body: { model: "gpt-4o-mini", messages: [], stream: true },
      });
      expect(stream.headers.get("connection")).toBe("close");
      const { rest: read } = await afterFirstChunk(stream);
      const openai = new OpenAI({
        baseURL: `${gateway.url}/v1/provider-a/${project.projectId}`,
        apiKey: project.bearer,
        maxRetries: 0,
      });
      const sdk = await openai.chat.completions
        .create({ model: "gpt-4o-mini", messages: [], stream: true })
        .withResponse();
      const sdkRead = (async () => {
        try {
          for await (const _chunk of sdk.data);
          return "whole";
        } catch {
          return "cut";
        }
      })();
      // Both began during the delay, and the drain's deadline cuts them.
      expect(gateway.output()).not.toContain("shutting down: no new connections");
      expect(await gateway.exit).toEqual({ code: 0, signal: null });
      expect(gateway.output()).toContain(
        '"connections":2,"msg":"shutdown deadline reached: connections cut"',
      );
      expect(await read).toBe("cut");
      expect(await sdkRead).toBe("cut");
      // Their rows are written, as any stream's the shutdown cuts: the provider's status, aborted.
      for (const requestId of [stream.headers.get("x-request-id"), sdk.response.headers.get("x-request-id")])
        expect(gateway.usageRow(requestId)).toEqual({ status: 200, outcome: "aborted" });
    } finally {
      fake.hangStreamsAfter(null);
      await gateway.remove();
    }
  }, 25_000);
});
