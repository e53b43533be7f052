import type { AddressInfo } from "node:net";
import { connect, createServer, type Server, type Socket } from "node:net";

/**
 * A TCP proxy in front of a local service, to cut and restore it in a test without stopping the
 * shared service other tests use: `cut()` drops every connection and refuses new ones.
 */
export async function startTcpProxy(
  targetPort: number,
): Promise<{ port: number; cut(): void; restore(): void; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  let open = true;
  const server: Server = createServer((client) => {
    if (!open) {
      client.destroy();
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
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as AddressInfo).port,
    cut() {
      open = false;
      for (const socket of sockets) socket.destroy();
    },
    restore() {
      open = true;
    },
    async close() {
      open = false;
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
