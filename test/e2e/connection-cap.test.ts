import { type AddressInfo, connect, type Socket } from "node:net";
import { connect as tlsConnect } from "node:tls";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { defaultMaxConnections, readOpenFileLimit } from "../../src/http/open-file-limit.js";
import { createGatewayServer, type GatewayServer } from "../../src/server.js";
import { sendRawHeaders } from "../support/raw-request.js";
import { selfSigned } from "../support/self-signed.js";
import { startTestGateway, type TestGateway } from "../support/test-gateway.js";

const cap = 3;

/** A connection the test holds, with everything the server sent on it so far. */
interface Held {
  socket: Socket;
  received(): string;
  /** Resolves once the server ended or cut the connection. */
  closed: Promise<void>;
}

function open(port: number, host = "127.0.0.1", localAddress?: string): Promise<Held> {
  return new Promise((resolve, reject) => {
    const socket = connect({ port, host, ...(localAddress ? { localAddress } : {}) });
    let data = "";
    socket.setEncoding("utf8");
    socket.on("data", (chunk: string) => {
      data += chunk;
    });
    const closed = new Promise<void>((done) => socket.once("close", () => done()));
    // A refused connection may be reset by the server, as a refused TLS one is.
    socket.on("error", () => {});
    socket.once("connect", () => resolve({ socket, received: () => data, closed }));
    socket.once("error", reject);
  });
}

