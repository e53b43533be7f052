import { Agent, request as httpRequest, type IncomingMessage, type ServerResponse } from "node:http";
import { connect } from "node:net";
import { gzipSync } from "node:zlib";
import Anthropic, { toFile } from "@anthropic-ai/sdk";
import { GoogleGenAI } from "@google/genai";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { generateAppleKeyPair } from "../fakes/fake-apple.js";
import { type LocalServer, startLocalServer } from "../support/local-server.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowOf,
} from "../support/test-gateway.js";

/**
 * Proxy edge cases found in an audit, each against a provider (and an Apple) that is a plain local
 * HTTP server the test programs request by request.
 */
interface Received {
  method: string;
  url: string;
  headers: IncomingMessage["headers"];
  body: Buffer;
  /** Which of Sluice's connections to the provider the request came on. */
  connection: number | undefined;
}

type Answer = (request: Received, response: ServerResponse) => void;

/** A provider stand-in that hands each request, its body read whole, to `answer`. */
function listen(answer: (request: Received, response: ServerResponse) => void): Promise<LocalServer> {
  return startLocalServer((incoming, response) => {
    const chunks: Buffer[] = [];
    incoming.on("data", (chunk: Buffer) => chunks.push(chunk));
    incoming.on("end", () =>
      answer(
        {
          method: incoming.method ?? "",
          url: incoming.url ?? "",
          headers: incoming.headers,
          body: Buffer.concat(chunks),
          connection: incoming.socket.remotePort,
        },
        response,
      ),
    );
  });
}

const json = (response: ServerResponse, body: unknown) => {
  const payload = Buffer.from(JSON.stringify(body));
  response.writeHead(200, { "content-type": "application/json", "content-length": String(payload.length) });
  response.end(payload);
};

