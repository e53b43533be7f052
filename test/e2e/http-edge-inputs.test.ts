import type { Server } from "node:http";
import { type AddressInfo, connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createGatewayServer } from "../../src/server.js";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { rawExchange } from "../support/raw-exchange.js";
import {
  adminToken,
  createTestProject,
  logLinesOf,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowById,
} from "../support/test-gateway.js";

/**
 * Requests `fetch` would refuse to send, written byte by byte on a socket to the server `serve()`
 * builds: whatever the bytes, the answer is the error envelope with the right status.
 */
interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** Writes `parts` (50 ms apart) and collects what comes back until the server closes. */
function exchange(port: number, parts: Array<string | Buffer>, timeoutMs = 5000): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1");
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no close within ${timeoutMs} ms; got ${Buffer.concat(chunks).toString("latin1")}`));
    }, timeoutMs);
    socket.on("data", (chunk) => chunks.push(chunk));
    socket.on("error", () => {});
    socket.on("close", () => {
      clearTimeout(timer);
      resolve(Buffer.concat(chunks).toString("utf8"));
    });
    socket.on("connect", async () => {
      for (const part of parts) {
        if (socket.destroyed) return;
        socket.write(part);
        await new Promise((wait) => setTimeout(wait, 50));
      }
    });
  });
}

/** Splits a connection's bytes into responses (bodies framed by content-length). */
function responsesOf(raw: string): RawResponse[] {
  const responses: RawResponse[] = [];
  let rest = raw;
  while (rest.length > 0) {
    const end = rest.indexOf("\r\n\r\n");
    if (end < 0) throw new Error(`not a response: ${JSON.stringify(rest)}`);
    const [statusLine = "", ...lines] = rest.slice(0, end).split("\r\n");
    const headers: Record<string, string> = {};
    for (const line of lines) {
      const colon = line.indexOf(":");
      headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
    }
    const length = Number(headers["content-length"] ?? 0);
    responses.push({
      status: Number(statusLine.split(" ")[1]),
      headers,
      body: rest.slice(end + 4, end + 4 + length),
    });
    rest = rest.slice(end + 4 + length);
  }
  return responses;
}

function expectEnvelope(response: RawResponse | undefined, status: number, code: string) {
  expect(response?.status).toBe(status);
  expect(response?.headers["content-type"]).toMatch(/^application\/json/);
  const body = JSON.parse(response?.body ?? "") as { error: Record<string, unknown> };
  expect(Object.keys(body)).toEqual(["error"]);
  expect(body.error.code).toBe(code);
  expect(typeof body.error.message).toBe("string");
  expect(body.error.requestId).toMatch(/^req_[0-9a-f]{32}$/);
  expect(body.error.requestId).toBe(response?.headers["x-request-id"]);
  return body.error;
}

describe("HTTP edge inputs on the gateway's own server", () => {
  let upstream: FakeUpstream;
  let sluice: TestGateway;
  let server: Server;
  let port: number;
  let project: TestProject;

  beforeAll(async () => {
    upstream = await startFakeUpstream();
    sluice = await startTestGateway({ providerABaseUrl: `${upstream.url}/a/v1`, metricsEnabled: true });
    project = await createTestProject(sluice.gateway);
    // As serve() builds it; the request timeout is short so a stalled body is answered in time.
    server = createGatewayServer(sluice.gateway.app, {
      http: { requestTimeout: 1000, headersTimeout: 1000, connectionsCheckingInterval: 50 },
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
    await sluice.close();
    await upstream.close();
  });

  const head = (method: string, target: string, headers: Record<string, string> = {}) =>
    `${method} ${target} HTTP/1.1\r\n${Object.entries({ host: "sluice.test", ...headers })
      .map(([name, value]) => `${name}: ${value}\r\n`)
      .join("")}\r\n`;
  const chatBody = JSON.stringify({ model: "gpt-4.1-mini", messages: [{ role: "user", content: "Hi" }] });
  const chat = (target: string) =>
    head("POST", target, {
      authorization: `Bearer ${project.bearer("provider-a")}`,
      "content-type": "application/json",
      "content-length": String(chatBody.length),
      connection: "close",
    }) + chatBody;

  it.each([
    [
      "a header name with a space",
      "GET /health HTTP/1.1\r\nhost: x\r\nbad header: 1\r\n\r\n",
      /Invalid header token/,
    ],
    [
      "a control character in a header value",
      "GET /health HTTP/1.1\r\nhost: x\r\nx-a: a\u0001b\r\n\r\n",
      /header value/,
    ],
    [
      "two content-lengths",
      "POST /v1/text HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\ncontent-length: 2\r\n\r\n{}",
      /Content-Length/,
    ],
    [
      "content-length with transfer-encoding",
      "POST /v1/text HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
      /Transfer-Encoding/,
    ],
    [
      "a negative content-length",
      "POST /v1/text HTTP/1.1\r\nhost: x\r\ncontent-length: -1\r\n\r\n",
      /Content-Length/,
    ],
    [
      "a chunk size that is not hex",
      "POST /v1/text HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n{}\r\n",
      /chunk size/,
    ],
    ["a method llhttp does not know", "FOO /health HTTP/1.1\r\nhost: x\r\n\r\n", /method/],
    [
      "a raw non-ASCII byte in the path",
      Buffer.from("GET /v1/t\u00e9xt HTTP/1.1\r\nhost: x\r\n\r\n", "utf8"),
      /url/,
    ],
    ["HTTP/1.2", "GET /health HTTP/1.2\r\nhost: x\r\n\r\n", /HTTP version/],
    ["bare LF line ends", "GET /health HTTP/1.1\nhost: x\n\n", /CRLF/],
    ["the HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", /HTTP\/2/],
  ] as const)(
    "answers a request with %s with 400 in the envelope, not Node's bodiless 400",
    async (_name, bytes, reason) => {
      const [response, ...more] = responsesOf(await exchange(port, [bytes]));
      const error = expectEnvelope(response, 400, "BAD_REQUEST");
      expect(error.message).toMatch(reason);
      expect(response?.headers.connection).toBe("close");
      expect(more).toEqual([]);
    },
  );

  it("answers a request line or headers over Node's limit with 431 in the envelope", async () => {
    for (const bytes of [
      head("GET", "/health", { "x-long": "a".repeat(20_000) }),
      head("GET", `/v1/${"a".repeat(20_000)}`),
    ]) {
      const [response] = responsesOf(await exchange(port, [bytes]));
      expectEnvelope(response, 431, "REQUEST_HEADER_FIELDS_TOO_LARGE");
    }
  });

  it("answers a request with 1000 header fields or more with 431, where Node would drop those past the 1000th unseen", async () => {
    const filler = (count: number) => Array.from({ length: count }, (_, at) => `x-${at}: v\r\n`).join("");
    // A second Host (or credential header) past Node's 1000th line went unseen, and was served.
    const [hidden] = responsesOf(
      await exchange(port, [
        `GET /health HTTP/1.1\r\nhost: x\r\n${filler(1100)}host: y\r\nconnection: close\r\n\r\n`,
      ]),
    );
    expect(expectEnvelope(hidden, 431, "REQUEST_HEADER_FIELDS_TOO_LARGE").message).toMatch(
      /1000 header fields/,
    );
    const [most] = responsesOf(
      await exchange(port, [`GET /health HTTP/1.1\r\nhost: x\r\n${filler(997)}connection: close\r\n\r\n`]),
    );
    expect(most?.status).toBe(200);
  });

  it("answers a body that stops mid-way with 408 once the request timeout passes", async () => {
    const started = Date.now();
    const bytes = head("POST", `/v1/text/${project.projectId}`, {
      authorization: `Bearer ${project.bearer("provider-a")}`,
      "content-type": "application/json",
      "content-length": "100",
    });
    const [response] = responsesOf(await exchange(port, [bytes, '{"text":"hal']));
    expectEnvelope(response, 408, "REQUEST_TIMEOUT");
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
  });

  it("answers the requests pipelined before a malformed one first, in order", async () => {
    const raw = await exchange(port, [
      `${head("GET", "/health")}${head("GET", "/v1/nothing")}GET /health HTTP/1.1\r\nhost: x\r\nbad header: 1\r\n\r\n`,
    ]);
    const [health, missing, malformed, ...more] = responsesOf(raw);
    expect(health?.status).toBe(200);
    expect(JSON.parse(health?.body ?? "")).toMatchObject({ status: "ok" });
    expectEnvelope(missing, 404, "NOT_FOUND");
    expectEnvelope(malformed, 400, "BAD_REQUEST");
    expect(more).toEqual([]);
  });

  it("answers a request once when its body, read after its answer, is malformed or cut short, and closes", async () => {
    for (const parts of [
      // Bad chunk framing, with a request pipelined behind it that the 400 would have seemed to answer.
      [
        "POST /nowhere HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n" +
          head("GET", "/health"),
      ],
      // The client ends its side before the body it declared is all there.
      ['POST /nowhere HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{"te', "end"],
    ]) {
      const raw = await new Promise<string>((resolve) => {
        const socket = connect(port, "127.0.0.1");
        let received = "";
        socket.on("data", (chunk) => {
          received += chunk;
        });
        socket.on("error", () => {});
        socket.on("close", () => resolve(received));
        socket.write(parts[0] as string);
        if (parts[1] === "end") setTimeout(() => socket.end(), 50);
      });
      const [missing, ...more] = responsesOf(raw);
      expectEnvelope(missing, 404, "NOT_FOUND");
      expect(more).toEqual([]);
    }
  });

  it("answers an HTTP/1.1 request without Host with 400 in the envelope, and an HTTP/1.0 one", async () => {
    const [missing] = responsesOf(
      await exchange(port, ["GET /health HTTP/1.1\r\nconnection: close\r\n\r\n"]),
    );
    expect(expectEnvelope(missing, 400, "BAD_REQUEST").message).toMatch(/Host/);
    const [old] = responsesOf(await exchange(port, ["GET /health HTTP/1.0\r\n\r\n"]));
    expect(old?.status).toBe(200);
    const [empty] = responsesOf(
      await exchange(port, ["GET /health HTTP/1.1\r\nhost:\r\nconnection: close\r\n\r\n"]),
    );
    expect(empty?.status).toBe(200);
  });

  // RFC 9112 §3.2 asks for the 400 only. A missing Host leaves the message's framing intact (Node
  // reads its body by its content-length or chunks either way), so the connection is kept, as for
  // any well-framed 400: only framing that cannot be trusted closes it (a body that reads as a
  // request is not served as one).
  it("keeps the connection after the 400 to a request without Host: its body is read, the next request served", async () => {
    const smuggled = "GET /admin/v1/projects HTTP/1.1\r\n\r\n";
    const raw = await exchange(port, [
      "GET /health HTTP/1.1\r\n\r\n" +
        `POST /v1/text HTTP/1.1\r\ncontent-length: ${smuggled.length}\r\n\r\n${smuggled}` +
        `POST /v1/text HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n${smuggled.length.toString(16)}\r\n${smuggled}\r\n0\r\n\r\n` +
        head("GET", "/health", { connection: "close" }),
    ]);
    const [get, sized, chunked, next, ...more] = responsesOf(raw);
    for (const missing of [get, sized, chunked])
      expect(expectEnvelope(missing, 400, "BAD_REQUEST").message).toMatch(/Host/);
    expect(get?.headers.connection).toBe("keep-alive");
    expect(next?.status).toBe(200);
    expect(more).toEqual([]);
  });

  it.each([
    ["no version at all (HTTP/0.9)", "POST /v1/text/pa\r\n\r\n", /without HTTP\/1\.1/],
    ["no version and no headers", "GET /health\r\n\r\n", /without HTTP\/1\.1/],
    ["HTTP/2.0", "GET /health HTTP/2.0\r\nhost: x\r\nconnection: keep-alive\r\n\r\n", /HTTP\/2\.0/],
  ] as const)(
    "refuses a request line with %s with 400 and closes the connection",
    async (_name, bytes, reason) => {
      const method = bytes.slice(0, bytes.indexOf(" "));
      const counted = async () =>
        new RegExp(
          `sluice_http_requests_total\\{route="malformed",method="${method}",status="400"\\} (\\d+)`,
        ).exec(await (await fetch(`${sluice.url}/metrics`)).text())?.[1];
      const before = Number((await counted()) ?? 0);
      // The keep-alive request behind it is never answered: the connection closes first.
      const [response, ...more] = responsesOf(await exchange(port, [bytes, head("GET", "/health")]));
      expect(expectEnvelope(response, 400, "BAD_REQUEST").message).toMatch(reason);
      expect(response?.headers.connection).toBe("close");
      expect(more).toEqual([]);
      expect(Number(await counted())).toBeGreaterThan(before);
    },
  );

  it("answers CONNECT with 404 in the envelope instead of closing the connection silently", async () => {
    const [response] = responsesOf(
      await exchange(port, ["CONNECT 127.0.0.1:443 HTTP/1.1\r\nhost: 127.0.0.1:443\r\n\r\n"]),
    );
    const envelope = expectEnvelope(response, 404, "NOT_FOUND");
    expect(envelope.message).toMatch(/forward proxy/);
    expect(response?.headers.date).toMatch(/ GMT$/);
    // Its access line names the id it answered with, as every other answer's does.
    const line = sluice.logs
      .map((text) => JSON.parse(text))
      .find((entry) => entry.requestId === envelope.requestId);
    expect(line).toMatchObject({ msg: "request", method: "CONNECT", status: 404 });
  });

  // Node hands a CONNECT over as soon as it parses it, while the requests before it may still be
  // answered. Its 404 was written at once: the client took it for its first request's answer, and
  // that request's answer (a chat completion the provider had been called for) never came, nor its
  // usage row.
  it("answers CONNECT pipelined behind a proxied call after that call's answer, which keeps its usage row", async () => {
    upstream.clear();
    upstream.setLatencyMs(200);
    try {
      const call = chat(`/v1/provider-a/${project.projectId}/chat/completions`).replace(
        "connection: close",
        "connection: keep-alive",
      );
      const raw = await exchange(port, [
        `${call}CONNECT 127.0.0.1:443 HTTP/1.1\r\nhost: 127.0.0.1:443\r\n\r\n`,
      ]);
      const answers = responsesOf(raw);
      expect(answers.map((answer) => answer.status)).toEqual([200, 404]);
      expect(JSON.parse(answers[0]?.body ?? "")).toMatchObject({ object: "chat.completion" });
      expect(expectEnvelope(answers[1], 404, "NOT_FOUND").message).toMatch(/forward proxy/);
      expect(upstream.requests.map((forwarded) => forwarded.path)).toEqual(["/a/v1/chat/completions"]);
      const row = await usageRowById(sluice.gateway, answers[0]?.headers["x-request-id"]);
      expect(row.status).toBe(200);
    } finally {
      upstream.setLatencyMs(0);
    }
  });

  // Node takes its own listeners off a socket when it hands a CONNECT over, the one that tells the
  // answer being written that the client has read what was sent (`drain`) among them: an answer
  // larger than the socket's buffer stopped at its first full buffer, until the upstream idle
  // timeout (5 minutes) cut it, and the CONNECT's 404 never came.
  it("sends a large answer whole when a CONNECT is pipelined behind it, then the CONNECT's 404", async () => {
    upstream.clear();
    upstream.setText("x".repeat(4 * 1024 * 1024));
    try {
      const call = chat(`/v1/provider-a/${project.projectId}/chat/completions`).replace(
        "connection: close",
        "connection: keep-alive",
      );
      const raw = await exchange(port, [
        `${call}CONNECT 127.0.0.1:443 HTTP/1.1\r\nhost: 127.0.0.1:443\r\n\r\n`,
      ]);
      const answers = responsesOf(raw);
      expect(answers.map((answer) => answer.status)).toEqual([200, 404]);
      const completion = JSON.parse(answers[0]?.body ?? "") as {
        choices: Array<{ message: { content: string } }>;
      };
      expect(completion.choices[0]?.message.content).toHaveLength(4 * 1024 * 1024);
      expect(expectEnvelope(answers[1], 404, "NOT_FOUND").message).toMatch(/forward proxy/);
      const row = await usageRowById(sluice.gateway, answers[0]?.headers["x-request-id"]);
      expect(row).toMatchObject({ status: 200, outcome: "ok" });
    } finally {
      upstream.setText("Hello from the fake upstream");
    }
  });

  // Node gives an answer queued behind another on its connection no socket until the one ahead is
  // sent, and (before nodejs/node#62534) no `close` when the client leaves first: its access line
  // and its count in sluice_http_requests_total hung on that `close`, so they were never written,
  // though the proxied call's usage row was.
  it("logs and counts every pipelined request once when the client leaves with answers still queued", async () => {
    upstream.clear();
    upstream.setPlan((request) =>
      (request.json as { model?: string }).model === "slow" ? { latencyMs: 1500 } : undefined,
    );
    const counted = async () => {
      const text = await (await fetch(`${sluice.url}/metrics`)).text();
      const count = (labels: string) =>
        [...text.matchAll(new RegExp(`sluice_http_requests_total\\{${labels}\\} (\\d+)`, "g"))].reduce(
          (sum, match) => sum + Number(match[1]),
          0,
        );
      return {
        proxied: count(`route="/v1/provider-a/:projectId/\\*",method="POST",status="\\d+"`),
        health: count(`route="/health",method="GET",status="\\d+"`),
      };
    };
    try {
      const before = await counted();
      const from = sluice.logs.length;
      const call = (model: string) => {
        const body = JSON.stringify({ model, messages: [{ role: "user", content: "Hi" }] });
        return (
          head("POST", `/v1/provider-a/${project.projectId}/chat/completions`, {
            authorization: `Bearer ${project.bearer("provider-a")}`,
            "content-type": "application/json",
            "content-length": String(body.length),
          }) + body
        );
      };
      const socket = connect(port, "127.0.0.1");
      socket.on("error", () => {});
      socket.write(call("slow") + call("fast") + head("GET", "/health"));
      // The fast call is answered and /health too, both queued behind the slow call; then the client goes.
      await expect.poll(() => upstream.requests.length).toBe(2);
      await new Promise((resolve) => setTimeout(resolve, 200));
      socket.destroy();
      await upstream.waitForAbort(3000);
      const lines = async () =>
        logLinesOf(sluice, from)
          .filter((line) => line.msg === "request" && line.route !== "/metrics")
          .map((line) => `${line.route} ${line.status}${line.aborted ? " aborted" : ""}`)
          .sort();
      await expect.poll(lines, { timeout: 2000 }).toHaveLength(3);
      expect(await lines()).toEqual([
        "/health 200 aborted",
        "/v1/provider-a/:projectId/* 200 aborted",
        "/v1/provider-a/:projectId/* 499 aborted",
      ]);
      const after = await counted();
      expect({ proxied: after.proxied - before.proxied, health: after.health - before.health }).toEqual({
        proxied: 2,
        health: 1,
      });
    } finally {
      upstream.setPlan(null);
    }
  });

  // A half-close (FIN after the request, as `printf … | nc -N` sends) is what a client closing its
  // socket outright sends too: the call is aborted at once rather than run on for no one
  // (docs/proxy.md, Bodies and streams). Node's `httpAllowHalfOpen` would answer the first and not
  // see the second leave until its answer was written.
  it("takes a client that half-closes after its request as gone: the call aborted, 499, no answer", async () => {
    upstream.clear();
    upstream.setLatencyMs(1000);
    try {
      const from = sluice.logs.length;
      const call = chat(`/v1/provider-a/${project.projectId}/chat/completions`).replace(
        "connection: close",
        "connection: keep-alive",
      );
      const socket = connect(port, "127.0.0.1");
      const chunks: Buffer[] = [];
      socket.on("data", (chunk: Buffer) => chunks.push(chunk));
      socket.on("error", () => {});
      const closed = new Promise((resolve) => socket.once("close", resolve));
      socket.end(call);
      const aborted = await upstream.waitForAbort(3000);
      await closed;
      expect(aborted.path).toBe("/a/v1/chat/completions");
      expect(Buffer.concat(chunks).toString("latin1")).toBe("");
      const requestLine = async () =>
        logLinesOf(sluice, from).find((line) => line.msg === "request" && line.method === "POST");
      await expect.poll(requestLine).toMatchObject({ status: 499, aborted: true });
      const row = await usageRowById(sluice.gateway, (await requestLine())?.requestId as string);
      expect(row).toMatchObject({ status: 499, outcome: "aborted" });
    } finally {
      upstream.setLatencyMs(0);
    }
  });

  it("refuses an HTTP/1.0 request with Transfer-Encoding and serves nothing after it on the connection", async () => {
    upstream.clear();
    const auth = `authorization: Bearer ${project.bearer("provider-a")}\r\ncontent-type: application/json\r\n`;
    const base = `/v1/provider-a/${project.projectId}`;
    // An HTTP/1.0 front end reads all of this as one request with a body; before, Sluice decoded the
    // body as chunked, kept the connection, and forwarded the rest as a second (smuggled) request.
    const bytes =
      `POST ${base}/chat/completions HTTP/1.0\r\nconnection: keep-alive\r\n${auth}` +
      "transfer-encoding: chunked\r\n\r\n0\r\n\r\n" +
      `POST ${base}/embeddings HTTP/1.1\r\nhost: x\r\n${auth}content-length: 2\r\nconnection: close\r\n\r\n{}`;
    const responses = responsesOf(await exchange(port, [bytes]));
    expect(responses).toHaveLength(1);
    expect(expectEnvelope(responses[0], 400, "BAD_REQUEST").message).toMatch(/HTTP\/1\.0.*Transfer-Encoding/);
    expect(responses[0]?.headers.connection).toBe("close");
    expect(upstream.requests).toEqual([]);
  });

  // RFC 9112 §6.3: a request whose final transfer coding is not chunked has no length Sluice can
  // read: 400, then the connection closes. Before, Node's parser refused it only after the route
  // was chosen, so a route that answers without reading the body (/health, a 404, a 405) sent its
  // own status, and routes that authenticate first sent the parser's 400.
  it.each([
    ["GET /health", () => head("GET", "/health")],
    ["POST /health", () => head("POST", "/health")],
    ["an unknown path", () => head("POST", "/nowhere")],
    [
      "an admin route (GET)",
      () => head("GET", "/admin/v1/projects", { authorization: `Bearer ${adminToken}` }),
    ],
    [
      "an admin route (POST)",
      () =>
        head("POST", "/admin/v1/projects", {
          authorization: `Bearer ${adminToken}`,
          "content-type": "application/json",
        }),
    ],
    [
      "a proxy route",
      () =>
        head("POST", `/v1/provider-a/${project.projectId}/chat/completions`, {
          authorization: `Bearer ${project.bearer("provider-a")}`,
          "content-type": "application/json",
        }),
    ],
    [
      "a structured route",
      () =>
        head("POST", `/v1/text/${project.projectId}`, {
          authorization: `Bearer ${project.bearer("provider-a")}`,
          "content-type": "application/json",
        }),
    ],
  ])(
    "answers a transfer coding other than chunked alone with 400 on %s, and serves nothing after it on the connection",
    async (_route, headOf) => {
      for (const coding of ["gzip", "identity", "chunked;x=1", "gzip, chunked", "chunked, gzip"]) {
        upstream.clear();
        const request = headOf().replace("\r\n\r\n", `\r\ntransfer-encoding: ${coding}\r\n\r\n`);
        // What a front end that reads the body as chunked takes for one request; a request pipelined
        // behind it that would be served if the connection were kept (request smuggling).
        const raw = await exchange(
          port,
          [`${request}2\r\n{}\r\n0\r\n\r\n${head("GET", "/health", { connection: "close" })}`],
          15_000,
        );
        const responses = responsesOf(raw);
        expect(
          responses.map((response) => response.status),
          `transfer-encoding: ${coding}`,
        ).toEqual([400]);
        expect(expectEnvelope(responses[0], 400, "BAD_REQUEST").message).toMatch(/Transfer-Encoding/);
        expect(responses[0]?.headers.connection, `transfer-encoding: ${coding}`).toBe("close");
        expect(upstream.requests, `transfer-encoding: ${coding}`).toEqual([]);
      }
    },
  );

  it("serves a chunked body whatever the case of chunked and the spaces around it", async () => {
    for (const coding of ["chunked", "CHUNKED", "Chunked ", "  chunked"]) {
      upstream.clear();
      const request = head("POST", `/v1/provider-a/${project.projectId}/chat/completions`, {
        authorization: `Bearer ${project.bearer("provider-a")}`,
        "content-type": "application/json",
        "transfer-encoding": coding,
        connection: "close",
      });
      const reply = await rawExchange(
        port,
        Buffer.from(`${request}${chatBody.length.toString(16)}\r\n${chatBody}\r\n0\r\n\r\n`),
        { timeoutMs: 15_000 },
      );
      expect(reply.status, `transfer-encoding: ${JSON.stringify(coding)}`).toBe(200);
      expect(upstream.requests.map((forwarded) => String(forwarded.body))).toEqual([chatBody]);
    }
  });

  it("closes the connection after answering an Upgrade request, so a request pipelined behind it is not left hanging", async () => {
    const raw = await exchange(port, [
      "GET /health HTTP/1.1\r\nhost: x\r\nconnection: Upgrade, HTTP2-Settings\r\nupgrade: h2c\r\n" +
        "http2-settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\nGET /v1/nothing HTTP/1.1\r\nhost: x\r\n\r\n",
    ]);
    // Before, Node dropped the second request and kept the connection open (until keep-alive ended).
    const [first] = responsesOf(raw);
    expect(first?.status).toBe(200);
    expect(first?.headers.connection).toBe("close");
  });

  // An Upgrade that Connection does not name is no upgrade (RFC 9110 §7.8): Node parses what follows
  // as any request, and ran it. Closing after the first answer dropped that one's answer, though the
  // provider had been called (a billed chat completion whose client never heard of it).
  it("answers a request pipelined behind one whose Upgrade its Connection does not name, as any other", async () => {
    upstream.clear();
    const requests: Array<[string, string]> = [
      ["websocket", "realtime"],
      ["h2c", "models/gpt-4o"],
    ];
    for (const [upgrade, path] of requests) {
      const raw = await exchange(port, [
        head("GET", `/v1/provider-a/${project.projectId}/${path}`, {
          authorization: `Bearer ${project.bearer("provider-a")}`,
          upgrade,
          "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
          "sec-websocket-version": "13",
        }) + chat(`/v1/provider-a/${project.projectId}/chat/completions`),
      ]);
      const answers = responsesOf(raw);
      expect(
        answers.map((answer) => answer.status),
        upgrade,
      ).toEqual([upgrade === "h2c" ? 200 : 404, 200]);
      expect(answers[0]?.headers.connection, upgrade).toBe("keep-alive");
      expect(JSON.parse(answers[1]?.body ?? "")).toMatchObject({ object: "chat.completion" });
    }
    expect(upstream.requests.map((forwarded) => forwarded.path)).toEqual([
      "/a/v1/chat/completions",
      "/a/v1/models/gpt-4o",
      "/a/v1/chat/completions",
    ]);
  });

  it("never sends chunked coding to an HTTP/1.0 client, even one whose TE asks for it", async () => {
    const text = JSON.stringify({ model: "gpt-4o-mini", messages: [], stream: true });
    const raw = await exchange(port, [
      `POST /v1/provider-a/${project.projectId}/chat/completions HTTP/1.0\r\n` +
        `authorization: Bearer ${project.bearer("provider-a")}\r\ncontent-type: application/json\r\n` +
        `te: chunked\r\ncontent-length: ${text.length}\r\n\r\n${text}`,
    ]);
    const end = raw.indexOf("\r\n\r\n");
    const head = raw.slice(0, end).toLowerCase();
    expect(head).toMatch(/^http\/1\.1 200/);
    expect(head).not.toContain("transfer-encoding");
    // Delimited by the connection's close: the events as the provider sent them, no chunk sizes.
    expect(raw.slice(end + 4)).toMatch(/^data: /);
    expect(raw.endsWith("data: [DONE]\n\n")).toBe(true);
  });

  it.each([
    ["two Host lines", "host: sluice.test\r\nhost: other.test\r\n"],
    ["a Host that is not a host and port", "host: a b/c@d\r\n"],
  ])("answers %s 400 (RFC 9112 §3.2), where it served them", async (_what, hosts) => {
    const [response] = responsesOf(
      await exchange(port, [`GET /health HTTP/1.1\r\n${hosts}connection: close\r\n\r\n`]),
    );
    expect(expectEnvelope(response, 400, "BAD_REQUEST").message).toMatch(/one Host header/);
  });

  it("serves a Host that is an IP literal with a port", async () => {
    const [response] = responsesOf(
      await exchange(port, ["GET /health HTTP/1.1\r\nhost: [::1]:8787\r\nconnection: close\r\n\r\n"]),
    );
    expect(response?.status).toBe(200);
  });

  it("serves a request whose Expect it does not know instead of a bodiless 417", async () => {
    const [response] = responsesOf(
      await exchange(port, [head("GET", "/health", { expect: "something-else", connection: "close" })]),
    );
    expect(response?.status).toBe(200);
    expect(JSON.parse(response?.body ?? "")).toMatchObject({ status: "ok" });
  });

  it("sends 100 Continue only once a request is admitted, so a refused upload is never sent", async () => {
    const target = `/v1/provider-a/${project.projectId}/chat/completions`;
    const expecting = (headers: Record<string, string>) =>
      head("POST", target, {
        "content-type": "application/json",
        "content-length": String(chatBody.length),
        expect: "100-continue",
        connection: "close",
        ...headers,
      });
    upstream.clear();
    const refused = responsesOf(await exchange(port, [expecting({ authorization: "Bearer nope.nope" })]));
    expect(refused.map((response) => response.status)).toEqual([401]);
    const tooLarge = responsesOf(
      await exchange(port, [
        expecting({
          authorization: `Bearer ${project.bearer("provider-a")}`,
          "content-length": String(1024 ** 3),
        }),
      ]),
    );
    expect(tooLarge.map((response) => response.status)).toEqual([413]);
    expect(upstream.requests).toHaveLength(0);
    const admitted = responsesOf(
      await exchange(port, [
        expecting({ authorization: `Bearer ${project.bearer("provider-a")}` }),
        chatBody,
      ]),
    );
    expect(admitted.map((response) => response.status)).toEqual([100, 200]);
    expect(upstream.requests.map((request) => String(request.body))).toEqual([chatBody]);
  });

  it("answers a path that is not percent-encoded UTF-8 with 400, on routes that exist too", async () => {
    for (const target of [
      `/v1/text/%zz`,
      `/v1/text/%C0%AE`,
      "/v1/provider-a/%E2%82/models",
      `/v1/provider-a/${project.projectId}/chat/%zz`,
      "/nothing/%zz",
    ]) {
      const [response] = responsesOf(await exchange(port, [head("POST", target, { connection: "close" })]));
      expect(expectEnvelope(response, 400, "BAD_REQUEST").message).toMatch(/percent-encoded/);
    }
  });

  it("forwards an absolute-form request target to the provider path it names", async () => {
    upstream.clear();
    const raw = await exchange(port, [
      chat(`http://sluice.test/v1/provider-a/${project.projectId}/chat/completions`),
    ]);
    expect(responsesOf(raw)[0]?.status).toBe(200);
    expect(upstream.requests.map((request) => `${request.method} ${request.path}`)).toEqual([
      "POST /a/v1/chat/completions",
    ]);
  });

  it("refuses a request target with a fragment instead of forwarding it", async () => {
    upstream.clear();
    const raw = await exchange(port, [chat(`/v1/provider-a/${project.projectId}/chat/completions#frag`)]);
    expect(expectEnvelope(responsesOf(raw)[0], 400, "BAD_REQUEST").message).toMatch(/fragment/);
    expect(upstream.requests).toEqual([]);
  });
});

