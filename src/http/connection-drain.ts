import type { IncomingMessage, Server, ServerResponse } from "node:http";
import { Server as NetServer, type Socket } from "node:net";
import { refuseAtDeadline } from "../deadline-refusal.js";
import { cutConnection } from "./cut-answer.js";

/** How often a drain looks at the connections still open. */
const lookEveryMs = 25;
/**
 * How long the connections of refused calls get to send their 503 before they are cut too. Most
 * answer at once; an admin call on PostgreSQL answers once the server has stopped its query (a
 * CancelRequest, the error back, a rollback: decision 0049), which took up to 95 ms on a loaded
 * machine. The wait ends as soon as every refused connection has closed, so it costs only when a
 * call does not answer (a cancel that cannot reach the server): it is taken from the half of the
 * shutdown's margin that the rows and the flush get (`shutdownMarginMs`), leaving them half of it.
 * A cut connection still writing the line that tells its client of the cut (over TLS, behind a
 * write under way: `cutConnection`) is waited for within the same time.
 */
export const refusedAnswerWaitMs = 250;
const netClose = NetServer.prototype.close;

/**
 * Graceful close of a `node:http` server whose clients keep their connections alive. Node 20 keeps
 * saying `connection: keep-alive` after `server.close()`, so clients go on sending requests on
 * their open connections, and cutting those connections resets requests they have already sent.
 * A drain makes every connection close on its own instead, after an answer: see `drain`.
 */
export interface ConnectionDrain {
  /**
   * Called for every request before the app sees it, so also for one that arrives during the drain,
   * which makes its answer close the connection (`Connection: close`). A request pipelined behind
   * another (HTTP/1.1 lets a client send it before the answer ahead of it) is answered too: the answer
   * ahead, not begun yet, keeps the connection open for it. Returns false for a request the
   * connection can no longer answer, behind an answer that has said `close`: it is not served (RFC
   * 9112 §9.6), so its client, seeing the connection close, knows it was not processed, where it
   * would have been processed and its answer dropped.
   */
  admitRequest(request: IncomingMessage, response: ServerResponse): boolean;
  /**
   * Every response whose head is not written yet, and every later one, says `Connection: close`,
   * as in a drain, while the server still listens and no connection is closed: the shutdown delay
   * (SLUICE_SHUTDOWN_DELAY_MS). A client kept alive on this instance (behind a TCP load balancer,
   * which only stops sending it new connections) then reconnects after its next answer, through
   * the load balancer to another instance, instead of being on an idle connection the drain closes
   * as it sends a request on it (reset, its client cannot tell whether it was processed).
   */
  closeAfterAnswers(): void;
  /**
   * Stops listening, once the connections already waiting in the listener's backlog are accepted
   * (closing it would reset them and the requests they carry); every response whose head is not
   * written yet, and every later one, says `Connection: close`, and its connection closes once it
   * is sent. A connection with nothing in
   * progress (idle, or whose keep-alive answer went out before the drain) is closed once it has
   * stayed quiet, no byte received, for a look (25 ms): closing it at once could reset a request
   * its client has already sent, which it cannot tell was not processed (RFC 9112 §9.3.1). After
   * `timeoutMs`, or once `hurry` is aborted, a call whose answer has not begun is refused
   * (`refuseAtDeadline`: it answers 503 itself, within a short wait) and the rest are cut. Resolves
   * with how many calls were refused and how many connections were cut.
   */
  drain(timeoutMs: number, hurry?: AbortSignal): Promise<DrainEnd>;
}

/** How a drain ended: calls refused with 503 at the deadline, and connections cut. */
interface DrainEnd {
  refused: number;
  cut: number;
}

/**
 * Tracks the server's connections from `event`: `connection` for HTTP, `secureConnection` for
 * HTTPS (the TLS socket is the one the HTTP parser and its responses use).
 */