describe("proxy edge cases", () => {
  let provider: LocalServer;
  let answer: Answer;
  const received: Received[] = [];
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    provider = await listen((request, response) => {
      received.push(request);
      answer(request, response);
    });
    sluice = await startTestGateway({
      providerABaseUrl: `${provider.url}/a/v1`,
      providerBBaseUrl: `${provider.url}/b/v1`,
      providerCBaseUrl: `${provider.url}/c/v1beta`,
    });
    project = await createTestProject(sluice.gateway);
  });

  afterAll(async () => {
    await sluice.close();
    await provider.close();
  });

  beforeEach(() => {
    received.length = 0;
    answer = (_request, response) =>
      json(response, { model: "gpt-4o-mini", usage: { prompt_tokens: 1, completion_tokens: 1 } });
  });

  const callA = (path: string, init: RequestInit = {}) =>
    fetch(`${sluice.url}/v1/provider-a/${project.projectId}/${path}`, {
      method: "POST",
      ...init,
      headers: {
        authorization: `Bearer ${project.bearer("provider-a")}`,
        "content-type": "application/json",
        ...(init.headers as Record<string, string> | undefined),
      },
    });

  it("opens a provider connection per concurrent call: calls beyond 256 open streams are not held back", async () => {
    const held: ServerResponse[] = [];
    let arrived = 0;
    let allArrived: () => void = () => {};
    const calls = 300;
    const everyCallArrived = new Promise<void>((resolve) => {
      allArrived = resolve;
    });
    answer = (_request, response) => {
      // A stream that has started and is still running (a long completion, say).
      response.writeHead(200, { "content-type": "text/event-stream" });
      response.write('data: {"choices":[]}\n\n');
      held.push(response);
      if (++arrived === calls) allArrived();
    };
    const responses = Array.from({ length: calls }, () =>
      callA("chat/completions", { body: '{"model":"gpt-4o-mini","stream":true}' }).then(async (response) => {
        await response.text();
        return response.status;
      }),
    );
    // Calls held back show as arrivals that stop while calls wait: the outcome is "stalled" once none
    // arrived for 5 s. A busy machine is slower but still makes progress, however long all 300 take
    // (before, they had to arrive within 5 s in all, and a loaded run saw 122 by then).
    let watch: NodeJS.Timeout | undefined;
    const stalled = new Promise<"stalled">((resolve) => {
      let seen = -1;
      watch = setInterval(() => {
        if (arrived === seen) resolve("stalled");
        seen = arrived;
      }, 5000);
    });
    const outcome = await Promise.race([everyCallArrived.then(() => "all arrived" as const), stalled]);
    clearInterval(watch);
    for (const response of held) response.end("data: [DONE]\n\n");
    // Calls still queued in the gateway reach the provider once streams end; let them finish.
    answer = (_request, response) => {
      response.writeHead(200, { "content-type": "text/event-stream" });
      response.end("data: [DONE]\n\n");
    };
    expect(await Promise.all(responses)).toEqual(Array(calls).fill(200));
    expect(outcome, `${arrived} of ${calls} calls reached the provider while the streams ran`).toBe(
      "all arrived",
    );
  }, 90_000);

  it("counts tokens only for a POST: reading a stored response again (GET, a poll) records none and is free", async () => {
    const stored = {
      id: "resp_1",
      object: "response",
      model: "gpt-4o-mini",
      usage: { input_tokens: 9, output_tokens: 4 },
    };
    answer = (_request, response) => json(response, stored);
    const read = await callA("responses/resp_1", { method: "GET", headers: { "content-type": "" } });
    expect(await read.json()).toEqual(stored);
    expect(await usageRowOf(sluice.gateway, read)).toMatchObject({
      status: 200,
      input_tokens: null,
      output_tokens: null,
      cost_usd: 0,
    });
    const created = await callA("responses", { body: '{"model":"gpt-4o-mini","input":"hi"}' });
    expect(await usageRowOf(sluice.gateway, created)).toMatchObject({ input_tokens: 9, output_tokens: 4 });
  });

  // RFC 9110 9.3.1: content in a GET has no meaning, and a server on the provider's side that reads
  // none (taking the body for the next request on the connection Sluice shares between clients)
  // would see two requests in one. A GET or HEAD with a body is refused, never forwarded.
  it.each(["GET", "HEAD"])(
    "refuses a %s with a body (400) and never forwards it; one without passes",
    async (method) => {
      const sent = (body: string | null) =>
        new Promise<{ status: number; body: string }>((resolve, reject) => {
          const call = httpRequest(
            `${sluice.url}/v1/provider-a/${project.projectId}/responses/resp_1`,
            {
              method,
              headers: {
                authorization: `Bearer ${project.bearer("provider-a")}`,
                ...(body === null ? {} : { "content-length": String(Buffer.byteLength(body)) }),
              },
            },
            (response) => {
              const chunks: Buffer[] = [];
              response.on("data", (chunk: Buffer) => chunks.push(chunk));
              response.on("end", () =>
                resolve({ status: response.statusCode ?? 0, body: Buffer.concat(chunks).toString() }),
              );
            },
          );
          call.on("error", reject);
          call.end(body ?? undefined);
        });
      const refused = await sent('{"model":"gpt-4o-mini"}');
      expect(refused.status).toBe(400);
      if (method === "GET")
        expect(JSON.parse(refused.body)).toMatchObject({
          error: { code: "BAD_REQUEST", message: expect.stringContaining("body") },
        });
      expect(received).toEqual([]);
      expect((await sent(null)).status).toBe(200);
      expect((await sent("")).status).toBe(200);
      expect(received.map((request) => [request.method, request.body.length])).toEqual([
        [method, 0],
        [method, 0],
      ]);
    },
  );

  // RFC 9110 9.3.5 and 9.3.7: content in a DELETE or an OPTIONS has no defined meaning (no call of
  // provider A's API sends one), but is allowed, and a server may take it for a smuggling attempt.
  // It is forwarded framed by its content-length (a chunked one too), and the provider connection
  // that carried it carries nothing after it (undici closes it): a server that read none cannot
  // take it for another client's request. The client's own connection has nothing left unread.
  it.each([
    ["DELETE", 7],
    ["OPTIONS", 7],
    ["DELETE", 100_000],
  ])(
    "forwards a %s's body of %i bytes framed by a content-length, on a provider connection used for nothing after it",
    async (method, size) => {
      const agent = new Agent({ keepAlive: true, maxSockets: 1 });
      const call = (verb: string, body: Buffer | null) =>
        new Promise<{ status: number; reused: boolean }>((resolve, reject) => {
          const outgoing = httpRequest(
            `${sluice.url}/v1/provider-a/${project.projectId}/files/file-1`,
            {
              method: verb,
              agent,
              headers: {
                authorization: `Bearer ${project.bearer("provider-a")}`,
                // Node sends a DELETE's or an OPTIONS's body unframed unless told.
                ...(body === null ? {} : { "transfer-encoding": "chunked" }),
              },
            },
            (response) => {
              response.resume();
              response.on("end", () =>
                resolve({ status: response.statusCode ?? 0, reused: outgoing.reusedSocket }),
              );
            },
          );
          outgoing.on("error", reject);
          if (body !== null) outgoing.write(body.subarray(0, 3));
          outgoing.end(body?.subarray(3));
        });
      const body = Buffer.alloc(size, 0x61);
      try {
        expect(await call("GET", null)).toMatchObject({ status: 200 });
        expect(await call(method, body)).toEqual({ status: 200, reused: true });
        expect(await call("GET", null)).toEqual({ status: 200, reused: true });
        expect(await call(method, null)).toEqual({ status: 200, reused: true });
        expect(await call("GET", null)).toEqual({ status: 200, reused: true });
      } finally {
        agent.destroy();
      }
      const [first, withBody, after, bodiless, last] = received;
      expect(withBody?.headers["content-length"]).toBe(String(size));
      expect(withBody?.headers["transfer-encoding"]).toBeUndefined();
      expect(withBody?.body.equals(body)).toBe(true);
      // As fetch and the SDKs send one: no content-length for no content.
      expect(bodiless?.headers["content-length"]).toBeUndefined();
      expect(bodiless?.body.length).toBe(0);
      // The connection kept alive before the body is the one it came on; none carries a call after it.
      expect(withBody?.connection).toBe(first?.connection);
      expect(after?.connection).not.toBe(withBody?.connection);
      expect([bodiless?.connection, last?.connection]).toEqual([after?.connection, after?.connection]);
    },
  );

  it("answers provider C's file upload (upload/…) 404 with the reason, and never forwards it", async () => {
    const response = await fetch(`${sluice.url}/v1/provider-c/${project.projectId}/upload/v1beta/files`, {
      method: "POST",
      headers: {
        "x-goog-api-key": project.bearer("provider-c"),
        "content-type": "application/json",
        "x-goog-upload-protocol": "resumable",
      },
      body: JSON.stringify({ file: { displayName: "a.pdf" } }),
    });
    expect(response.status).toBe(404);
    const { error } = (await response.json()) as { error: { code: string; message: string } };
    expect(error.code).toBe("NOT_FOUND");
    expect(error.message).toMatch(/^Provider C file uploads do not go through Sluice/);
    expect(received).toHaveLength(0);
  });

  it("never starts a provider C resumable upload through v1beta/files, and never shows an upload URL's key", async () => {
    // `files.create` on the API path (no `upload/`): the upload headers stay behind, so the provider
    // makes no upload session; an upload URL that quoted the key back would show it redacted.
    const key = project.providerKeys["provider-c"];
    answer = (_request, response) => {
      response.writeHead(200, {
        "content-type": "application/json",
        "x-goog-upload-url": `https://generativelanguage.googleapis.com/upload/v1beta/files?upload_id=u1&key=${key}`,
        "x-goog-upload-status": "active",
      });
      response.end("{}");
    };
    const response = await fetch(`${sluice.url}/v1/provider-c/${project.projectId}/v1beta/files`, {
      method: "POST",
      headers: {
        "x-goog-api-key": project.bearer("provider-c"),
        "content-type": "application/json",
        "x-goog-upload-protocol": "resumable",
        "x-goog-upload-command": "start",
        "x-goog-upload-header-content-length": "5",
        "x-goog-upload-header-content-type": "text/plain",
      },
      body: JSON.stringify({ file: { displayName: "a.txt" } }),
    });
    expect(response.status).toBe(200);
    expect(response.headers.get("x-goog-upload-url")).toBe(
      "https://generativelanguage.googleapis.com/upload/v1beta/files?upload_id=u1&key=[redacted]",
    );
    expect(received).toHaveLength(1);
    expect(received[0]!.url).toBe("/c/v1beta/files");
    expect(Object.keys(received[0]!.headers).filter((name) => name.startsWith("x-goog-upload"))).toEqual([]);
  });

  it("answers provider B's file upload 404 with the reason, not a 415 about its multipart form, and never forwards it", async () => {
    const anthropic = new Anthropic({
      apiKey: project.bearer("provider-b"),
      baseURL: `${sluice.url}/v1/provider-b/${project.projectId}`,
      maxRetries: 0,
    });
    const error = await anthropic.beta.files
      .upload({ file: await toFile(Buffer.from("%PDF-1.4 a"), "a.pdf", { type: "application/pdf" }) })
      .then(
        () => null,
        (caught: unknown) => caught as InstanceType<typeof Anthropic.APIError>,
      );
    expect(error?.status).toBe(404);
    expect(error?.message).toMatch(/Provider B's Files API does not go through Sluice/);
    expect(received).toHaveLength(0);
  });

  it("answers the SDKs' calls that are no POST (retrievals, lists, downloads, updates, deletions) on B and C 405 naming the POST-only proxy, and never forwards them", async () => {
    const anthropic = new Anthropic({
      apiKey: project.bearer("provider-b"),
      baseURL: `${sluice.url}/v1/provider-b/${project.projectId}`,
      maxRetries: 0,
    });
    const google = new GoogleGenAI({
      apiKey: project.bearer("provider-c"),
      httpOptions: { baseUrl: `${sluice.url}/v1/provider-c/${project.projectId}` },
    });
    const calls: Array<[string, string, () => Promise<unknown>]> = [
      [
        "provider-b",
        "GET v1/messages/batches/msgbatch_1",
        () => anthropic.messages.batches.retrieve("msgbatch_1"),
      ],
      [
        "provider-b",
        "GET v1/messages/batches/msgbatch_1",
        () => anthropic.messages.batches.results("msgbatch_1"),
      ],
      ["provider-b", "GET v1/messages/batches", () => anthropic.messages.batches.list()],
      [
        "provider-b",
        "DELETE v1/messages/batches/msgbatch_1",
        () => anthropic.messages.batches.delete("msgbatch_1"),
      ],
      ["provider-b", "GET v1/files", () => anthropic.beta.files.list()],
      ["provider-b", "GET v1/files/file_1/content", () => anthropic.beta.files.download("file_1")],
      ["provider-c", "GET v1/cachedContents/c1", () => google.caches.get({ name: "cachedContents/c1" })],
      [
        "provider-c",
        "PATCH v1/cachedContents/c1",
        () => google.caches.update({ name: "cachedContents/c1", config: { ttl: "60s" } }),
      ],
      [
        "provider-c",
        "DELETE v1/cachedContents/c1",
        () => google.caches.delete({ name: "cachedContents/c1" }),
      ],
      ["provider-c", "GET v1/files/f1", () => google.files.get({ name: "files/f1" })],
      ["provider-c", "GET v1/batches/b1", () => google.batches.get({ name: "batches/b1" })],
      ["provider-c", "GET v1/interactions/i1", () => google.interactions.get("i1")],
      ["provider-c", "DELETE v1/interactions/i1", () => google.interactions.delete("i1")],
    ];
    for (const [provider, call, make] of calls) {
      const error = (await make().then(
        () => null,
        (caught: unknown) => caught,
      )) as { status?: number; message?: string } | null;
      expect(error?.status, call).toBe(405);
      expect(error?.message, call).toContain(
        `${provider}'s proxy forwards POST calls only: ${call} does not go through Sluice`,
      );
    }
    expect(received).toHaveLength(0);
  });

  it("forwards the request's content-encoding with the body it describes", async () => {
    const body = gzipSync(JSON.stringify({ model: "gpt-4o-mini", input: "hello" }));
    const response = await callA("embeddings", {
      body,
      headers: { "content-encoding": "gzip" },
    });
    expect(response.status).toBe(200);
    const upstream = received.at(-1) as Received;
    expect(upstream.body.equals(body)).toBe(true);
    expect(upstream.headers["content-encoding"]).toBe("gzip");
  });

  it.each([
    "%252e%252e/admin",
    "files/%252E%252E/admin",
    "%25252e%25252e/admin",
    "a%252fb",
    "a%255cb",
    "%252525252e%252525252e/admin",
  ])("refuses the doubly encoded provider path %s with 400 before any upstream call", async (path) => {
    const response = await callA(path, { body: "{}" });
    expect(response.status).toBe(400);
    expect(((await response.json()) as { error: { code: string } }).error.code).toBe("BAD_REQUEST");
    expect(received).toHaveLength(0);
  });

  // A client that joins its base URL and the path with one slash too many (`…/prj_1/` and
  // `/chat/completions`) is told what is wrong with the path, not only that it is refused.
  it.each([
    ["/chat/completions", "an empty segment (a leading, trailing or doubled slash)"],
    ["chat/completions/", "an empty segment (a leading, trailing or doubled slash)"],
    ["chat//completions", "an empty segment (a leading, trailing or doubled slash)"],
    ["chat%2fcompletions", "an encoded slash or backslash"],
    [
      "%252e%252e/admin",
      "an escape that decodes, decoded again, to a `.` or `..` segment, a slash, a backslash or a NUL",
    ],
  ])("refuses the provider path %s with 400 saying why: %s", async (path, reason) => {
    const response = await callA(path, { body: "{}" });
    expect(response.status).toBe(400);
    const { error } = (await response.json()) as { error: { code: string; message: string } };
    expect(error.code).toBe("BAD_REQUEST");
    expect(error.message).toBe(`The provider path is not allowed: it has ${reason} (docs/proxy.md#paths)`);
    expect(received).toHaveLength(0);
  });

  it.each(["files/report%2520v2", "files/100%25off"])(
    "still forwards the path %s, whose encoded percent sign hides nothing",
    async (path) => {
      const response = await callA(path, { body: "{}" });
      expect(response.status).toBe(200);
      expect(received.at(-1)?.url).toBe(`/a/v1/${path}`);
    },
  );
});

