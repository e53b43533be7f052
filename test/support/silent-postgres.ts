import { type AddressInfo, createServer, type Socket } from "node:net";

/**
 * A PostgreSQL that sets a session up and then never answers a query: what a client sees of a
 * server whose backends hang, or of a pooler that authenticates clients itself and then waits for
 * a server connection it does not get. Each connection gets AuthenticationOk, BackendKeyData and
 * ReadyForQuery (protocol 3.0) in answer to its startup message; what it sends after is kept for
 * `received()` and never answered.
 */
export async function startSilentPostgres(): Promise<{
  port: number;
  received(): string;
  close(): Promise<void>;
}> {
  const sockets = new Set<Socket>();
  let received = "";
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => socket.destroy());
    let startedUp = false;
    socket.on("data", (chunk: Buffer) => {
      if (startedUp) {
        received += chunk.toString("latin1");
        return;
      }
      startedUp = true;
      socket.write(
        Buffer.concat([
          message("R", int32(0)),
          message("K", Buffer.concat([int32(4242), int32(1)])),
          message("Z", Buffer.from("I")),
        ]),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as AddressInfo).port,
    received: () => received,
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

function int32(value: number): Buffer {
  const buffer = Buffer.alloc(4);
  buffer.writeInt32BE(value);
  return buffer;
}

/** A backend message: its type byte, then its length (itself included) and body. */
function message(type: string, body: Buffer): Buffer {
  return Buffer.concat([Buffer.from(type), int32(body.length + 4), body]);
}
