import { createServer, type Server, type ServerResponse } from "node:http";
import { connect, createServer as createNetServer } from "node:net";
import { Worker } from "node:worker_threads";
import { afterEach, describe, expect, it } from "vitest";
import { collectGarbage } from "../../test/support/garbage-collection.js";
import { onRefusal } from "../deadline-refusal.js";
import { GatewayError } from "../errors.js";
import { refusedAnswerWaitMs, trackConnections } from "./connection-drain.js";
import { sendRawError } from "./send.js";

describe("trackConnections", () => {
  let server: Server | undefined;
  afterEach(async () => {
    server?.closeAllConnections();
    await new Promise((resolve) => server?.close(resolve));
    server = undefined;
  });

  // A response pipelined behind an unfinished one is linked to it (for the drain's refusals). The
  // link outlived the answer ahead: on a keep-alive connection whose client always has a request
  // in flight behind another, every response ever answered on it stayed reachable from the last.
  it("holds none of a connection's finished pipelined answers while the connection stays open", async () => {
    const answered: WeakRef<ServerResponse>[] = [];
    server = createServer();
    const drain = trackConnections(server, "connection");
    let unanswered: ServerResponse | undefined;
    server.on("request", (request, response) => {
      if (!drain.admitRequest(request, response)) return;
      answered.push(new WeakRef(response));
      // Each answer waits for the request behind it: the client always has two in flight.
      unanswered?.end("ok");
      unanswered = response;
    });
    await new Promise<void>((resolve) => server?.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as { port: number };
    const socket = connect(port, "127.0.0.1");
    let received = "";
    socket.on("data", (chunk) => {
      received += chunk;
    });
    const answers = () => received.split("HTTP/1.1 200").length - 1;
    const until = async (done: () => boolean) => {
      const by = Date.now() + 5000;
      while (!done() && Date.now() < by) await new Promise((resolve) => setTimeout(resolve, 1));
    };
    const count = 200;
    socket.write("GET / HTTP/1.1\r\nhost: x\r\n\r\n");
    for (let sent = 1; sent < count; sent++) {
      socket.write("GET / HTTP/1.1\r\nhost: x\r\n\r\n");
      await until(() => answers() >= sent);
    }
    unanswered?.end("ok");
    unanswered = undefined;
    await until(() => answers() >= count);
    expect(answers()).toBe(count);
    expect(answered.length).toBe(count);
    await new Promise((resolve) => setTimeout(resolve, 20));
    collectGarbage();
    // The connection is still open: only its last answer may be held.
    expect(socket.destroyed).toBe(false);
    expect(answered.filter((response) => response.deref() !== undefined).length).toBeLessThanOrEqual(1);
    socket.destroy();
  });
  // A connection closed after an early answer lingers (reading what its client still sends) for up
  // to 2 s; a drain must not wait on it: cut at the deadline like any connection still busy.
  it("cuts a connection lingering after an early answer at the deadline", async () => {
    server = createServer();
    const drain = trackConnections(server, "connection");
    // Node reports each further chunk the parser refuses: answered once, as the app does.
    server.on("clientError", (_error, socket) => {
      if (!socket.writableEnded)
        sendRawError(socket, new GatewayError("BAD_REQUEST", "not HTTP/1.1"), "req-1");
    });
    await new Promise<void>((resolve) => server?.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as { port: number };
    const socket = connect({ port, host: "127.0.0.1", allowHalfOpen: true });
    socket.on("error", () => {});
    let received = "";
    const answered = new Promise<void>((resolve) =>
      socket.on("data", (chunk) => {
        received += chunk;
        resolve();
      }),
    );
    socket.write("POST / HTTP/1.1\r\nhost: x\r\nx-bad: a\u0001b\r\ncontent-length: 1000000\r\n\r\n");
    await answered;
    // The client keeps sending its body and never closes: only the cut ends the connection.
    const sending = setInterval(() => socket.writable && socket.write(Buffer.alloc(1024)), 5);
    const hurry = new AbortController();
    const drained = drain.drain(60_000, hurry.signal);
    hurry.abort();
    const end = await drained;
    clearInterval(sending);
    expect(received).toMatch(/^HTTP\/1\.1 400 /);
    expect(end).toEqual({ refused: 0, cut: 1 });
    socket.destroy();
  });

  // A connection the kernel completed while the event loop was busy (a storm's calls, a stall) waits
  // in the listener's backlog until Node accepts it, its client's request already sent; libuv
  // accepts one a loop iteration, so under load several wait. Closing the listener at the drain's
  // start reset them, unread: calls sent before the shutdown began, left without an answer, which
  // their clients cannot tell from calls lost once processed. A drain started in an I/O callback (a
  // signal's, a socket's), after the poll phase's accept, is the harder case.
  for (const startedIn of ["a callback of its own", "an I/O callback"] as const)
    it(`answers the requests sent before the drain on connections not accepted yet (drain started in ${startedIn})`, async () => {
      server = createServer();
      const drain = trackConnections(server, "connection");
      server.on("request", (request, response) => {
        if (!drain.admitRequest(request, response)) return;
        request.resume();
        request.on("end", () => response.end("ok"));
      });
      await new Promise<void>((resolve) => server?.listen(0, "127.0.0.1", resolve));
      const { port } = server.address() as { port: number };
      // The clients run on a thread of their own, as they would in a process of their own: told to
      // go, they connect and send their requests while this thread's event loop is held
      // (Atomics.wait) until all are sent, so the server accepts none of them.
      const clients = 5;
      const flags = new Int32Array(new SharedArrayBuffer(8));
      const [go, sent] = [0, 1];
      const worker = new Worker(
        `const { workerData, parentPort } = require("node:worker_threads");
        const { flags, port, clients } = workerData;
        Atomics.wait(flags, ${go}, 0, 10000);
        const ends = [];
        for (let each = 0; each < clients; each++) {
          const socket = require("node:net").connect(port, "127.0.0.1");
          let received = "";
          let done = false;
          const end = (error) => {
            if (done) return;
            done = true;
            ends.push({ received, error });
            if (ends.length === clients) parentPort.postMessage(ends);
          };
          socket.on("data", (chunk) => { received += chunk; });
          socket.on("error", (error) => end(error.code));
          socket.on("close", () => end());
          socket.write("POST / HTTP/1.1\\r\\nhost: x\\r\\ncontent-length: 2\\r\\n\\r\\nhi", () => {
            if (Atomics.add(flags, ${sent}, 1) === clients - 1) Atomics.notify(flags, ${sent});
          });
        }`,
        { eval: true, workerData: { port, flags, clients } },
      );
      const ended = new Promise<Array<{ received: string; error?: string }>>((resolve) =>
        worker.once("message", resolve),
      );
      const drainOnceSent = () => {
        Atomics.store(flags, go, 1);
        Atomics.notify(flags, go);
        for (let seen = 0; seen < clients; seen = Atomics.load(flags, sent))
          Atomics.wait(flags, sent, seen, 10_000);
        return drain.drain(2000);
      };
      const trigger = createNetServer((socket) => socket.destroy());
      try {
        let drained: ReturnType<typeof drain.drain>;
        if (startedIn === "a callback of its own") drained = drainOnceSent();
        else {
          await new Promise<void>((resolve) => trigger.listen(0, "127.0.0.1", resolve));
          const { port: triggerPort } = trigger.address() as { port: number };
          drained = new Promise((resolve) => {
            trigger.once("connection", () => resolve(drainOnceSent()));
            connect(triggerPort, "127.0.0.1").on("error", () => {});
          });
        }
        const end = await drained;
        expect(Atomics.load(flags, sent), "the requests sent").toBe(clients);
        const ends = await ended;
        expect(ends.filter(({ error }) => error !== undefined)).toEqual([]);
        for (const { received } of ends) {
          expect(received).toMatch(/^HTTP\/1\.1 200 /);
          expect(received).toMatch(/\r\nconnection: close\r\n/i);
        }
        expect(end).toEqual({ refused: 0, cut: 0 });
        // The listener is closed all the same.
        const refused = await new Promise((resolve) =>
          connect(port, "127.0.0.1")
            .on("error", (e: NodeJS.ErrnoException) => resolve(e.code))
            .on("connect", () => resolve("connected")),
        );
        expect(refused).toBe("ECONNREFUSED");
      } finally {
        trigger.close();
        await worker.terminate();
      }
    });

  /**
   * A server whose one call, when refused, answers 503 after `answerAfterMs` (an admin call whose
   * query waits for the server to confirm its cancel), or never; the drain starts at its deadline
   * once the call is in. Returns the drain's end, how long it took, and what the client received.
   */
  async function refusedAnswering(answerAfterMs: number | "never") {
    server = createServer();
    const drain = trackConnections(server, "connection");
    server.on("request", (request, response) => {
      if (!drain.admitRequest(request, response)) return;
      onRefusal(response, () => {
        if (answerAfterMs !== "never")
          setTimeout(() => response.writeHead(503).end("refused"), answerAfterMs);
      });
    });
    await new Promise<void>((resolve) => server?.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as { port: number };
    const socket = connect(port, "127.0.0.1");
    socket.on("error", () => {});
    let received = "";
    socket.on("data", (chunk) => {
      received += chunk;
    });
    const closed = new Promise((resolve) => socket.on("close", resolve));
    const arrived = new Promise((resolve) => server?.once("request", resolve));
    socket.write("GET / HTTP/1.1\r\nhost: x\r\n\r\n");
    await arrived;
    const started = performance.now();
    const end = await drain.drain(0);
    const tookMs = performance.now() - started;
    await closed;
    return { end, tookMs, received };
  }

  // The admin API's answer to a refused call waits for PostgreSQL to stop its query (its write is
  // then not made): a cancel, a rollback and the answer, which on a loaded machine took up to 95 ms
  // of the 100 the wait once was, and the connection was cut without the 503.
  it("waits for a refused call's answer that takes a while, and no longer", async () => {
    const { end, tookMs, received } = await refusedAnswering(150);
    expect(received).toMatch(/^HTTP\/1\.1 503 /);
    expect(end).toEqual({ refused: 1, cut: 0 });
    expect(tookMs).toBeLessThan(refusedAnswerWaitMs);
  });

  it("cuts a refused call that does not answer within the wait", async () => {
    const { end, tookMs, received } = await refusedAnswering("never");
    expect(received).toBe("");
    expect(end).toEqual({ refused: 1, cut: 0 });
    expect(tookMs).toBeGreaterThanOrEqual(refusedAnswerWaitMs - 5);
    expect(tookMs).toBeLessThan(refusedAnswerWaitMs + 500);
  });
});
