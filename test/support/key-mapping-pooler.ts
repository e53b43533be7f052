import { randomInt } from "node:crypto";
import { type AddressInfo, connect, createServer, type Server, type Socket } from "node:net";

/** A CancelRequest's code (PostgreSQL's protocol, "Canceling Requests in Progress"). */
export const cancelRequestCode = 80877102;

/** A connection made to the pooler: a session (a startup message and what follows) or a cancel. */
export type PoolerConnection =
  | { kind: "session" }
  | {
      kind: "cancel";
      bytes: Buffer;
      processID: number;
      secretKey: number;
      reachedServer: boolean;
      /**
       * Whether the client closed the cancel's connection before the pooler was done with it and
       * closed it: what PgBouncer before 1.19.1 mishandles (pgbouncer#801).
       */
      cutByClient: boolean;
    };

/**
 * A stand-in for a connection pooler (PgBouncer) in front of the local PostgreSQL: every session
 * passes through, except that the backend key the server hands out (BackendKeyData, `K`) is replaced
 * by one of the pooler's own, a process id no server process can have (above Linux's 2^22) and a
 * random secret, as a pooler's clients see its ids, not the server's. A CancelRequest naming one of
 * its keys is passed on with the server's; one naming another is dropped, as PgBouncer does.
 * `connections()` lists what came in, in order. No TLS: an SSLRequest is answered `N`.
 */
export async function startKeyMappingPooler(targetPort: number): Promise<{
  port: number;
  connections(): PoolerConnection[];
  /** The sessions whose connections are open. */
  openSessions(): number;
  /**
   * From now on the cancels that come are held: neither passed on nor closed until the function
   * returned is called, which closes their connections as the pooler does once it is done with one.
   */
  holdCancels(): () => void;
  /** The pooler's key for the server's backend `processID`. */
  keyOf(processID: number): { processID: number; secretKey: number } | undefined;
  close(): Promise<void>;
}> {
  const seen: PoolerConnection[] = [];
  const sockets = new Set<Socket>();
  let openSessions = 0;
  /** The cancels held (`holdCancels`), each closed by the pooler when released; null: none held. */
  let held: Array<() => void> | null = null;
  /** The pooler's keys, by its process id: the server's behind each. */
  const keys = new Map<number, { secretKey: number; server: { processID: number; secretKey: number } }>();
  let nextProcessID = 5_000_000;
  const track = (socket: Socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => socket.destroy());
  };

  const server: Server = createServer((client) => {
    track(client);
    let head = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      head = Buffer.concat([head, chunk]);
      if (head.length < 8) return;
      const length = head.readInt32BE(0);
      const code = head.readInt32BE(4);
      if (code === 80877103 && length === 8) {
        // SSLRequest: no TLS here; the client goes on in plain text (or gives up).
        head = head.subarray(8);
        client.write("N");
        return;
      }
      if (code === cancelRequestCode) {
        if (head.length < 16) return;
        client.off("data", onData);
        cancel(client, head.subarray(0, 16));
        return;
      }
      client.off("data", onData);
      seen.push({ kind: "session" });
      session(client, head);
    };
    client.on("data", onData);
  });

  function cancel(client: Socket, bytes: Buffer): void {
    const processID = bytes.readInt32BE(8);
    const secretKey = bytes.readInt32BE(12);
    const key = keys.get(processID);
    const reachedServer = key !== undefined && key.secretKey === secretKey;
    const record = {
      kind: "cancel" as const,
      bytes: Buffer.from(bytes),
      processID,
      secretKey,
      reachedServer,
      cutByClient: false,
    };
    seen.push(record);
    let closing = false;
    const close = () => {
      closing = true;
      client.destroy();
    };
    // The client's end (or reset) before the pooler closed it.
    client.on("end", () => {
      if (!closing) record.cutByClient = true;
    });
    client.on("close", () => {
      if (!closing) record.cutByClient = true;
    });
    client.resume();
    if (held) {
      held.push(close);
      return;
    }
    if (!key || !reachedServer) {
      close();
      return;
    }
    const forwarded = Buffer.alloc(16);
    forwarded.writeInt32BE(16, 0);
    forwarded.writeInt32BE(cancelRequestCode, 4);
    forwarded.writeInt32BE(key.server.processID, 8);
    forwarded.writeInt32BE(key.server.secretKey, 12);
    const upstream = connect(targetPort, "127.0.0.1");
    track(upstream);
    upstream.on("connect", () => upstream.write(forwarded));
    // The server closes the cancel's connection once it has acted on it: so does the pooler then.
    upstream.on("close", close);
    upstream.resume();
  }

  function session(client: Socket, first: Buffer): void {
    openSessions++;
    client.on("close", () => openSessions--);
    const upstream = connect(targetPort, "127.0.0.1");
    track(upstream);
    upstream.on("close", () => client.destroy());
    client.on("close", () => upstream.destroy());
    upstream.write(first);
    client.pipe(upstream);
    // The server's messages, each a type byte and an Int32 length: BackendKeyData's key replaced.
    let pending = Buffer.alloc(0);
    upstream.on("data", (chunk: Buffer) => {
      pending = Buffer.concat([pending, chunk]);
      let at = 0;
      while (pending.length - at >= 5) {
        const size = 1 + pending.readInt32BE(at + 1);
        if (pending.length - at < size) break;
        const message = Buffer.from(pending.subarray(at, at + size));
        if (message[0] === 0x4b && size === 13) {
          const server = { processID: message.readInt32BE(5), secretKey: message.readInt32BE(9) };
          const processID = nextProcessID++;
          const secretKey = randomInt(-(2 ** 31), 2 ** 31 - 1);
          keys.set(processID, { secretKey, server });
          message.writeInt32BE(processID, 5);
          message.writeInt32BE(secretKey, 9);
        }
        client.write(message);
        at += size;
      }
      pending = pending.subarray(at);
    });
  }

  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as AddressInfo).port,
    connections: () => [...seen],
    openSessions: () => openSessions,
    holdCancels() {
      const holding: Array<() => void> = [];
      held = holding;
      return () => {
        if (held === holding) held = null;
        for (const close of holding) close();
      };
    },
    keyOf(processID) {
      for (const [pooled, key] of keys)
        if (key.server.processID === processID) return { processID: pooled, secretKey: key.secretKey };
      return undefined;
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
