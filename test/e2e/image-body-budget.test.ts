import { randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { providerA } from "../fakes/fake-upstream-responses.js";
import { openUpload, until } from "../support/held-upload.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowOf,
} from "../support/test-gateway.js";

const mib = 1024 * 1024;
const budget = 10 * mib;
/** What a call reserves for each image of 1024x1024: an RGB image's pixels, in base64 (decision 0054). */
const perImage = 1024 * 1024 * 4;

/** A PNG of `size` bytes as the provider sends it: its signature, then bytes no compression shrinks. */
const bigPng = (size: number) =>
  Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), randomBytes(size - 8)]);

/** A /v1/image call on a connection of its own, whose client may leave (`socket.destroy()`). */
const generate = (sluice: TestGateway, project: TestProject, request: Record<string, unknown>) => {
  const body = JSON.stringify({ prompt: "a lighthouse", model: "gpt-image-1", ...request });
  return openUpload(
    sluice.url,
    `/v1/image/${project.projectId}`,
    project.bearer("provider-a"),
    [`content-length: ${Buffer.byteLength(body)}`],
    body,
  );
};

/**
 * SLUICE_MAX_BUFFERED_BODY_BYTES and /v1/image (decision 0054): a call's body is a few dozen bytes,
 * but it holds its images (the provider's answer, decoded, the client's answer) about three times
 * over in base64. Before, the budget counted only the body: any number of calls of 20 images ran
 * at once, each holding some 250 MiB, and a handful killed the process.
 */
