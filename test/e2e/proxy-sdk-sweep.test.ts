import { randomBytes } from "node:crypto";
import { request } from "node:http";
import { connect } from "node:net";
import { createServer as createTlsServer, type Server as TlsServer } from "node:tls";
import { toFile as anthropicFile } from "@anthropic-ai/sdk";
import { GoogleGenAI } from "@google/genai";
import OpenAI, { toFile } from "openai";
import { OpenAIRealtimeWS } from "openai/realtime/ws";
import { ResponsesWS } from "openai/resources/responses/ws";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { useProxyStage } from "../support/proxy-stage.js";
import { sdkClients } from "../support/sdk-clients.js";
import { selfSigned } from "../support/self-signed.js";

/**
 * The SDK calls real apps make through the proxies beyond chat, messages, generateContent, their
 * streams and embeddings (proxy-sdk.test.ts), each driven by the official SDK against the fake
 * upstream's recorded answer shapes: what the app gets, what reaches the provider, and the usage
 * row. Calls that cannot go through Sluice get a clear error, before any byte reaches the provider.
 */
describe("the official SDKs' other calls through the proxies", () => {
  const stage = useProxyStage(sdkClients);

  beforeEach(() => {
    stage.fake.clear();
    stage.fake.setUsage({ input: 11, output: 7, cached: 3, reasoning: 2 });
  });

  /** The rows `call` adds (after waiting `settleMs` for rows that are not written). */
  async function rowsOf(call: () => Promise<unknown>, expected: number) {
    const before = new Set((await stage.usageRows()).map((row) => row.request_id));
    await call();
    for (const deadline = Date.now() + 5000; ; ) {
      const added = (await stage.usageRows()).filter((row) => !before.has(row.request_id));
      if (added.length >= expected || Date.now() > deadline) {
        if (expected === 0) await new Promise((resolve) => setTimeout(resolve, 200));
        return (await stage.usageRows()).filter((row) => !before.has(row.request_id));
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  async function rowOf(call: () => Promise<unknown>) {
    const rows = await rowsOf(call, 1);
    expect(rows).toHaveLength(1);
    return rows[0]!;
  }

  const free = {
    input_tokens: null,
    output_tokens: null,
    cached_tokens: null,
    reasoning_tokens: null,
    cost_usd: 0,
  };

  describe("provider A (openai)", () => {
    it("records the Responses API's tokens and cost, streamed (from response.completed) and not, alike", async () => {
      const buffered = await rowOf(async () => {
        const response = await stage.openai.responses.create({ model: "gpt-4o", input: "Hi" });
        expect(response.usage).toMatchObject({ input_tokens: 11, output_tokens: 7 });
      });
      const streamed = await rowOf(async () => {
        const stream = stage.openai.responses.stream({ model: "gpt-4o", input: "Hi" });
        const final = await stream.finalResponse();
        expect(final.usage).toMatchObject({ input_tokens: 11, output_tokens: 7 });
      });
      const tokens = { input_tokens: 11, output_tokens: 7, cached_tokens: 3, reasoning_tokens: 2 };
      expect(buffered).toMatchObject({ status: 200, outcome: "ok", model: "gpt-4o", streamed: 0, ...tokens });
      expect(streamed).toMatchObject({ status: 200, outcome: "ok", model: "gpt-4o", streamed: 1, ...tokens });
      expect(buffered.cost_usd).toBeGreaterThan(0);
      expect(streamed.cost_usd).toBe(buffered.cost_usd);
    });

    it("forwards models.retrieve to the provider (the list is the catalogue's) and records it as free", async () => {
      const row = await rowOf(async () => {
        const model = await stage.openai.models.retrieve("gpt-4o");
        expect(model).toMatchObject({ id: "gpt-4o", object: "model" });
      });
      expect(stage.fake.last()).toMatchObject({ method: "GET", path: "/a/v1/models/gpt-4o" });
      expect(row).toMatchObject({ status: 200, outcome: "ok", ...free });
      // The list is Sluice's own answer: no provider call and no row.
      const listed = await rowsOf(async () => {
        const ids: string[] = [];
        for await (const model of stage.openai.models.list()) ids.push(model.id);
        expect(ids).toContain("gpt-4o");
      }, 0);
      expect(listed).toHaveLength(0);
      expect(stage.fake.requests).toHaveLength(1);
    });

    it("forwards files.create's form and files.delete's DELETE, and records both as free", async () => {
      const content = Buffer.from('{"custom_id":"1"}\n');
      const created = await rowOf(async () => {
        const file = await stage.openai.files.create({
          file: await toFile(content, "in.jsonl"),
          purpose: "batch",
        });
        expect(file).toMatchObject({
          id: "file-abc123",
          filename: "in.jsonl",
          bytes: content.length,
          purpose: "batch",
        });
      });
      expect(created).toMatchObject({ status: 200, outcome: "ok", ...free });
      const deleted = await rowOf(async () => {
        expect(await stage.openai.files.delete("file-abc123")).toEqual({
          id: "file-abc123",
          object: "file",
          deleted: true,
        });
      });
      const sent = stage.fake.last()!;
      expect(sent).toMatchObject({ method: "DELETE", path: "/a/v1/files/file-abc123" });
      expect(sent.body).toHaveLength(0);
      expect(sent.headers.authorization).toBe(`Bearer ${stage.project.providerKeys["provider-a"]}`);
      expect(deleted).toMatchObject({ status: 200, outcome: "ok", ...free });
    });
  });

  describe("provider A (openai): the Uploads API", () => {
    /** What the SDK sent Sluice, read from the request its fetch was given: bytes and content type. */
    const sent: Array<{ body: Buffer; type: string | null }> = [];
    let openai: OpenAI;

    beforeAll(() => {
      openai = new OpenAI({
        baseURL: `${stage.sluice.url}/v1/provider-a/${stage.project.projectId}`,
        apiKey: stage.project.bearer("provider-a"),
        maxRetries: 0,
        fetch: async (input, init) => {
          const request = new Request(input, init);
          // (The SDK first fetches a `data:` URL, to learn whether this fetch takes FormData.)
          if (request.url.startsWith(stage.sluice.url))
            sent.push({
              body: Buffer.from(await request.clone().arrayBuffer()),
              type: request.headers.get("content-type"),
            });
          return fetch(request);
        },
      });
    });

    beforeEach(() => {
      sent.length = 0;
    });

    it("goes through part by part (uploads.create, each part's form byte for byte, uploads.complete), each call free", async () => {
      // Parts of any bytes: line ends, dashes that start a delimiter, and every byte value.
      const parts = [
        Buffer.concat([Buffer.from("\r\n--not-the-boundary\r\n\r\n"), randomBytes(70_000)]),
        Buffer.from(Array.from({ length: 256 }, (_, index) => index)),
      ];
      const bytes = parts[0]!.length + parts[1]!.length;
      const rows = await rowsOf(async () => {
        const upload = await openai.uploads.create({
          bytes,
          filename: "in.jsonl",
          mime_type: "text/jsonl",
          purpose: "batch",
        });
        expect(upload).toMatchObject({ id: "upload_fake1", object: "upload", status: "pending" });
        const ids: string[] = [];
        for (const data of parts)
          ids.push((await openai.uploads.parts.create(upload.id, { data: new Blob([data]) })).id);
        const done = await openai.uploads.complete(upload.id, { part_ids: ids });
        expect(done).toMatchObject({
          status: "completed",
          file: { id: "file-upload1", object: "file", bytes, filename: "in.jsonl", purpose: "batch" },
        });
      }, 4);
      expect(stage.fake.requests.map((request) => `${request.method} ${request.path}`)).toEqual([
        "POST /a/v1/uploads",
        "POST /a/v1/uploads/upload_fake1/parts",
        "POST /a/v1/uploads/upload_fake1/parts",
        "POST /a/v1/uploads/upload_fake1/complete",
      ]);
      // Every body reached the provider as the SDK wrote it, a part's form with the content type
      // that names its boundary, and its `data` part's bytes whole within it.
      expect(sent).toHaveLength(4);
      stage.fake.requests.forEach((request, index) => {
        expect(request.body.equals(sent[index]!.body), request.path).toBe(true);
        expect(request.headers["content-type"]).toBe(sent[index]!.type);
        expect(request.headers.authorization).toBe(`Bearer ${stage.project.providerKeys["provider-a"]}`);
      });
      for (const [index, data] of parts.entries()) {
        const part = stage.fake.requests[index + 1]!;
        expect(part.headers["content-type"]).toMatch(/^multipart\/form-data; boundary=\S+$/);
        expect(part.body.includes(data)).toBe(true);
      }
      expect(rows).toHaveLength(4);
      for (const row of rows) expect(row).toMatchObject({ status: 200, outcome: "ok", ...free });
    });
  });

  describe("provider B (@anthropic-ai/sdk)", () => {
    it("forwards the beta message batches' create (betas as anthropic-beta) with no tokens, and answers its retrieve 405", async () => {
      const row = await rowOf(async () => {
        const batch = await stage.anthropic.beta.messages.batches.create({
          requests: [
            {
              custom_id: "first",
              params: {
                model: "claude-sonnet-4-5",
                max_tokens: 64,
                messages: [{ role: "user", content: "Hi" }],
              },
            },
          ],
          betas: ["message-batches-2024-09-24"],
        });
        expect(batch).toMatchObject({ id: "msgbatch_fake1", processing_status: "in_progress" });
      });
      const sent = stage.fake.last()!;
      expect(sent).toMatchObject({ method: "POST", path: "/b/v1/messages/batches" });
      expect(sent.headers["anthropic-beta"]).toBe("message-batches-2024-09-24");
      // Billed for the requests it runs later, which only its retrieval and results (GETs) see.
      expect(row).toMatchObject({ status: 200, outcome: "ok", input_tokens: null, cost_usd: null });
      const error = await stage.anthropic.beta.messages.batches
        .retrieve("msgbatch_fake1")
        .catch((caught) => caught);
      expect(error).toMatchObject({ status: 405 });
      expect(String(error.message)).toMatch(
        /GET v1\/messages\/batches\/msgbatch_fake1 does not go through Sluice/,
      );
      expect(stage.fake.requests).toHaveLength(1);
    });

    it("answers the Files API's upload (files.upload, not only beta.files.upload) 404 with the reason, and never forwards it", async () => {
      const error = await stage.anthropic.files
        .upload({
          file: await anthropicFile(Buffer.from("%PDF-1.4 a"), "a.pdf", { type: "application/pdf" }),
        })
        .catch((caught) => caught);
      expect(error).toMatchObject({ status: 404 });
      expect(String(error.message)).toMatch(/Provider B's Files API does not go through Sluice/);
      expect(stage.fake.requests).toHaveLength(0);
    });

    it("records beta.messages.countTokens (betas as anthropic-beta) as free, as messages.countTokens", async () => {
      const row = await rowOf(async () => {
        const count = await stage.anthropic.beta.messages.countTokens({
          model: "claude-sonnet-4-5",
          messages: [{ role: "user", content: "Hi" }],
          betas: ["context-1m-2025-08-07"],
        });
        expect(count).toEqual({ input_tokens: 11 });
      });
      expect(stage.fake.last()).toMatchObject({
        method: "POST",
        path: "/b/v1/messages/count_tokens",
      });
      expect(stage.fake.last()!.headers["anthropic-beta"]).toBe(
        // The SDK adds its own token-counting beta after the ones given.
        "context-1m-2025-08-07,token-counting-2024-11-01",
      );
      expect(row).toMatchObject({ status: 200, outcome: "ok", model: "claude-sonnet-4-5", ...free });
    });

    it("answers a Skills API upload (skills.create, a multipart form) 415 and its list (GET) 405, and never forwards them", async () => {
      const skill = await anthropicFile(Buffer.from("---\nname: x\n---\n"), "x/SKILL.md");
      for (const create of [
        () => stage.anthropic.skills.create({ files: [skill] }),
        () => stage.anthropic.beta.skills.create({ files: [skill] }),
      ]) {
        const row = await rowOf(async () => {
          const error = await create().catch((caught) => caught);
          expect(error).toMatchObject({ status: 415 });
          expect(error.error.error).toMatchObject({
            code: "UNSUPPORTED_MEDIA_TYPE",
            message: expect.stringMatching(/^Content-Type must be application\/json/),
          });
        });
        expect(row).toMatchObject({ status: 415, error_code: "UNSUPPORTED_MEDIA_TYPE" });
      }
      const listed = await (async () => {
        for await (const _skill of stage.anthropic.skills.list()) return null;
      })().catch((caught) => caught);
      expect(listed).toMatchObject({ status: 405 });
      expect(String(listed.message)).toMatch(/GET v1\/skills does not go through Sluice/);
      expect(stage.fake.requests).toHaveLength(0);
    });

    it("passes a beta message's betas on as anthropic-beta and records its tokens", async () => {
      const row = await rowOf(() =>
        stage.anthropic.beta.messages.create({
          model: "claude-sonnet-4-5",
          max_tokens: 16,
          messages: [{ role: "user", content: "Hi" }],
          betas: ["context-1m-2025-08-07", "token-efficient-tools-2025-02-19"],
        }),
      );
      expect(stage.fake.last()!.headers["anthropic-beta"]).toBe(
        "context-1m-2025-08-07,token-efficient-tools-2025-02-19",
      );
      expect(row).toMatchObject({
        status: 200,
        model: "claude-sonnet-4-5",
        input_tokens: 11,
        output_tokens: 7,
      });
    });
  });

  describe("provider C (@google/genai)", () => {
    it("records caches.create with the model the cache is for (its body's, models/ left out), no tokens and an unknown cost", async () => {
      const row = await rowOf(async () => {
        const cache = await stage.google.caches.create({
          model: "gemini-2.5-flash",
          config: { contents: "A long document", ttl: "300s" },
        });
        expect(cache).toMatchObject({
          name: "cachedContents/fake-cache-1",
          model: "models/gemini-2.5-flash",
        });
      });
      expect(stage.fake.last()).toMatchObject({ method: "POST", path: "/c/v1/cachedContents" });
      expect(stage.fake.last()!.json).toMatchObject({ model: "models/gemini-2.5-flash" });
      // Billed by the hour it is stored, which the catalogue does not price: not free.
      expect(row).toMatchObject({
        status: 200,
        outcome: "ok",
        model: "gemini-2.5-flash",
        input_tokens: null,
        output_tokens: null,
        cost_usd: null,
      });
    });

    it("records authTokens.create (an ephemeral token for the Live API, which the app uses with the provider directly) as free", async () => {
      const google = new GoogleGenAI({
        apiKey: stage.project.bearer("provider-c"),
        httpOptions: {
          baseUrl: `${stage.sluice.url}/v1/provider-c/${stage.project.projectId}`,
          apiVersion: "v1alpha",
        },
      });
      const row = await rowOf(async () => {
        const token = await google.authTokens.create({
          config: { uses: 1, expireTime: "2025-11-13T02:43:20Z" },
        });
        expect(token).toMatchObject({ name: "auth_tokens/fake-ephemeral-token-1", uses: 1 });
      });
      expect(stage.fake.last()).toMatchObject({ method: "POST", path: "/c/v1alpha/auth_tokens" });
      expect(stage.fake.last()!.json).toMatchObject({ uses: 1, expireTime: "2025-11-13T02:43:20Z" });
      expect(stage.fake.last()!.headers["x-goog-api-key"]).toBe(stage.project.providerKeys["provider-c"]);
      // Minting bills nothing; the session it opens is billed, and never passes through Sluice.
      expect(row).toMatchObject({ status: 200, outcome: "ok", ...free });
    });

    it("answers files.upload and a file search store's upload (resumable uploads that start at upload/…, outside the API's path) 404 with the reason, and never forwards them", async () => {
      const file = new Blob(["hello"], { type: "text/plain" });
      const rows = await rowsOf(async () => {
        for (const upload of [
          () => stage.google.files.upload({ file, config: { mimeType: "text/plain" } }),
          () =>
            stage.google.fileSearchStores.uploadToFileSearchStore({
              fileSearchStoreName: "fileSearchStores/store-1",
              file,
              config: { mimeType: "text/plain" },
            }),
        ]) {
          const error = await upload().catch((caught) => caught);
          expect(error).toMatchObject({ status: 404 });
          expect(String(error.message)).toMatch(/Provider C file uploads do not go through Sluice/);
          // Nothing of the provider's: no upload URL, host or key.
          expect(String(error.message)).not.toMatch(/googleapis|upload_id|x-goog-upload-url/i);
        }
      }, 0);
      expect(rows).toHaveLength(0);
      expect(stage.fake.requests).toHaveLength(0);
    });
  });

  describe("WebSocket connections", () => {
    let tls: TlsServer;
    let tlsUrl: string;
    let cert: Buffer;

    beforeAll(async () => {
      // The Realtime SDK connects with wss: whatever the base URL's scheme, so Sluice is put behind
      // TLS, as it is served in production (a terminating proxy in front of it, here a local one).
      const pair = selfSigned();
      cert = pair.cert;
      const sluicePort = Number(new URL(stage.sluice.url).port);
      tls = createTlsServer(pair, (socket) => {
        const inner = connect(sluicePort, "127.0.0.1");
        socket.pipe(inner).pipe(socket);
        socket.on("error", () => inner.destroy());
        inner.on("error", () => socket.destroy());
      });
      await new Promise<void>((resolve) => tls.listen(0, "127.0.0.1", resolve));
      const { port } = tls.address() as { port: number };
      tlsUrl = `https://localhost:${port}`;
    });

    afterAll(() => new Promise<void>((resolve) => tls.close(() => resolve())));

    it("answers provider A's Realtime WebSocket (OpenAIRealtimeWS) with a clear 404 at once, never calling the provider", async () => {
      const client = new OpenAI({
        baseURL: `${tlsUrl}/v1/provider-a/${stage.project.projectId}`,
        apiKey: stage.project.bearer("provider-a"),
        maxRetries: 0,
      });
      const started = Date.now();
      const rows = await rowsOf(async () => {
        const realtime = await OpenAIRealtimeWS.create(client, {
          model: "gpt-realtime",
          options: { ca: cert },
        });
        const error = await new Promise<Error>((resolve) => {
          realtime.on("error", resolve);
          realtime.socket.on("open", () => resolve(new Error("opened")));
        });
        expect(error.message).toMatch(/Unexpected server response: 404/);
      }, 0);
      expect(Date.now() - started).toBeLessThan(5000);
      expect(rows).toHaveLength(0);
      expect(stage.fake.requests).toHaveLength(0);
    });

    it("answers the Responses API's WebSocket mode (ResponsesWS) 404 as well, with no row", async () => {
      const rows = await rowsOf(async () => {
        const socket = new ResponsesWS(stage.openai);
        const error = await new Promise<Error>((resolve) => {
          socket.on("error", resolve);
          socket.on("event", () => resolve(new Error("an event came")));
        });
        socket.close();
        expect(error.message).toMatch(/404/);
      }, 0);
      expect(rows).toHaveLength(0);
      expect(stage.fake.requests).toHaveLength(0);
    });

    it("forwards a GET whose Upgrade names another protocol (h2c) as the plain GET it is", async () => {
      const response = await fetchWithUpgrade(
        `${stage.sluice.url}/v1/provider-a/${stage.project.projectId}/models/gpt-4o`,
        stage.project.bearer("provider-a"),
      );
      expect(response).toMatchObject({ status: 200 });
      expect(JSON.parse(response.body)).toMatchObject({ id: "gpt-4o" });
      expect(stage.fake.last()).toMatchObject({ method: "GET", path: "/a/v1/models/gpt-4o" });
      expect(stage.fake.last()!.headers.upgrade).toBeUndefined();
    });

    it("names the reason in the 404's body, for the Realtime API and the Responses API's WebSocket mode alike", async () => {
      for (const path of ["realtime?model=gpt-realtime", "responses"]) {
        const { status, body } = await refusedHandshake(
          `${stage.sluice.url}/v1/provider-a/${stage.project.projectId}/${path}`,
          {
            authorization: `Bearer ${stage.project.bearer("provider-a")}`,
          },
        );
        expect(status).toBe(404);
        expect(JSON.parse(body).error).toMatchObject({
          code: "NOT_FOUND",
          message: expect.stringMatching(/^WebSocket connections do not go through Sluice/),
        });
      }
      expect(stage.fake.requests).toHaveLength(0);
    });

    it("answers provider C's Live API (live.connect) 405, naming the WebSocket as the reason", async () => {
      const error = await stage.google.live
        .connect({ model: "gemini-live-2.5-flash-preview", callbacks: { onmessage() {} } })
        .catch((caught: Error) => caught);
      expect(String((error as Error).message)).toMatch(/Unexpected server response: 405/);
      const wsBase = `${stage.sluice.url}/v1/provider-c/${stage.project.projectId}`;
      const { status, body } = await refusedHandshake(
        `${wsBase}/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent`,
        { "x-goog-api-key": stage.project.bearer("provider-c") },
      );
      expect(status).toBe(405);
      expect(JSON.parse(body).error.message).toMatch(/WebSocket connections do not go through Sluice/);
      // It names the way that works: an ephemeral token minted through Sluice, used with the provider.
      expect(JSON.parse(body).error.message).toMatch(
        /ephemeral token minted through Sluice, authTokens\.create/,
      );
      expect(stage.fake.requests).toHaveLength(0);
    });
  });
});

/** A GET asking to upgrade to HTTP/2 (h2c), as a client may on any request; answered as HTTP/1.1. */
function fetchWithUpgrade(url: string, bearer: string): Promise<{ status: number; body: string }> {
  return answerTo(url, {
    authorization: `Bearer ${bearer}`,
    connection: "Upgrade, HTTP2-Settings",
    upgrade: "h2c",
    "http2-settings": "AAMAAABkAAQAoAAAAAIAAAAA",
  });
}

/**
 * The status and body a WebSocket handshake to `url` (http:) is refused with: the request a
 * WebSocket client opens with (RFC 6455 §4.1), made with node:http, which reads the answer as any.
 */
function refusedHandshake(
  url: string,
  headers: Record<string, string>,
): Promise<{ status: number; body: string }> {
  return answerTo(url, {
    ...headers,
    connection: "Upgrade",
    upgrade: "websocket",
    "sec-websocket-key": randomBytes(16).toString("base64"),
    "sec-websocket-version": "13",
  });
}

/** The status and body of a GET of `url` with `headers`, made with node:http; an upgrade taken fails it. */
function answerTo(url: string, headers: Record<string, string>): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const outgoing = request(url, { headers });
    outgoing.on("upgrade", () => reject(new Error("the upgrade was taken")));
    outgoing.on("error", reject);
    outgoing.on("response", (response) => {
      let body = "";
      response.on("data", (chunk: Buffer) => {
        body += String(chunk);
      });
      response.on("end", () => resolve({ status: response.statusCode ?? 0, body }));
    });
    outgoing.end();
  });
}
