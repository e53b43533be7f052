import { connect, type Socket } from "node:net";

export interface HeldAnswer {
  status: number;
  headers: Record<string, string>;
  body: Record<string, unknown>;
}

export interface HeldUpload {
  socket: Socket;
  /** Everything the gateway sent on the connection. */
  received(): string;
  /** The first answer on the connection, a JSON one (rejects after 10 s without one). */
  answer: Promise<HeldAnswer>;
  /** The connection closed. */
  closed: Promise<void>;
}

/**
 * Opens a connection of its own to `url` (the gateway's) and sends the head of a POST to `path`
 * with `authorization: Bearer <bearer>` and a JSON content type, `headers` below them, then `body`,
 * which may be only a part of the one the head announces: the rest is never sent unless the caller
 * writes it on `socket`.
 */
export function openUpload(
  url: string,
  path: string,
  bearer: string,
  headers: string[],
  body = "",
): HeldUpload {
  const socket = connect(Number(new URL(url).port), "127.0.0.1");
  socket.on("error", () => {});
  let received = "";
  const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  const answer = new Promise<HeldAnswer>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no answer in 10 s; received ${received}`)), 10_000);
    socket.on("data", (chunk: Buffer) => {
      received += chunk.toString("latin1");
      // A `100 Continue` comes before the answer.
      const start = received.replace(/^HTTP\/1\.1 100 Continue\r\n\r\n/, "");
      const end = start.indexOf("\r\n\r\n");
      if (end < 0) return;
      const [statusLine, ...lines] = start.slice(0, end).split("\r\n");
      const fields = Object.fromEntries(
        lines.map((line) => [
          line.slice(0, line.indexOf(":")).toLowerCase(),
          line.slice(line.indexOf(":") + 1).trim(),
        ]),
      );
      const length = Number(fields["content-length"]);
      if (start.length < end + 4 + length) return;
      clearTimeout(timer);
      resolve({
        status: Number(statusLine?.split(" ")[1]),
        headers: fields,
        body: JSON.parse(start.slice(end + 4, end + 4 + length)) as Record<string, unknown>,
      });
    });
  });
  answer.catch(() => {});
  socket.write(
    `POST ${path} HTTP/1.1\r\nhost: x\r\n` +
      `authorization: Bearer ${bearer}\r\ncontent-type: application/json\r\n` +
      `${headers.map((line) => `${line}\r\n`).join("")}\r\n${body}`,
  );
  return { socket, received: () => received, answer, closed };
}

/** Waits until `check` holds, checking every 5 ms; throws naming `what` after 5 s. */
export async function until(check: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 5000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}
