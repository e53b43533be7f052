import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import { type AddressInfo, createServer as createTcpServer, type Server as TcpServer } from "node:net";
import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createProviderFetch, ProviderResponseTooLarge } from "./provider-fetch.js";

const maxResponseBytes = 64 * 1024;

describe("createProviderFetch", () => {
  let server: Server;
  let base: string;
  let seen: IncomingHttpHeaders[] = [];
  /** Bytes the server managed to write of its last chunked answer before the fetch let go. */
  let written = 0;
  const providerFetch = createProviderFetch({
    connectMs: 5_000,
    headersMs: 5_000,
    idleMs: 5_000,
    maxResponseBytes,
  });

  beforeAll(async () => {
    server = createServer((request, response) => {
      seen.push(request.headers);
      request.resume();
      const path = request.url ?? "";
      if (path === "/small") {
        response.writeHead(200, { "content-type": "application/json" });
        response.end('{"ok":true}');
      } else if (path === "/exact") {
        response.writeHead(200, { "content-length": String(maxResponseBytes) });
        response.end(Buffer.alloc(maxResponseBytes, 0x20));
      } else if (path === "/announced") {
        // Announces more than the cap, sends nothing more than the headers.
        response.writeHead(200, { "content-length": String(maxResponseBytes + 1) });
        response.flushHeaders();
      } else if (path === "/gzip") {
        // A small gzip answer that decodes past the cap, if the provider gzips regardless.
        response.writeHead(200, { "content-encoding": "gzip" });
        response.end(gzipSync(Buffer.alloc(maxResponseBytes * 4, 0x20)));
      } else if (path === "/chunked") {
        // 16 MiB in 16 KiB chunks, written as fast as the fetch reads them.
        written = 0;
        response.writeHead(200, { "content-type": "application/json" });
        const chunk = Buffer.alloc(16 * 1024, 0x20);
        const pump = () => {
          while (written < 16 * 2 ** 20 && !response.destroyed) {
            written += chunk.length;
            if (!response.write(chunk)) return void response.once("drain", pump);
          }
          response.end();
        };
        response.on("close", () => response.removeAllListeners("drain"));
        pump();
      }
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await providerFetch.close();
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  it("asks for the answer uncompressed, keeping the headers it was given", async () => {
    seen = [];
    const response = await providerFetch.fetch(`${base}/small`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": "k", "Accept-Encoding": "gzip" },
      body: "{}",
    });
    expect(await response.json()).toEqual({ ok: true });
    expect(seen[0]).toMatchObject({ "accept-encoding": "identity", "x-api-key": "k" });
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toBe("application/json");
    expect(response.url).toBe(`${base}/small`);
  });

  it("takes an answer of exactly the cap", async () => {
    const response = await providerFetch.fetch(`${base}/exact`);
    expect((await response.arrayBuffer()).byteLength).toBe(maxResponseBytes);
  });

  it("refuses an answer that announces more than the cap, before its body", async () => {
    await expect(providerFetch.fetch(`${base}/announced`)).rejects.toBeInstanceOf(ProviderResponseTooLarge);
  });

  it("fails a chunked answer once it passes the cap, and stops reading it", async () => {
    const response = await providerFetch.fetch(`${base}/chunked`);
    const reader = (response.body as ReadableStream<Uint8Array>).getReader();
    let received = 0;
    const failure = await (async () => {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return null;
        received += value.byteLength;
      }
    })().catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(ProviderResponseTooLarge);
    expect((failure as Error).message).toContain("SLUICE_MAX_PROVIDER_RESPONSE_BYTES");
    expect(received).toBeLessThanOrEqual(maxResponseBytes);
    // The provider's connection was dropped: far from all 16 MiB was written (socket buffers aside).
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(written).toBeLessThan(8 * 2 ** 20);
  });

  it("counts a body a provider gzipped regardless as it is decoded", async () => {
    const response = await providerFetch.fetch(`${base}/gzip`);
    await expect(response.text()).rejects.toBeInstanceOf(ProviderResponseTooLarge);
  });
});

/**
 * A provider's reason phrase is no part of its answer the SDK reads (RFC 9112 has clients ignore
 * it): one with a byte past ASCII, which undici decodes as UTF-8 (a character past U+00FF, or
 * U+FFFD for a byte that is not UTF-8), is no reason to refuse the answer.
 */
describe("createProviderFetch and the provider's reason phrase", () => {
  const providerFetch = createProviderFetch({
    connectMs: 5_000,
    headersMs: 5_000,
    idleMs: 5_000,
    maxResponseBytes,
  });
  let server: TcpServer;
  let base: string;
  let line = Buffer.alloc(0);

  beforeAll(async () => {
    server = createTcpServer((socket) => {
      socket.on("error", () => {});
      socket.once("data", () =>
        socket.end(
          Buffer.concat([
            line,
            Buffer.from('\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{"ok":true}'),
          ]),
        ),
      );
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await providerFetch.close();
    await new Promise((resolve) => server.close(resolve));
  });

  it.each([
    ["ASCII", Buffer.from("HTTP/1.1 200 Fine"), "Fine"],
    ["UTF-8 within latin-1", Buffer.from("HTTP/1.1 200 \u00c7a va", "utf8"), "\u00c7a va"],
    ["UTF-8 past latin-1", Buffer.from("HTTP/1.1 200 \u30b5\u30fc\u30d3\u30b9", "utf8"), ""],
    ["latin-1, not UTF-8", Buffer.from("HTTP/1.1 200 Caf\u00e9", "latin1"), ""],
  ])("takes an answer whose reason phrase is %s", async (_name, sent, statusText) => {
    line = sent;
    const response = await providerFetch.fetch(`${base}/reason`);
    expect(response.status).toBe(200);
    expect(response.statusText).toBe(statusText);
    expect(await response.json()).toEqual({ ok: true });
  });
});
