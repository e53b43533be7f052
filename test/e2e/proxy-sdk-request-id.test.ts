import Anthropic from "@anthropic-ai/sdk";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type ProxyStage, startProxyStage } from "../support/proxy-stage.js";
import { createTestProject, type TestProject } from "../support/test-gateway.js";

/**
 * @anthropic-ai/sdk reads a request id from the `request-id` header only (its errors' `requestID`).
 * Sluice's own error answers on provider B's routes carry its id there too, beside `x-request-id`,
 * so an app can quote it from the SDK's error (docs/proxy.md, "Headers"); provider B's own
 * answers keep the provider's.
 */
describe("Sluice's request id in the Anthropic SDK's errors", () => {
  let stage: ProxyStage;
  const base = (project: TestProject = stage.project) =>
    `${stage.sluice.url}/v1/provider-b/${project.projectId}`;
  const create = (client: Anthropic) =>
    client.messages
      .create({ model: "claude-sonnet-4-5", max_tokens: 64, messages: [{ role: "user", content: "Hi" }] })
      .catch((caught: unknown) => caught);

  beforeAll(async () => {
    stage = await startProxyStage();
  });
  afterAll(() => stage.close());
  beforeEach(() => stage.fake.clear());

  /** The refusal as the SDK gives it, its request id checked against the answer's. */
  function expectSluiceId(caught: unknown, status: number, code: string): void {
    expect(caught).toBeInstanceOf(Anthropic.APIError);
    const error = caught as InstanceType<typeof Anthropic.APIError>;
    expect(error.status).toBe(status);
    const sluiceId = error.headers?.get("x-request-id");
    expect(sluiceId).toMatch(/^req_/);
    expect(error.requestID).toBe(sluiceId);
    expect(error.error).toMatchObject({ error: { code, requestId: sluiceId } });
  }

  it("is the SDK's requestID on a 401 (a wrong key)", async () => {
    const client = new Anthropic({ baseURL: base(), apiKey: "sk-sluice-wrong", maxRetries: 0 });
    expectSluiceId(await create(client), 401, "UNAUTHORIZED");
  });

  it("is the SDK's requestID on a 404 for an unknown project, refused before admission", async () => {
    const client = new Anthropic({
      baseURL: `${stage.sluice.url}/v1/provider-b/no-such-project`,
      apiKey: stage.project.bearer("provider-b"),
      maxRetries: 0,
    });
    const caught = await create(client);
    expect(caught).toBeInstanceOf(Anthropic.NotFoundError);
    expect((caught as InstanceType<typeof Anthropic.APIError>).requestID).toBe(
      (caught as InstanceType<typeof Anthropic.APIError>).headers?.get("x-request-id"),
    );
    expect((caught as InstanceType<typeof Anthropic.APIError>).requestID).toMatch(/^req_/);
  });

  it("is the SDK's requestID on a 400 for a provider path Sluice does not forward, or no route can read", async () => {
    const client = new Anthropic({
      baseURL: base(),
      apiKey: stage.project.bearer("provider-b"),
      maxRetries: 0,
    });
    // Refused by the route (an encoded slash), then by the router (an escape that decodes to no UTF-8).
    for (const path of ["/v1/a%2Fb/messages", "/v1/%zz/messages"]) {
      const caught = await client.post(path, { body: {} }).catch((error: unknown) => error);
      expectSluiceId(caught, 400, "BAD_REQUEST");
    }
    expect(stage.fake.requests).toHaveLength(0);
  });

  it("is the SDK's requestID on Sluice's rate-limit 429", async () => {
    const limited = await createTestProject(stage.sluice.gateway, { rateLimits: { perMinute: 1 } });
    const client = new Anthropic({
      baseURL: base(limited),
      apiKey: limited.bearer("provider-b"),
      maxRetries: 0,
    });
    await client.messages.create({
      model: "claude-sonnet-4-5",
      max_tokens: 64,
      messages: [{ role: "user", content: "Hi" }],
    });
    expectSluiceId(await create(client), 429, "TOO_MANY_REQUESTS");
  });

  it("is the SDK's requestID on Sluice's own 502 when the provider closes without an answer", async () => {
    stage.fake.setPlan(() => ({ destroy: true }));
    const client = new Anthropic({
      baseURL: base(),
      apiKey: stage.project.bearer("provider-b"),
      maxRetries: 0,
    });
    const caught = await create(client).finally(() => stage.fake.setPlan(null));
    expect((caught as InstanceType<typeof Anthropic.APIError>).status).toBeGreaterThanOrEqual(502);
    const error = caught as InstanceType<typeof Anthropic.APIError>;
    expect(error.requestID).toBe(error.headers?.get("x-request-id"));
    expect(error.requestID).toMatch(/^req_/);
  });

  it("stays the provider's own on provider B's answers passed through", async () => {
    stage.fake.enqueueResponse({ status: 429, headers: { "request-id": "req_provider_b_own" } });
    const client = new Anthropic({
      baseURL: base(),
      apiKey: stage.project.bearer("provider-b"),
      maxRetries: 0,
    });
    const caught = (await create(client)) as InstanceType<typeof Anthropic.APIError>;
    expect(caught).toBeInstanceOf(Anthropic.RateLimitError);
    expect(caught.requestID).toBe("req_provider_b_own");
    expect(caught.headers?.get("x-request-id")).toMatch(/^req_/);
    expect(caught.headers?.get("x-request-id")).not.toBe("req_provider_b_own");

    const ok = await client.messages
      .create({ model: "claude-sonnet-4-5", max_tokens: 64, messages: [{ role: "user", content: "Hi" }] })
      .withResponse();
    // A success passed through has no `request-id` Sluice added: only the provider's, when it sends one.
    expect(ok.response.headers.get("request-id")).toBeNull();
  });
});
