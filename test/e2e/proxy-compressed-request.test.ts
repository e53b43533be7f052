import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
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
      expect(await response.text(), String(coding)).toContain('"usage"');
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
    }
    expect(received).toEqual([]);
    // Elsewhere the option does not apply, and the body goes out as sent, for the provider to read.
    const response = await post("embeddings", Buffer.from("zstd bytes"), "zstd");
    await response.text();
    expect(received.map(({ body }) => body.toString())).toEqual(["zstd bytes"]);
    expect(received[0]?.headers["content-encoding"]).toBe("zstd");
  });

  it("meters a compressed streamed call made with the openai SDK's own body", async () => {
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
    let usage: unknown = null;
    for await (const chunk of stream) usage = chunk.usage ?? usage;
    expect(usage).toMatchObject({ prompt_tokens: 1000, completion_tokens: 5000 });
    await sluice.gateway.flushUsage();
    const row = await sluice.gateway.database.db
      .selectFrom("usage_records")
      .selectAll()
      .where("request_id", "=", response.headers.get("x-request-id") ?? "")
      .executeTakeFirstOrThrow();
    expect(row).toMatchObject({ streamed: 1, input_tokens: 1000, output_tokens: 5000 });
  });
});
