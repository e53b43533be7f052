import { mkdtempSync, rmSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { connect, createServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { adminToken, freePort, runGatewayUntilExit, spawnGateway } from "../support/spawned-gateway.js";

/** The answer to one request (`connection: close`), its body read whole. */
function ask(
  url: string,
  method = "GET",
): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: string }> {
  return new Promise((resolve, reject) => {
    const outgoing = httpRequest(url, { method, headers: { connection: "close" } }, (response) => {
      let body = "";
      response.setEncoding("utf8");
      response.on("data", (chunk: string) => {
        body += chunk;
      });
      response.on("end", () =>
        resolve({ status: response.statusCode ?? 0, headers: response.headers, body }),
      );
    });
    outgoing.on("error", reject);
    outgoing.end();
  });
}

/** The error envelope's code and message, without its request id (each answer has its own). */
function envelope(body: string): { code: string; message: string } {
  const { error } = JSON.parse(body) as { error: { code: string; message: string } };
  return { code: error.code, message: error.message };
}

/** Whether a connection to `port` on 127.0.0.1 is refused (nothing listens there). */
function refused(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, "127.0.0.1");
    socket.once("connect", () => {
      socket.destroy();
      resolve(false);
    });
    socket.once("error", (error: NodeJS.ErrnoException) => resolve(error.code === "ECONNREFUSED"));
  });
}

/** Reads `socket` until what it received matches `pattern`. */
function readUntil(socket: Socket, pattern: RegExp): Promise<string> {
  return new Promise((resolve, reject) => {
    let received = "";
    const onData = (chunk: Buffer) => {
      received += String(chunk);
      if (pattern.test(received)) {
        socket.off("data", onData);
        resolve(received);
      }
    };
    socket.on("data", onData);
    socket.once("close", () => reject(new Error(`closed before ${pattern}: ${received}`)));
    socket.once("error", reject);
  });
}

/**
 * SLUICE_METRICS_PORT: `npm start` serves /metrics on a listener of its own, which the gateway's
 * port then does not serve, so that operators keep metrics off the public address without a rule
 * at the load balancer.
 */
