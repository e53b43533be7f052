import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { brotliCompressSync, deflateSync, gunzipSync, gzipSync, inflateSync } from "node:zlib";
import OpenAI from "openai";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowOf,
} from "../support/test-gateway.js";

/**
 * A client may compress its request body (`content-encoding`), and Sluice forwards it as sent. But
 * a streamed chat completion that does not ask for usage gets the option set, and compressed bytes
 * hold no `"stream"` to find: these bodies are decoded to decide, so compressing a body is no way
 * to stream without usage being recorded.
 */
describe("a compressed request body on provider A's streamed completions", () => {
  let upstream: Server;
  let sluice: TestGateway;
  let project: TestProject;
  let received: { headers: IncomingHttpHeaders; body: Buffer }[] = [];

  beforeAll(async () => {
    // Like a server that takes compressed request bodies: it decodes them, then streams a chat
    // completion whose usage chunk comes only when the request asked for it.
    upstream = createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on("data", (chunk: Buffer) => chunks.push(chunk));
      request.on("end", () => {
        const body = Buffer.concat(chunks);
        received.push({ headers: request.headers, body });
        const coding = request.headers["content-encoding"];
        const plain = coding === "gzip" ? gunzipSync(body) : coding === "deflate" ? inflateSync(body) : body;
        if (request.url !== "/v1/chat/completions") {
          response.writeHead(400, { "content-type": "application/json" }).end('{"error":{"message":"?"}}');
          return;
        }
        const sent = JSON.parse(plain.toString()) as {
          stream?: boolean;
          stream_options?: { include_usage?: boolean };
        };
        const base = { id: "chatcmpl-1", object: "chat.completion.chunk", created: 1, model: "gpt-4o-mini" };
        const usage = { prompt_tokens: 1000, completion_tokens: 5000, total_tokens: 6000 };
        if (!sent.stream) {
          response.writeHead(200, { "content-type": "application/json" });
          response.end(JSON.stringify({ ...base, object: "chat.completion", choices: [], usage }));
          return;
        }
        response.writeHead(200, { "content-type": "text/event-stream" });
        const delta = { index: 0, delta: { content: "hi" }, finish_reason: "stop" };
        response.write(`data: ${JSON.stringify({ ...base, choices: [delta] })}\n\n`);
        if (sent.stream_options?.include_usage === true)
          response.write(`data: ${JSON.stringify({ ...base, choices: [], usage })}\n\n`);
        response.end("data: [DONE]\n\n");
      });
    });
    await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
    sluice = await startTestGateway({
      providerABaseUrl: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/v1`,
      maxBodyBytes: 64 * 1024,
    });
    project = await createTestProject(sluice.gateway);
  });

  afterAll(async () => {
    await sluice.close();
    upstream.closeAllConnections();
    upstream.close();
  });

  beforeEach(() => {
    received = [];
  });

  const post = (path: string, body: Buffer, coding: string | null) =>
    fetch(`${sluice.url}/v1/provider-a/${project.projectId}/${path}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${project.bearer("provider-a")}`,
        "content-type": "application/json",
        ...(coding ? { "content-encoding": coding } : {}),
      },
      body,
    });

  const streamed = JSON.stringify({
    model: "gpt-4o-mini",
    messages: [{ role: "user", content: "hi" }],
    stream: true,
  });

  it("records the same tokens for a streamed request sent plain, gzip, deflate or br", async () => {
    const bodies: Array<[Buffer, string | null]> = [
      [Buffer.from(streamed), null],
      [gzipSync(streamed), "gzip"],
      [deflateSync(streamed), "deflate"],
      [brotliCompressSync(streamed), "br"],
      [gzipSync(streamed), "identity, GZIP"],
    ];
    for (const [body, coding] of bodies) {
      const response = await post("chat/completions", body, coding);
      // Read, but not forwarded: the client did not ask for the usage chunk.
      const text = await response.text();
      expect(text, String(coding)).toContain("data: [DONE]");
      expect(text, String(coding)).not.toContain('"usage"');
      const row = await usageRowOf(sluice.gateway, response);
      expect(row, String(coding)).toMatchObject({ streamed: 1, input_tokens: 1000, output_tokens: 5000 });
      expect(row.cost_usd).toBeGreaterThan(0);
    }
    // The option had to be set: each body went out decoded, with it, and without a content-encoding.
    for (const { headers, body } of received) {
      expect(headers["content-encoding"]).toBeUndefined();
      expect(Number(headers["content-length"])).toBe(body.length);
      expect(JSON.parse(body.toString()).stream_options).toEqual({ include_usage: true });
    }
  });

  it("forwards a compressed body as sent when it needs no change", async () => {
    const asking = gzipSync(
      JSON.stringify({
        model: "gpt-4o-mini",
        messages: [],
        stream: true,
        stream_options: { include_usage: true },
      }),
    );
    const notStreamed = gzipSync(JSON.stringify({ model: "gpt-4o-mini", messages: [] }));
    for (const body of [asking, notStreamed]) {
      const response = await post("chat/completions", body, "gzip");
      await response.text();
      expect((await usageRowOf(sluice.gateway, response)).input_tokens).toBe(1000);
    }
    expect(received.map(({ body }) => body)).toEqual([asking, notStreamed]);
    expect(received.map(({ headers }) => headers["content-encoding"])).toEqual(["gzip", "gzip"]);
  });

  it("refuses a body it cannot decode there: an unknown coding 415, a corrupt one 400, a bomb 413", async () => {
    const cases: Array<[Buffer, string, number, string]> = [
      [Buffer.from(streamed), "zstd", 415, "UNSUPPORTED_MEDIA_TYPE"],
      [Buffer.from("not gzip at all"), "gzip", 400, "BAD_REQUEST"],
      [gzipSync(Buffer.alloc(1024 * 1024, 0x20)), "gzip", 413, "PAYLOAD_TOO_LARGE"],
    ];
    for (const [body, coding, status, code] of cases) {
      const response = await post("chat/completions", body, coding);
      expect(response.status, coding).toBe(status);
      expect(((await response.json()) as { error: { code: string } }).error.code).toBe(code);
      // RFC 9110 15.5.16: a 415 for a content coding names the codings the path reads.
      expect(response.headers.get("accept-encoding"), coding).toBe(
        status === 415 ? "gzip, deflate, br, identity" : null,
      );
    }
    expect(received).toEqual([]);
    // Elsewhere the option does not apply, and the body goes out as sent, for the provider to read.
    const response = await post("embeddings", Buffer.from("zstd bytes"), "zstd");
    await response.text();
    expect(received.map(({ body }) => body.toString())).toEqual(["zstd bytes"]);
    expect(received[0]?.headers["content-encoding"]).toBe("zstd");
  });

  it("meters a compressed streamed call made with the openai SDK's own body, and hides the usage chunk", async () => {
    // The SDK sends JSON; a client (or a proxy in front of Sluice) that compresses it is the case.
    const openai = new OpenAI({
      apiKey: project.bearer("provider-a"),
      baseURL: `${sluice.url}/v1/provider-a/${project.projectId}`,
      fetch: (url, init) => {
        const headers = new Headers(init?.headers);
        headers.set("content-encoding", "gzip");
        return fetch(url, { ...init, body: gzipSync(String(init?.body)), headers });
      },
    });
    const { data: stream, response } = await openai.chat.completions
      .create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }], stream: true })
      .withResponse();
    let text = "";
    for await (const chunk of stream) {
      expect(chunk.choices).not.toEqual([]);
      expect(chunk.usage).toBeUndefined();
      text += chunk.choices[0]?.delta.content ?? "";
    }
    expect(text).toBe("hi");
    const row = await usageRowOf(sluice.gateway, response);
    expect(row).toMatchObject({ streamed: 1, input_tokens: 1000, output_tokens: 5000 });
  });
});

/**
 * Elsewhere a compressed body is forwarded as sent, for the provider to read. What Sluice itself
 * reads from it afterwards (the model for a failure row or an answer that names none, the images a
 * cut image generation asked for) is read from the decoded body, and a body that does not decode
 * just names nothing.
 */
describe("a compressed request body forwarded as sent", () => {
  let upstream: Server;
  let answer: (path: string, response: ServerResponse) => void;
  let received: { url: string; headers: IncomingHttpHeaders; body: Buffer }[] = [];
  let sluice: TestGateway;
  let project: TestProject;
  /** A gateway whose provider A refuses connections. */
  let down: TestGateway;
  let downProject: TestProject;

  beforeAll(async () => {
    upstream = createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on("data", (chunk: Buffer) => chunks.push(chunk));
      request.on("end", () => {
        received.push({ url: request.url ?? "", headers: request.headers, body: Buffer.concat(chunks) });
        answer(request.url ?? "", response);
      });
    });
    await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
    const url = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
    sluice = await startTestGateway({
      providerABaseUrl: `${url}/a/v1`,
      providerBBaseUrl: `${url}/b/v1`,
      maxBodyBytes: 64 * 1024,
    });
    project = await createTestProject(sluice.gateway);
    down = await startTestGateway({ providerABaseUrl: "http://127.0.0.1:1/v1", maxBodyBytes: 64 * 1024 });
    downProject = await createTestProject(down.gateway);
  });

  afterAll(async () => {
    await sluice.close();
    await down.close();
    upstream.closeAllConnections();
    upstream.close();
  });

  beforeEach(() => {
    received = [];
  });

  const send = (
    gateway: TestGateway,
    target: TestProject,
    provider: "provider-a" | "provider-b",
    path: string,
    body: Buffer,
    coding: string,
  ) =>
    fetch(`${gateway.url}/v1/${provider}/${target.projectId}/${path}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${target.bearer(provider)}`,
        "content-type": "application/json",
        "content-encoding": coding,
      },
      body,
    });

  /**
   * The usage row of a call. When the answer does not say what the request's body does, the row
   * waits for that body to be decoded, which may be a moment after the client's last byte.
   */
  const rowOf = (gateway: TestGateway, response: Response) => usageRowOf(gateway.gateway, response);

  const errorAnswer = (status: number, body: unknown) => (_path: string, response: ServerResponse) =>
    response.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));

  const message = JSON.stringify({
    model: "claude-3-5-haiku-latest",
    max_tokens: 16,
    messages: [{ role: "user", content: "hi" }],
  });
  const embedding = JSON.stringify({ model: "text-embedding-3-small", input: "hi" });

  it("names the request's model on the row when the provider fails", async () => {
    const cases: Array<[string, Buffer, string, number, unknown]> = [
      [
        "provider-b",
        gzipSync(message),
        "gzip",
        529,
        { type: "error", error: { type: "overloaded_error", message: "Overloaded" } },
      ],
      [
        "provider-a",
        deflateSync(embedding),
        "deflate",
        503,
        { error: { message: "busy", type: "server_error" } },
      ],
      ["provider-a", brotliCompressSync(embedding), "br", 500, { error: { message: "oops" } }],
    ];
    for (const [provider, body, coding, status, error] of cases) {
      answer = errorAnswer(status, error);
      const path = provider === "provider-b" ? "v1/messages" : "embeddings";
      const response = await send(sluice, project, provider as "provider-a", path, body, coding);
      expect(response.status, coding).toBe(status);
      expect(await response.json(), coding).toEqual(error);
      expect(await rowOf(sluice, response), coding).toMatchObject({
        status,
        outcome: "error",
        model: provider === "provider-b" ? "claude-3-5-haiku-latest" : "text-embedding-3-small",
      });
    }
    // Each body went out as sent, compressed.
    expect(received.map(({ body }) => body)).toEqual(cases.map(([, body]) => body));
    expect(received.map(({ headers }) => headers["content-encoding"])).toEqual(["gzip", "deflate", "br"]);
  });

  it("names the request's model on the row when the provider cannot be reached", async () => {
    const response = await send(down, downProject, "provider-a", "embeddings", gzipSync(embedding), "gzip");
    expect(response.status).toBe(502);
    expect(((await response.json()) as { error: { code: string } }).error.code).toBe("PROVIDER_ERROR");
    expect(await rowOf(down, response)).toMatchObject({
      status: 502,
      error_code: "PROVIDER_ERROR",
      model: "text-embedding-3-small",
    });
  });

  it("names no model, and fails nothing, for a forwarded body it cannot decode", async () => {
    const bodies: Array<[Buffer, string]> = [
      // A coding Sluice cannot undo (opaque bytes to it, as zstd's would be).
      [gzipSync(embedding), "zstd"],
      [Buffer.from("not gzip at all"), "gzip"],
      // Decodes beyond SLUICE_MAX_BODY_BYTES (64 KiB here), though its model comes first.
      [gzipSync(`{"model":"text-embedding-3-small","input":"${" ".repeat(128 * 1024)}"}`), "gzip"],
    ];
    for (const [body, coding] of bodies) {
      const response = await send(down, downProject, "provider-a", "embeddings", body, coding);
      expect(response.status, coding).toBe(502);
      expect(await rowOf(down, response), coding).toMatchObject({
        status: 502,
        error_code: "PROVIDER_ERROR",
        model: null,
      });
    }
  });

  it("counts the images a compressed image request asked for when the answer is cut", async () => {
    // The answer's status, the size and quality it names and its first image arrive, then the
    // provider goes away: only the count is the request's.
    answer = (_path, response) => {
      response.writeHead(200, { "content-type": "application/json" });
      response.write('{"created":1763000000,"quality":"low","size":"1024x1024","data":[{"b64_json":"AAAA"}');
      setTimeout(() => response.destroy(), 20);
    };
    const request = JSON.stringify({
      model: "gpt-image-1",
      prompt: "a cat",
      n: 3,
      size: "1024x1024",
      quality: "low",
    });
    const response = await send(
      sluice,
      project,
      "provider-a",
      "images/generations",
      gzipSync(request),
      "gzip",
    );
    await response.text().catch(() => "");
    const row = await rowOf(sluice, response);
    expect(row).toMatchObject({ model: "gpt-image-1", outcome: "error" });
    // Three images at gpt-image-1's low-quality 1024x1024 price, not the default count of one.
    expect(row.cost_usd).toBeCloseTo(3 * 0.011, 10);
  });
});