/** Sends `GET path` on a kept-alive connection and waits for the whole answer. */
async function ask(held: Held, path = "/health"): Promise<{ status: number; body: string }> {
  const before = held.received().length;
  held.socket.write(`GET ${path} HTTP/1.1\r\nHost: sluice.test\r\n\r\n`);
  const deadline = Date.now() + 5000;
  for (;;) {
    const text = held.received().slice(before);
    const headEnd = text.indexOf("\r\n\r\n");
    if (headEnd >= 0) {
      const length = Number(/\r\ncontent-length: *(\d+)/i.exec(text.slice(0, headEnd))?.[1] ?? Number.NaN);
      const body = text.slice(headEnd + 4);
      if (Buffer.byteLength(body) >= length)
        return { status: Number(text.slice(9, 12)), body: body.slice(0, length) };
    }
    if (held.socket.destroyed || Date.now() > deadline)
      throw new Error(`no whole answer on the connection: ${JSON.stringify(text)}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** What the server sent on a connection before it closed it (a refusal). */
async function answerUntilClosed(held: Held): Promise<string> {
  await held.closed;
  return held.received();
}

async function until(check: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 5000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

function close(held: Held): Promise<void> {
  held.socket.destroy();
  return held.closed;
}

function portOf(server: GatewayServer): number {
  return (server.address() as AddressInfo).port;
}

/** A second server for the same gateway app (same cap), listening on `host` with or without TLS. */
async function listenToo(
  sluice: TestGateway,
  host: string,
  tls?: { cert: Buffer; key: Buffer },
): Promise<GatewayServer> {
  const server = createGatewayServer(sluice.gateway.app, tls ? { tls } : {});
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  return server;
}

async function stop(server: GatewayServer): Promise<void> {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
}

describe("the connection cap per client address (SLUICE_MAX_CONNECTIONS_PER_IP)", () => {
  let sluice: TestGateway;
  let port: number;
  const held: Held[] = [];
  const servers: GatewayServer[] = [];

  beforeAll(async () => {
    sluice = await startTestGateway({ maxConnectionsPerIp: cap, metricsEnabled: true });
    port = portOf(sluice.server);
  });
  afterEach(async () => {
    await Promise.all(held.splice(0).map(close));
    await Promise.all(servers.splice(0).map(stop));
    await until(() => sluice.gateway.connections.addresses() === 0, "every connection was let go");
  });
  afterAll(async () => {
    await sluice.close();
  });

  const hold = async (to = port, host = "127.0.0.1") => {
    const connection = await open(to, host);
    held.push(connection);
    return connection;
  };

  it("serves as many kept-alive connections as the cap, refuses the next with a 429 envelope, and takes one again once one closes", async () => {
    const kept = [await hold(), await hold(), await hold()];
    for (const connection of kept) expect((await ask(connection)).status).toBe(200);
    expect(sluice.gateway.connections.openFrom("127.0.0.1")).toBe(cap);

    const refused = await hold();
    refused.socket.write("GET /health HTTP/1.1\r\nHost: sluice.test\r\n\r\n");
    const answer = await answerUntilClosed(refused);
    const [head = "", body = ""] = answer.split("\r\n\r\n");
    expect(head).toMatch(/^HTTP\/1\.1 429 Too Many Requests\r\n/);
    expect(head).toMatch(/\r\nconnection: close(\r\n|$)/i);
    expect(head).toMatch(/\r\nretry-after: \d+(\r\n|$)/i);
    expect(head).toMatch(/\r\ncontent-type: application\/json; charset=utf-8(\r\n|$)/i);
    const requestId = /\r\nx-request-id: (req_[0-9a-f]{32})(\r\n|$)/i.exec(head)?.[1];
    expect(requestId).toBeDefined();
    expect(JSON.parse(body)).toEqual({
      error: {
        code: "TOO_MANY_REQUESTS",
        message: expect.stringContaining(`${cap} connections`),
        requestId,
      },
    });
    // Only the one answer: the request sent on the refused connection was not served.
    expect(answer.match(/HTTP\/1\.1 /g)).toHaveLength(1);

    // The kept connections still work.
    for (const connection of kept) expect((await ask(connection)).status).toBe(200);

    await close(kept[0] as Held);
    await until(
      () => sluice.gateway.connections.openFrom("127.0.0.1") === cap - 1,
      "the closed one was let go",
    );
    const again = await hold();
    expect((await ask(again)).status).toBe(200);
  });

  it("refuses the HTTP clients of node:http and fetch with a 429 they can read", async () => {
    for (let index = 0; index < cap; index++) expect((await ask(await hold())).status).toBe(200);
    const answer = await sendRawHeaders(`http://127.0.0.1:${port}/health`, {}, "", "GET");
    expect(answer.status).toBe(429);
    expect(answer.headers.connection).toBe("close");
    expect(JSON.parse(answer.body).error.code).toBe("TOO_MANY_REQUESTS");
    // fetch (undici) too, on a connection of its own.
    const fetched = await fetch(`http://127.0.0.1:${port}/health`);
    expect(fetched.status).toBe(429);
    expect(fetched.headers.get("retry-after")).toBe("1");
    expect(((await fetched.json()) as { error: { code: string } }).error.code).toBe("TOO_MANY_REQUESTS");
  });

  it("counts a refused connection in sluice_connections_refused_total and warns once per address per minute", async () => {
    const kept = [await hold(), await hold(), await hold()];
    for (const connection of kept) await ask(connection);
    const metrics = await ask(kept[0] as Held, "/metrics");
    const before = refusedCount(metrics.body);

    for (let index = 0; index < 4; index++) await answerUntilClosed(await hold());

    const after = refusedCount((await ask(kept[0] as Held, "/metrics")).body);
    expect(after - before).toBe(4);
    // One line per address and minute, whichever case of this file refused 127.0.0.1 first.
    const warnings = capWarnings(sluice.logs);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ level: "warn", clientIp: "127.0.0.1", limit: cap });
  });

  it("counts an IPv4 client of a dual-stack socket (::ffff:127.0.0.1) as 127.0.0.1", async () => {
    const dual = await listenToo(sluice, "::");
    servers.push(dual);
    const kept = [await hold(portOf(dual)), await hold(), await hold(portOf(dual))];
    for (const connection of kept) expect((await ask(connection)).status).toBe(200);
    expect(sluice.gateway.connections.openFrom("127.0.0.1")).toBe(cap);
    expect(sluice.gateway.connections.addresses()).toBe(1);
    const answer = await answerUntilClosed(await hold(portOf(dual)));
    expect(answer).toMatch(/^HTTP\/1\.1 429 /);
  });

  it("cuts a TLS connection over the cap before the handshake, and lets the TLS ones under it through", async () => {
    const tlsServer = await listenToo(sluice, "127.0.0.1", selfSigned());
    servers.push(tlsServer);
    const secure = await new Promise<Socket>((resolve, reject) => {
      const socket = tlsConnect({ port: portOf(tlsServer), host: "127.0.0.1", rejectUnauthorized: false });
      socket.once("secureConnect", () => resolve(socket));
      socket.once("error", reject);
    });
    held.push({
      socket: secure,
      received: () => "",
      closed: new Promise((done) => secure.once("close", done)),
    });
    for (let index = 1; index < cap; index++) await ask(await hold());
    expect(sluice.gateway.connections.openFrom("127.0.0.1")).toBe(cap);
    const failure = await new Promise<unknown>((resolve) => {
      const socket = tlsConnect({ port: portOf(tlsServer), host: "127.0.0.1", rejectUnauthorized: false });
      socket.once("secureConnect", () => resolve(null));
      socket.once("error", resolve);
    });
    expect(failure).toBeInstanceOf(Error);
  });

  it("lets go of every count: many connections opened, refused, reset and closed leave none behind", async () => {
    for (let round = 0; round < 5; round++) {
      const batch = await Promise.all(Array.from({ length: 8 }, () => open(port)));
      // Half send a request, a quarter are reset by the client, the rest close quietly.
      await Promise.all(
        batch.map(async (connection, index) => {
          if (index % 2 === 0) connection.socket.write("GET /health HTTP/1.1\r\nHost: sluice.test\r\n\r\n");
          await new Promise((resolve) => setTimeout(resolve, 5));
          if (index % 4 === 1) connection.socket.resetAndDestroy();
          else connection.socket.destroy();
          await connection.closed;
        }),
      );
    }
    await until(() => sluice.gateway.connections.addresses() === 0, "the counts are back to none");
    expect(sluice.gateway.connections.openFrom("127.0.0.1")).toBe(0);
    // And the cap is whole again.
    const kept = [await hold(), await hold(), await hold()];
    for (const connection of kept) expect((await ask(connection)).status).toBe(200);
  });
});

