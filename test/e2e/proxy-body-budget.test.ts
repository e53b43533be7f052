import { type AddressInfo, createServer, type Socket } from "node:net";
import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type FakeUpstream, providerBaseUrls } from "../fakes/fake-upstream.js";
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

/** A chat completions body of exactly `size` bytes, with `fields` (`"stream":true,`) before its messages. */
function chatBody(size: number, fields = ""): string {
  const empty = `{"model":"gpt-5.4-mini",${fields}"messages":[{"role":"user","content":""}]}`;
  return `${empty.slice(0, -4)}${"x".repeat(size - empty.length)}"}]}`;
}

/** A chat completions body of `size` bytes with `fields`, gzipped (a few KiB: its content is one letter). */
function gzippedChat(size: number, fields: string): Buffer {
  return gzipSync(chatBody(size, fields));
}

/**
 * SLUICE_MAX_BUFFERED_BODY_BYTES on the proxies: a proxied call holds its whole body until it is
 * sent to the provider (up to SLUICE_MAX_BODY_BYTES, 20 MiB), so without the budget a thousand
 * connections each uploading one slowly held 20 GiB.
 */
describe("the budget of request bodies on the proxies", () => {
  let stage: ProxyStage;
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let project: TestProject;
  const held = () => sluice.gateway.bodyBudget.held();
  const open = (headers: string[], body = "") =>
    openUpload(
      sluice.url,
      `/v1/provider-a/${project.projectId}/chat/completions`,
      project.bearer("provider-a"),
      headers,
      body,
    );

  beforeAll(async () => {
    stage = await startProxyStage(
      { maxBufferedBodyBytes: budget, metricsEnabled: true },
      { provider: "provider-a" },
    );
    ({ fake, sluice, project } = stage);
  });

  afterAll(() => stage.close());

  beforeEach(() => {
    fake.clear();
    fake.setLatencyMs(0);
  });

  it("answers 503 to a body past it while uploads hold it, and takes one again once a share is given back", async () => {
    // Three uploads of 1 MiB, each held just short of its end: the budget is full.
    const whole = chatBody(mib);
    const uploads = [0, 1, 2].map(() => open([`content-length: ${mib}`], whole.slice(0, mib - 16)));
    await until(() => held() === 3 * (mib - 16), "the three uploads were counted");

    const announced = open([`content-length: ${mib}`, "expect: 100-continue"]);
    const refused = await announced.answer;
    expect(refused.status).toBe(503);
    expect(refused.headers["retry-after"]).toBe("5");
    expect(refused.body).toMatchObject({
      error: { code: "SERVICE_UNAVAILABLE", details: { retryable: true } },
    });
    expect(announced.received()).not.toContain("100 Continue");
    expect(fake.requests).toHaveLength(0);
    // An operator sees the bytes held and the refusal.
    const metrics = await (await fetch(`${sluice.url}/metrics`)).text();
    expect(metrics).toContain(`\nsluice_buffered_body_bytes ${3 * (mib - 16)}\n`);
    expect(metrics).toContain("\nsluice_body_budget_refusals_total 1\n");

    uploads[0]?.socket.destroy();
    await until(() => held() === 2 * (mib - 16), "the share of the upload whose client left was given back");
    const later = open([`content-length: ${mib}`], whole);
    expect((await later.answer).status).toBe(200);
    later.socket.destroy();

    // The rest of an upload completes its call; its share is given back.
    uploads[1]?.socket.write(whole.slice(mib - 16));
    expect((await uploads[1]?.answer)?.status).toBe(200);
    for (const upload of uploads) upload.socket.destroy();
    await until(() => held() === 0, "every share was given back");
  });

  it("gives a large body's share back once it is sent, while its answer is still awaited", async () => {
    fake.setLatencyMs(20_000);
    const call = open([`content-length: ${mib}`], chatBody(mib));
    await until(() => fake.requests.length === 1, "the call reached the provider");
    await until(() => held() === 0, "the sent body's share was given back");
    call.socket.destroy();
  });

  it("holds a small body's share for the whole call (undici keeps such a body until the answer)", async () => {
    fake.setLatencyMs(20_000);
    const size = 16 * 1024;
    const call = open([`content-length: ${size}`], chatBody(size));
    await until(() => fake.requests.length === 1, "the call reached the provider");
    expect(held()).toBe(size);
    call.socket.destroy();
    await until(() => held() === 0, "the share of the call whose client left was given back");
  });

  it("holds a small compressed body's share while undici keeps it, after its decoded copy is let go", async () => {
    // Decoded to see that it asks for usage already (it does), then forwarded as sent: undici
    // keeps its few KiB until the answer ends, as it keeps any body of 64 KiB or less.
    fake.setLatencyMs(20_000);
    const gz = gzippedChat(8 * mib, '"stream":true,"stream_options":{"include_usage":true},');
    const call = open([`content-length: ${gz.length}`, "content-encoding: gzip"]);
    call.socket.write(gz);
    await until(() => fake.requests.length === 1, "the call reached the provider");
    expect(fake.requests[0]?.headers["content-encoding"]).toBe("gzip");
    expect(held()).toBe(gz.length);
    call.socket.destroy();
    await until(() => held() === 0, "the share of the call whose client left was given back");
  });
});

/**
 * A compressed body decoded to set the stream usage option (provider A's chat completions) is
 * held decoded until it is sent: up to SLUICE_MAX_BODY_BYTES from a few KiB of gzip.
 */
describe("the budget of the proxies' decoded bodies", () => {
  let stalled: ReturnType<typeof createServer>;
  const connections: Socket[] = [];
  let sluice: TestGateway;
  let project: TestProject;
  const held = () => sluice.gateway.bodyBudget.held();

  beforeAll(async () => {
    // A provider that takes the connection and reads nothing: the body is never all sent.
    stalled = createServer((socket) => {
      connections.push(socket);
      socket.on("error", () => {});
    });
    await new Promise<void>((resolve) => stalled.listen(0, "127.0.0.1", resolve));
    const url = `http://127.0.0.1:${(stalled.address() as AddressInfo).port}`;
    sluice = await startTestGateway({ ...providerBaseUrls({ url }), maxBufferedBodyBytes: budget });
    project = await createTestProject(sluice.gateway, { provider: "provider-a" });
  });

  afterAll(async () => {
    await sluice.close();
    for (const socket of connections) socket.destroy();
    await new Promise((resolve) => stalled.close(resolve));
  });

  it("counts the decoded body, not its gzip, until it is sent", async () => {
    const size = 16 * mib;
    const gz = gzippedChat(size, '"stream":true,');
    const send = () => {
      const upload = openUpload(
        sluice.url,
        `/v1/provider-a/${project.projectId}/chat/completions`,
        project.bearer("provider-a"),
        [`content-length: ${gz.length}`, "content-encoding: gzip"],
      );
      upload.socket.write(gz);
      return upload;
    };
    const first = send();
    await until(() => connections.length === 1, "the call is being sent to the provider");
    // Sent decoded, with the option: those bytes are what is held.
    expect(held()).toBe(size + ',"stream_options":{"include_usage":true}'.length);

    // A second such body does not fit beside it.
    const second = send();
    expect((await second.answer).status).toBe(503);
    expect(connections).toHaveLength(1);

    first.socket.destroy();
    await until(() => held() === 0, "the share of the call whose client left was given back");
    second.socket.destroy();
  });
});
