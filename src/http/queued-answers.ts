import type { ServerResponse } from "node:http";
import type { Socket } from "node:net";

/**
 * Node gives the answer to a request pipelined behind another on its connection no socket until
 * the answers ahead of it are sent (`response.socket` is null meanwhile), and, before
 * nodejs/node#62534, no `close` either when the client leaves first. What waits for such an
 * answer's end watches its connection's `close` instead, through here: one listener on the
 * connection for all of them (a client pipelining a dozen calls put a `close` listener per call
 * and per watcher on it, and Node warned of a leak past ten).
 */
const waitingOn = new WeakMap<Socket, Set<() => void>>();

/** Runs `listener` when `socket` closes (once), unless `offConnectionClose` takes it back first. */
export function onConnectionClose(socket: Socket, listener: () => void): void {
  let listeners = waitingOn.get(socket);
  if (!listeners) {
    const added = new Set<() => void>();
    listeners = added;
    waitingOn.set(socket, added);
    socket.once("close", () => {
      waitingOn.delete(socket);
      // A listener may take itself, or another, back as it runs: a Set skips what was deleted.
      for (const waiting of added) waiting();
    });
  }
  listeners.add(listener);
}

export function offConnectionClose(socket: Socket, listener: () => void): void {
  waitingOn.get(socket)?.delete(listener);
}

/**
 * The connection of an answer still queued behind another on it (Node gives it no socket until the
 * answers ahead are sent), whose close stands for the answer's own; null for an answer with its
 * socket, which hears `close` itself.
 */
export function queuedConnection(response: ServerResponse): Socket | null {
  return response.socket === null ? response.req.socket : null;
}

/**
 * Runs `listener` once, when `response` closes, or, for an answer still queued behind another on
 * its connection, when the connection closes first. An answer with its socket (every request not
 * pipelined behind another) costs one comparison more than a plain `once("close")`.
 */
export function onceAnswerCloses(response: ServerResponse, listener: () => void): void {
  const queuedOn = queuedConnection(response);
  if (queuedOn === null) {
    response.once("close", listener);
    return;
  }
  const once = () => {
    response.off("close", once);
    offConnectionClose(queuedOn, once);
    listener();
  };
  response.once("close", once);
  onConnectionClose(queuedOn, once);
}