describe("the connection cap and trusted proxies", () => {
  let sluice: TestGateway;

  beforeAll(async () => {
    sluice = await startTestGateway({ maxConnectionsPerIp: 1, trustProxy: ["127.0.0.1"] });
  });
  afterAll(async () => {
    await sluice.close();
  });

  it("does not cap a proxy named in SLUICE_TRUST_PROXY, whose connections carry many clients", async () => {
    const dual = await listenToo(sluice, "::");
    const kept: Held[] = [];
    try {
      for (let index = 0; index < 6; index++)
        kept.push(await open(index % 2 === 0 ? portOf(sluice.server) : portOf(dual)));
      for (const connection of kept) expect((await ask(connection)).status).toBe(200);
      expect(sluice.gateway.connections.addresses()).toBe(0);
    } finally {
      await Promise.all(kept.map(close));
      await stop(dual);
    }
  });
});

describe("SLUICE_MAX_CONNECTIONS_PER_IP=0", () => {
  it("caps nothing and counts nothing", async () => {
    const sluice = await startTestGateway({ maxConnectionsPerIp: 0 });
    const kept: Held[] = [];
    try {
      for (let index = 0; index < 5; index++) kept.push(await open(portOf(sluice.server)));
      for (const connection of kept) expect((await ask(connection)).status).toBe(200);
      expect(sluice.gateway.connections.addresses()).toBe(0);
    } finally {
      await Promise.all(kept.map(close));
      await sluice.close();
    }
  });
});