describe("SLUICE_METRICS_PORT", () => {
  const dataDir = mkdtempSync(join(tmpdir(), "sluice-metrics-port-"));
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

  it("serves GET and HEAD /metrics on its own port alone, and the gateway's port answers /metrics as an unknown path", async () => {
    const metricsPort = await freePort();
    const gateway = await spawnGateway({ env: { SLUICE_METRICS_PORT: String(metricsPort) } });
    const metricsUrl = `http://127.0.0.1:${metricsPort}`;
    try {
      const scraped = await ask(`${metricsUrl}/metrics`);
      expect(scraped.status).toBe(200);
      expect(scraped.headers["content-type"]).toMatch(/^text\/plain; version=0\.0\.4/);
      // The gateway's own registry: the /health probes of the start are in it.
      expect(scraped.body).toMatch(
        /^sluice_http_requests_total\{route="\/health",method="GET",status="200"\} \d+$/m,
      );
      expect(scraped.body).toContain("sluice_process_cpu_seconds_total");
      const head = await ask(`${metricsUrl}/metrics`, "HEAD");
      expect(head.status).toBe(200);
      expect(head.body).toBe("");

      // The public port: /metrics is no route there, answered as any other unknown path.
      const publicMetrics = await ask(`${gateway.url}/metrics`);
      const unknown = await ask(`${gateway.url}/no-such-path`);
      expect(publicMetrics.status).toBe(404);
      expect(publicMetrics.status).toBe(unknown.status);
      expect(envelope(publicMetrics.body)).toEqual(envelope(unknown.body));
      expect(publicMetrics.body).not.toContain("sluice_");

      // The metrics port serves nothing else: the gateway's routes are not there.
      const health = await ask(`${metricsUrl}/health`);
      expect(health.status).toBe(404);
      expect(envelope(health.body)).toEqual(envelope(unknown.body));
      expect(health.headers["x-request-id"]).toBeTruthy();
      const posted = await ask(`${metricsUrl}/metrics`, "POST");
      expect(posted.status).toBe(405);
      expect(posted.headers.allow).toBe("GET, HEAD");
      expect(envelope(posted.body)).toEqual({
        code: "METHOD_NOT_ALLOWED",
        message: "POST is not allowed on this path",
      });

      // Scrapes are counted under route /metrics, as the gateway's port counts its own.
      const after = await ask(`${metricsUrl}/metrics`);
      expect(after.body).toMatch(
        /^sluice_http_requests_total\{route="\/metrics",method="GET",status="200"\} 1$/m,
      );
      expect(after.body).toMatch(
        /^sluice_http_requests_total\{route="\/metrics",method="HEAD",status="200"\} 1$/m,
      );
      expect(after.body).toMatch(
        /^sluice_http_requests_total\{route="not-found",method="GET",status="404"\} 3$/m,
      );
    } finally {
      await gateway.remove();
    }
  }, 30_000);

  it("stops the start, naming the setting, when its port is taken", async () => {
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
    const { port } = taken.address() as { port: number };
    try {
      const exited = await runGatewayUntilExit({
        SLUICE_DATA_DIR: dataDir,
        SLUICE_METRICS_PORT: String(port),
      });
      expect(exited.code).toBe(1);
      expect(exited.stderr).toBe(
        `sluice failed to start: cannot listen on SLUICE_METRICS_HOST 127.0.0.1 SLUICE_METRICS_PORT ${port}: ` +
          `listen EADDRINUSE: address already in use 127.0.0.1:${port}\n`,
      );
    } finally {
      await new Promise((resolve) => taken.close(resolve));
    }
  }, 20_000);

  // The metrics listener starts first and takes the port: "address already in use" alone sent the
  // operator looking for another process holding PORT.
  it("says so when SLUICE_METRICS_PORT is the gateway's own PORT", async () => {
    const port = await freePort();
    const exited = await runGatewayUntilExit({
      SLUICE_DATA_DIR: dataDir,
      PORT: String(port),
      SLUICE_METRICS_PORT: String(port),
    });
    expect(exited.code).toBe(1);
    expect(exited.stderr).toBe(
      `sluice failed to start: cannot listen on HOST 127.0.0.1 PORT ${port} (SLUICE_METRICS_PORT is the same port, which the metrics listener, started first, holds: give it a port of its own): ` +
        `listen EADDRINUSE: address already in use 127.0.0.1:${port}\n`,
    );
  }, 20_000);

  it("closes at the start of a graceful shutdown, its kept-alive connections too, while the gateway's port still drains", async () => {
    const metricsPort = await freePort();
    const gateway = await spawnGateway({
      env: { SLUICE_METRICS_PORT: String(metricsPort), SLUICE_SHUTDOWN_TIMEOUT_MS: "60000" },
    });
    const scraper = connect(metricsPort, "127.0.0.1");
    const publicPort = Number(new URL(gateway.url).port);
    const uploader = connect(publicPort, "127.0.0.1");
    try {
      // A scraper's kept-alive connection, as Prometheus holds one.
      const scraperClosed = new Promise<void>((resolve) => scraper.once("close", () => resolve()));
      scraper.write("GET /metrics HTTP/1.1\r\nHost: metrics\r\n\r\n");
      await readUntil(scraper, /sluice_process_cpu_seconds_total/);

      // A request in flight on the gateway's port: its body half sent, so the drain waits for it.
      const body = JSON.stringify({ name: "drained", provider: "provider-a", testMode: true });
      uploader.write(
        "POST /admin/v1/projects HTTP/1.1\r\nHost: gateway\r\n" +
          `Authorization: Bearer ${adminToken}\r\nContent-Type: application/json\r\n` +
          `Content-Length: ${body.length}\r\nExpect: 100-continue\r\n\r\n`,
      );
      // 100 Continue comes once the route reads the body: the request is in flight.
      await readUntil(uploader, /^HTTP\/1\.1 100 Continue\r\n\r\n/);
      uploader.write(body.slice(0, 10));

      gateway.child.kill("SIGTERM");
      await new Promise<void>((resolve) => {
        const poll = () => (gateway.output().includes("shutting down") ? resolve() : setTimeout(poll, 20));
        poll();
      });
      await scraperClosed;
      expect(await refused(metricsPort)).toBe(true);
      // The gateway's port still drains meanwhile: the upload in flight is answered once it ends.
      const answered = readUntil(uploader, /HTTP\/1\.1 201 /);
      uploader.write(body.slice(10));
      await answered;
      expect(await gateway.exit).toEqual({ code: 0, signal: null });
      expect(gateway.output()).toContain('"msg":"stopped"');
    } finally {
      scraper.destroy();
      uploader.destroy();
      await gateway.remove();
    }
  }, 30_000);
});
