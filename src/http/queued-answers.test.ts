import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { type AddressInfo, connect, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { onceAnswerCloses } from "./queued-answers.js";

type Server = ReturnType<typeof createServer>;
const servers: Server[] = [];

afterEach(async () => {
  for (const server of servers.splice(0)) {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

/**
 * A server that answers `/slow` after 300 ms and anything else at once, each answer watched with
 * `onceAnswerCloses`: `closed` lists the paths in the order their listener ran, and `queued` those
 * Node had queued behind another answer when they arrived.
 */
async function watchingServer() {
  const closed: string[] = [];
  const queued: string[] = [];
  const sockets: Socket[] = [];
  const server = createServer((request: IncomingMessage, response: ServerResponse) => {
    const path = request.url ?? "";
    if (response.socket === null) queued.push(path);
    else sockets.push(response.socket as Socket);
    onceAnswerCloses(response, () => closed.push(path));
    request.resume();
    if (path === "/slow") setTimeout(() => response.end("slow"), 300);
    else response.end(path);
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const client = connect((server.address() as AddressInfo).port, "127.0.0.1");
  client.on("error", () => {});
  const get = (paths: string[]) =>
    client.write(paths.map((path) => `GET ${path} HTTP/1.1\r\nhost: x\r\n\r\n`).join(""));
  return { closed, queued, sockets, client, get };
}

const wait = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("onceAnswerCloses", () => {
  it("runs for an answer still queued when its client leaves, and for the one ahead of it, once each", async () => {
    const { closed, queued, client, get } = await watchingServer();
    get(["/slow", "/a", "/b"]);
    await wait(100);
    expect(queued).toEqual(["/a", "/b"]);
    client.destroy();
    await wait(100);
    expect(closed.sort()).toEqual(["/a", "/b", "/slow"]);
  });

  it("runs once for a queued answer that was sent, not again when the connection closes", async () => {
    const { closed, queued, client, get } = await watchingServer();
    get(["/slow", "/a"]);
    await wait(500);
    expect(queued).toEqual(["/a"]);
    expect(closed).toEqual(["/slow", "/a"]);
    client.destroy();
    await wait(100);
    expect(closed).toEqual(["/slow", "/a"]);
  });

  // One listener per connection, not per queued answer: past ten, Node warned of a leak.
  it("puts one close listener on the connection for a dozen queued answers", async () => {
    const { queued, sockets, client, get } = await watchingServer();
    const warnings: Error[] = [];
    const onWarning = (warning: Error) => warnings.push(warning);
    process.on("warning", onWarning);
    try {
      get(["/slow", ...Array.from({ length: 12 }, (_, index) => `/${index}`)]);
      await wait(100);
      expect(queued).toHaveLength(12);
      const [socket] = sockets;
      const before = socket?.listenerCount("close") ?? 0;
      get(["/twelve", "/thirteen"]);
      await wait(50);
      expect(socket?.listenerCount("close")).toBe(before);
      client.destroy();
      await wait(50);
      expect(warnings.filter((warning) => warning.name === "MaxListenersExceededWarning")).toEqual([]);
    } finally {
      process.off("warning", onWarning);
    }
  });
});
