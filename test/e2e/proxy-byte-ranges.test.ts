import { gzipSync } from "node:zlib";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { fakeFileBytes, fakeFileEtag, fakeFileLastModified } from "../fakes/fake-file-content.js";
import { useProxyStage } from "../support/proxy-stage.js";
import { sendRawBytes } from "../support/raw-request.js";
import { sdkClients } from "../support/sdk-clients.js";
import { usageRowById, usageRowOf } from "../support/test-gateway.js";

/**
 * Byte ranges through provider A's proxy (docs/proxy.md, "Headers"): a download resumed or read in
 * part (`files/{id}/content`) gets the provider's 206 (or 416) as the provider sends it, and a call
 * whose answer Sluice meters is sent without its `range`, so the provider answers it whole.
 */
describe("byte ranges through the proxies", () => {
  const content = () => `${stage.sluice.url}/v1/provider-a/${stage.project.projectId}/files/file-abc/content`;
  const auth = () => ({ authorization: `Bearer ${stage.project.bearer("provider-a")}` });

  const stage = useProxyStage(sdkClients);
  beforeEach(() => stage.fake.clear());
  afterEach(() => stage.fake.setCompression(null));

  /** A GET through Sluice read as raw bytes (no decoding of a content-encoding, as fetch would). */
  const rawGet = (url: string, headers: Record<string, string>) => sendRawBytes(url, headers, "", "GET");

  it("resumes a download: range and if-range reach the provider, and its 206 reaches the client byte for byte", async () => {
    const first = await fetch(content(), { headers: auth() });
    expect(first.status).toBe(200);
    expect(Buffer.from(await first.arrayBuffer()).equals(fakeFileBytes)).toBe(true);
    const etag = first.headers.get("etag") as string;
    expect(etag).toBe(fakeFileEtag);
    expect(first.headers.get("accept-ranges")).toBe("bytes");

    const rest = await rawGet(content(), { ...auth(), range: "bytes=600-", "if-range": etag });
    const upstream = stage.fake.last()!;
    expect(upstream.headers.range).toBe("bytes=600-");
    expect(upstream.headers["if-range"]).toBe(fakeFileEtag);
    expect(upstream.headers["accept-encoding"]).toBe("identity");
    expect(rest.status).toBe(206);
    expect(rest.headers["content-range"]).toBe("bytes 600-999/1000");
    expect(rest.headers["content-length"]).toBe("400");
    expect(rest.headers["content-type"]).toBe("application/octet-stream");
    expect(rest.headers["content-encoding"]).toBeUndefined();
    expect(rest.headers.etag).toBe(fakeFileEtag);
    expect(rest.body.equals(fakeFileBytes.subarray(600))).toBe(true);
    // A GET reads what is stored: a free row, without tokens, whatever part of it was asked for.
    expect(await usageRowById(stage.sluice.gateway, rest.headers["x-request-id"] as string)).toMatchObject({
      provider: "provider-a",
      status: 206,
      outcome: "ok",
      streamed: 0,
      input_tokens: null,
      output_tokens: null,
      cost_usd: 0,
    });
  });

  // RFC 9110 13.1.5: an if-range may give the last-modified date as its validator. The date (commas
  // and all) reaches the provider as sent, which compares it, and its 206 or 200 reaches the client.
  it("resumes a download whose if-range is the last-modified date, which reaches the provider as sent", async () => {
    const first = await rawGet(content(), auth());
    expect(first.headers["last-modified"]).toBe(fakeFileLastModified);
    const rest = await rawGet(content(), {
      ...auth(),
      range: "bytes=600-",
      "if-range": fakeFileLastModified,
    });
    expect(stage.fake.last()!.headers.range).toBe("bytes=600-");
    expect(stage.fake.last()!.headers["if-range"]).toBe(fakeFileLastModified);
    expect(rest.status).toBe(206);
    expect(rest.headers["content-range"]).toBe("bytes 600-999/1000");
    expect(rest.body.equals(fakeFileBytes.subarray(600))).toBe(true);
    const stale = "Mon, 30 Jun 2025 10:00:00 GMT";
    const whole = await rawGet(content(), { ...auth(), range: "bytes=600-", "if-range": stale });
    expect(stage.fake.last()!.headers["if-range"]).toBe(stale);
    expect(whole.status).toBe(200);
    expect(whole.body.equals(fakeFileBytes)).toBe(true);
  });

  it("gives the official openai SDK's files.content the part its Range header asks for", async () => {
    const part = await stage.openai.files.content("file-abc", { headers: { Range: "bytes=-100" } });
    expect(stage.fake.last()!.headers.range).toBe("bytes=-100");
    expect(stage.fake.last()!.headers.accept).toBe("application/binary");
    expect(part.status).toBe(206);
    expect(part.headers.get("content-range")).toBe("bytes 900-999/1000");
    expect(Buffer.from(await part.arrayBuffer()).equals(fakeFileBytes.subarray(900))).toBe(true);
  });

  it("leaves the choice to the provider: an if-range that no longer matches gets the whole file (200)", async () => {
    const response = await fetch(content(), {
      headers: { ...auth(), range: "bytes=0-99", "if-range": '"file-content-v0"' },
    });
    expect(stage.fake.last()!.headers["if-range"]).toBe('"file-content-v0"');
    expect(response.status).toBe(200);
    expect(response.headers.get("content-range")).toBeNull();
    expect(Buffer.from(await response.arrayBuffer()).equals(fakeFileBytes)).toBe(true);
  });

  it("passes the provider's 416 back with its content-range and body, on an error row that costs nothing", async () => {
    const response = await fetch(content(), { headers: { ...auth(), range: "bytes=5000-" } });
    expect(stage.fake.last()!.headers.range).toBe("bytes=5000-");
    expect(response.status).toBe(416);
    expect(response.headers.get("content-range")).toBe("bytes */1000");
    expect(await response.json()).toMatchObject({ error: { code: "range_not_satisfiable" } });
    expect(await usageRowOf(stage.sluice.gateway, response)).toMatchObject({
      status: 416,
      outcome: "error",
      input_tokens: null,
      output_tokens: null,
      cost_usd: 0,
    });
  });

  it("passes a range of a provider's compressed bytes as sent, content-encoding and all, undecoded", async () => {
    stage.fake.setCompression("gzip");
    const compressed = gzipSync(fakeFileBytes);
    const part = await rawGet(content(), { ...auth(), range: "bytes=0-49", "accept-encoding": "gzip" });
    expect(stage.fake.last()!.headers["accept-encoding"]).toBe("identity");
    expect(part.status).toBe(206);
    expect(part.headers["content-encoding"]).toBe("gzip");
    expect(part.headers["content-range"]).toBe(`bytes 0-49/${compressed.length}`);
    expect(part.headers["content-length"]).toBe("50");
    expect(part.body.equals(compressed.subarray(0, 50))).toBe(true);
  });

  it("sends no range with a call whose answer it meters: the provider answers it whole, and it is counted", async () => {
    const response = await fetch(
      `${stage.sluice.url}/v1/provider-a/${stage.project.projectId}/chat/completions`,
      {
        method: "POST",
        headers: { ...auth(), "content-type": "application/json", range: "bytes=0-9", "if-range": '"x"' },
        body: JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Hi" }] }),
      },
    );
    expect(stage.fake.last()!.headers.range).toBeUndefined();
    expect(stage.fake.last()!.headers["if-range"]).toBeUndefined();
    expect(response.status).toBe(200);
    const completion = (await response.json()) as { choices: Array<{ message: { content: string } }> };
    expect(completion.choices[0]?.message.content).toBe("Hello from the fake upstream");
    expect(await usageRowOf(stage.sluice.gateway, response)).toMatchObject({ status: 200, input_tokens: 11 });
  });

  it("sends no range with a Responses API poll, which can report a background run's tokens", async () => {
    stage.fake.enqueueResponse({ status: 404 });
    const response = await fetch(
      `${stage.sluice.url}/v1/provider-a/${stage.project.projectId}/responses/resp_1`,
      {
        headers: { ...auth(), range: "bytes=-64" },
      },
    );
    await response.arrayBuffer();
    expect(stage.fake.last()!.method).toBe("GET");
    expect(stage.fake.last()!.headers.range).toBeUndefined();
  });
});
