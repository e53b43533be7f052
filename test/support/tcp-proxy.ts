import type { AddressInfo } from "node:net";
import { connect, createServer, type Server, type Socket } from "node:net";

/**
 * A TCP proxy in front of a local service, to cut and restore it in a test without stopping the
 * shared service other tests use: `cut()` drops every connection and refuses new ones; `stall()`
 * keeps the connections open but passes nothing on any more (a service that hangs), keeping what
 * clients send meanwhile for `stalledText()`; `hang()` also holds new connections that way, open
 * and unanswered (a server that stopped answering), until `restore()` lets new ones through again.
 */
export async function startTcpProxy(targetPort: number): Promise<{
  port: number;
  cut(): void;
  stall(): void;
  hang(): void;
  stalledText(): string;
  restore(): void;
  close(): Promise<void>;
}> {
  const sockets = new Set<Socket>();
  const pairs = new Set<[Socket, Socket]>();
  let open = true;
  let holding = false;
  let stalled = "";
  const server: Server = createServer((client) => {
    if (!open) {
      client.destroy();
      return;
    }
    if (holding) {
      sockets.add(client);
      client.on("close", () => sockets.delete(client));
      client.on("error", () => client.destroy());
      client.on("data", (chunk: Buffer) => (stalled += chunk.toString("latin1")));
      return;
    }
    const upstream = connect(targetPort, "127.0.0.1");
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on("close", () => sockets.delete(socket));
      socket.on("error", () => {
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream).pipe(client);
    const pair: [Socket, Socket] = [client, upstream];
    pairs.add(pair);
    client.on("close", () => pairs.delete(pair));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  function stall(): void {
    for (const [client, upstream] of pairs) {
      client.unpipe(upstream);
      upstream.unpipe(client);
      client.on("data", (chunk: Buffer) => (stalled += chunk.toString("latin1"))).resume();
    }
  }
  return {
    port: (server.address() as AddressInfo).port,
    cut() {
      open = false;
      for (const socket of sockets) socket.destroy();
    },
    stall,
    hang() {
      holding = true;
      stall();
    },
    stalledText: () => stalled,
    restore() {
      open = true;
      holding = false;
    },
    async close() {
      open = false;
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
