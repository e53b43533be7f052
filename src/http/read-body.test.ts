import { createServer, type IncomingMessage } from "node:http";
import { connect } from "node:net";
import { describe, expect, it } from "vitest";
import { readBody } from "./read-body.js";

/** Sends raw bytes to a server whose handler reads the body; resolves with what readBody did. */
async function readRaw(raw: string, maxBytes = 1024, cut = false): Promise<Buffer | Error> {
  let settle: (value: Buffer | Error) => void = () => {};
  const outcome = new Promise<Buffer | Error>((resolve) => {
    settle = resolve;
  });
  const server = createServer((request: IncomingMessage, response) => {
    readBody(request, maxBytes).then(
      (body) => {
        settle(body);
        response.end();
      },
      (error: Error) => {
        settle(error);
        response.destroy();
      },
    );
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  const socket = connect(typeof address === "object" && address ? address.port : 0, "127.0.0.1");
  socket.on("error", () => {});
  socket.write(raw);
  if (cut) setTimeout(() => socket.destroy(), 50);
  const result = await outcome;
  socket.destroy();
  await new Promise((resolve) => server.close(resolve));
  return result;
}

const head = (length: number) => `POST / HTTP/1.1\r\nhost: x\r\ncontent-length: ${length}\r\n\r\n`;

describe("readBody", () => {
  it("reads the whole body", async () => {
    expect(String(await readRaw(`${head(5)}hello`))).toBe("hello");
  });

  it("refuses a body announced or found larger than the cap with 413", async () => {
    expect(await readRaw(`${head(2000)}x`, 1024)).toMatchObject({ code: "PAYLOAD_TOO_LARGE" });
    const chunked = `POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n800\r\n${"x".repeat(2048)}\r\n0\r\n\r\n`;
    expect(await readRaw(chunked, 1024)).toMatchObject({ code: "PAYLOAD_TOO_LARGE" });
  });

  it("fails with 400 when the client leaves in the middle of the body", async () => {
    expect(await readRaw(`${head(100)}only ten b`, 1024, true)).toMatchObject({
      code: "BAD_REQUEST",
      status: 400,
    });
  });

  it("fails with 400 at once when the client left before the body was read", async () => {
    let settle: (value: unknown) => void = () => {};
    const outcome = new Promise((resolve) => {
      settle = resolve;
    });
    const server = createServer((request: IncomingMessage) => {
      // As when admission awaits I/O and the client leaves meanwhile.
      request.socket.destroy();
      setTimeout(() => readBody(request, 1024).then(settle, settle), 20);
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const address = server.address();
    const socket = connect(typeof address === "object" && address ? address.port : 0, "127.0.0.1");
    socket.on("error", () => {});
    socket.write(`${head(5)}hello`);
    expect(await outcome).toMatchObject({ code: "BAD_REQUEST", status: 400 });
    socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  });
});
