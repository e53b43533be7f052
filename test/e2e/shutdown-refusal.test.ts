import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import BetterSqlite3 from "better-sqlite3";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { shutDown } from "../../src/server.js";
import { createSafePdfFetcher } from "../../src/structured/safe-pdf-fetch.js";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { openUpload, until } from "../support/held-upload.js";
import { afterFirstChunk, proxiedChat } from "../support/proxied-chat.js";
import { expectDeadlineRefusal, rowsAfterShutdown } from "../support/shutdown-refusal.js";
import {
  adminToken,
  createTestProject,
  logLinesOf,
  startTestGateway,
  type TestGateway,
} from "../support/test-gateway.js";

const shutdownTimeoutMs = 300;
const schema = { type: "object", properties: { answer: { type: "string" } }, required: ["answer"] };

/** Waits until the fake upstream has received `count` requests. */
async function untilRequested(fake: FakeUpstream, count: number): Promise<void> {
  const by = Date.now() + 5000;
  while (fake.requests.length < count && Date.now() < by)
    await new Promise((resolve) => setTimeout(resolve, 10));
  expect(fake.requests).toHaveLength(count);
}

/**
 * At the shutdown's deadline a call whose answer has not begun (its provider is still thinking) is
 * refused, not cut: it gets 503 with Retry-After and `Connection: close`, its provider call is
 * aborted, and its usage row says 503, the gateway's refusal, where it said 499 (a client that
 * left) for a connection closed without an answer. A call whose answer began is cut as before.
 */
describe("calls unanswered at the shutdown deadline", () => {
  let fake: FakeUpstream;

  beforeAll(async () => {
    fake = await startFakeUpstream();
  });

  afterEach(() => {
    fake.setLatencyMs(0);
    fake.hangStreamsAfter(null);
    fake.clear();
  });

  afterAll(async () => {
    await fake.close();
  });

  it("answers a proxied call 503 and aborts it, and cuts a stream whose answer began", async () => {
    const sluice = await startTestGateway({
      providerABaseUrl: `${fake.url}/a/v1`,
      shutdownTimeoutMs,
    });
    const project = await createTestProject(sluice.gateway);
    fake.hangStreamsAfter(1);
    const stream = await proxiedChat(sluice.url, project, {
      body: { model: "gpt-4o-mini", messages: [], stream: true },
    });
    const { rest: streamCut } = await afterFirstChunk(stream);
    fake.setLatencyMs(10_000);
    const pending = proxiedChat(sluice.url, project).catch((error: Error) => error);
    await untilRequested(fake, 2);
    const refusedCall = fake.requests[1];

    const startedAt = performance.now();
    await shutDown(sluice.server, sluice.gateway);
    // Not after the refused call's 10 s upstream: its deadline and margin (1.3 s) on an idle
    // machine, half of those 10 s at most on a loaded one.
    expect(performance.now() - startedAt).toBeLessThan(10_000 / 2);
    const requestId = await expectDeadlineRefusal(await pending);
    // The refused call's own abort: the stream's, cut at the same deadline, would answer too.
    expect((await fake.waitForAbort(5000, (request) => request === refusedCall)).aborted).toBe(true);
    expect(await streamCut).toBe("cut");
    expect(rowsAfterShutdown(sluice)).toEqual([
      // The stream's answer began: its row keeps the provider's status, cut short (`aborted`).
      {
        request_id: stream.headers.get("x-request-id"),
        endpoint: "proxy",
        status: 200,
        outcome: "aborted",
        error_code: null,
      },
      {
        request_id: requestId,
        endpoint: "proxy",
        status: 503,
        outcome: "error",
        error_code: "SERVICE_UNAVAILABLE",
      },
    ]);
    // The access line says what the client got: 503, an answer sent whole.
    const accessLine = logLinesOf(sluice).find(
      (line) => line.msg === "request" && line.requestId === requestId,
    );
    expect(accessLine).toMatchObject({ status: 503 });
    expect(accessLine).not.toHaveProperty("aborted");
    expect(sluice.logs.join("")).toContain(
      '"refused":1,"msg":"shutdown deadline reached: unanswered calls refused"',
    );
  });

  it("answers a /v1/text call 503 and aborts its provider call", async () => {
    const sluice = await startTestGateway({
      providerABaseUrl: `${fake.url}/a/v1`,
      shutdownTimeoutMs,
    });
    const project = await createTestProject(sluice.gateway, { provider: "provider-a", outputSchema: schema });
    fake.setLatencyMs(8000);
    const pending = fetch(`${sluice.url}/v1/text/${project.projectId}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${project.bearer("provider-a")}`,
        "content-type": "application/json",
      },
      body: JSON.stringify({ text: "hello" }),
    }).catch((error: Error) => error);
    await untilRequested(fake, 1);

    await shutDown(sluice.server, sluice.gateway);
    const requestId = await expectDeadlineRefusal(await pending);
    expect((await fake.waitForAbort(5000)).aborted).toBe(true);
    expect(rowsAfterShutdown(sluice)).toEqual([
      {
        request_id: requestId,
        endpoint: "text",
        status: 503,
        outcome: "error",
        error_code: "SERVICE_UNAVAILABLE",
      },
    ]);
  });
});

