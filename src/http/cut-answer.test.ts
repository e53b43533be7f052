import { createServer as createHttpServer, type ServerResponse } from "node:http";
import { createServer as createHttpsServer, request as httpsRequest } from "node:https";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { selfSigned } from "../../test/support/self-signed.js";
import { cutAnswer } from "./cut-answer.js";

type Server = ReturnType<typeof createHttpServer>;
const servers: Server[] = [];

afterEach(async () => {
  for (const server of servers.splice(0)) {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

/** When the cut comes after the answer's last write: in its tick, the next one, or later. */
const whens = [
  ["with the last write", (cut: () => void) => cut()],
  ["a tick after it", (cut: () => void) => process.nextTick(cut)],
  ["once it went out", (cut: () => void) => setTimeout(cut, 20)],
] as const;

/**
 * A server whose every answer is a chunked stream of two events, `connection` as given, cut
 * (`cutAnswer`) as `when` says after the second.
 */
async function cuttingServer(
  connection: "close" | "keep-alive",
  when: (cut: () => void) => void,
  tls?: { cert: Buffer; key: Buffer },
): Promise<string> {
  const answer = (_request: unknown, response: ServerResponse) => {
    response.writeHead(200, { "content-type": "text/event-stream", connection });
    response.write("data: 1\n\n");
    setTimeout(() => {
      response.write("data: 2\n\n");
      when(() => cutAnswer(response));
    }, 20);
  };
  const server = tls ? createHttpsServer(tls, answer) : createHttpServer(answer);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return `${tls ? "https" : "http"}://127.0.0.1:${(server.address() as AddressInfo).port}/`;
}

describe("cutAnswer", () => {
  it.each(whens)(
    "cuts a chunked answer that said Connection: close so that fetch sees the cut, %s",
    async (_when, when) => {
      // undici, Node 20's fetch, takes such an answer's close for its end, last chunk or not.
      const response = await fetch(await cuttingServer("close", when));
      expect(response.headers.get("connection")).toBe("close");
      const read = await response.text().then(
        (text) => ({ text }),
        (error: Error) => ({ cause: String(error.cause) }),
      );
      expect(read).toEqual({ cause: expect.stringContaining("Invalid character in chunk size") });
    },
  );

  it.each(whens)(
    "over TLS too: the line that breaks the framing follows every chunk written, %s",
    async (_when, when) => {
      const tls = selfSigned();
      const url = await cuttingServer("close", when, tls);
      // Node's client says which: a parse error where the line came, an abort where it did not.
      const { body, error } = await new Promise<{ body: string; error: string }>((resolve) => {
        let body = "";
        let error = "none";
        let answered = false;
        const request = httpsRequest(
          url,
          { ca: tls.cert, agent: false, servername: "localhost" },
          (response) => {
            answered = true;
            response.setEncoding("utf8");
            response.on("data", (part: string) => {
              body += part;
            });
            response.on("error", () => {});
            response.on("close", () => resolve({ body, error }));
          },
        );
        request.on("error", (failure: NodeJS.ErrnoException) => {
          error = failure.code ?? "";
        });
        // No answer at all (a failed handshake): said, rather than waited for.
        request.on("close", () => {
          if (!answered) resolve({ body, error });
        });
        request.end();
      });
      expect(body).toBe("data: 1\n\ndata: 2\n\n");
      expect(error).toBe("HPE_INVALID_CHUNK_SIZE");
    },
  );

  it("sends a kept-alive answer nothing more: its close before the last chunk says it was cut", async () => {
    const response = await fetch(await cuttingServer("keep-alive", (cut) => cut()));
    expect(response.headers.get("connection")).toBe("keep-alive");
    const read = await response.text().then(
      (text) => ({ text }),
      (error: Error) => ({ cause: String(error.cause) }),
    );
    expect(read).toEqual({ cause: expect.stringContaining("other side closed") });
  });
});
