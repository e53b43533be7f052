import { randomBytes } from "node:crypto";
import OpenAI, { APIError } from "openai";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { clockAwayFromMonthEnd } from "../support/away-from-month-end.js";
import {
  createPostgresSchema,
  postgresAvailable,
  redisAvailable,
  redisTestSpace,
  redisUrl,
} from "../support/services.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowById,
} from "../support/test-gateway.js";

// Two gateways on one database and one Redis. An image call whose price the table gives before it
// runs counts in flight at that price (decision 0042, amended). Before, only on the instance that
// ran it: the place it took in Redis counted at the month's largest call on the other, so under a
// 1 USD cap with 0.011 spent a call of 0.50 running on one gateway let another of 0.50 run on the
// other at once (the month at 1.011).
describe.skipIf(!postgresAvailable || !redisAvailable)(
  "proxied image calls of a known price on two gateways",
  () => {
    const space = redisTestSpace("proxy-known-price-two");
    let fake: FakeUpstream;
    let schema: Awaited<ReturnType<typeof createPostgresSchema>>;
    const gateways: TestGateway[] = [];

    beforeAll(async () => {
      fake = await startFakeUpstream();
      schema = await createPostgresSchema();
      const shared = {
        masterKey: randomBytes(32).toString("base64"),
        databaseUrl: schema.url,
        redisUrl,
        redisKeyPrefix: `${space.nextPrefix()}:`,
        providerABaseUrl: `${fake.url}/a/v1`,
      };
      for (let index = 0; index < 2; index++)
        gateways.push(await startTestGateway(shared, { now: clockAwayFromMonthEnd() }));
    });
    afterAll(async () => {
      for (const gateway of gateways) await gateway.close();
      await space.cleanup();
      await fake?.close();
      await schema?.drop();
    });

    /** `openai.images.generate` of gpt-image-1 through `gateway`'s proxy: its status and request id. */
    async function generate(
      gateway: TestGateway,
      project: TestProject,
      n: number,
      quality: "low" | "high",
      size: "1024x1024" | "1536x1024",
    ) {
      const openai = new OpenAI({
        baseURL: `${gateway.url}/v1/provider-a/${project.projectId}`,
        apiKey: project.bearer("provider-a"),
        maxRetries: 0,
      });
      try {
        const { response } = await openai.images
          .generate({ model: "gpt-image-1", prompt: "a lighthouse", n, quality, size })
          .withResponse();
        return { status: response.status, requestId: response.headers.get("x-request-id"), retryAfter: null };
      } catch (error) {
        if (!(error instanceof APIError)) throw error;
        return {
          status: error.status ?? 0,
          requestId: error.headers?.get("x-request-id") ?? null,
          retryAfter: error.headers?.get("retry-after") ?? null,
        };
      }
    }

    it("counts a call of known price running on one gateway at its price on the other", async () => {
      const [one, two] = gateways as [TestGateway, TestGateway];
      const project = await createTestProject(one.gateway, { provider: "provider-a", monthlySpendCapUsd: 1 });
      // 0.011 spent, written: both read it (and the largest call) from the database.
      const first = await generate(one, project, 1, "low", "1024x1024");
      expect(first.status).toBe(200);
      expect((await usageRowById(one.gateway, first.requestId)).cost_usd).toBe(0.011);

      fake.setLatencyMs(2_000);
      try {
        const before = fake.requests.length;
        // 2 x 0.25 = 0.50 on the first gateway, held at the provider.
        const running = generate(one, project, 2, "high", "1536x1024");
        await vi.waitFor(() => expect(fake.requests.length).toBe(before + 1), { timeout: 5_000 });
        // Another 0.50 on the second: 0.011 + 0.50 + 0.50 passes the cap, the calls in flight's 429.
        const refused = await generate(two, project, 2, "high", "1536x1024");
        expect(refused.status).toBe(429);
        expect(refused.retryAfter).toBe("1");
        expect(fake.requests.length).toBe(before + 1);
        // 0.25 fits beside it (0.761).
        const fits = generate(two, project, 1, "high", "1536x1024");
        expect((await running).status).toBe(200);
        expect((await fits).status).toBe(200);
      } finally {
        fake.setLatencyMs(0);
      }
    });
  },
);
