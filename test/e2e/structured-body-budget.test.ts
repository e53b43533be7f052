import type { ServerResponse } from "node:http";
import { connect } from "node:net";
import { getHeapStatistics } from "node:v8";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { createSafePdfFetcher } from "../../src/structured/safe-pdf-fetch.js";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import { openUpload, until } from "../support/held-upload.js";
import { type LocalServer, startLocalServer } from "../support/local-server.js";
import { type ProxyStage, startProxyStage } from "../support/proxy-stage.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

const mib = 1024 * 1024;
const budget = 3 * mib;
const schema = { type: "object", properties: { answer: { type: "string" } }, required: ["answer"] };

/** A /v1/text body of exactly `size` bytes. */
function textBody(size: number): string {
  return `{"text":"${"x".repeat(size - '{"text":""}'.length)}"}`;
}

/** A connection of its own to the project's /v1/text, sending the head, then `body` (maybe a part). */
const open = (sluice: TestGateway, project: TestProject, headers: string[], body = "") =>
  openUpload(sluice.url, `/v1/text/${project.projectId}`, project.bearer("provider-a"), headers, body);

/** A whole call of a `size`-byte body. */
const call = (sluice: TestGateway, project: TestProject, size: number) =>
  open(sluice, project, [`content-length: ${size}`], textBody(size));

/**
 * SLUICE_MAX_BUFFERED_BODY_BYTES: the request bodies the structured and image endpoints hold in
 * memory, all calls together. Without it, every connection could hold a body at its own cap (28 MiB
 * at /v1/pdf) for as long as its call ran, and a thousand connections would hold 28 GiB.
 */
describe("the budget of request bodies held in memory", () => {
  let stage: ProxyStage;
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let project: TestProject;
  const held = () => sluice.gateway.bodyBudget.held();

  beforeAll(async () => {
    stage = await startProxyStage(
      { maxBufferedBodyBytes: budget },
      { provider: "provider-a", outputSchema: schema },
    );
    ({ fake, sluice, project } = stage);
  });

  afterAll(() => stage.close());

  beforeEach(() => {
    fake.clear();
    fake.setLatencyMs(0);
  });

  it("answers 503 to bodies past it while calls hold it, and takes them again once it is given back", async () => {
    // Three calls of 1 MiB, held at the provider: the budget is full.
    fake.setLatencyMs(20_000);
    const holding = [0, 1, 2].map(() => call(sluice, project, mib));
    await until(() => fake.requests.length === 3, "the three calls reached the provider");

    // Announced: refused before any of it is sent (no 100 Continue).
    const announced = open(sluice, project, [`content-length: ${mib}`, "expect: 100-continue"]);
    const refused = await announced.answer;
    expect(refused.status).toBe(503);
    expect(refused.headers["retry-after"]).toBe("5");
    expect(refused.body).toMatchObject({
      error: { code: "SERVICE_UNAVAILABLE", details: { retryable: true } },
    });
    expect((refused.body.error as { message: string }).message).toContain("SLUICE_MAX_BUFFERED_BODY_BYTES");
    expect(announced.received()).not.toContain("100 Continue");

    // Chunked: refused while it is read, and its connection closed rather than left waiting.
    const chunked = open(sluice, project, ["transfer-encoding: chunked"], `100000\r\n${textBody(mib)}`);
    expect((await chunked.answer).status).toBe(503);
    await chunked.closed;

    // Nothing was held past the budget, and no call reached the provider but the three.
    expect(held()).toBe(budget);
    expect(fake.requests).toHaveLength(3);

    // A client that leaves gives its call's share back; a call of that size is then taken.
    holding[0]?.socket.destroy();
    await until(() => held() === 2 * mib, "the share of the call whose client left was given back");
    fake.setLatencyMs(0);
    const later = call(sluice, project, mib);
    const answered = await later.answer;
    expect(answered.status).toBe(200);
    expect(answered.body).toEqual({ answer: "fake" });
    later.socket.destroy();
    await until(() => held() === 2 * mib, "the answered call's share was given back");

    for (const exchange of holding) exchange.socket.destroy();
    await until(() => held() === 0, "every share was given back");
  });

  it("counts a body as it arrives, and gives it back when its client leaves mid-upload", async () => {
    const part = textBody(mib).slice(0, 512 * 1024);
    const upload = open(sluice, project, [`content-length: ${mib}`], part);
    await until(() => held() === part.length, "the half sent was counted");
    upload.socket.destroy();
    await until(() => held() === 0, "the share of the upload whose client left was given back");
  });

  it("gives back a pipelined call's share when its client leaves, without waiting for its provider", async () => {
    // The second call waits behind the first on their connection: its answer has no socket yet,
    // and hears no `close` of its own when the client goes.
    fake.setLatencyMs(20_000);
    const request = (size: number) =>
      `POST /v1/text/${project.projectId} HTTP/1.1\r\nhost: x\r\n` +
      `authorization: Bearer ${project.bearer("provider-a")}\r\ncontent-type: application/json\r\n` +
      `content-length: ${size}\r\n\r\n${textBody(size)}`;
    const socket = connect(Number(new URL(sluice.url).port), "127.0.0.1");
    socket.on("error", () => {});
    socket.write(request(1000) + request(2000));
    await until(() => fake.requests.length === 2, "both calls reached the provider");
    expect(held()).toBe(3000);
    socket.destroy();
    await until(() => held() === 0, "both shares were given back");
    // Nor does the provider go on with the second call for no one.
    await until(
      () => fake.requests.every((upstream) => upstream.aborted),
      "both provider calls were aborted",
    );
  });

  it("takes a body larger than the budget when no other is held", async () => {
    const alone = call(sluice, project, 4 * mib);
    expect((await alone.answer).status).toBe(200);
    alone.socket.destroy();
    await until(() => held() === 0, "its share was given back");
  });
});

