import { existsSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { type Browser, chromium, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

/**
 * CORS as a real browser enforces it: Debian's Chromium (installed by .ci/run) loads a page from
 * one origin and calls Sluice, on another, with fetch. In CI a missing browser fails the suite; on
 * a machine without Chromium the suite is skipped.
 */
const chromiumPath = [process.env.CHROMIUM_PATH, "/usr/bin/chromium", "/usr/bin/chromium-browser"].find(
  (path): path is string => path !== undefined && existsSync(path),
);
const inCi = process.env.CI === "true";

async function startPageServer(): Promise<{ server: Server; origin: string }> {
  const server = createServer((_request, response) => {
    response.writeHead(200, { "content-type": "text/html" }).end("<!doctype html><title>app</title>");
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

interface BrowserAnswer {
  status?: number;
  body?: string;
  requestId?: string | null;
  rateLimit?: string | null;
  failed?: string;
}

/** fetch from inside the page; a CORS refusal is the TypeError the browser raises. */
function browserFetch(
  page: Page,
  url: string,
  init: { method: string; headers: Record<string, string>; body?: string },
) {
  return page.evaluate(
    async ({ url, init }): Promise<BrowserAnswer> => {
      try {
        const response = await fetch(url, init);
        return {
          status: response.status,
          body: await response.text(),
          requestId: response.headers.get("x-request-id") ?? response.headers.get("x-sluice-request-id"),
          rateLimit: response.headers.get("ratelimit"),
        };
      } catch (error) {
        return { failed: String(error) };
      }
    },
    { url, init },
  );
}

describe.skipIf(!chromiumPath && !inCi)("CORS in a real browser (Chromium)", () => {
  let upstream: FakeUpstream;
  let sluice: TestGateway;
  let project: TestProject;
  let app: { server: Server; origin: string };
  let stranger: { server: Server; origin: string };
  let browser: Browser;

  beforeAll(async () => {
    upstream = await startFakeUpstream();
    app = await startPageServer();
    stranger = await startPageServer();
    sluice = await startTestGateway({
      providerABaseUrl: `${upstream.url}/a/v1`,
      providerBBaseUrl: `${upstream.url}/b`,
      corsOrigins: [app.origin],
    });
    project = await createTestProject(sluice.gateway);
    browser = await chromium.launch({
      ...(chromiumPath ? { executablePath: chromiumPath } : {}),
      args: ["--no-sandbox"],
    });
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await sluice?.close();
    await upstream?.close();
    for (const page of [app, stranger]) page?.server.close();
  });

  async function pageAt(origin: string): Promise<Page> {
    const page = await browser.newPage();
    await page.goto(`${origin}/`);
    return page;
  }

  const chat = (stream: boolean) => ({
    method: "POST",
    headers: { authorization: `Bearer ${project.bearer("provider-a")}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "gpt-4o-mini", stream, messages: [{ role: "user", content: "hi" }] }),
  });

  it("lets a listed origin call a proxy with its key, and read the answer and Sluice's headers", async () => {
    const page = await pageAt(app.origin);
    const answer = await browserFetch(
      page,
      `${sluice.url}/v1/provider-a/${project.projectId}/chat/completions`,
      chat(false),
    );
    expect(answer.failed).toBeUndefined();
    expect(answer.status).toBe(200);
    expect(JSON.parse(answer.body ?? "{}").object).toBe("chat.completion");
    expect(answer.requestId).toMatch(/^req_/);
    expect(answer.rateLimit).toMatch(/;r=\d+;t=\d+/);
    await page.close();
  });

  it("streams SSE to the page event by event", async () => {
    const page = await pageAt(app.origin);
    // The fake provider paces its events 30 ms apart, so each reaches the page on its own.
    const url = `${sluice.url}/v1/provider-a/${project.projectId}/chat/completions?sse_delay_ms=30`;
    const reads = await page.evaluate(
      async ({ url, init }) => {
        const response = await fetch(url, init);
        const reader = (response.body as ReadableStream<Uint8Array>).getReader();
        const decoder = new TextDecoder();
        let text = "";
        let chunks = 0;
        for (let read = await reader.read(); !read.done; read = await reader.read()) {
          chunks += 1;
          text += decoder.decode(read.value, { stream: true });
        }
        return { type: response.headers.get("content-type"), chunks, text };
      },
      { url, init: chat(true) },
    );
    expect(reads.type).toContain("text/event-stream");
    expect(reads.chunks).toBeGreaterThan(1);
    expect(reads.text).toContain("data: [DONE]");
    await page.close();
  });

  it("lets the page read Sluice's JSON errors, so an app can show them", async () => {
    const page = await pageAt(app.origin);
    const answer = await browserFetch(
      page,
      `${sluice.url}/v1/provider-a/${project.projectId}/chat/completions`,
      {
        ...chat(false),
        headers: { authorization: "Bearer not-a-key", "content-type": "application/json" },
      },
    );
    expect(answer.status).toBe(401);
    expect(JSON.parse(answer.body ?? "{}").error.code).toBe("UNAUTHORIZED");
    await page.close();
  });

  it("refuses an origin that is not listed: the browser never hands the answer to the page", async () => {
    upstream.clear();
    const page = await pageAt(stranger.origin);
    const answer = await browserFetch(
      page,
      `${sluice.url}/v1/provider-a/${project.projectId}/chat/completions`,
      chat(false),
    );
    expect(answer.status).toBeUndefined();
    expect(answer.failed).toContain("TypeError");
    // The preflight was refused, so the call itself never reached the provider.
    expect(upstream.requests).toHaveLength(0);
    await page.close();
  });
});
