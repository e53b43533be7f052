import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { ProviderId } from "../../src/providers/provider-id.js";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import { tinyPng } from "../fakes/fake-upstream-responses.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

const schema = {
  type: "object",
  properties: { title: { type: "string" } },
  required: ["title"],
  additionalProperties: false,
};

/** A PNG whose header (IHDR) says `width` x `height`, padded to `length` bytes. */
function png(width: number, height: number, length = tinyPng.length): Buffer {
  const bytes = Buffer.concat([tinyPng, Buffer.alloc(Math.max(0, length - tinyPng.length))]);
  bytes.writeUInt32BE(width, 16);
  bytes.writeUInt32BE(height, 20);
  return bytes;
}

/** Provider B's cap: 5 MiB of base64, so 3,932,160 decoded bytes. */
const providerBMaxImageBytes = ((5 * 1024 * 1024) / 4) * 3;

describe("structured input limits of the providers", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  const projects = {} as Record<ProviderId, TestProject>;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    // SLUICE_MAX_IMAGE_BYTES at its default (10 MiB): above provider B's own cap.
    sluice = await startTestGateway({ ...providerBaseUrls(fake) });
    for (const provider of ["provider-a", "provider-b", "provider-c"] as const) {
      projects[provider] = await createTestProject(sluice.gateway, { provider, outputSchema: schema });
    }
  });

  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });

  beforeEach(() => {
    fake.clear();
    fake.setStructuredOutput({ title: "ok" });
  });

  function vision(provider: ProviderId, image: Buffer) {
    const project = projects[provider];
    return fetch(`${sluice.url}/v1/vision/${project.projectId}`, {
      method: "POST",
      headers: { authorization: `Bearer ${project.bearer(provider)}`, "content-type": "application/json" },
      body: JSON.stringify({ image: image.toString("base64") }),
    });
  }

  async function errorOf(response: Response) {
    const body = (await response.json()) as { error: { code: string; message: string; details?: unknown } };
    return { status: response.status, ...body.error };
  }

  it("answers 413 for an image over provider B's 5 MB (in base64) before any call, not its 400 as a 502", async () => {
    const response = await vision("provider-b", png(100, 100, providerBMaxImageBytes + 3));
    const error = await errorOf(response);
    expect(error).toMatchObject({ status: 413, code: "PAYLOAD_TOO_LARGE" });
    expect(error.message).toContain("provider-b");
    expect(error.message).toContain(`${providerBMaxImageBytes} bytes`);
    expect(fake.requests).toHaveLength(0);
  });

  it("sends an image at provider B's cap, and the same larger image to providers A and C", async () => {
    expect((await vision("provider-b", png(100, 100, providerBMaxImageBytes))).status).toBe(200);
    for (const provider of ["provider-a", "provider-c"] as const) {
      const response = await vision(provider, png(100, 100, providerBMaxImageBytes + 3));
      expect(response.status, provider).toBe(200);
    }
    expect(fake.requests).toHaveLength(3);
  });

  it("answers 422 for an image wider or taller than provider B's 8000 px before any call", async () => {
    for (const [width, height] of [
      [8001, 10],
      [10, 8001],
    ]) {
      const error = await errorOf(await vision("provider-b", png(width as number, height as number)));
      expect(error).toMatchObject({ status: 422, code: "VALIDATION_ERROR" });
      expect(error.message).toContain("8000");
      expect(error.details).toEqual({ width, height, maxSide: 8000 });
    }
    expect(fake.requests).toHaveLength(0);
    expect((await vision("provider-b", png(8000, 8000))).status).toBe(200);
    // Providers A and C scale a large image down themselves.
    expect((await vision("provider-a", png(9000, 9000))).status).toBe(200);
    expect((await vision("provider-c", png(9000, 9000))).status).toBe(200);
  });
});
