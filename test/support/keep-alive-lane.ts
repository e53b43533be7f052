import { connect, type Socket } from "node:net";
import { dechunk, parseHead } from "./raw-exchange.js";

/**
 * A keep-alive client on a raw socket for test/e2e/fuzz-keep-alive-storm.test.ts: one request at a
 * time (a well-behaved `Expect: 100-continue` client waits up to 1 s for its 100), or several
 * pipelined, each answer read by its framing (content-length, chunked, or the close).
 */

export interface Reply {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
  interim: number[];
  closed: boolean;
}

export interface FuzzRequest {
  index: number;
  /** The route family the request was made for (`proxy-a`, `admin`, `raw`, …). */
  family: string;
  /** What was chosen, for the failure report. */
  note: string[];
  method: string;
  target: string;
  headers: Array<[string, string]>;
  body: Buffer;
  /** The body is sent in one chunk and the last chunk (none when empty). */
  chunked: boolean;
  /** Waits for 100 Continue (or the answer) before sending the body. */
  expectContinue: boolean;
  /** Sends no Content-Length (nor Transfer-Encoding). */
  noLength: boolean;
  /** These bytes are sent instead of a request made of the fields above. */
  raw?: Buffer;
}

/** A keep-alive connection: reopened when the gateway closed it. */
export class Lane {
  socket: Socket | null = null;
  buffer = Buffer.alloc(0);
  closed = true;
  waiter: (() => void) | null = null;
  constructor(
    readonly port: number,
    readonly timeoutMs: number,
  ) {}
  async open() {
    const socket = connect(this.port, "127.0.0.1");
    this.socket = socket;
    this.buffer = Buffer.alloc(0);
    this.closed = false;
    await new Promise<void>((resolve, reject) => {
      socket.once("connect", resolve);
      socket.once("error", reject);
    });
    socket.on("data", (chunk: Buffer) => {
      if (this.socket !== socket) return;
      this.buffer = Buffer.concat([this.buffer, chunk]);
      this.waiter?.();
    });
    const end = () => {
      if (this.socket !== socket) return;
      this.closed = true;
      this.waiter?.();
    };
    socket.on("error", end);
    socket.on("close", end);
    socket.on("end", end);
  }
  close() {
    this.socket?.destroy();
    this.socket = null;
    this.closed = true;
  }
  private wait(deadline: number): Promise<boolean> {
    return new Promise((resolve) => {
      const timer = setTimeout(
        () => {
          this.waiter = null;
          resolve(false);
        },
        Math.max(0, deadline - Date.now()),
      );
      this.waiter = () => {
        clearTimeout(timer);
        this.waiter = null;
        resolve(true);
      };
    });
  }
  /** Writes every request at once (pipelined), then reads the answers in order until one closes. */
  async pipeline(reqs: FuzzRequest[]): Promise<Array<Reply | null>> {
    this.close();
    await this.open();
    const socket = this.socket as Socket;
    socket.write(Buffer.concat(reqs.map(serializeRequest)));
    const replies: Array<Reply | null> = [];
    const deadline = Date.now() + this.timeoutMs;
    for (const req of reqs) {
      let got: Reply | null = null;
      for (;;) {
        const interim: number[] = [];
        const parsed = parse(this.buffer, req.method.toUpperCase() === "HEAD", this.closed, interim);
        if (parsed) {
          this.buffer = this.buffer.subarray(parsed.used);
          got = { ...parsed.reply, interim, closed: this.closed };
          break;
        }
        if (this.closed) break;
        if (Date.now() > deadline || !(await this.wait(deadline))) {
          this.close();
          throw new Error(`hung in a pipeline: ${replies.length} of ${reqs.length} answered`);
        }
      }
      replies.push(got);
      if (!got || /close/i.test(got.headers.connection ?? "")) break;
    }
    this.close();
    return replies;
  }
  async exchange(req: FuzzRequest, head: boolean): Promise<Reply> {
    if (this.closed || !this.socket) await this.open();
    const socket = this.socket as Socket;
    const deadline = Date.now() + this.timeoutMs;
    const interim: number[] = [];
    if (req.raw) socket.write(req.raw);
    else {
      const headers = [...req.headers];
      if (req.chunked) headers.push(["transfer-encoding", "chunked"]);
      else if (!req.noLength && (req.body.length > 0 || ["POST", "PATCH", "PUT"].includes(req.method)))
        headers.push(["content-length", String(req.body.length)]);
      if (req.expectContinue) headers.push(["expect", "100-continue"]);
      const headText = `${req.method} ${req.target} HTTP/1.1\r\n${headers.map(([n, v]) => `${n}: ${v}\r\n`).join("")}\r\n`;
      socket.write(Buffer.from(headText, "latin1"));
      const bodyBytes = req.chunked
        ? Buffer.concat([
            ...(req.body.length > 0
              ? [Buffer.from(`${req.body.length.toString(16)}\r\n`), req.body, Buffer.from("\r\n")]
              : []),
            Buffer.from("0\r\n\r\n"),
          ])
        : req.body;
      if (req.expectContinue && bodyBytes.length > 0) {
        // A well-behaved client: waits for 100 (or a final answer), up to 1 s, then sends anyway.
        const until = Date.now() + 1000;
        for (;;) {
          const text = this.buffer.toString("latin1");
          if (/^HTTP\/1\.1 \d{3}/.test(text) && text.includes("\r\n\r\n")) break;
          if (this.closed || Date.now() > until) break;
          await this.wait(until);
        }
        const text = this.buffer.toString("latin1");
        const continued = /^HTTP\/1\.1 100/.test(text);
        if (continued || !/^HTTP\/1\.1 \d{3}/.test(text)) {
          if (!this.closed) socket.write(bodyBytes);
        }
      } else if (bodyBytes.length > 0) socket.write(bodyBytes);
    }
    for (;;) {
      const parsed = parse(this.buffer, head, this.closed, interim);
      if (parsed) {
        this.buffer = this.buffer.subarray(parsed.used);
        const reply = { ...parsed.reply, interim, closed: this.closed };
        if (/close/i.test(reply.headers.connection ?? "") || this.closed) this.close();
        return reply;
      }
      if (this.closed) {
        const text = this.buffer.toString("latin1");
        this.close();
        throw new Error(`closed without a whole answer (${text.slice(0, 200)})`);
      }
      if (Date.now() > deadline || !(await this.wait(deadline))) {
        this.close();
        throw new Error(`hung: no whole answer within ${this.timeoutMs} ms`);
      }
    }
  }
}

