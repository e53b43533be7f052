import type { IncomingHttpHeaders } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LocalServer, startLocalServer } from "../support/local-server.js";
import {
  createProjectOnEachProvider,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

/**
 * A provider (or a compatible server at the configured base URL) that answers 307 to another
 * origin: fetch follows it by default and drops only `authorization`, so provider B's `x-api-key`
 * and C's `x-goog-api-key` (the rebuilt key) and every prompt would reach that origin. The AI SDK
 * routes follow no redirect (502); the proxies hand the 3xx to the client.
 */
describe("a provider's redirect to another origin", () => {
  let upstream: LocalServer;
  let elsewhere: LocalServer;
  let sluice: TestGateway;
  const seenElsewhere: IncomingHttpHeaders[] = [];
  let projects: Record<"provider-a" | "provider-b" | "provider-c", TestProject>;

  beforeAll(async () => {
    elsewhere = await startLocalServer((request, response) => {
      seenElsewhere.push(request.headers);
      request.resume();
      response.writeHead(500, { "content-type": "application/json" }).end("{}");
    });
    const elsewhereUrl = elsewhere.url;
    upstream = await startLocalServer((request, response) => {
      request.resume();
      response.writeHead(307, { location: `${elsewhereUrl}/steal${request.url}` }).end();
    });
    const upstreamUrl = upstream.url;
    sluice = await startTestGateway({
      providerABaseUrl: `${upstreamUrl}/a/v1`,
      providerBBaseUrl: `${upstreamUrl}/b/v1`,
      providerCBaseUrl: `${upstreamUrl}/c/v1beta`,
    });
    const schema = {
      type: "object",
      properties: { title: { type: "string" } },
      required: ["title"],
      additionalProperties: false,
    };
    projects = await createProjectOnEachProvider(sluice.gateway, { outputSchema: schema });
  });

  afterAll(async () => {
    await sluice.close();
    await upstream.close();
    await elsewhere.close();
  });

  for (const provider of ["provider-a", "provider-b", "provider-c"] as const) {
    it(`${provider}: /v1/text follows no redirect: 502, and nothing (no key, no prompt) reaches that origin`, async () => {
      seenElsewhere.length = 0;
      const project = projects[provider];
      const response = await fetch(`${sluice.url}/v1/text/${project.projectId}`, {
        method: "POST",
        headers: { authorization: `Bearer ${project.bearer(provider)}`, "content-type": "application/json" },
        body: JSON.stringify({ text: "hello" }),
      });
      expect(response.status).toBe(502);
      expect(((await response.json()) as { error: { code: string } }).error.code).toBe("PROVIDER_ERROR");
      expect(seenElsewhere).toEqual([]);
    });
  }

  for (const provider of ["provider-a", "provider-c"] as const) {
    it(`${provider}: /v1/image follows no redirect either`, async () => {
      seenElsewhere.length = 0;
      const project = projects[provider];
      const response = await fetch(`${sluice.url}/v1/image/${project.projectId}`, {
        method: "POST",
        headers: { authorization: `Bearer ${project.bearer(provider)}`, "content-type": "application/json" },
        body: JSON.stringify({ prompt: "a cat" }),
      });
      expect(response.status).toBe(502);
      await response.arrayBuffer();
      expect(seenElsewhere).toEqual([]);
    });
  }

  it("the proxy hands the 307 to the client and sends nothing to that origin", async () => {
    seenElsewhere.length = 0;
    const project = projects["provider-b"];
    const response = await fetch(`${sluice.url}/v1/provider-b/${project.projectId}/v1/messages`, {
      method: "POST",
      redirect: "manual",
      headers: { "x-api-key": project.bearer("provider-b"), "content-type": "application/json" },
      body: JSON.stringify({ model: "claude-3-5-haiku-latest", max_tokens: 1, messages: [] }),
    });
    await response.text();
    expect(response.status).toBe(307);
    expect(seenElsewhere).toHaveLength(0);
  });
});
