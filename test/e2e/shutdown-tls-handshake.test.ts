import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { request } from "node:https";
import { type AddressInfo, connect, createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { writeSelfSigned } from "../support/self-signed.js";
import { type SpawnedGateway, spawnGateway } from "../support/spawned-gateway.js";

/**
 * A relay to `port` that passes what the client sends at once and what the server sends
 * `delayMs` later (a client that far away, or slow), `Infinity`: never (a client that went away
 * mid-handshake). `serverSpoke` resolves when the server first sends something back: over TLS,
 * its part of the handshake, the connection accepted and its ClientHello read.
 */
async function startSlowRelay(
  port: number,
  delayMs: number,
): Promise<{ port: number; serverSpoke: Promise<void>; close(): void }> {
  let spoke!: () => void;
  const serverSpoke = new Promise<void>((resolve) => {
    spoke = resolve;
  });
  const sockets: Socket[] = [];
  const relay: Server = createServer((client) => {
    const server = connect(port, "127.0.0.1");
    sockets.push(client, server);
    client.on("data", (chunk: Buffer) => server.write(chunk));
    client.on("end", () => server.end());
    client.on("error", () => server.destroy());
    // What the server does to the connection reaches the client after what it sent before.
    const later = (pass: () => void) => {
      if (delayMs !== Number.POSITIVE_INFINITY) setTimeout(pass, delayMs);
    };
    server.on("data", (chunk: Buffer) => {
      spoke();
      later(() => client.write(chunk));
    });
    server.on("end", () => later(() => client.end()));
    server.on("error", () => later(() => client.destroy()));
  });
  await new Promise<void>((resolve) => relay.listen(0, "127.0.0.1", resolve));
  return {
    port: (relay.address() as AddressInfo).port,
    serverSpoke,
    close() {
      for (const socket of sockets) socket.destroy();
      relay.close();
    },
  };
}

/** A proxied chat call over HTTPS to 127.0.0.1:`port`: its status and Connection, or its error. */
function chatOverTls(
  port: number,
  ca: Buffer,
  project: { projectId: string; bearer: string },
): Promise<{ status?: number; connection?: string; requestId?: string; error?: string }> {
  return new Promise((resolve) => {
    const outgoing = request(
      {
        host: "127.0.0.1",
        port,
        servername: "localhost",
        ca,
        agent: false,
        method: "POST",
        path: `/v1/provider-a/${project.projectId}/chat/completions`,
        headers: { authorization: `Bearer ${project.bearer}`, "content-type": "application/json" },
      },
      (response) => {
        response.resume();
        response.on("end", () =>
          resolve({
            status: response.statusCode,
            connection: response.headers.connection,
            requestId: String(response.headers["x-request-id"]),
          }),
        );
        response.on("error", (error: NodeJS.ErrnoException) =>
          resolve({ error: error.code ?? error.message }),
        );
      },
    );
    outgoing.on("error", (error: NodeJS.ErrnoException) => resolve({ error: error.code ?? error.message }));
    outgoing.end(JSON.stringify({ model: "gpt-4o-mini", messages: [] }));
  });
}

/**
 * Under HTTPS (SLUICE_TLS_CERT, SLUICE_TLS_KEY), a connection the gateway accepted before its
 * shutdown began but whose TLS handshake was still under way: its request, sent once the handshake
 * is done, is answered as one on an accepted plain connection would be, with `Connection: close`.
 */
describe("shutdown with a TLS handshake under way", () => {
  const dir = mkdtempSync(join(tmpdir(), "sluice-tls-"));
  const { certFile, keyFile } = writeSelfSigned(dir);
  const tls = { certFile, keyFile, ca: readFileSync(certFile) };
  let fake: FakeUpstream;

  beforeAll(async () => {
    fake = await startFakeUpstream();
  });

  afterAll(async () => {
    await fake.close();
    rmSync(dir, { recursive: true, force: true });
  });

  async function start(shutdownTimeoutMs: number): Promise<SpawnedGateway> {
    return spawnGateway({
      tls,
      env: {
        SLUICE_PROVIDER_A_BASE_URL: `${fake.url}/a/v1`,
        SLUICE_SHUTDOWN_TIMEOUT_MS: String(shutdownTimeoutMs),
      },
    });
  }

  it("answers the request of a client still in its handshake (300 ms away) when SIGTERM comes", async () => {
    const gateway = await start(10_000);
    const relay = await startSlowRelay(Number(new URL(gateway.url).port), 300);
    try {
      const project = await gateway.createProject();
      // A connection accepted and never sent a byte, as an idle plain one: closed after a look, not
      // waited for.
      const silent = connect(Number(new URL(gateway.url).port), "127.0.0.1");
      await new Promise((resolve) => silent.once("connect", resolve));
      const silentClosed = new Promise<number>((resolve) =>
        silent.once("close", () => resolve(performance.now())),
      );
      silent.on("error", () => {});
      const call = chatOverTls(relay.port, tls.ca, project);
      await relay.serverSpoke;
      const signalledAt = performance.now();
      gateway.child.kill("SIGTERM");
      const outcome = await call;
      const exit = await gateway.exit;
      expect(outcome).toMatchObject({ status: 200, connection: "close" });
      expect(exit).toEqual({ code: 0, signal: null });
      expect(gateway.usageRequestIds()).toContain(outcome.requestId);
      // Well before the 10 s deadline: the silent connection does not hold the drain.
      expect((await silentClosed) - signalledAt).toBeLessThan(5000);
    } finally {
      relay.close();
      await gateway.remove();
    }
  }, 40_000);

  it("cuts a handshake that never ends at the deadline, and exits within it", async () => {
    const gateway = await start(1000);
    const relay = await startSlowRelay(Number(new URL(gateway.url).port), Number.POSITIVE_INFINITY);
    try {
      const call = chatOverTls(relay.port, tls.ca, { projectId: "p", bearer: "b" });
      await relay.serverSpoke;
      const signalledAt = performance.now();
      gateway.child.kill("SIGTERM");
      const exit = await gateway.exit;
      const took = performance.now() - signalledAt;
      relay.close();
      expect(await call).toHaveProperty("error");
      expect(exit).toEqual({ code: 0, signal: null });
      // The deadline (1 s) and the margin (1 s), with room for a loaded machine.
      expect(took).toBeLessThan(1000 + 1000 + 1000);
      expect(gateway.output()).toContain(
        '"connections":1,"msg":"shutdown deadline reached: connections cut"',
      );
    } finally {
      relay.close();
      await gateway.remove();
    }
  }, 40_000);
});