export function trackConnections(server: Server, event: "connection" | "secureConnection"): ConnectionDrain {
  const open = new Set<TrackedSocket>();
  /** Whether answers close their connections (`closeAfterAnswers`, or the drain). */
  let closing = false;
  /** Answers the drain made close their connection, which one pipelined behind may reopen. */
  const closedByDrain = new WeakSet<ServerResponse>();
  const closeConnectionAfter = (response: ServerResponse) => {
    // Only the drain's own close is undone: one Node decided (HTTP/1.0, `Connection: close`) stays.
    if (response.shouldKeepAlive) closedByDrain.add(response);
    response.shouldKeepAlive = false;
  };
  server.on(event, (socket: Socket) => {
    open.add(socket);
    socket.once("close", () => open.delete(socket));
  });
  /**
   * Over TLS, the connections accepted whose handshake is under way (their TCP sockets): their
   * requests come once it is done, and the drain waits for them as for an accepted plain connection
   * (`drain`). Plain HTTP has none, and pays nothing.
   */
  const handshaking = new Set<Socket>();
  if (event === "secureConnection") {
    server.on("connection", (raw: Socket) => {
      handshaking.add(raw);
      raw.once("close", () => handshaking.delete(raw));
    });
    server.on("secureConnection", (socket: Socket) => {
      // The TCP socket under the TLS one (the field Node's TLS server sets).
      const raw = (socket as Socket & { _parent?: Socket | null })._parent;
      if (raw) handshaking.delete(raw);
    });
  }

  const closeAfterAnswers = () => {
    if (closing) return;
    closing = true;
    // The last answer of each connection closes it: one pipelined ahead keeps it open for it.
    for (const socket of open) {
      const response = socket[lastResponse];
      if (response && !response.headersSent) closeConnectionAfter(response);
    }
  };

  return {
    admitRequest(request, response: TrackedResponse) {
      const socket = request.socket as TrackedSocket;
      const previous = socket[lastResponse];
      socket[lastResponse] = response;
      // Pipelined: linked to the answer ahead while that one is unfinished, and the link goes once
      // this answer is done (answers go out in order), so the chain is never longer than the
      // requests in flight on the connection. A link kept after that held every answer a client that
      // always pipelines had on the connection, for as long as it stayed open. Only a pipelined
      // request pays the listener.
      if (previous !== undefined && !previous.writableFinished) {
        response[ahead] = previous;
        response.once("close", () => {
          response[ahead] = undefined;
        });
      }
      if (!closing) return true;
      if (previous !== undefined) {
        if (!previous.headersSent && closedByDrain.has(previous)) previous.shouldKeepAlive = true;
        else if (closesConnection(previous)) {
          socket[lastResponse] = previous;
          return false;
        }
      }
      closeConnectionAfter(response);
      return true;
    },
    closeAfterAnswers,
    async drain(timeoutMs, hurry) {
      closeAfterAnswers();
      const deadline = Date.now() + timeoutMs;
      await acceptQueued(server, deadline, hurry);
      // Stops listening only: `server.close()` would also close the connections idle this moment
      // (Node >= 19), resetting a request that is on its way but not read yet.
      netClose.call(server);
      const quiet = new Map<Socket, number>();
      do {
        for (const socket of open) {
          const response = pendingResponse(socket);
          if (response && !response.writableFinished) quiet.delete(socket);
          else if (quiet.get(socket) === socket.bytesRead) socket.destroy();
          else quiet.set(socket, socket.bytesRead);
        }
        // A handshake under way is waited for (it takes round trips, the client's request follows
        // it); a connection that has sent nothing, not even its ClientHello, is closed once it has
        // stayed so for a look, as a plain one that has sent nothing.
        for (const raw of handshaking)
          if (raw.bytesRead > 0) quiet.delete(raw);
          else if (quiet.get(raw) === 0) raw.destroy();
          else quiet.set(raw, 0);
        await new Promise((resolve) => setTimeout(resolve, Math.min(lookEveryMs, deadline - Date.now())));
        // What arrived meanwhile is read (the poll phase) before the next look.
        await new Promise((resolve) => setImmediate(resolve));
      } while (open.size + handshaking.size > 0 && Date.now() < deadline && !hurry?.aborted);
      // A handshake still under way at the deadline is cut: it never got to a request.
      const cutHandshakes = handshaking.size;
      for (const raw of handshaking) raw.destroy();
      const refused = new Set<Socket>();
      /** Cut connections still writing the line that tells their clients so (cutConnection). */
      const cutWriting: Socket[] = [];
      let refusedPipelined = 0;
      for (const socket of open) {
        const response = pendingResponse(socket);
        // Calls pipelined behind the one being answered are refused first, before a cut connection
        // ends them: their answers never go out, but their rows say the gateway refused them (503),
        // not that their client left (499).
        for (let queued = socket[lastResponse]; queued && queued !== response; queued = queued[ahead])
          if (!queued.headersSent && refuseAtDeadline(queued)) refusedPipelined++;
        // A call still waiting for its answer is answered 503 rather than left without one, and its
        // answer closes the connection, even if it kept it open for a request pipelined behind it.
        if (response && !response.headersSent) response.shouldKeepAlive = false;
        if (response && !response.headersSent && refuseAtDeadline(response)) refused.add(socket);
        else {
          cutConnection(socket);
          if (!socket.destroyed) cutWriting.push(socket);
        }
      }
      const cut = open.size - refused.size + cutHandshakes;
      const answeredBy = Date.now() + refusedAnswerWaitMs;
      while (
        ([...refused].some((socket) => open.has(socket)) || cutWriting.some((socket) => !socket.destroyed)) &&
        Date.now() < answeredBy
      )
        await new Promise((resolve) => setTimeout(resolve, 5));
      server.closeAllConnections();
      // Node's own close too, which stops its timeout checks on the connections.
      server.close();
      return { refused: refused.size + refusedPipelined, cut };
    },
  };
}

