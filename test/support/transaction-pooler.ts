import { type AddressInfo, connect, createServer, type Server, type Socket } from "node:net";

/** PostgreSQL's protocol 3.0 startup code, and the SSLRequest's. */
const protocol3 = 196608;
const sslRequestCode = 80877103;

/** A server connection of the pooler's, and the backend behind it. */
interface ServerConnection {
  socket: Socket;
  processID: number;
  /** The client whose transaction runs on it, if any. */
  linked: ClientSession | undefined;
}

interface ClientSession {
  socket: Socket;
  /** Whole messages it sent that wait for a server connection. */
  waiting: Buffer[];
  server: ServerConnection | undefined;
}

/**
 * A stand-in for a pooler in transaction mode (PgBouncer's `pool_mode = transaction`) in front of
 * the local PostgreSQL, with no PgBouncer needed: it opens `poolSize` server connections of its own
 * (with the first client's startup message: a trust login), answers each client's startup itself,
 * and hands each client transaction (from its first message to the server's ReadyForQuery outside
 * a transaction, `Z` `I`) to the next server connection in turn (PgBouncer's
 * `server_round_robin = 1`), so what a client leaves on a session stays on a server connection the
 * other clients' transactions use, and two transactions of one client run on two sessions. A
 * client's Terminate is not passed on; a client gone in the middle of a transaction closes its
 * server connection (the server rolls it back), as PgBouncer does. No TLS (an SSLRequest is
 * answered `N`), no cancels. `serverProcessIDs()` names the backends behind it.
 */
