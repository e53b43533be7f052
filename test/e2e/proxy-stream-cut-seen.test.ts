import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, type RequestPlan, startFakeUpstream } from "../fakes/fake-upstream.js";
import { afterFirstChunk, proxiedChat } from "../support/proxied-chat.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowById,
  usageRowOf,
} from "../support/test-gateway.js";

/**
 * A stream the provider cuts, or leaves silent past the idle timeout, is cut for the client too:
 * Node's fetch and the OpenAI SDK see their read fail, never a clean end an app would take for the
 * whole answer. Also on a connection the client asked to close (`Connection: close`), whose answer
 * says so: undici (Node 20's fetch) takes such an answer's close for its end, even a chunked one's
 * before its last chunk.
 */
describe("a stream cut after its answer began", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway({ providerABaseUrl: `${fake.url}/a/v1`, upstreamIdleTimeoutMs: 300 });
    project = await createTestProject(sluice.gateway);
  });

  afterAll(async () => {
    fake.setPlan(null);
    await sluice.close();
    await fake.close();
  });

  const cuts: Array<[string, RequestPlan]> = [
    ["the provider cuts it", { streamEnd: "cut", sseDelayMs: 20 }],
    ["the provider goes silent past the idle timeout", { hangStreamsAfter: 2 }],
  ];
  const connections: Array<[string, Record<string, string>]> = [
    ["kept alive", {}],
    ["closed after the answer", { connection: "close" }],
  ];

  describe.each(cuts)("%s", (_cut, plan) => {
    it.each(connections)(
      "on a connection %s: fetch's read fails, the row says error",
      async (_c, headers) => {
        fake.setPlan(() => plan);
        const response = await proxiedChat(sluice.url, project, {
          body: { model: "gpt-4o-mini", messages: [], stream: true },
          headers,
        });
        expect(response.status).toBe(200);
        expect(response.headers.get("connection")).toBe(headers.connection ?? "keep-alive");
        const { rest } = await afterFirstChunk(response);
        expect(await rest).toBe("cut");
        expect(await usageRowOf(sluice.gateway, response)).toMatchObject({
          status: 200,
          streamed: 1,
          outcome: "error",
        });
      },
    );

    it.each(connections)("on a connection %s: the OpenAI SDK's stream throws", async (_c, headers) => {
      fake.setPlan(() => plan);
      const openai = new OpenAI({
        baseURL: `${sluice.url}/v1/provider-a/${project.projectId}`,
        apiKey: project.bearer("provider-a"),
        maxRetries: 0,
        defaultHeaders: headers,
      });
      const { data: stream, response } = await openai.chat.completions
        .create({ model: "gpt-4o-mini", messages: [], stream: true })
        .withResponse();
      const read = (async () => {
        for await (const _chunk of stream);
      })();
      await expect(read).rejects.toThrow();
      expect(await usageRowById(sluice.gateway, response.headers.get("x-request-id"))).toMatchObject({
        status: 200,
        outcome: "error",
      });
    });
  });
});