/**
 * How long the drain takes the listener's queued connections for at most: four looks. One look
 * (25 ms) ran out on a loaded machine (a full test suite on two cores) with two of five queued
 * connections left, each loop turn taking ~10 ms; the turns stop sooner once one accepts none.
 */
const acceptQueuedMs = 4 * lookEveryMs;

/**
 * The most connections the kernel queues for a listener that Node has not accepted yet: Node's
 * default backlog (`server.listen`'s), which the kernel may lower (`net.core.somaxconn`).
 */
const maxQueuedConnections = 511;

/**
 * Accepts the connections the kernel has completed and queued on `server`'s listener but Node has
 * not accepted yet, before the listener closes: closing it resets them, their clients' requests
 * often sent already (and unread), which the clients cannot tell from calls lost once processed.
 * They wait there while the event loop is busy: libuv accepts one connection a loop iteration, so
 * under load a queue builds up, its oldest waiting for tens of milliseconds or more. Each turn of
 * the loop's poll phase accepts the next (the queue is first in, first out); once one accepts none,
 * none is queued. The first check only leaves the poll phase this may run in (a signal's callback,
 * a socket's), after the listener's turn. For `acceptQueuedMs` at most: connections made
 * meanwhile join the queue, and a flood of them must not keep the listener open (waiting for an
 * empty queue, a storm's drain held it until the deadline and reset ten times the connections it
 * spared); nor past the most the kernel queues, the deadline or `hurry`. A connection still queued
 * then is reset, as one made as the listener closes. The connections accepted are served as any of
 * the drain's, their answers closing them.
 */
async function acceptQueued(server: Server, deadline: number, hurry: AbortSignal | undefined): Promise<void> {
  let accepted = 0;
  // The server's own event, not the tracked one: a connection refused at once (the connection
  // caps) or still in its TLS handshake was taken from the queue all the same.
  const count = () => {
    accepted++;
  };
  server.on("connection", count);
  try {
    const until = Math.min(deadline, Date.now() + acceptQueuedMs);
    await new Promise((resolve) => setImmediate(resolve));
    for (let turns = 0; turns < maxQueuedConnections; turns++) {
      const before = accepted;
      await new Promise((resolve) => setImmediate(resolve));
      if (accepted === before || hurry?.aborted || Date.now() >= until) return;
    }
  } finally {
    server.off("connection", count);
  }
}

/** The last request's response on a connection, set by `admitRequest`. */
const lastResponse = Symbol("the connection's last response");
/** The unfinished response a pipelined request's response waits behind. */
const ahead = Symbol("the response ahead");
type TrackedResponse = ServerResponse & { [ahead]?: TrackedResponse };
type TrackedSocket = Socket & { [lastResponse]?: TrackedResponse };

/**
 * Whether `response` closes its connection once sent: its head said `Connection: close` (Node's
 * `_last`), or will, as Node decided when the request arrived (an HTTP/1.0 client, one that sent
 * `Connection: close`) or a route did.
 */
function closesConnection(response: ServerResponse): boolean {
  return response.headersSent
    ? (response as ServerResponse & { _last?: boolean })._last === true
    : !response.shouldKeepAlive;
}

/** The response Node is writing on `socket`, if any (the field Node's own idle check reads). */
function pendingResponse(socket: Socket): ServerResponse | null {
  return (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage ?? null;
}
