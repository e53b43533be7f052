import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { GatewayError } from "../errors.js";
import { createSafePdfFetcher } from "./safe-pdf-fetch.js";

type Addresses = Array<{ address: string; family: number }>;

/** An error's code and message (and its Retry-After, if any). */
function described(error: unknown): string {
  if (!(error instanceof GatewayError)) return String(error);
  const retry = error.headers["retry-after"];
  return `${error.code}: ${error.message}${retry === undefined ? "" : ` (Retry-After ${retry})`}`;
}

/** The fetch's outcome: "ok", or its error described. */
function outcome(run: Promise<unknown>): Promise<string> {
  return run.then(() => "ok", described);
}

describe("the PDF fetcher's caps on work in flight", () => {
  let server: Server;
  let port = 0;
  const requests: string[] = [];

  beforeAll(async () => {
    server = createServer((request, response) => {
      requests.push(request.url ?? "");
      if (request.url === "/doc.pdf") return void response.end("%PDF-1.4\n");
      // Announced over the cap: its start, and the rest never.
      if (request.url === "/announced-large.pdf") {
        response.writeHead(200, { "content-type": "application/pdf", "content-length": 2 << 20 });
        return void response.write("%PDF-1.4\n");
      }
      // A PDF that starts and never ends: the fetch holds what came until its deadline.
      response.writeHead(200, { "content-type": "application/pdf" });
      response.write("%PDF-1.4\n");
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    port = (server.address() as AddressInfo).port;
  });

  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  const fetcherWith = (options: {
    maxFetches?: number;
    maxFetchesPerProject?: number;
    timeoutMs: number;
    lookup?: (host: string) => Promise<Addresses>;
  }) =>
    createSafePdfFetcher({
      isAllowedAddress: (ip) => ip === "127.0.0.1",
      allowedProtocols: ["http:"],
      maxBytes: 1 << 20,
      ...options,
    });

  // Each fetch may hold up to SLUICE_MAX_PDF_BYTES until SLUICE_PDF_FETCH_TIMEOUT_MS (20 MiB for
  // 15 s by default): without a cap, ~150 concurrent fetches held ~3 GiB.
  it("answers a fetch beyond the cap 503 with Retry-After, before any lookup or connection, and takes one again once a fetch ended", async () => {
    let lookups = 0;
    const fetchPdf = fetcherWith({
      maxFetches: 2,
      timeoutMs: 5000,
      lookup: async () => {
        lookups++;
        return [{ address: "127.0.0.1", family: 4 }];
      },
    });
    requests.length = 0;
    const holders = [new AbortController(), new AbortController()];
    const held = holders.map((holder) =>
      outcome(fetchPdf(new URL(`http://127.0.0.1:${port}/hold`), holder.signal)),
    );
    await vi.waitFor(() => expect(requests).toEqual(["/hold", "/hold"]), { timeout: 5000, interval: 5 });

    // Given up by the test after 300 ms when it is not refused at once (as before the cap).
    const extra = new AbortController();
    setTimeout(() => extra.abort(new Error("The test gave up")), 300);
    const error = await fetchPdf(new URL(`http://pdf.example:${port}/doc.pdf`), extra.signal).then(
      () => null,
      (caught: unknown) => caught,
    );
    expect(described(error)).toBe(
      "SERVICE_UNAVAILABLE: Too many PDF fetches are running on this instance (SLUICE_MAX_PDF_FETCHES); retry shortly (Retry-After 5)",
    );
    expect((error as GatewayError).status).toBe(503);
    expect((error as GatewayError).details).toEqual({ retryable: true });
    expect(lookups).toBe(0);
    expect(requests).toEqual(["/hold", "/hold"]);

    holders[0]!.abort(new Error("The client disconnected"));
    expect(await held[0]).toBe("BAD_REQUEST: fetching the PDF was cancelled");
    expect(await outcome(fetchPdf(new URL(`http://pdf.example:${port}/doc.pdf`)))).toBe("ok");
    holders[1]!.abort(new Error("The client disconnected"));
    expect(await held[1]).toBe("BAD_REQUEST: fetching the PDF was cancelled");
    // A refusal and a failure give their places back as a success does.
    expect(await outcome(fetchPdf(new URL(`http://127.0.0.1:${port}/doc.pdf`)))).toBe("ok");
    expect(await outcome(fetchPdf(new URL(`http://127.0.0.1:${port}/doc.pdf`)))).toBe("ok");
  });

  // One project's clients naming slow PDF hosts held every place, and every other project's PDF URL
  // was answered 503 until their deadline (docs/decisions/0060).
  it("answers a project's fetch beyond its share 429 with Retry-After, before any lookup or connection, while another project's runs", async () => {
    let lookups = 0;
    const fetchPdf = fetcherWith({
      maxFetches: 3,
      maxFetchesPerProject: 2,
      timeoutMs: 5000,
      lookup: async () => {
        lookups++;
        return [{ address: "127.0.0.1", family: 4 }];
      },
    });
    requests.length = 0;
    const holders = [new AbortController(), new AbortController()];
    const held = holders.map((holder) =>
      outcome(
        fetchPdf(new URL(`http://127.0.0.1:${port}/hold`), holder.signal, undefined, undefined, "greedy"),
      ),
    );
    await vi.waitFor(() => expect(requests).toEqual(["/hold", "/hold"]), { timeout: 5000, interval: 5 });

    const error = await fetchPdf(
      new URL(`http://pdf.example:${port}/doc.pdf`),
      undefined,
      "req-1",
      undefined,
      "greedy",
    ).then(
      () => null,
      (caught: unknown) => caught,
    );
    expect(described(error)).toBe(
      "TOO_MANY_REQUESTS: This project has 2 PDF fetches running on this instance, the most one project may run at once (SLUICE_MAX_PDF_FETCHES_PER_PROJECT); retry when one ends (Retry-After 1)",
    );
    expect((error as GatewayError).status).toBe(429);
    expect(lookups).toBe(0);
    // The third place is another project's, or a fetch that names none.
    expect(
      await outcome(
        fetchPdf(new URL(`http://pdf.example:${port}/doc.pdf`), undefined, undefined, undefined, "other"),
      ),
    ).toBe("ok");
    expect(await outcome(fetchPdf(new URL(`http://pdf.example:${port}/doc.pdf`)))).toBe("ok");

    // A refused URL gives the project's place back, as the instance's (before its wait, decision 0047).
    holders[0]!.abort(new Error("The client disconnected"));
    expect(await held[0]).toBe("BAD_REQUEST: fetching the PDF was cancelled");
    expect(
      await outcome(fetchPdf(new URL("http://10.0.0.1/doc.pdf"), undefined, undefined, undefined, "greedy")),
    ).toBe(`BAD_REQUEST: the PDF URL's host has no public address`);
    expect(
      await outcome(
        fetchPdf(new URL(`http://pdf.example:${port}/doc.pdf`), undefined, undefined, undefined, "greedy"),
      ),
    ).toBe("ok");
    holders[1]!.abort(new Error("The client disconnected"));
    expect(await held[1]).toBe("BAD_REQUEST: fetching the PDF was cancelled");
  });

  it("refuses a PDF whose Content-Length is over the cap (413) without waiting for its body", async () => {
    const fetchPdf = fetcherWith({ timeoutMs: 5000 });
    // Given up by the test after 300 ms when it is not refused at once (as before: the fetch waited
    // for the body, to refuse it once more than the cap had come).
    const caller = new AbortController();
    setTimeout(() => caller.abort(new Error("The test gave up")), 300);
    expect(
      await outcome(fetchPdf(new URL(`http://127.0.0.1:${port}/announced-large.pdf`), caller.signal)),
    ).toBe(`PAYLOAD_TOO_LARGE: The PDF exceeds ${1 << 20} bytes`);
  });
});
