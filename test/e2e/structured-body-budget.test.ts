import { connect } from "node:net";
import { getHeapStatistics } from "node:v8";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import { openUpload, until } from "../support/held-upload.js";
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
