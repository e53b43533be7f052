import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { ProviderId } from "../../src/providers/provider-id.js";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import { tinyPng } from "../fakes/fake-upstream-responses.js";
import {
  createProjectOnEachProvider,
  createTestProject,
  titleSchema as schema,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

/** A PNG whose header (IHDR) says `width` x `height`, padded to `length` bytes. */
function png(width: number, height: number, length = tinyPng.length): Buffer {
  const bytes = Buffer.concat([tinyPng, Buffer.alloc(Math.max(0, length - tinyPng.length))]);
  bytes.writeUInt32BE(width, 16);
  bytes.writeUInt32BE(height, 20);
  return bytes;
}

/** An uncompressed PDF with a page tree of `pages` pages; `encrypt` adds an /Encrypt to its trailer. */
function pdf(pages: number, options: { encrypt?: boolean } = {}): string {
  const leaves = Array.from(
    { length: pages },
    (_, index) => `${index + 3} 0 obj\n<< /Type /Page /Parent 2 0 R >>\nendobj\n`,
  );
  const kids = Array.from({ length: pages }, (_, index) => `${index + 3} 0 R`).join(" ");
  const text =
    "%PDF-1.7\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n" +
    `2 0 obj\n<< /Type /Pages /Kids [${kids}] /Count ${pages} >>\nendobj\n${leaves.join("")}` +
    `trailer\n<< /Size ${pages + 3} /Root 1 0 R${options.encrypt ? " /Encrypt 9 0 R" : ""} >>\n%%EOF\n`;
  return `data:application/pdf;base64,${Buffer.from(text, "latin1").toString("base64")}`;
}

/** Provider B's cap: 5 MiB of base64, so 3,932,160 decoded bytes. */
const providerBMaxImageBytes = ((5 * 1024 * 1024) / 4) * 3;

describe("structured input limits of the providers", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let projects: Record<ProviderId, TestProject>;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    // SLUICE_MAX_IMAGE_BYTES at its default (10 MiB): above provider B's own cap.
    sluice = await startTestGateway({ ...providerBaseUrls(fake) });
    projects = await createProjectOnEachProvider(sluice.gateway, { outputSchema: schema });
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

  function pdfCall(provider: ProviderId, data: string) {
    const project = projects[provider];
    return fetch(`${sluice.url}/v1/pdf/${project.projectId}`, {
      method: "POST",
      headers: { authorization: `Bearer ${project.bearer(provider)}`, "content-type": "application/json" },
      body: JSON.stringify({ pdf: data }),
    });
  }

  it("answers 422 for a PDF of more pages than provider B reads on any model, before any call", async () => {
    const error = await errorOf(await pdfCall("provider-b", pdf(601)));
    expect(error).toMatchObject({ status: 422, code: "VALIDATION_ERROR" });
    expect(error.message).toContain("601 pages");
    expect(error.message).toContain("600");
    expect(fake.requests).toHaveLength(0);
    expect((await pdfCall("provider-b", pdf(600))).status).toBe(200);
    expect((await pdfCall("provider-c", pdf(601))).status).toBe(200);
  });

  it("leaves an encrypted PDF to provider B: no refusal of one is on record, and one encrypted for its permissions alone opens", async () => {
    expect((await pdfCall("provider-b", pdf(2, { encrypt: true }))).status).toBe(200);
    expect(fake.requests).toHaveLength(1);
  });

  it("answers 400 for a PDF of no pages on every provider: nothing to analyse, and a billed call", async () => {
    for (const provider of ["provider-a", "provider-b", "provider-c"] as const) {
      const error = await errorOf(await pdfCall(provider, pdf(0)));
      expect(error, provider).toMatchObject({ status: 400, code: "BAD_REQUEST" });
      expect(error.message).toContain("no pages");
    }
    expect(fake.requests).toHaveLength(0);
  });

  it("answers text only of whitespace 400 and text over the body cap 413 with its message, calling no provider", async () => {
    const small = await startTestGateway({ ...providerBaseUrls(fake), maxBodyBytes: 4096 });
    try {
      const project = await createTestProject(small.gateway, {
        provider: "provider-a",
        outputSchema: schema,
      });
      const text = (value: string) =>
        fetch(`${small.url}/v1/text/${project.projectId}`, {
          method: "POST",
          headers: {
            authorization: `Bearer ${project.bearer("provider-a")}`,
            "content-type": "application/json",
          },
          body: JSON.stringify({ text: value }),
        });
      // Unicode spaces too: no-break, em space, line separator, byte order mark.
      expect(await errorOf(await text(" \u00a0\u2003\u2028\ufeff\n"))).toMatchObject({
        status: 400,
        code: "BAD_REQUEST",
      });
      expect(await errorOf(await text("x".repeat(5000)))).toMatchObject({
        status: 413,
        code: "PAYLOAD_TOO_LARGE",
        message: "The request body exceeds 4096 bytes",
        details: { maxBytes: 4096 },
      });
      expect(fake.requests).toHaveLength(0);
    } finally {
      await small.close();
    }
  });
});