describe("the budget's default", () => {
  it("is an eighth of V8's heap limit when SLUICE_MAX_BUFFERED_BODY_BYTES is unset", async () => {
    const sluice = await startTestGateway();
    try {
      expect(sluice.gateway.bodyBudget.maxBytes).toBe(Math.floor(getHeapStatistics().heap_size_limit / 8));
    } finally {
      await sluice.close();
    }
  });
});

/**
 * A PDF given by URL is a body of a few bytes, but the call holds the fetched PDF (and the provider's
 * request built from it) as long as an inline one: its bytes count in the budget once fetched.
 * SLUICE_MAX_PDF_FETCHES bounds only the fetches under way, and a call whose fetch has ended gives
 * its place back: calls of fetched PDFs waiting on their provider held them all, counted nowhere.
 */
describe("the budget and a PDF fetched by URL", () => {
  const pdf = Buffer.concat([Buffer.from("%PDF-1.7\n"), Buffer.alloc(2 * mib - 9, 0x20)]);
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let project: TestProject;
  const held = () => sluice.gateway.bodyBudget.held();

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway(
      { ...providerBaseUrls(fake), maxBufferedBodyBytes: budget },
      { fetchPdf: async () => pdf },
    );
    project = await createTestProject(sluice.gateway, { provider: "provider-a", outputSchema: schema });
  });
  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });

  it("counts the fetched PDF while its call runs, refuses a body past the budget then, and gives both back", async () => {
    fake.setLatencyMs(20_000);
    const body = JSON.stringify({ pdf: "https://example.com/a.pdf" });
    const fetched = openUpload(
      sluice.url,
      `/v1/pdf/${project.projectId}`,
      project.bearer("provider-a"),
      [`content-length: ${body.length}`],
      body,
    );
    await until(() => fake.requests.length === 1, "the PDF's call reached the provider");
    // Counted as the same PDF sent inline would be: its base64.
    const inBase64 = Math.ceil(pdf.length / 3) * 4;
    expect(held()).toBe(body.length + inBase64);

    const text = call(sluice, project, 1.5 * mib);
    expect((await text.answer).status).toBe(503);
    // Another fetched PDF past the budget: 503 once fetched, before any provider call.
    const another = openUpload(
      sluice.url,
      `/v1/pdf/${project.projectId}`,
      project.bearer("provider-a"),
      [`content-length: ${body.length}`],
      body,
    );
    const refused = await another.answer;
    expect(refused.status).toBe(503);
    expect(refused.body).toMatchObject({
      error: { code: "SERVICE_UNAVAILABLE", details: { retryable: true } },
    });
    expect(fake.requests).toHaveLength(1);
    expect(held()).toBe(body.length + inBase64);

    fetched.socket.destroy();
    await until(() => held() === 0, "the PDF call's share was given back");
  });
});

/**
 * A PDF host's bytes past the budget are not read: a PDF whose Content-Length does not fit is refused
 * before its body is read, one sent without it at the first chunk that does not fit, and its
 * connection is closed. Before, the whole PDF was downloaded (up to SLUICE_MAX_PDF_BYTES) and only
 * then refused with the same 503.
 */
