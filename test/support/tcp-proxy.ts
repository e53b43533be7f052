import type { AddressInfo } from "node:net";
import { connect, createServer, type Server, type Socket } from "node:net";
import { Transform } from "node:stream";

/**
 * A TCP proxy in front of a local service, to cut and restore it in a test without stopping the
 * shared service other tests use: `cut()` drops every connection and refuses new ones; `stall()`
 * keeps the connections open but passes nothing on any more (a service that hangs), keeping what
 * clients send meanwhile for `stalledText()`. A connection made after `stall()` passes through (a
 * path that went silent while a new one works), unless `stall({ newConnections: true })` (a service
 * that hangs altogether: new connections are accepted and stalled too); `delayNew(ms)` holds each
 * new connection that long before it passes through (a server slow to take connections);
 * `connections()` counts the connections made to it (refused ones too), `open()` the sockets still
 * open on either side of it; `stallOn(text)` stalls the
 * first connection that sends `text` as it sends it, the chunk holding it not passed on (the network
 * fails at that moment: a transaction's `commit` never reaches the server); `retarget(port)` sends
 * new connections to another local port, those open staying where they are (a name that points to
 * another server after a failover); `hideCloses()` stops passing on the server's end of each
 * connection open now (what it sends last, its close): the client finds out when it next sends,
 * with a reset (a NAT, a load balancer or a pooler that had forgotten an idle connection).
 */
export async function startTcpProxy(firstTargetPort: number): Promise<{
  port: number;
  cut(): void;
  stall(options?: { newConnections?: boolean }): void;
  delayNew(ms: number): void;
  stallOn(text: string): void;
  retarget(port: number): void;
  hideCloses(): void;
  stalledText(): string;
  connections(): number;
  open(): number;
  restore(): void;
  close(): Promise<void>;
}> {
  let targetPort = firstTargetPort;
  const sockets = new Set<Socket>();
  const pairs = new Set<[Socket, Transform, Socket]>();
  let open = true;
  let stalled = "";
  let accepted = 0;
  let stallNew = false;
  let delayNewMs = 0;
  let stallText: string | undefined;
  const keepStalled = (client: Socket) =>
    client.on("data", (chunk: Buffer) => (stalled += chunk.toString("latin1"))).resume();
  const server: Server = createServer((client) => {
    accepted++;
    if (!open) {
      client.destroy();
      return;
    }
    if (stallNew) {
      sockets.add(client);
      client.on("close", () => sockets.delete(client));
      client.on("error", () => client.destroy());
      keepStalled(client);
      return;
    }
    if (delayNewMs > 0) {
      // What the client sends meanwhile is kept, and passed on first; read, so that a client that
      // gives up meanwhile is seen to close.
      sockets.add(client);
      client.on("close", () => sockets.delete(client));
      client.on("error", () => client.destroy());
      const held: Buffer[] = [];
      const hold = (chunk: Buffer) => held.push(chunk);
      client.on("data", hold);
      setTimeout(() => {
        client.off("data", hold);
        if (!client.destroyed) passThrough(client, held);
      }, delayNewMs);
      return;
    }
    passThrough(client);
  });
  function passThrough(client: Socket, held: Buffer[] = []): void {
    const upstream = connect(targetPort, "127.0.0.1");
    pairSockets(sockets, client, upstream);
    for (const chunk of held) upstream.write(chunk);
    const outbound = new Transform({
      transform(chunk: Buffer, _encoding, done) {
        if (stallText === undefined || !chunk.includes(stallText)) return done(null, chunk);
        stallText = undefined;
        stallPair(pair);
        stalled += chunk.toString("latin1");
        done();
      },
    });
    client.pipe(outbound).pipe(upstream);
    upstream.pipe(client);
    const pair: [Socket, Transform, Socket] = [client, outbound, upstream];
    pairs.add(pair);
    client.on("close", () => pairs.delete(pair));
  }
  function stallPair([client, outbound, upstream]: [Socket, Transform, Socket]): void {
    client.unpipe(outbound);
    upstream.unpipe(client);
    keepStalled(client);
  }
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as AddressInfo).port,
    cut() {
      open = false;
      for (const socket of sockets) socket.destroy();
    },
    stall(options = {}) {
      stallNew = options.newConnections ?? false;
      for (const pair of pairs) stallPair(pair);
    },
    delayNew(ms) {
      delayNewMs = ms;
    },
    stallOn(text) {
      stallText = text;
    },
    retarget(port) {
      targetPort = port;
    },
    hideCloses() {
      for (const [client, , upstream] of pairs) {
        upstream.unpipe(client);
        upstream.resume();
        client.on("data", () => {
          if (upstream.readableEnded || upstream.destroyed) client.resetAndDestroy();
        });
      }
    },
    stalledText: () => stalled,
    connections: () => accepted,
    open: () => sockets.size,
    restore() {
      open = true;
      stallNew = false;
      delayNewMs = 0;
      stallText = undefined;
    },
    async close() {
      open = false;
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/**
 * Keeps `client` and `upstream`, a connection passed through, in `sockets` while they are open
 * (for a stop to destroy), and ends both when either fails.
 */
export function pairSockets(sockets: Set<Socket>, client: Socket, upstream: Socket): void {
  for (const socket of [client, upstream]) {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => {
      client.destroy();
      upstream.destroy();
    });
  }
}
