import { Agent, createServer, request as httpRequest, type Server } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { sendJson } from "./send.js";

describe("closeIfBodyUnread", () => {
  let server: Server | undefined;
  afterEach(async () => {
    server?.closeAllConnections();
    await new Promise((resolve) => server?.close(resolve));
  });

  it("leaves no listener on a kept-alive connection per refused chunked request once its body ended", async () => {
    const sockets = new Set<Socket>();
    // Answers before reading the body, as a refusal does (401, 404, …).
    server = createServer((request, response) => {
      sockets.add(request.socket);
      sendJson(response, 401, { error: "no" });
    });
    await new Promise<void>((resolve) => server?.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as AddressInfo;
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const send = () =>
      new Promise<number>((resolve, reject) => {
        const outgoing = httpRequest(
          {
            port,
            host: "127.0.0.1",
            method: "POST",
            path: "/",
            agent,
            headers: { "transfer-encoding": "chunked" },
          },
          (response) => {
            response.resume();
            response.on("end", () => resolve(response.statusCode ?? 0));
          },
        );
        outgoing.on("error", reject);
        outgoing.end('{"model":"x"}');
      });
    const closeListeners = () => [...sockets].map((socket) => socket.listenerCount("close"));
    await send();
    await new Promise((resolve) => setTimeout(resolve, 20));
    const after = closeListeners();
    for (let index = 0; index < 20; index++) expect(await send()).toBe(401);
    await new Promise((resolve) => setTimeout(resolve, 20));
    agent.destroy();
    // One connection, served every request, and holds no more listeners than after the first.
    expect(sockets.size).toBe(1);
    expect(closeListeners()).toEqual(after);
  });
});
