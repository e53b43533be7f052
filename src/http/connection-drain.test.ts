import { createServer, type Server, type ServerResponse } from "node:http";
import { connect } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { collectGarbage } from "../../test/support/garbage-collection.js";
import { GatewayError } from "../errors.js";
import { trackConnections } from "./connection-drain.js";
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
});
