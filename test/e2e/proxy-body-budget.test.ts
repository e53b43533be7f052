import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import { openUpload, until } from "../support/held-upload.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

const mib = 1024 * 1024;
const budget = 3 * mib;

/** A chat completions body of exactly `size` bytes. */
function chatBody(size: number): string {
  const empty = '{"model":"gpt-5.4-mini","messages":[{"role":"user","content":""}]}';
  return `${empty.slice(0, -4)}${"x".repeat(size - empty.length)}"}]}`;
}

/**
 * SLUICE_MAX_BUFFERED_BODY_BYTES on the proxies: a proxied call holds its whole body until it is
 * sent to the provider (up to SLUICE_MAX_BODY_BYTES, 20 MiB), so without the budget a thousand
 * connections each uploading one slowly held 20 GiB.
 */
describe("the budget of request bodies on the proxies", () => {
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
    fake = await startFakeUpstream();
    sluice = await startTestGateway({
      ...providerBaseUrls(fake),
      maxBufferedBodyBytes: budget,
      metricsEnabled: true,
    });
    project = await createTestProject(sluice.gateway, { provider: "provider-a" });
  });

  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });

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
});