describe("a client that leaves while it is admitted", () => {
  let provider: LocalServer;
  const providerCalls: Received[] = [];
  let apple: LocalServer;
  const appleWaiting: ServerResponse[] = [];
  let appleCalled: () => void = () => {};
  let sluice: TestGateway;
  let project: TestProject;
  const keys = generateAppleKeyPair();
  const deviceToken = Buffer.from("device-token-of-a-client-that-leaves").toString("base64");

  beforeAll(async () => {
    provider = await listen((request, response) => {
      providerCalls.push(request);
      json(response, { model: "gpt-4o-mini", usage: { prompt_tokens: 1, completion_tokens: 1 } });
    });
    // An Apple that answers only when the test says so: the call is admitted meanwhile.
    apple = await listen((_request, response) => {
      appleWaiting.push(response);
      appleCalled();
    });
    sluice = await startTestGateway({
      providerABaseUrl: `${provider.url}/a/v1`,
      deviceCheckProductionUrl: apple.url,
    });
    project = await createTestProject(sluice.gateway, {
      deviceCheck: {
        enabled: true,
        teamId: "TEAM123456",
        keyId: "KEY1234567",
        privateKey: keys.privateKeyPem,
        environment: "production",
      },
    });
  });

  afterAll(async () => {
    await sluice.close();
    await apple.close();
    await provider.close();
  });

  it("records the call as aborted (499) and never calls the provider, though its body was never read", async () => {
    const body = JSON.stringify({ model: "gpt-4o-mini", messages: [] });
    const appleReached = new Promise<void>((resolve) => {
      appleCalled = resolve;
    });
    const socket = connect(Number(new URL(sluice.url).port), "127.0.0.1");
    await new Promise<void>((resolve) => socket.once("connect", resolve));
    socket.write(
      `POST /v1/provider-a/${project.projectId}/chat/completions HTTP/1.1\r\nhost: sluice\r\n` +
        `authorization: Bearer ${project.partialKeys["provider-a"]}.${deviceToken}\r\n` +
        `content-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    await appleReached;
    // The whole request arrived, but the gateway reads the body only once the call is admitted.
    socket.destroy();
    await new Promise((resolve) => setTimeout(resolve, 100));
    for (const response of appleWaiting.splice(0)) response.writeHead(200).end();

    let rows: Array<Record<string, unknown>> = [];
    for (let attempt = 0; attempt < 40 && rows.length === 0; attempt++) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      await sluice.gateway.flushUsage();
      rows = await sluice.gateway.database.db
        .selectFrom("usage_records")
        .selectAll()
        .where("project_id", "=", project.projectId)
        .execute();
    }
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ status: 499, outcome: "aborted", auth_method: "bearer-device-check" });
    expect(providerCalls).toHaveLength(0);
  });
});
