import { mkdtempSync, rmSync } from "node:fs";
import { connect, createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pairSockets } from "./tcp-proxy.js";

/**
 * The shared PostgreSQL as a server on a Unix socket sees it: a socket file in a directory of its
 * own (`dir`, what `host=` names), passed on to 127.0.0.1:5432. `restarting()` does what a restart
 * does to the socket: the connections drop and the file is gone until `restarted()` listens again.
 */
export async function startUnixSocketPostgres(): Promise<{
  dir: string;
  restarting(): Promise<void>;
  restarted(): Promise<void>;
  close(): Promise<void>;
}> {
  const dir = mkdtempSync(join(tmpdir(), "sluice-pg-socket-"));
  const path = join(dir, ".s.PGSQL.5432");
  const sockets = new Set<Socket>();
  let server: Server | null = null;
  const listen = () =>
    new Promise<void>((resolve) => {
      server = createServer((client) => {
        const upstream = connect(5432, "127.0.0.1");
        pairSockets(sockets, client, upstream);
        client.pipe(upstream).pipe(client);
      });
      server.listen(path, resolve);
    });
  const stop = async () => {
    for (const socket of sockets) socket.destroy();
    const closing = server;
    server = null;
    // Node removes the socket file as the server closes.
    if (closing) await new Promise<void>((resolve) => closing.close(() => resolve()));
  };
  await listen();
  return {
    dir,
    restarting: stop,
    restarted: listen,
    async close() {
      await stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
