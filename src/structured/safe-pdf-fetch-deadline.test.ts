import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { collectGarbage } from "../../test/support/garbage-collection.js";
import { createSafePdfFetcher } from "./safe-pdf-fetch.js";

/**
 * The fetch's deadline was `AbortSignal.any([AbortSignal.timeout(ms), clientSignal])`, which never
 * fires on Node 20 once a garbage collection runs before it (nodejs/node#57736): `any` holds its
 * sources weakly, and once the fetch was optimized (after some hundreds of calls: here a warm-up)
 * its suspended call no longer held the timeout's signal either, whose timer went with it. A server
 * that sends a byte now and then (never idle for the body timeout) then held the fetch, and the
 * client's request, until the client gave up: a soak of /v1/pdf saw requests past 15 s with a
 * deadline of 500 ms. The fetch here collects garbage while it waits.
 */
const warmUpCalls = 1500;
// Room for a warm-up fetch on a loaded machine; the collections below come well before it.
const timeoutMs = 1000;

/** `call`'s outcome (its error's message), collecting garbage while it runs; "still running" long past the deadline. */
async function outcomeUnderGc(call: (clientSignal: AbortSignal) => Promise<unknown>): Promise<string> {
  // The client's signal, which never aborts: the client waits.
  const client = new AbortController();
  const running = call(client.signal).then(
    () => "resolved",
    (error: unknown) => (error instanceof Error ? error.message : String(error)),
  );
  for (let turn = 0; turn < 3; turn++) {
    await new Promise((resolve) => setTimeout(resolve, 30));
    collectGarbage();
  }
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<string>((resolve) => {
    timer = setTimeout(() => resolve("still running"), timeoutMs + 2000);
  });
  try {
    return await Promise.race([running, late]);
  } finally {
    clearTimeout(timer);
    client.abort(new Error("The test ended"));
  }
}

describe("the PDF fetch's deadline under garbage collection", () => {
  let server: Server;
  let port = 0;

  beforeAll(async () => {
    // Headers and a PDF's first bytes at once (a body that is no PDF is refused once they are in),
    // then a byte every 50 ms: never idle long enough for the body timeout. The warm-up's PDF is
    // answered whole.
    server = createServer((request, response) => {
      if (request.url === "/small.pdf") return void response.end("%PDF-1.4\n");
      response.writeHead(200, { "content-type": "application/pdf" });
      response.write("%PDF-1.4\n");
      const timer = setInterval(() => response.write("%"), 50);
      response.on("close", () => clearInterval(timer));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    port = (server.address() as AddressInfo).port;
  });

  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  it("ends a PDF fetch whose server keeps sending at SLUICE_PDF_FETCH_TIMEOUT_MS", {
    timeout: 60_000,
  }, async () => {
    const fetchPdf = createSafePdfFetcher({
      isAllowedAddress: (ip) => ip === "127.0.0.1",
      allowedProtocols: ["http:"],
      maxBytes: 1 << 20,
      timeoutMs,
    });
    for (let call = 0; call < warmUpCalls / 5; call++) {
      await Promise.all(
        Array.from({ length: 5 }, () =>
          fetchPdf(new URL(`http://127.0.0.1:${port}/small.pdf`), new AbortController().signal),
        ),
      );
    }
    expect(
      await outcomeUnderGc((signal) => fetchPdf(new URL(`http://127.0.0.1:${port}/drip.pdf`), signal)),
    ).toBe("fetching the PDF took too long");
  });
});