export async function startTransactionPooler(
  targetPort: number,
  poolSize: number,
  /**
   * `droppingOptions`: the server connections log in without the client's `options` startup
   * parameter, as PgBouncer does with `options` in its `ignore_startup_parameters`.
   */
  behaviour: { droppingOptions?: boolean } = {},
): Promise<{ port: number; serverProcessIDs(): number[]; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const servers: ServerConnection[] = [];
  const queue: ClientSession[] = [];
  let opening: Promise<void> | undefined;
  let turn = 0;
  const track = (socket: Socket) => {
    // Each message is written on its own: without this, Nagle's algorithm holds many of them.
    socket.setNoDelay(true);
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => socket.destroy());
  };

  /** Opens the pool's server connections, once, with a client's startup message. */
  const openServers = (startup: Buffer) =>
    (opening ??= Promise.all(
      Array.from({ length: poolSize }, async () => {
        const server = await openServer(targetPort, startup);
        track(server.socket);
        servers.push(server);
        reading(server.socket, (message) => fromServer(server, message));
        server.socket.on("close", () => {
          servers.splice(servers.indexOf(server), 1);
          server.linked?.socket.destroy();
        });
      }),
    ).then(() => {}));

  const fromServer = (server: ServerConnection, message: Buffer) => {
    const client = server.linked;
    if (!client) return;
    client.socket.write(message);
    // ReadyForQuery outside a transaction: the transaction is over, the connection goes back.
    if (message[0] === 0x5a && message[5] === 0x49) {
      server.linked = undefined;
      client.server = undefined;
      dispatch();
      if (client.waiting.length > 0) ask(client);
    }
  };

  /** Gives waiting clients the free server connections, each the next one in turn. */
  const dispatch = () => {
    while (queue.length > 0) {
      let free: ServerConnection | undefined;
      for (let step = 0; step < servers.length && !free; step++) {
        const candidate = servers[(turn + step) % servers.length];
        if (candidate && !candidate.linked) {
          free = candidate;
          turn = (turn + step + 1) % servers.length;
        }
      }
      if (!free) return;
      const client = queue.shift() as ClientSession;
      free.linked = client;
      client.server = free;
      for (const message of client.waiting.splice(0)) free.socket.write(message);
    }
  };

  const ask = (client: ClientSession) => {
    if (client.server) {
      for (const message of client.waiting.splice(0)) client.server.socket.write(message);
    } else if (!queue.includes(client)) {
      queue.push(client);
      dispatch();
    }
  };

  const server: Server = createServer((socket) => {
    track(socket);
    const client: ClientSession = { socket, waiting: [], server: undefined };
    socket.on("close", () => {
      const queued = queue.indexOf(client);
      if (queued >= 0) queue.splice(queued, 1);
      // Gone in the middle of a transaction: its server connection cannot be handed on.
      client.server?.socket.destroy();
    });
    let head = Buffer.alloc(0);
    const onStartup = (chunk: Buffer) => {
      head = Buffer.concat([head, chunk]);
      if (head.length < 8 || head.length < head.readInt32BE(0)) return;
      const length = head.readInt32BE(0);
      const code = head.readInt32BE(4);
      if (code === sslRequestCode) {
        head = head.subarray(8);
        socket.write("N");
        return;
      }
      socket.off("data", onStartup);
      if (code !== protocol3) {
        socket.destroy();
        return;
      }
      const sent = head.subarray(0, length);
      const startup = behaviour.droppingOptions ? withoutParameter(sent, "options") : sent;
      const rest = head.subarray(length);
      void openServers(startup).then(
        () => {
          socket.write(
            Buffer.concat([
              message("R", int32(0)),
              message("K", Buffer.concat([int32(7_000_000), int32(1)])),
              message("Z", Buffer.from("I")),
            ]),
          );
          reading(socket, (sent) => {
            // Terminate: the client goes, its server connection stays the pool's.
            if (sent[0] === 0x58) return;
            client.waiting.push(sent);
            ask(client);
          });
          if (rest.length > 0) socket.emit("data", rest);
        },
        () => socket.destroy(),
      );
    };
    socket.on("data", onStartup);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as AddressInfo).port,
    serverProcessIDs: () => servers.map((each) => each.processID),
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** A server connection logged in with `startup` (trust), once the server is ready for queries. */
function openServer(port: number, startup: Buffer): Promise<ServerConnection> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1");
    let processID = 0;
    socket.once("error", reject);
    socket.once("connect", () => socket.write(startup));
    const stop = reading(socket, (received) => {
      const type = String.fromCharCode(received[0] ?? 0);
      if (type === "K") processID = received.readInt32BE(5);
      else if (type === "R" && received.readInt32BE(5) !== 0)
        reject(new Error("the server asks for a password"));
      else if (type === "E")
        reject(new Error(`the server refused the login: ${received.toString("latin1")}`));
      else if (type === "Z") {
        stop();
        socket.off("error", reject);
        resolve({ socket, processID, linked: undefined });
      }
    });
  });
}

/** Calls `each` with every whole message (type byte, length, body) `socket` sends; returns a stop. */
function reading(socket: Socket, each: (message: Buffer) => void): () => void {
  let pending = Buffer.alloc(0);
  const onData = (chunk: Buffer) => {
    pending = Buffer.concat([pending, chunk]);
    while (pending.length >= 5) {
      const end = 1 + pending.readInt32BE(1);
      if (pending.length < end) return;
      const whole = pending.subarray(0, end);
      pending = pending.subarray(end);
      each(whole);
    }
  };
  socket.on("data", onData);
  return () => socket.off("data", onData);
}

/** A startup message (length, protocol, then name and value pairs) without the parameter `name`. */
function withoutParameter(startup: Buffer, name: string): Buffer {
  const fields = startup
    .subarray(8, startup.length - 1)
    .toString("utf8")
    .split("\0");
  const kept: string[] = [];
  for (let at = 0; at + 1 < fields.length; at += 2)
    if (fields[at] !== name) kept.push(fields[at] as string, fields[at + 1] as string);
  const body = Buffer.concat([startup.subarray(4, 8), Buffer.from(`${kept.join("\0")}\0\0`, "utf8")]);
  return Buffer.concat([int32(body.length + 4), body]);
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
