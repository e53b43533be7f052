import { once } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import { type AddressInfo, createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { TLSSocket } from "node:tls";
import { afterEach, describe, expect, it } from "vitest";
import { selfSigned } from "../../test/support/self-signed.js";
import { type CancelTarget, cancelGraceMs, sendCancelRequest } from "./postgres-cancel-request.js";

/** The CancelRequest for process 4242 with secret key -7 (secret keys are any Int32). */
const cancelPacket = Buffer.from([
  0, 0, 0, 16, 0x04, 0xd2, 0x16, 0x2e, 0, 0, 0x10, 0x92, 0xff, 0xff, 0xff, 0xf9,
]);
const sslRequest = Buffer.from([0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]);
const key = { processID: 4242, secretKey: -7 };

/** What one connection to the fake server sent before it closed, and whether the server closed it. */
interface Received {
  bytes: Buffer;
  /** Bytes read inside TLS, when the server took it up. */
  secured?: Buffer;
  alpn?: string | false | null;
}

const servers: Server[] = [];
const sockets = new Set<Socket>();
const dirs: string[] = [];
afterEach(async () => {
  for (const socket of sockets) socket.destroy();
  sockets.clear();
  for (const server of servers.splice(0)) await new Promise((resolve) => server.close(resolve));
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/**
 * A stand-in for PostgreSQL's postmaster: `handle` is given each connection and what it has sent so
 * far, and says when to close it; `received()` resolves with what the first connection sent.
 */
async function fakeServer(
  handle: (socket: Socket, received: Received) => void,
  listenOn?: string,
): Promise<{ port: number; received: Promise<Received>; readonly connections: number }> {
  let firstReceived: (received: Received) => void = () => {};
  const received = new Promise<Received>((resolve) => {
    firstReceived = resolve;
  });
  let connections = 0;
  const server = createServer((socket) => {
    connections++;
    const seen: Received = { bytes: Buffer.alloc(0) };
    sockets.add(socket);
    socket.on("data", (chunk: Buffer) => {
      seen.bytes = Buffer.concat([seen.bytes, chunk]);
    });
    socket.on("error", () => {});
    socket.on("close", () => firstReceived(seen));
    handle(socket, seen);
  });
  servers.push(server);
  if (listenOn) server.listen(listenOn);
  else server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return {
    port: listenOn ? 5432 : (server.address() as AddressInfo).port,
    received,
    get connections() {
      return connections;
    },
  };
}

/** Closes `socket` once it has sent the 16 bytes of a CancelRequest, as PostgreSQL does. */
function closeAfterCancel(socket: Socket, seen: Received) {
  socket.on("data", () => {
    if (seen.bytes.length >= 16) socket.end();
  });
}

function target(port: number, more: Partial<CancelTarget> = {}): CancelTarget {
  return { ...key, host: "127.0.0.1", port, ssl: false, ...more };
}

describe("sendCancelRequest", () => {
  it("sends the 16 bytes alone on a connection of its own, and settles once the server closes it", async () => {
    const server = await fakeServer(closeAfterCancel);
    await sendCancelRequest(target(server.port), 5000).settled;
    expect((await server.received).bytes).toEqual(cancelPacket);
  });

  it("reaches a server on a Unix socket, as pg does for a host that is a directory", async () => {
    const dir = mkdtempSync(join(tmpdir(), "sluice-pg-socket-"));
    dirs.push(dir);
    const server = await fakeServer(closeAfterCancel, join(dir, ".s.PGSQL.5432"));
    await sendCancelRequest(target(5432, { host: dir }), 5000).settled;
    expect((await server.received).bytes).toEqual(cancelPacket);
  });

  // As the session's own connection did: the secret key is not sent in the clear, and a proxy that
  // routes by TLS's server name finds the server.
  it("sends it inside TLS, after an SSLRequest, when the session's connection uses TLS", async () => {
    const { cert, key: tlsKey } = selfSigned();
    const server = await fakeServer((socket, seen) => {
      socket.once("data", () => {
        socket.removeAllListeners("data");
        socket.write("S");
        const secure = new TLSSocket(socket, { isServer: true, cert, key: tlsKey });
        seen.secured = Buffer.alloc(0);
        secure.on("data", (chunk: Buffer) => {
          seen.secured = Buffer.concat([seen.secured ?? Buffer.alloc(0), chunk]);
          if (seen.secured.length >= 16) secure.end();
        });
        secure.on("error", () => {});
      });
    });
    // The certificate is for localhost: checked as the session's is.
    await sendCancelRequest(target(server.port, { host: "localhost", ssl: { ca: cert } }), 5000).settled;
    const received = await server.received;
    expect(received.bytes).toEqual(sslRequest);
    expect(received.secured).toEqual(cancelPacket);
  });

  it("sends nothing when the server refuses TLS the session's connection used", async () => {
    const server = await fakeServer((socket) => {
      socket.once("data", () => socket.write("N"));
    });
    await sendCancelRequest(target(server.port, { ssl: { rejectUnauthorized: false } }), 5000).settled;
    expect((await server.received).bytes).toEqual(sslRequest);
  });

  it("takes TLS up at once, asking for ALPN's postgresql, with sslnegotiation=direct", async () => {
    const { cert, key: tlsKey } = selfSigned();
    const server = await fakeServer((socket, seen) => {
      socket.removeAllListeners("data");
      const secure = new TLSSocket(socket, {
        isServer: true,
        cert,
        key: tlsKey,
        ALPNProtocols: ["postgresql"],
      });
      seen.secured = Buffer.alloc(0);
      secure.on("data", (chunk: Buffer) => {
        seen.secured = Buffer.concat([seen.secured ?? Buffer.alloc(0), chunk]);
        seen.alpn = secure.alpnProtocol;
        if (seen.secured.length >= 16) secure.end();
      });
      secure.on("error", () => {});
    });
    const sent = sendCancelRequest(
      target(server.port, { ssl: { rejectUnauthorized: false }, sslNegotiation: "direct" }),
      5000,
    );
    await sent.settled;
    const received = await server.received;
    expect(received.secured).toEqual(cancelPacket);
    expect(received.alpn).toBe("postgresql");
  });

  it("cuts a connection the server never closes at the timeout", async () => {
    const server = await fakeServer(() => {});
    const started = performance.now();
    await sendCancelRequest(target(server.port), 200).settled;
    expect(performance.now() - started).toBeGreaterThanOrEqual(190);
    expect(performance.now() - started).toBeLessThan(2000);
    expect((await server.received).bytes).toEqual(cancelPacket);
  });

  it("is cut at once by destroy before its 16 bytes are sent", async () => {
    // The server never answers the SSLRequest: the cancel is not sent yet.
    const server = await fakeServer(() => {});
    const sent = sendCancelRequest(target(server.port, { ssl: { rejectUnauthorized: false } }), 10_000);
    await expect.poll(() => server.connections).toBe(1);
    const started = performance.now();
    sent.destroy();
    await sent.settled;
    expect(performance.now() - started).toBeLessThan(cancelGraceMs - 10);
    expect((await server.received).bytes).toEqual(sslRequest);
  });

  // PgBouncer before 1.19.1 can close an unrelated client when a cancel's connection is closed by
  // its sender before PgBouncer has finished with it (pgbouncer#801): a cancel sent is given a short
  // grace to be closed by the server, when it is done with it, before it is cut.
  it("is closed by the server, not cut, when destroy comes after its 16 bytes and the server closes it within the grace", async () => {
    let closedByServer = false;
    let cutFirst = false;
    let sentAll: () => void = () => {};
    const bytesIn = new Promise<void>((resolve) => {
      sentAll = resolve;
    });
    const server = await fakeServer((socket, seen) => {
      socket.on("data", () => {
        if (seen.bytes.length < 16) return;
        sentAll();
        // The server (a pooler passing the cancel on) is done with it 20 ms later.
        setTimeout(() => {
          closedByServer = true;
          socket.end();
        }, 20);
      });
      socket.on("end", () => {
        if (!closedByServer) cutFirst = true;
      });
      socket.on("close", () => {
        if (!closedByServer) cutFirst = true;
      });
    });
    const sent = sendCancelRequest(target(server.port), 10_000);
    await bytesIn;
    const started = performance.now();
    sent.destroy();
    await sent.settled;
    expect((await server.received).bytes).toEqual(cancelPacket);
    expect(cutFirst).toBe(false);
    // Settled with the server's close, not at the end of the grace.
    expect(performance.now() - started).toBeLessThan(1000);
  });

  it("is cut by destroy after its grace when the server does not close a cancel sent", async () => {
    let sentAll: () => void = () => {};
    const bytesIn = new Promise<void>((resolve) => {
      sentAll = resolve;
    });
    const server = await fakeServer((socket, seen) => {
      socket.on("data", () => {
        if (seen.bytes.length >= 16) sentAll();
      });
    });
    const sent = sendCancelRequest(target(server.port), 10_000);
    await bytesIn;
    const started = performance.now();
    sent.destroy();
    await sent.settled;
    expect(performance.now() - started).toBeGreaterThanOrEqual(cancelGraceMs - 5);
    expect(performance.now() - started).toBeLessThan(1000);
    expect((await server.received).bytes).toEqual(cancelPacket);
  });

  it("settles when nothing listens", async () => {
    const server = await fakeServer(() => {});
    const { port } = server;
    const [listening] = servers.splice(0);
    await new Promise((resolve) => listening?.close(resolve));
    await sendCancelRequest(target(port), 5000).settled;
  });
});