export function serializeRequest(req: FuzzRequest): Buffer {
  if (req.raw) return req.raw;
  const headers = [...req.headers];
  if (req.chunked) headers.push(["transfer-encoding", "chunked"]);
  else if (!req.noLength && (req.body.length > 0 || ["POST", "PATCH", "PUT"].includes(req.method)))
    headers.push(["content-length", String(req.body.length)]);
  const head = `${req.method} ${req.target} HTTP/1.1\r\n${headers.map(([n, v]) => `${n}: ${v}\r\n`).join("")}\r\n`;
  const body = req.chunked
    ? Buffer.concat([
        ...(req.body.length > 0
          ? [Buffer.from(`${req.body.length.toString(16)}\r\n`), req.body, Buffer.from("\r\n")]
          : []),
        Buffer.from("0\r\n\r\n"),
      ])
    : req.body;
  return Buffer.concat([Buffer.from(head, "latin1"), body]);
}

function parse(
  raw: Buffer,
  head: boolean,
  closed: boolean,
  interim: number[],
): { reply: Omit<Reply, "interim" | "closed">; used: number } | null {
  let start = 0;
  for (;;) {
    const parsed = parseHead(raw, start);
    if (parsed === null) return null;
    const { status, headers, bodyAt: restAt } = parsed;
    if (status >= 100 && status < 200) {
      interim.push(status);
      start = restAt;
      continue;
    }
    const rest = raw.subarray(restAt);
    if (head || status === 204 || status === 304)
      return { reply: { status, headers, body: Buffer.alloc(0) }, used: restAt };
    if (headers["content-length"] !== undefined) {
      const length = Number(headers["content-length"]);
      return rest.length >= length
        ? { reply: { status, headers, body: rest.subarray(0, length) }, used: restAt + length }
        : null;
    }
    if (/chunked/i.test(headers["transfer-encoding"] ?? "")) {
      const chunked = dechunk(rest);
      return chunked && chunked.end !== null
        ? { reply: { status, headers, body: chunked.body }, used: restAt + chunked.end }
        : null;
    }
    return closed ? { reply: { status, headers, body: rest }, used: raw.length } : null;
  }
}