describe("the body budget and the images a /v1/image call will hold", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let project: TestProject;
  const held = () => sluice.gateway.bodyBudget.held();

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway({
      providerABaseUrl: `${fake.url}/a/v1`,
      maxBufferedBodyBytes: budget,
    });
    project = await createTestProject(sluice.gateway, { provider: "provider-a" });
  });
  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });
  beforeEach(() => {
    fake.clear();
    fake.setPlan(null);
  });

  it("reserves a call's images before its provider call, answers 503 to calls that do not fit, and gives all back when their clients leave", async () => {
    // Five calls of one 1024x1024 image each, held at the provider: two fit in 10 MiB.
    fake.setPlan(() => ({ latencyMs: 20_000 }));
    const calls = [0, 1, 2, 3, 4].map(() => generate(sluice, project, { size: "1024x1024" }));
    const answered = await Promise.all(
      calls.map((call) => Promise.race([call.answer, new Promise((resolve) => setTimeout(resolve, 1500))])),
    );
    const refused = answered.filter((answer) => answer !== undefined) as Array<
      Awaited<(typeof calls)[0]["answer"]>
    >;
    expect({ provider: fake.requests.length, refused: refused.length }).toEqual({ provider: 2, refused: 3 });
    for (const answer of refused) {
      expect(answer.status).toBe(503);
      expect(answer.headers["retry-after"]).toBe("5");
      expect(answer.body).toMatchObject({
        error: { code: "SERVICE_UNAVAILABLE", details: { retryable: true } },
      });
      expect((answer.body.error as { message: string }).message).toContain("SLUICE_MAX_BUFFERED_BODY_BYTES");
    }
    expect(held()).toBeGreaterThanOrEqual(2 * perImage);
    expect(held()).toBeLessThanOrEqual(budget);
    // A request the model refuses is told so (422) first: nothing is reserved for it.
    const invalid = generate(sluice, project, { size: "1000x1000" });
    expect((await invalid.answer).status).toBe(422);
    invalid.socket.destroy();

    // The clients leave: their calls' reservations are given back.
    for (const call of calls) call.socket.destroy();
    await until(() => held() === 0, "every reservation was given back");
    await until(() => fake.requests.every((request) => request.aborted), "the provider calls were aborted");
  });

  it("gives the reservation back when the provider fails", async () => {
    fake.setPlan(() => ({ latencyMs: 500, failStatus: 500 }));
    const call = generate(sluice, project, { size: "1024x1024", n: 2 });
    await until(() => held() >= 2 * perImage, "the call's images were reserved");
    const answer = await call.answer;
    expect(answer.status).toBe(502);
    await until(() => held() === 0, "the failed call's reservation was given back");
    call.socket.destroy();
  });

  it("takes a call larger than the whole budget when no other call holds any of it", async () => {
    // Four images of 1024x1024: 16 MiB, over the budget of 10 MiB.
    fake.setPlan((request) =>
      (request.json as { n?: number }).n === 4 ? { latencyMs: 1000 } : { latencyMs: 0 },
    );
    const large = generate(sluice, project, { size: "1024x1024", n: 4 });
    await until(() => held() >= 4 * perImage, "the large call's images were reserved");
    // While it runs, even a call of one image does not fit beside it.
    const small = generate(sluice, project, { size: "1024x1024" });
    expect((await small.answer).status).toBe(503);
    expect((await large.answer).status).toBe(200);
    await until(() => held() === 0, "the large call's reservation was given back");
    for (const call of [large, small]) call.socket.destroy();
  });

  it("refuses a size no catalogued model makes before reserving it, and counts a model it does not know at most at the largest", async () => {
    fake.setPlan(() => ({ latencyMs: 1000 }));
    // GPT Image 2.6 and dall-e-3 have no size list: 20 images of 99999x99999 reserved up to 20 times
    // SLUICE_MAX_PROVIDER_RESPONSE_BYTES (2.5 GiB) and, alone, held every other call off until
    // the provider refused them.
    for (const [model, maxSide, maxPixels] of [
      ["gpt-image-2.6-sunburst", 3840, 8_294_400],
      ["dall-e-3", 1792, 1_835_008],
    ] as const) {
      const absurd = generate(sluice, project, { model, size: "99999x99999", n: 20 });
      const answer = await absurd.answer;
      expect({ status: answer.status, body: answer.body }).toEqual({
        status: 422,
        body: {
          error: expect.objectContaining({
            code: "VALIDATION_ERROR",
            message: `\`size\` 99999x99999 does not fit model ${model}: its longer side must be at most ${maxSide} pixels`,
            details: { option: "size", maxSide, maxPixels },
          }),
        },
      });
      absurd.socket.destroy();
    }
    expect({ provider: fake.requests.length, held: held() }).toEqual({ provider: 0, held: 0 });
    // A model the catalogue does not know is sent the size, each image counted at most as the
    // largest a catalogued model makes (3840x2160), not as the whole answer cap (128 MiB).
    const unknown = generate(sluice, project, { model: "gpt-image-9", size: "99999x99999" });
    await until(() => fake.requests.length === 1, "the provider was called");
    expect(held()).toBeGreaterThanOrEqual(3840 * 2160 * 4);
    expect(held()).toBeLessThan(3840 * 2160 * 4 + 1024);
    unknown.socket.destroy();
    await until(() => held() === 0, "the reservation was given back");
  });

  it("checks the rate limits before the budget: a call over the whole budget, retried at once, is 429 and holds nothing", async () => {
    const limited = await createTestProject(sluice.gateway, {
      provider: "provider-a",
      rateLimits: { perMinute: 1 },
    });
    // The provider refuses the model it does not know after half a second, unbilled.
    fake.setPlan((request) =>
      (request.json as { model?: string }).model === "gpt-image-9"
        ? { latencyMs: 500, failStatus: 404 }
        : { latencyMs: 0 },
    );
    // One image of 3840x2160: 32 MiB reserved, over the budget of 10 MiB: it runs alone.
    const large = generate(sluice, limited, { model: "gpt-image-9", size: "3840x2160" });
    await until(() => held() >= 3840 * 2160 * 4, "the large call's image was reserved");
    const other = generate(sluice, project, { size: "1024x1024" });
    expect((await other.answer).status).toBe(503);
    // Its client asks again at once: the project's limit refuses it before any of the budget.
    const again = generate(sluice, limited, { model: "gpt-image-9", size: "3840x2160" });
    expect((await again.answer).status).toBe(429);
    // The others are held off for its provider's round trip alone.
    expect((await large.answer).status).toBe(502);
    await until(() => held() === 0, "the large call's reservation was given back");
    const retried = generate(sluice, limited, { model: "gpt-image-9", size: "3840x2160" });
    expect((await retried.answer).status).toBe(429);
    expect(held()).toBe(0);
    const afterwards = generate(sluice, project, { size: "1024x1024" });
    expect((await afterwards.answer).status).toBe(200);
    expect(fake.requests.map((request) => (request.json as { model?: string }).model)).toEqual([
      "gpt-image-9",
      "gpt-image-1",
    ]);
    for (const call of [large, other, again, retried, afterwards]) call.socket.destroy();
  });
});

