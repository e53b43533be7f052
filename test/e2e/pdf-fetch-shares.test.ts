import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { createSafePdfFetcher, type SafePdfFetcherOptions } from "../../src/structured/safe-pdf-fetch.js";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import { type HeldUpload, openUpload, until } from "../support/held-upload.js";
import { type LocalServer, startLocalServer } from "../support/local-server.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

/** The options of every fetcher built (the gateway's own, when no fetcher is injected). */
const built = vi.hoisted(() => [] as SafePdfFetcherOptions[]);

vi.mock("../../src/structured/safe-pdf-fetch.js", async (importOriginal) => {
  const original = await importOriginal<typeof import("../../src/structured/safe-pdf-fetch.js")>();
  return {
    ...original,
    createSafePdfFetcher(options: SafePdfFetcherOptions) {
      built.push(options);
      return original.createSafePdfFetcher(options);
    },
  };
});

const schema = { type: "object", properties: { answer: { type: "string" } }, required: ["answer"] };
const maxFetches = 4;
const maxFetchesPerProject = 2;

/**
 * SLUICE_MAX_PDF_FETCHES is the instance's, shared by every project. A project whose clients named
 * PDF hosts that drip their bytes (a PDF's first bytes, then one every 100 ms, well within every
 * timeout) held each place until SLUICE_PDF_FETCH_TIMEOUT_MS, one call each, within its rate limits:
 * every other project's PDF URL was then answered 503 at once. A project now holds at most its
 * share of the places (SLUICE_MAX_PDF_FETCHES_PER_PROJECT); its call past that is its own 429,
 * and the other places stay for the others (docs/decisions/0060).
 */
describe("the PDF fetch places shared between projects", () => {
  let fake: FakeUpstream;
  let host: LocalServer;
  let sluice: TestGateway;
  let greedy: TestProject;
  let other: TestProject;
  const dripping: string[] = [];
  /** The drips whose connection is still open (the fetch reads it). */
  let dripsOpen = 0;

  beforeAll(async () => {
    host = await startLocalServer((request, response) => {
      if (request.url === "/doc.pdf") return void response.end("%PDF-1.4\n");
      dripping.push(request.url ?? "");
      dripsOpen++;
      response.writeHead(200, { "content-type": "application/pdf" });
      response.write("%PDF-1.4\n");
      const timer = setInterval(() => response.write("%"), 100);
      response.on("close", () => {
        clearInterval(timer);
        dripsOpen--;
      });
    });
    fake = await startFakeUpstream();
    sluice = await startTestGateway(
      { ...providerBaseUrls(fake), maxPdfFetches: maxFetches, maxPdfFetchesPerProject: maxFetchesPerProject },
      // Production's fetcher, with the gateway's two caps, except that the local PDF host counts as
      // a public address (the gateway's own fetcher takes only https URLs to public addresses).
      {
        fetchPdf: createSafePdfFetcher({
          isAllowedAddress: (ip) => ip === "127.0.0.1",
          allowedProtocols: ["http:"],
          maxBytes: 1 << 20,
          timeoutMs: 20_000,
          maxFetches,
          maxFetchesPerProject,
        }),
      },
    );
    greedy = await createTestProject(sluice.gateway, { provider: "provider-a", outputSchema: schema });
    other = await createTestProject(sluice.gateway, { provider: "provider-a", outputSchema: schema });
  });
  afterAll(async () => {
    await sluice.close();
    await fake.close();
    await host.close();
  });

  const pdfCall = (project: TestProject, url: string): HeldUpload => {
    const body = JSON.stringify({ pdf: url });
    return openUpload(
      sluice.url,
      `/v1/pdf/${project.projectId}`,
      project.bearer("provider-a"),
      [`content-length: ${body.length}`],
      body,
    );
  };

  it("keeps one project's slow PDF hosts from taking every place: its calls past its share are its own 429, another project's PDF is fetched", async () => {
    const calls = Array.from({ length: maxFetches }, (_, at) =>
      pdfCall(greedy, `${host.url}/drip-${at}.pdf`),
    );
    const answered: number[] = [];
    calls.forEach(
      (call, at) =>
        void call.answer.then(
          () => answered.push(at),
          () => {},
        ),
    );
    // Every call of the greedy project is either dripping or answered.
    await until(() => dripping.length + answered.length === maxFetches, "the greedy project's calls settled");

    const fetched = pdfCall(other, `${host.url}/doc.pdf`);
    const answer = await fetched.answer;
    expect({ status: answer.status, body: answer.body }).toEqual({ status: 200, body: { answer: "fake" } });

    expect(dripping).toHaveLength(maxFetchesPerProject);
    expect(answered).toHaveLength(maxFetches - maxFetchesPerProject);
    for (const at of answered) {
      const refused = await calls[at]!.answer;
      expect(refused.status).toBe(429);
      expect(refused.headers["retry-after"]).toBe("1");
      expect(refused.headers["x-request-id"]).toMatch(/^req_/);
      // The rate limits' report of the admitted call, as on its other answers: they did not refuse it.
      expect(refused.headers.ratelimit).toMatch(/^"(project|ip)";r=[1-9]/);
      expect(refused.body).toEqual({
        error: {
          code: "TOO_MANY_REQUESTS",
          message: `This project has ${maxFetchesPerProject} PDF fetches running on this instance, the most one project may run at once (SLUICE_MAX_PDF_FETCHES_PER_PROJECT); retry when one ends`,
          requestId: refused.headers["x-request-id"],
        },
      });
    }

    // A place the project gave back is its own again.
    for (const call of calls) call.socket.destroy();
    await until(() => dripsOpen === 0, "the held fetches stopped");
    const again = pdfCall(greedy, `${host.url}/doc.pdf`);
    expect((await again.answer).status).toBe(200);
    for (const call of [fetched, again]) call.socket.destroy();
  });
});

describe("SLUICE_MAX_PDF_FETCHES_PER_PROJECT", () => {
  it.each([
    [{}, 8, 4],
    [{ maxPdfFetches: 5 }, 5, 3],
    [{ maxPdfFetches: 1 }, 1, 1],
    [{ maxPdfFetches: 6, maxPdfFetchesPerProject: 2 }, 6, 2],
  ] as const)(
    "builds the gateway's fetcher with the share set or its default (%o)",
    async (settings, total, share) => {
      built.length = 0;
      const sluice = await startTestGateway(settings);
      try {
        expect(
          built.map(({ maxFetches, maxFetchesPerProject }) => ({ maxFetches, maxFetchesPerProject })),
        ).toEqual([{ maxFetches: total, maxFetchesPerProject: share }]);
      } finally {
        await sluice.close();
      }
    },
  );
});