/**
 * A browser app reads an answer only when it carries CORS headers: the answers to what Node's parser
 * refused get them where the request's head was read (its Origin and path are known), by the rule
 * every other answer follows (docs/decisions/0007).
 */
describe("answers to what Node's parser refused, for a browser app (SLUICE_CORS_ORIGINS)", () => {
  const app = "https://app.example.com";
  let sluice: TestGateway;
  let server: Server;
  let port: number;
  let project: TestProject;

  beforeAll(async () => {
    sluice = await startTestGateway({ corsOrigins: [app] });
    project = await createTestProject(sluice.gateway);
    server = createGatewayServer(sluice.gateway.app, {
      http: { requestTimeout: 1000, headersTimeout: 1000, connectionsCheckingInterval: 50 },
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
    await sluice.close();
  });

  const head = (target: string, headers: Record<string, string>) =>
    `POST ${target} HTTP/1.1\r\n${Object.entries({ host: "sluice.test", ...headers })
      .map(([name, value]) => `${name}: ${value}\r\n`)
      .join("")}\r\n`;
  const upload = (
    origin: string,
    target = `/v1/text/${project.projectId}`,
    authorization = `Bearer ${project.bearer("provider-a")}`,
  ) =>
    head(target, {
      origin,
      authorization,
      "content-type": "application/json",
      "content-length": "100",
    });

  it("marks a 408 for a body that stops mid-way with the CORS headers of an allowed origin", async () => {
    const [response] = responsesOf(await exchange(port, [upload(app), '{"text":"hal']));
    expectEnvelope(response, 408, "REQUEST_TIMEOUT");
    expect(response?.headers["access-control-allow-origin"]).toBe(app);
    expect(response?.headers["access-control-expose-headers"]).toBe("*");
    expect(response?.headers.vary).toBe("Origin");
  });

  it("marks a 400 for a malformed chunked body with them", async () => {
    const bytes = `${head(`/v1/text/${project.projectId}`, {
      origin: app,
      authorization: `Bearer ${project.bearer("provider-a")}`,
      "content-type": "application/json",
      "transfer-encoding": "chunked",
    })}2\r\n{}XX`;
    const [response] = responsesOf(await exchange(port, [bytes]));
    expectEnvelope(response, 400, "BAD_REQUEST");
    expect(response?.headers["access-control-allow-origin"]).toBe(app);
  });

  it("gives an origin not listed, and the admin API, only what any other answer gets", async () => {
    const [other] = responsesOf(await exchange(port, [upload("https://evil.example"), '{"text":"hal']));
    expectEnvelope(other, 408, "REQUEST_TIMEOUT");
    expect(other?.headers["access-control-allow-origin"]).toBeUndefined();
    expect(other?.headers.vary).toBe("Origin");
    const [admin] = responsesOf(
      await exchange(port, [upload(app, "/admin/v1/projects", `Bearer ${adminToken}`), '{"name":"hal']),
    );
    expect(admin?.status).toBe(408);
    expect(admin?.headers["access-control-allow-origin"]).toBeUndefined();
    expect(admin?.headers.vary).toBeUndefined();
  });

  // Node's parser hands over nothing of a head it could not finish, so its Origin and path are not
  // known: no CORS header is guessed (docs/decisions/0007).
  it("adds nothing to a 431 for a head over Node's limit, whose Origin Node never read", async () => {
    const [response] = responsesOf(
      await exchange(port, [head("/v1/text/x", { origin: app, "x-long": "a".repeat(20_000) })]),
    );
    expectEnvelope(response, 431, "REQUEST_HEADER_FIELDS_TOO_LARGE");
    expect(response?.headers["access-control-allow-origin"]).toBeUndefined();
  });
});