/**
 * A /v1/pdf call whose PDF is still arriving from its URL at the deadline waits for no provider yet:
 * its fetch hears the refusal through the call's client watch, stops, and the call is answered 503
 * as one waiting for its provider, with its row; the PDF's server sees its connection closed.
 */
describe("a /v1/pdf call whose PDF is still arriving by URL at the shutdown deadline", () => {
  it("is answered 503, its fetch stopped, and its row says 503", async () => {
    let served: ServerResponse | undefined;
    const pdfServer = createServer((_request, response) => {
      served = response;
      response.writeHead(200, { "content-type": "application/pdf" });
      response.write("%PDF-1.4\n");
    });
    await new Promise<void>((resolve) => pdfServer.listen(0, "127.0.0.5", resolve));
    const pdfUrl = `http://127.0.0.5:${(pdfServer.address() as AddressInfo).port}/slow.pdf`;
    const sluice = await startTestGateway(
      { shutdownTimeoutMs },
      {
        fetchPdf: createSafePdfFetcher({
          isAllowedAddress: (ip) => ip === "127.0.0.5",
          allowedProtocols: ["http:"],
          maxBytes: 1 << 20,
          timeoutMs: 60_000,
        }),
      },
    );
    try {
      const project = await createTestProject(sluice.gateway, {
        provider: "provider-a",
        outputSchema: schema,
      });
      const pending = fetch(`${sluice.url}/v1/pdf/${project.projectId}`, {
        method: "POST",
        headers: {
          authorization: `Bearer ${project.bearer("provider-a")}`,
          "content-type": "application/json",
        },
        body: JSON.stringify({ pdf: pdfUrl }),
      }).catch((error: Error) => error);
      await until(() => served !== undefined, "the PDF's server answers");
      const pdfClosed = new Promise((resolve) => served?.once("close", resolve));
      await shutDown(sluice.server, sluice.gateway);
      const answer = await pending;
      expect(answer).toBeInstanceOf(Response);
      const response = answer as Response;
      expect(response.status).toBe(503);
      expect(response.headers.get("retry-after")).toBe("1");
      expect(((await response.json()) as { error: { code: string } }).error.code).toBe("SERVICE_UNAVAILABLE");
      await pdfClosed;
      expect(rowsAfterShutdown(sluice)).toEqual([
        {
          request_id: response.headers.get("x-request-id"),
          endpoint: "pdf",
          status: 503,
          outcome: "error",
          error_code: "SERVICE_UNAVAILABLE",
        },
      ]);
    } finally {
      await new Promise((resolve) => pdfServer.close(resolve));
    }
  });
});

/**
 * A /v1/image call whose images are still being uploaded to an S3 vault at the deadline (its provider
 * answered and billed it): the upload hears the refusal through the call's client watch and stops,
 * and the call is answered 503 with its row (503, the billed model named).
 */
describe("a /v1/image call whose S3 upload is still under way at the shutdown deadline", () => {
  it("is answered 503 and its row says 503", async () => {
    const fake = await startFakeUpstream();
    let uploads = 0;
    // A store that takes the upload and never answers.
    const s3 = createServer((request) => {
      uploads++;
      request.resume();
    });
    await new Promise<void>((resolve) => s3.listen(0, "127.0.0.1", resolve));
    const sluice = await startTestGateway({
      providerCBaseUrl: `${fake.url}/c/v1beta`,
      vaultS3Endpoint: `http://127.0.0.1:${(s3.address() as AddressInfo).port}`,
      vaultS3Bucket: "vault",
      vaultS3AccessKeyId: "AKIDTEST",
      vaultS3SecretAccessKey: "s3-secret-for-the-shutdown-test",
      vaultTimeoutMs: 60_000,
      shutdownTimeoutMs,
    });
    try {
      const project = await createTestProject(sluice.gateway, {
        provider: "provider-c",
        teamId: "team1",
        saveImagesToVault: true,
      });
      const pending = fetch(`${sluice.url}/v1/image/${project.projectId}`, {
        method: "POST",
        headers: {
          authorization: `Bearer ${project.bearer("provider-c")}`,
          "content-type": "application/json",
        },
        body: JSON.stringify({ prompt: "a cat" }),
      }).catch((error: Error) => error);
      await until(() => uploads > 0, "the vault receives the upload");
      await shutDown(sluice.server, sluice.gateway);
      const answer = await pending;
      expect(answer).toBeInstanceOf(Response);
      const response = answer as Response;
      expect(response.status).toBe(503);
      expect(response.headers.get("retry-after")).toBe("1");
      expect(((await response.json()) as { error: { message: string } }).error.message).toBe(
        "The gateway is shutting down and stopped this call before its answer began; retry it",
      );
      expect(rowsAfterShutdown(sluice)).toEqual([
        {
          request_id: response.headers.get("x-request-id"),
          endpoint: "image",
          status: 503,
          outcome: "error",
          error_code: "SERVICE_UNAVAILABLE",
        },
      ]);
    } finally {
      s3.closeAllConnections();
      await new Promise((resolve) => s3.close(resolve));
      await fake.close();
    }
  });
});