describe("the cap on all connections together (SLUICE_MAX_CONNECTIONS)", () => {
  const total = 3;
  let sluice: TestGateway;
  let port: number;
  const held: Held[] = [];
  const servers: GatewayServer[] = [];

  beforeAll(async () => {
    sluice = await startTestGateway({ maxConnections: total, metricsEnabled: true });
    port = portOf(sluice.server);
  });
  afterEach(async () => {
    await Promise.all(held.splice(0).map(close));
    await Promise.all(servers.splice(0).map(stop));
    await until(() => sluice.gateway.connections.open() === 0, "every connection was let go");
  });
  afterAll(async () => {
    await sluice.close();
  });

  /** A connection from `localAddress`: Linux routes all of 127.0.0.0/8 to the loopback. */
  const hold = async (localAddress: string, to = port) => {
    const connection = await open(to, "127.0.0.1", localAddress);
    held.push(connection);
    return connection;
  };

  it("serves as many connections from different addresses as the cap, refuses the next with a 503 envelope, and takes one again once one closes", async () => {
    const kept = [await hold("127.0.0.1"), await hold("127.0.0.2"), await hold("127.0.0.3")];
    for (const connection of kept) expect((await ask(connection)).status).toBe(200);
    expect(sluice.gateway.connections.open()).toBe(total);
    expect(sluice.gateway.connections.openFrom("127.0.0.2")).toBe(1);
    const before = refusedCount((await ask(kept[0] as Held, "/metrics")).body, fullMetric);

    const refused = await hold("127.0.0.4");
    refused.socket.write("GET /health HTTP/1.1\r\nHost: sluice.test\r\n\r\n");
    const answer = await answerUntilClosed(refused);
    const [head = "", body = ""] = answer.split("\r\n\r\n");
    expect(head).toMatch(/^HTTP\/1\.1 503 Service Unavailable\r\n/);
    expect(head).toMatch(/\r\nconnection: close(\r\n|$)/i);
    expect(head).toMatch(/\r\nretry-after: 5(\r\n|$)/i);
    expect(head).toMatch(/\r\ncontent-type: application\/json; charset=utf-8(\r\n|$)/i);
    const requestId = /\r\nx-request-id: (req_[0-9a-f]{32})(\r\n|$)/i.exec(head)?.[1];
    expect(requestId).toBeDefined();
    expect(JSON.parse(body)).toEqual({
      error: {
        code: "SERVICE_UNAVAILABLE",
        details: { retryable: true },
        message: expect.stringContaining("SLUICE_MAX_CONNECTIONS)"),
        requestId,
      },
    });
    // Only the one answer: the request sent on the refused connection was not served.
    expect(answer.match(/HTTP\/1\.1 /g)).toHaveLength(1);
    // A refused connection is not counted, and the kept ones still work.
    expect(sluice.gateway.connections.open()).toBe(total);
    for (const connection of kept) expect((await ask(connection)).status).toBe(200);
    expect(refusedCount((await ask(kept[0] as Held, "/metrics")).body, fullMetric) - before).toBe(1);

    await close(kept[1] as Held);
    await until(() => sluice.gateway.connections.open() === total - 1, "the closed one was let go");
    const again = await hold("127.0.0.4");
    expect((await ask(again)).status).toBe(200);
    expect((await fetch(`http://127.0.0.1:${port}/health`)).status).toBe(503);
  });

  it("warns once a minute, and counts the refusals apart from the per-address cap's", async () => {
    const kept = [await hold("127.0.0.1"), await hold("127.0.0.2"), await hold("127.0.0.3")];
    for (const connection of kept) await ask(connection);
    const metrics = (await ask(kept[0] as Held, "/metrics")).body;
    const before = refusedCount(metrics, fullMetric);
    const perAddressBefore = refusedCount(metrics);
    for (let index = 0; index < 3; index++) await answerUntilClosed(await hold(`127.0.0.${10 + index}`));
    const after = (await ask(kept[0] as Held, "/metrics")).body;
    expect(refusedCount(after, fullMetric) - before).toBe(3);
    expect(refusedCount(after)).toBe(perAddressBefore);
    // One line a minute, whichever case of this file was refused first.
    const warnings = capWarnings(sluice.logs, "SLUICE_MAX_CONNECTIONS");
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ level: "warn", limit: total });
  });

  it("cuts a TLS connection over it before the handshake", async () => {
    const tlsServer = await listenToo(sluice, "127.0.0.1", selfSigned());
    servers.push(tlsServer);
    for (let index = 0; index < total; index++) await ask(await hold(`127.0.0.${index + 1}`));
    const failure = await new Promise<unknown>((resolve) => {
      const socket = tlsConnect({ port: portOf(tlsServer), host: "127.0.0.1", rejectUnauthorized: false });
      socket.once("secureConnect", () => resolve(null));
      socket.once("error", resolve);
    });
    expect(failure).toBeInstanceOf(Error);
  });
});

