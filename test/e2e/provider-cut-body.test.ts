import type { ServerResponse } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ProviderId } from "../../src/providers/provider-id.js";
import { type LocalServer, startLocalServer } from "../support/local-server.js";
import {
  createProjectOnEachProvider,
  titleSchema as schema,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

/** The start of an answer, as any of the providers' JSON begins; never its end. */
const start = '{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"{\\"title';

type Cut = "content-length" | "chunked" | "reset";

/**
 * Sends a 200 and its headers, then part of the body, then drops the connection: with a
 * `content-length` larger than what comes, chunked without its last chunk, or reset (a TCP RST).
 */
function cutAnswer(response: ServerResponse, cut: Cut): void {
  const headers: Record<string, string> =
    cut === "content-length"
      ? { "content-type": "application/json", "content-length": String(start.length + 500) }
      : { "content-type": "application/json" };
  response.writeHead(200, headers);
  response.flushHeaders();
  response.write(start, () =>
    setTimeout(() => (cut === "reset" ? response.socket?.resetAndDestroy() : response.socket?.destroy()), 20),
  );
}

/**
 * A provider that answers 200, sends its headers, and then drops the connection mid-body: the
 * AI SDK reports "Failed to process successful response" (status 200) over the socket's error.
 * Nothing of the provider's answer came: a transient failure, retryable as a 5xx or a provider not
 * reached is (docs/api.md), not one the same call gets again.
 */
describe("a provider that drops the connection in the middle of a 200's body", () => {
  let cut: Cut = "content-length";
  let upstream: LocalServer;
  let sluice: TestGateway;
  let requests = 0;
  let projects: Record<ProviderId, TestProject>;

  beforeAll(async () => {
    upstream = await startLocalServer((request, response) => {
      requests++;
      request.resume();
      request.on("end", () => cutAnswer(response, cut));
    });
    sluice = await startTestGateway({
      providerABaseUrl: `${upstream.url}/a/v1`,
      providerBBaseUrl: `${upstream.url}/b/v1`,
      providerCBaseUrl: `${upstream.url}/c/v1beta`,
    });
    projects = await createProjectOnEachProvider(sluice.gateway, { outputSchema: schema });
  });
  afterAll(async () => {
    await sluice?.close();
    await upstream?.close();
  });

  it.each([
    ["text", "provider-a", "content-length"],
    ["text", "provider-b", "content-length"],
    ["text", "provider-c", "content-length"],
    ["text", "provider-a", "chunked"],
    ["text", "provider-c", "chunked"],
    ["image", "provider-a", "content-length"],
    ["image", "provider-c", "content-length"],
    ["image", "provider-a", "chunked"],
    ["text", "provider-b", "reset"],
    ["image", "provider-c", "reset"],
  ] as const)("/v1/%s on %s, %s: 502 PROVIDER_ERROR, retryable", async (route, provider, how) => {
    cut = how;
    requests = 0;
    const project = projects[provider];
    const response = await fetch(`${sluice.url}/v1/${route}/${project.projectId}`, {
      method: "POST",
      headers: { authorization: `Bearer ${project.bearer(provider)}`, "content-type": "application/json" },
      body: JSON.stringify(route === "text" ? { text: "x" } : { prompt: "a lighthouse" }),
    });
    const { error } = (await response.json()) as {
      error: { code: string; message: string; details?: { retryable?: unknown; providerStatus?: unknown } };
    };
    expect(requests).toBe(1);
    expect(response.status).toBe(502);
    expect(error.code).toBe("PROVIDER_ERROR");
    expect(error.details).toMatchObject({ providerStatus: 200, retryable: true });
  });
});
