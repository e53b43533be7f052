import { connect, createServer, type Socket } from "node:net";

/**
 * A TCP relay to a Redis: every connection to it gets one of its own to `redisUrl`; what the client
 * sends goes on at once (`sent` sees it first), and each reply goes to `replied`, which passes it on
 * to the client when it will (`socket.write`).
 */
export async function redisRelay(
  redisUrl: string,
  handlers: { sent?: () => void; replied: (socket: Socket, data: Buffer) => void },
) {
  const { hostname, port } = new URL(redisUrl);
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    const upstream = connect(Number(port), hostname);
    for (const each of [socket, upstream]) {
      sockets.add(each);
      each.on("error", () => {});
      each.on("close", () => {
        socket.destroy();
        upstream.destroy();
      });
    }
    socket.on("data", (data: Buffer) => {
      handlers.sent?.();
      upstream.write(data);
    });
    upstream.on("data", (data: Buffer) => handlers.replied(socket, data));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `redis://127.0.0.1:${(server.address() as { port: number }).port}`,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

/**
 * A TCP proxy to a Redis that can hold its replies (`hold()`) until the test lets them go
 * (`release()`), and counts the round trips a client waited for: a round begins each time the
 * client sends after a reply reached it (or sends first), so commands sent together (pipelined, or
 * one script) are one round, and a command sent only once an earlier reply came back is another,
 * however the bytes are cut into chunks. Counted, not timed.
 */
export async function heldRedisReplies(redisUrl: string) {
  const held: Array<[Socket, Buffer]> = [];
  const waiting: Array<() => void> = [];
  let holding = false;
  let rounds = 0;
  let repliedSinceSent = true;
  const relay = await redisRelay(redisUrl, {
    sent() {
      if (repliedSinceSent) rounds++;
      repliedSinceSent = false;
    },
    replied(socket, data) {
      if (!holding) {
        repliedSinceSent = true;
        socket.write(data);
        return;
      }
      held.push([socket, data]);
      for (const wake of waiting.splice(0)) wake();
    },
  });
  return {
    url: relay.url,
    /** Holds every reply from now on, and counts rounds from 0. */
    hold(): void {
      holding = true;
      rounds = 0;
      repliedSinceSent = true;
    },
    /**
     * `hold()` once `client` (connected through this relay) has the answers to all it sent before:
     * a PING sent after them, answered. A command an earlier call sent without waiting for it (the
     * ZREM that gives back a place, at `finish`) was written before `hold()`, but the relay may read
     * it only after; were it read alone, its answer let go before the next call's first command,
     * that command counted as a second round.
     */
    async holdAfter(client: { ping(): Promise<unknown> }): Promise<void> {
      await client.ping();
      this.hold();
    },
    /** Resolves once a reply is held. */
    replied(): Promise<void> {
      return held.length > 0 ? Promise.resolve() : new Promise((resolve) => waiting.push(resolve));
    },
    /** Lets the replies held go on to the client. */
    release(): void {
      for (const [socket, data] of held.splice(0)) if (socket.writable) socket.write(data);
      repliedSinceSent = true;
    },
    /** Passes replies on at once again. */
    pass(): void {
      holding = false;
      this.release();
    },
    /** Rounds the client waited for since `hold()`. */
    rounds: () => rounds,
    close: relay.close,
  };
}