describe("the budget and a PDF host sending more than fits", () => {
  const size = 8 * mib;
  const piece = 256 * 1024;
  let fake: FakeUpstream;
  let host: LocalServer;
  let sluice: TestGateway;
  let project: TestProject;
  /** The bytes of the PDF the host has written (the socket took them), by path. */
  const sent = new Map<string, number>();
  const held = () => sluice.gateway.bodyBudget.held();

  /** Writes `bytes` of the PDF (its start first) and counts them once the socket took them. */
  const write = (response: ServerResponse, path: string, bytes: Buffer) =>
    new Promise<boolean>((resolve) => {
      if (response.destroyed) return resolve(false);
      response.write(bytes, (error) => {
        if (!error) sent.set(path, (sent.get(path) ?? 0) + bytes.length);
        resolve(!error);
      });
    });
  const pdfPiece = (at: number, length: number) =>
    at === 0
      ? Buffer.concat([Buffer.from("%PDF-1.7\n"), Buffer.alloc(length - 9, 0x20)])
      : Buffer.alloc(length, 0x20);

  beforeAll(async () => {
    host = await startLocalServer((request, response) => {
      const path = request.url ?? "";
      sent.set(path, 0);
      void (async () => {
        if (path === "/announced.pdf") {
          // The head and the PDF's first piece, then the rest a second later if the fetch still reads.
          response.writeHead(200, { "content-type": "application/pdf", "content-length": size });
          await write(response, path, pdfPiece(0, piece));
          await new Promise((resolve) => setTimeout(resolve, 1000));
          await write(response, path, Buffer.alloc(size - piece, 0x20));
          response.end();
          return;
        }
        // No Content-Length: pieces as they come, until the fetch stops reading.
        response.writeHead(200, { "content-type": "application/pdf" });
        for (let at = 0; at < size; at += piece) {
          if (!(await write(response, path, pdfPiece(at, piece)))) return;
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
        response.end();
      })();
    });
    fake = await startFakeUpstream();
    sluice = await startTestGateway(
      { ...providerBaseUrls(fake), maxBufferedBodyBytes: budget },
      // Production's fetcher, except that the local PDF host counts as a public address.
      {
        fetchPdf: createSafePdfFetcher({
          isAllowedAddress: (ip) => ip === "127.0.0.1",
          allowedProtocols: ["http:"],
          maxBytes: 16 * mib,
          timeoutMs: 10_000,
        }),
      },
    );
    project = await createTestProject(sluice.gateway, { provider: "provider-a", outputSchema: schema });
  });
  afterAll(async () => {
    await sluice.close();
    await fake.close();
    await host.close();
  });

  const pdfCall = (path: string) => {
    const body = JSON.stringify({ pdf: `${host.url}${path}` });
    return openUpload(
      sluice.url,
      `/v1/pdf/${project.projectId}`,
      project.bearer("provider-a"),
      [`content-length: ${body.length}`],
      body,
    );
  };

  it("refuses a PDF whose Content-Length does not fit before reading its body, and one sent without it at the first chunk past it", async () => {
    // A call of 2 MiB held at the provider: 1 MiB of the budget is left, 768 KiB of PDF in base64.
    fake.setLatencyMs(20_000);
    const holding = call(sluice, project, 2 * mib);
    await until(() => fake.requests.length === 1, "the holding call reached the provider");

    const announced = pdfCall("/announced.pdf");
    const refused = await announced.answer;
    expect(refused.status).toBe(503);
    expect(refused.body).toMatchObject({
      error: { code: "SERVICE_UNAVAILABLE", details: { retryable: true } },
    });
    // The host's connection is closed after its first piece: the rest is never written.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    expect(sent.get("/announced.pdf")).toBe(piece);

    const chunked = pdfCall("/chunked.pdf");
    expect((await chunked.answer).status).toBe(503);
    // Read up to the first piece that did not fit (a piece or two more on their way in the sockets).
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(sent.get("/chunked.pdf")).toBeLessThan(2 * mib);

    // No provider call but the holding one, and only its body held.
    expect(fake.requests).toHaveLength(1);
    for (const exchange of [announced, chunked]) exchange.socket.destroy();
    await until(() => held() === 2 * mib, "the refused calls gave their shares back");
    holding.socket.destroy();
    await until(() => held() === 0, "every share was given back");
  });
});