/**
 * At the shutdown's deadline a call whose request body is still arriving has no answer begun either:
 * it is refused the same way (503, the envelope, Retry-After, `Connection: close`), its body's read
 * ended, nothing done with what arrived. Before, its route went on waiting for the body: the drain
 * counted it as refused (an admin call on SQLite, a structured call) or not at all (a proxied
 * upload), then cut its connection without an answer.
 */
describe("calls whose request body is still arriving at the shutdown deadline", () => {
  let fake: FakeUpstream;

  beforeAll(async () => {
    fake = await startFakeUpstream();
  });

  afterEach(() => {
    fake.clear();
  });

  afterAll(async () => {
    await fake.close();
  });

  /**
   * Sends the head of a POST to `path` and half of its body, waits until the route reads it, shuts
   * the gateway down, and answers what the client got and whether its connection closed.
   */
  async function refusedMidBody(sluice: TestGateway, path: string, bearer: string) {
    let request: IncomingMessage | undefined;
    sluice.server.once("request", (received: IncomingMessage) => {
      request = received;
    });
    const body = JSON.stringify({ name: "Sent while shutting down", text: "hello" });
    const upload = openUpload(
      sluice.url,
      path,
      bearer,
      [`content-length: ${body.length}`],
      body.slice(0, 10),
    );
    // The route has authenticated the call and reads its body, which stops halfway.
    await until(() => (request?.listenerCount("data") ?? 0) > 0, "the route reads the body");
    const from = sluice.logs.length;
    await shutDown(sluice.server, sluice.gateway);
    const answer = await upload.answer;
    // Closed after the answer, not held open for the rest of the body.
    await upload.closed;
    const requestId = answer.headers["x-request-id"];
    expect(answer).toMatchObject({
      status: 503,
      headers: { "retry-after": "1", connection: "close" },
      body: {
        error: {
          code: "SERVICE_UNAVAILABLE",
          details: { retryable: true },
          message: "The gateway is shutting down and stopped this call before its answer began; retry it",
          requestId,
        },
      },
    });
    const lines = logLinesOf(sluice, from);
    expect(lines).toContainEqual(
      expect.objectContaining({ msg: "shutdown deadline reached: unanswered calls refused", refused: 1 }),
    );
    expect(lines.filter((line) => line.msg === "shutdown deadline reached: connections cut")).toEqual([]);
    expect(lines).toContainEqual(expect.objectContaining({ msg: "request", requestId, status: 503 }));
    expect(lines.filter((line) => line.level === "error")).toEqual([]);
    return requestId;
  }

  it("answers an admin write 503 and makes no change", async () => {
    const sluice = await startTestGateway({ shutdownTimeoutMs });
    const project = await createTestProject(sluice.gateway);
    await refusedMidBody(sluice, "/admin/v1/projects", adminToken);
    const database = new BetterSqlite3(join(sluice.gateway.config.dataDir, "sluice.sqlite"), {
      readonly: true,
    });
    try {
      expect(database.prepare("select id from projects").all()).toEqual([{ id: project.projectId }]);
    } finally {
      database.close();
    }
    // No usage row: the admin API writes none.
    expect(rowsAfterShutdown(sluice)).toEqual([]);
  });

  it.each([
    ["a /v1/text call", "calls no provider", "text", { provider: "provider-a", outputSchema: schema }],
    ["a proxied upload", "forwards nothing", "proxy", {}],
  ] as const)("answers %s 503, %s, and its row says 503", async (_call, _provider, endpoint, fields) => {
    const sluice = await startTestGateway({ providerABaseUrl: `${fake.url}/a/v1`, shutdownTimeoutMs });
    const project = await createTestProject(sluice.gateway, fields);
    const path =
      endpoint === "text"
        ? `/v1/text/${project.projectId}`
        : `/v1/provider-a/${project.projectId}/chat/completions`;
    const requestId = await refusedMidBody(sluice, path, project.bearer("provider-a"));
    expect(fake.requests).toEqual([]);
    expect(rowsAfterShutdown(sluice)).toEqual([
      {
        request_id: requestId,
        endpoint,
        status: 503,
        outcome: "error",
        error_code: "SERVICE_UNAVAILABLE",
      },
    ]);
  });
});
