import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ProviderId } from "../../src/providers/provider-id.js";
import { type LocalServer, startLocalServer, startLocalTcpServer } from "../support/local-server.js";
import { injectedKey } from "../support/proxy-key-calls.js";
import {
  adminToken,
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  titleSchema,
  usageRowOf,
} from "../support/test-gateway.js";

/**
 * A compatible server that echoes the request into its success, the key it was sent where the
 * answer names its model (provider A's and B's `model`, C's `modelVersion`), whole or in a stream.
 * A success's body reaches the client unscanned (docs/decisions/0010), but the model it names is
 * also what the call's usage row keeps: in the database in plain text, in the admin API's usage
 * report and in `sluice usage`, where the key, stored sealed, must never be shown again.
 */
describe("a provider's success that names the injected key as its model", () => {
  let upstream: LocalServer;
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    upstream = await startLocalServer((request, response) => {
      let sent = "";
      request.on("data", (chunk: Buffer) => {
        sent += String(chunk);
      });
      request.on("end", () => {
        const key = injectedKey(request);
        const usage = { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 };
        if (sent.includes('"stream":true')) {
          response.writeHead(200, { "content-type": "text/event-stream" });
          const chunk = { id: "c1", object: "chat.completion.chunk", model: key, choices: [] };
          response.end(
            `data: ${JSON.stringify(chunk)}\n\ndata: ${JSON.stringify({ ...chunk, usage })}\n\ndata: [DONE]\n\n`,
          );
          return;
        }
        response.writeHead(200, { "content-type": "application/json" });
        response.end(
          request.url?.startsWith("/c/")
            ? JSON.stringify({
                candidates: [],
                usageMetadata: { promptTokenCount: 1, candidatesTokenCount: 1, totalTokenCount: 2 },
                modelVersion: key,
              })
            : request.url?.startsWith("/b/")
              ? JSON.stringify({
                  id: "msg_1",
                  type: "message",
                  model: key,
                  content: [],
                  usage: { input_tokens: 1, output_tokens: 1 },
                })
              : JSON.stringify({ id: "c1", object: "chat.completion", model: key, choices: [], usage }),
        );
      });
    });
    const url = upstream.url;
    sluice = await startTestGateway({
      providerABaseUrl: `${url}/a/v1`,
      providerBBaseUrl: `${url}/b/v1`,
      providerCBaseUrl: `${url}/c/v1beta`,
    });
    project = await createTestProject(sluice.gateway);
  });

  afterAll(async () => {
    await sluice.close();
    await upstream.close();
  });

  const calls: [string, ProviderId, string, Record<string, unknown>][] = [
    ["provider A", "provider-a", "chat/completions", { model: "gpt-4o-mini", messages: [] }],
    [
      "provider A streamed",
      "provider-a",
      "chat/completions",
      { model: "gpt-4o-mini", messages: [], stream: true, stream_options: { include_usage: true } },
    ],
    ["provider B", "provider-b", "v1/messages", { model: "claude-sonnet-4-5", messages: [] }],
    ["provider C", "provider-c", "v1beta/models/gemini-2.5-flash:generateContent", { contents: [] }],
  ];

  it.each(calls)(
    "%s: the usage row names the model asked, not the key, and the admin report does not show it",
    async (_name, provider, path, body) => {
      const response = await fetch(`${sluice.url}/v1/${provider}/${project.projectId}/${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${project.bearer(provider)}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      expect(response.status).toBe(200);
      await response.arrayBuffer();
      const key = project.providerKeys[provider];
      const row = await usageRowOf(sluice.gateway, response);
      expect(row.model).not.toContain(key);
      expect(row.model).toBe(provider === "provider-c" ? "gemini-2.5-flash" : body.model);
      const report = await fetch(`${sluice.url}/admin/v1/projects/${project.projectId}/usage?groupBy=model`, {
        headers: { authorization: `Bearer ${adminToken}` },
      });
      expect(report.status).toBe(200);
      expect(await report.text()).not.toContain(key);
    },
  );
});

/**
 * A server that names the key in its `transfer-encoding` (a coding Sluice did not offer, so the
 * answer is refused 502): the proxy failure's log line quoted the coding, key and all (lower-cased,
 * which still gives away all but the case of its letters).
 */
describe("a provider's transfer coding that quotes the injected key", () => {
  let upstream: Awaited<ReturnType<typeof startLocalTcpServer>>;
  let sluice: TestGateway;
  let projectId: string;
  let bearer: string;
  /** Mixed case, and of no provider key's form, which the log would redact by its form alone. */
  const key = "Q8pZrX0AbKdWmXYt3HcEp9JnUv1LsWq7Rt5Ne";

  beforeAll(async () => {
    upstream = await startLocalTcpServer((socket) => {
      let head = "";
      socket.on("data", (chunk: Buffer) => {
        head += String(chunk);
        if (!head.includes("\r\n\r\n")) return;
        const sent = /\r\nauthorization: Bearer ([^\r]+)/i.exec(head)?.[1] ?? "";
        socket.end(`HTTP/1.1 401 Unauthorized\r\ntransfer-encoding: ${sent}, chunked\r\n\r\n0\r\n\r\n`);
      });
    });
    sluice = await startTestGateway({ providerABaseUrl: `http://127.0.0.1:${upstream.port}/a/v1` });
    const project = await createTestProject(sluice.gateway);
    const added = await sluice.gateway.admin.addProviderKey(project.projectId, {
      provider: "provider-a",
      apiKey: key,
    });
    projectId = project.projectId;
    bearer = `${added.partialKey}.${project.testKey}`;
  });

  afterAll(async () => {
    await sluice.close();
    await upstream.close();
  });

  it("is refused 502, and neither the answer nor the log quotes the key, in any case", async () => {
    const from = sluice.logs.length;
    const response = await fetch(`${sluice.url}/v1/provider-a/${projectId}/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${bearer}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "gpt-4o-mini", messages: [] }),
    });
    const answer = `${JSON.stringify([...response.headers])} ${await response.text()}`;
    expect(response.status).toBe(502);
    const logged = sluice.logs.slice(from).join("");
    expect(logged).toContain("SLUICE_UNOFFERED_TRANSFER_CODING");
    for (const text of [answer, logged]) expect(text.toLowerCase()).not.toContain(key.toLowerCase());
  });
});

/**
 * A compatible server that echoes the key into the model's output (the JSON object a structured
 * route answers with): unlike a proxied success, which reaches the client as the provider sent it
 * (docs/decisions/0010), this answer is Sluice's own, parsed and checked whole, and the client holds
 * only a share of the key.
 */
describe("a structured answer whose output quotes the injected key", () => {
  let upstream: LocalServer;
  let sluice: TestGateway;
  const projects = {} as Record<ProviderId, TestProject>;

  beforeAll(async () => {
    upstream = await startLocalServer((request, response) => {
      request.resume();
      request.on("end", () => {
        const key = injectedKey(request);
        const output = JSON.stringify({ title: `The key is ${key}` });
        response.writeHead(200, { "content-type": "application/json" });
        response.end(
          JSON.stringify(
            request.url?.startsWith("/c/")
              ? {
                  candidates: [
                    { content: { role: "model", parts: [{ text: output }] }, finishReason: "STOP" },
                  ],
                  usageMetadata: { promptTokenCount: 1, candidatesTokenCount: 1, totalTokenCount: 2 },
                }
              : request.url?.startsWith("/b/")
                ? {
                    id: "msg_1",
                    type: "message",
                    role: "assistant",
                    model: "claude-sonnet-4-5",
                    content: [{ type: "text", text: output }],
                    stop_reason: "end_turn",
                    usage: { input_tokens: 1, output_tokens: 1 },
                  }
                : {
                    id: "c1",
                    object: "chat.completion",
                    created: 1,
                    model: "gpt-4o-mini",
                    choices: [
                      { index: 0, message: { role: "assistant", content: output }, finish_reason: "stop" },
                    ],
                    usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
                  },
          ),
        );
      });
    });
    const url = upstream.url;
    sluice = await startTestGateway({
      providerABaseUrl: `${url}/a/v1`,
      providerBBaseUrl: `${url}/b/v1`,
      providerCBaseUrl: `${url}/c/v1beta`,
    });
    for (const provider of ["provider-a", "provider-b", "provider-c"] as const)
      projects[provider] = await createTestProject(sluice.gateway, { provider, outputSchema: titleSchema });
  });

  afterAll(async () => {
    await sluice.close();
    await upstream.close();
  });

  it.each(["provider-a", "provider-b", "provider-c"] as const)(
    "%s: /v1/text answers the provider's failure (502), without the key",
    async (provider) => {
      const project = projects[provider];
      const response = await fetch(`${sluice.url}/v1/text/${project.projectId}`, {
        method: "POST",
        headers: { authorization: `Bearer ${project.bearer(provider)}`, "content-type": "application/json" },
        body: JSON.stringify({ text: "hello" }),
      });
      const text = await response.text();
      expect(text).not.toContain(project.providerKeys[provider]);
      expect(response.status).toBe(502);
      expect(JSON.parse(text).error.code).toBe("PROVIDER_ERROR");
      // The provider answered, and is paid: the row keeps its tokens.
      const row = await usageRowOf(sluice.gateway, response);
      expect([row.status, row.input_tokens, row.output_tokens]).toEqual([502, 1, 1]);
    },
  );
});

/** The same server on /v1/image: provider A's revised prompt, which the answer passes on, quoting the key. */
describe("a generated image whose revised prompt quotes the injected key", () => {
  const png =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
  let upstream: LocalServer;
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    upstream = await startLocalServer((request, response) => {
      request.resume();
      request.on("end", () => {
        const key = injectedKey(request);
        response.writeHead(200, { "content-type": "application/json" });
        response.end(
          JSON.stringify({
            created: 1,
            data: [
              { b64_json: png, revised_prompt: `A cat, as asked with ${key}` },
              { b64_json: png, revised_prompt: "A cat on a mat" },
            ],
            usage: { input_tokens: 1, output_tokens: 1, total_tokens: 2 },
          }),
        );
      });
    });
    sluice = await startTestGateway({ providerABaseUrl: `${upstream.url}/a/v1` });
    project = await createTestProject(sluice.gateway);
  });

  afterAll(async () => {
    await sluice.close();
    await upstream.close();
  });

  it("answers the images and the other revised prompts, without that one", async () => {
    const response = await fetch(`${sluice.url}/v1/image/${project.projectId}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${project.bearer("provider-a")}`,
        "content-type": "application/json",
      },
      body: JSON.stringify({ prompt: "a cat", model: "gpt-image-1", n: 2 }),
    });
    const text = await response.text();
    expect(text).not.toContain(project.providerKeys["provider-a"]);
    expect(response.status).toBe(200);
    const answer = JSON.parse(text) as { images: unknown[]; providerMetadata?: unknown };
    expect(answer.images).toHaveLength(2);
    expect(answer.providerMetadata).toEqual({
      "provider-a": { images: [{}, { revisedPrompt: "A cat on a mat" }] },
    });
  });
});