/**
 * The estimate is the images' pixels; an answer larger than it (a PNG of a size the estimate
 * underrates, or a provider that generates larger than asked) is counted at its real size once it
 * arrives, for as long as the call holds it (here: while the vault stores it).
 */
describe("the body budget and an answer larger than its estimate", () => {
  let fake: FakeUpstream;
  let s3: Server;
  let sluice: TestGateway;
  let project: TestProject;
  const held = () => sluice.gateway.bodyBudget.held();
  /** The vault's uploads, answered once released. */
  const uploads: ServerResponse[] = [];

  beforeAll(async () => {
    fake = await startFakeUpstream();
    s3 = createServer((request: IncomingMessage, response: ServerResponse) => {
      request.resume();
      request.on("end", () => {
        if (request.method === "PUT") uploads.push(response);
        else response.writeHead(204).end();
      });
    });
    await new Promise<void>((resolve) => s3.listen(0, "127.0.0.1", resolve));
    sluice = await startTestGateway({
      providerABaseUrl: `${fake.url}/a/v1`,
      maxBufferedBodyBytes: budget,
      vaultS3Endpoint: `http://127.0.0.1:${(s3.address() as AddressInfo).port}`,
      vaultS3Bucket: "vault",
      vaultS3AccessKeyId: "AKIDTEST",
      vaultS3SecretAccessKey: "s3-secret",
      vaultTimeoutMs: 10_000,
    });
    project = await createTestProject(sluice.gateway, {
      provider: "provider-a",
      teamId: "team1",
      saveImagesToVault: true,
    });
  });
  afterAll(async () => {
    await sluice.close();
    await fake.close();
    s3.closeAllConnections();
    await new Promise((resolve) => s3.close(resolve));
  });

  it("counts the answer's real size while the call holds it, and gives it back when the call ends", async () => {
    // Asked at 256x256 (512 KiB reserved), answered with two PNGs of 4 MiB (over 10 MiB in base64).
    const png = bigPng(4 * mib).toString("base64");
    fake.enqueueResponse({
      status: 200,
      body: providerA.gptImage({
        count: 2,
        quality: "high",
        size: "1024x1024",
        usage: { input_tokens: 10, output_tokens: 100, total_tokens: 110 },
        b64: png,
      }),
    });
    const call = fetch(`${sluice.url}/v1/image/${project.projectId}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${project.bearer("provider-a")}`,
        "content-type": "application/json",
      },
      body: JSON.stringify({
        prompt: "a lighthouse",
        model: "gpt-image-2.6-sunburst",
        size: "256x256",
        n: 2,
      }),
    });
    await until(() => uploads.length === 2, "both images are being stored");
    expect(held()).toBeGreaterThanOrEqual(2 * png.length);
    // Nothing else fits beside it now, though its estimate alone would have left room.
    const other = generate(sluice, project, { model: "gpt-image-2.6-sunburst", size: "256x256" });
    expect((await other.answer).status).toBe(503);
    for (const upload of uploads.splice(0)) upload.writeHead(200).end();
    const answer = await call;
    expect(answer.status).toBe(200);
    expect(((await answer.json()) as { images: Array<{ base64: string }> }).images[0]?.base64).toBe(png);
    expect(await usageRowOf(sluice.gateway, answer)).toMatchObject({ status: 200 });
    await until(() => held() === 0, "the call's share was given back");
    other.socket.destroy();
  });
});
