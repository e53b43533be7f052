import { createServer, type RequestListener, type Server } from "node:http";
import { type AddressInfo, createServer as createTcpServer, type Socket } from "node:net";

export interface LocalServer {
  server: Server;
  /** `http://127.0.0.1:<port>`, no trailing slash. */
  url: string;
  /** Closes it, cutting the connections still open. */
  close(): Promise<void>;
}

/** A plain HTTP server on a free loopback port, for a test's own stand-in (a provider, a store). */
export async function startLocalServer(handler: RequestListener): Promise<LocalServer> {
  const server = createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    server,
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/**
 * A plain TCP server on a free loopback port, for a stand-in that speaks another protocol (a Redis,
 * a PostgreSQL that never answers): `onSocket` gets each connection; closing cuts them.
 */
export async function startLocalTcpServer(
  onSocket: (socket: Socket) => void,
): Promise<{ port: number; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const server = createTcpServer((socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => socket.destroy());
    onSocket(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as AddressInfo).port,
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
