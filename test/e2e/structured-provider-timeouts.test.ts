import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LocalServer, startLocalServer } from "../support/local-server.js";
import {
  createTestProject,
  titleSchema as schema,
  startTestGateway,
  type TestGateway,
} from "../support/test-gateway.js";

/**
 * The structured and image endpoints call providers with the configured upstream timeouts, not
 * the global fetch's own 300 s: a provider that goes silent mid-answer is a 504 once
 * SLUICE_UPSTREAM_IDLE_TIMEOUT_MS passes, and one that cannot be reached says so.
 */
describe("structured and image calls on the configured upstream timeouts", () => {
  let silent: LocalServer;
  let sluice: TestGateway;

  beforeAll(async () => {
    // Answers 200 and the start of a body, then nothing more.
    silent = await startLocalServer((request, response) => {
      request.resume();
      response.writeHead(200, { "content-type": "application/json" });
      response.write('{"id":');
    });
    const url = silent.url;
    sluice = await startTestGateway({
      providerABaseUrl: `${url}/a/v1`,
      // Nothing listens there.
      providerBBaseUrl: "http://127.0.0.1:59/v1",
      providerCBaseUrl: `${url}/c/v1beta`,
      upstreamHeadersTimeoutMs: 60_000,
      upstreamIdleTimeoutMs: 500,
    });
  });
  afterAll(async () => {
    await sluice.close();
    await silent.close();
  });

  const call = async (route: string, provider: "provider-a" | "provider-b" | "provider-c", body: object) => {
    const project = await createTestProject(sluice.gateway, { provider, outputSchema: schema });
    const started = Date.now();
    const response = await fetch(`${sluice.url}/v1/${route}/${project.projectId}`, {
      method: "POST",
      headers: { authorization: `Bearer ${project.bearer(provider)}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    const envelope = (await response.json()) as { error: { code: string; message: string } };
    return { status: response.status, error: envelope.error, ms: Date.now() - started };
  };

  it("answers /v1/text 504 when the provider goes silent mid-answer, after the idle timeout", async () => {
    const result = await call("text", "provider-a", { text: "hello" });
    expect(result).toMatchObject({ status: 504, error: { code: "PROVIDER_TIMEOUT" } });
    expect(result.ms).toBeLessThan(10_000);
  }, 20_000);

  it("answers /v1/image 504 the same way", async () => {
    const result = await call("image", "provider-c", { prompt: "a cat" });
    expect(result).toMatchObject({ status: 504, error: { code: "PROVIDER_TIMEOUT" } });
  }, 20_000);

  it("says a provider that cannot be reached could not be reached (502)", async () => {
    const result = await call("text", "provider-b", { text: "hello" });
    expect(result).toMatchObject({
      status: 502,
      error: { code: "PROVIDER_ERROR", message: "The provider could not be reached" },
    });
  });
});