describe("the cap on all connections together and trusted proxies", () => {
  it("counts a trusted proxy's connections, which its address's cap does not", async () => {
    const sluice = await startTestGateway({
      maxConnections: 2,
      maxConnectionsPerIp: 1,
      trustProxy: ["127.0.0.1"],
    });
    const kept: Held[] = [];
    try {
      for (let index = 0; index < 2; index++) kept.push(await open(portOf(sluice.server)));
      for (const connection of kept) expect((await ask(connection)).status).toBe(200);
      expect(sluice.gateway.connections.addresses()).toBe(0);
      expect(sluice.gateway.connections.open()).toBe(2);
      const refused = await open(portOf(sluice.server));
      kept.push(refused);
      expect(await answerUntilClosed(refused)).toMatch(/^HTTP\/1\.1 503 /);
    } finally {
      await Promise.all(kept.map(close));
      await sluice.close();
    }
  });
});

describe("SLUICE_MAX_CONNECTIONS unset", () => {
  it("caps the connections at what the process's open-file limit leaves, read as the gateway starts", async () => {
    const sluice = await startTestGateway();
    try {
      const limit = readOpenFileLimit();
      if (process.platform === "linux") expect(limit).toBeGreaterThan(0);
      expect(sluice.gateway.connections.maxTotal).toBe(defaultMaxConnections(limit));
      expect(sluice.gateway.connections.maxTotal).toBeGreaterThan(0);
      const held = await open(portOf(sluice.server));
      expect((await ask(held)).status).toBe(200);
      expect(sluice.gateway.connections.open()).toBe(1);
      await close(held);
    } finally {
      await sluice.close();
    }
  });
});

describe("SLUICE_MAX_CONNECTIONS=0", () => {
  it("caps nothing and counts nothing", async () => {
    const sluice = await startTestGateway({ maxConnections: 0, maxConnectionsPerIp: 0 });
    const kept: Held[] = [];
    try {
      for (let index = 0; index < 5; index++) kept.push(await open(portOf(sluice.server)));
      for (const connection of kept) expect((await ask(connection)).status).toBe(200);
      expect(sluice.gateway.connections.open()).toBe(0);
    } finally {
      await Promise.all(kept.map(close));
      await sluice.close();
    }
  });
});

const fullMetric = "sluice_connections_refused_full_total";

function refusedCount(metrics: string, name = "sluice_connections_refused_total"): number {
  const match = new RegExp(`^${name} (\\d+)$`, "m").exec(metrics);
  if (!match) throw new Error(`${name} is not in /metrics`);
  return Number(match[1]);
}

function capWarnings(logs: string[], setting = "SLUICE_MAX_CONNECTIONS_PER_IP"): Record<string, unknown>[] {
  return logs
    .map((line) => JSON.parse(line) as Record<string, unknown>)
    .filter((line) => String(line.msg).includes(`${setting} `));
}
