import { gzipSync } from "node:zlib";
import { APIError, toFile } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { providerA, tinyPng } from "../fakes/fake-upstream-responses.js";
import { clockAwayFromMonthEnd } from "../support/away-from-month-end.js";
import { googleGenAiV1Client, sdkClients } from "../support/sdk-clients.js";
import { redisAvailable, redisTestSpace, redisUrl } from "../support/services.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowById,
} from "../support/test-gateway.js";

// An image generation through the proxies has a price the pricing table gives before it runs (n x
// the model's price at its quality and size), as a /v1/image call has. Before, the proxies did not
// tell it: under a 1 USD cap with 0.011 USD spent, a proxied call of 20 high-quality 1536x1024
// gpt-image-1 images (5 USD) ran, and ten calls of 0.50 sent at once all ran (each counted in flight
// at 0.011). Now they are held to it as /v1/image calls are (decision 0042, amended): the cap's 403,
// or the calls in flight's 429.
for (const { shared, name } of [
  { shared: false, name: "in memory" },
  { shared: true, name: "with the calls in flight in Redis" },
])
  describe.skipIf(shared && !redisAvailable)(`proxied image calls of a known price (${name})`, () => {
    let fake: FakeUpstream;
    let sluice: TestGateway;
    const space = redisTestSpace("proxy-known-price");

    beforeAll(async () => {
      fake = await startFakeUpstream();
      sluice = await startTestGateway(
        {
          providerABaseUrl: `${fake.url}/a/v1`,
          providerCBaseUrl: `${fake.url}/c/v1beta`,
          ...(shared ? { redisUrl, redisKeyPrefix: `${space.nextPrefix()}:` } : {}),
        },
        { now: clockAwayFromMonthEnd() },
      );
    });
    afterAll(async () => {
      await sluice.close();
      await fake.close();
      await space.cleanup();
    });

    /** `openai.images.generate` of gpt-image-1 through the proxy: its status, headers and error body. */
    async function generate(
      project: TestProject,
      n: number,
      quality?: "low" | "high",
      size?: "1024x1024" | "1536x1024",
    ) {
      const { openai } = sdkClients(sluice, project);
      try {
        const { data, response } = await openai.images
          .generate({
            model: "gpt-image-1",
            prompt: "a lighthouse",
            n,
            ...(quality ? { quality } : {}),
            ...(size ? { size } : {}),
          })
          .withResponse();
        return {
          status: response.status,
          headers: response.headers,
          images: data.data?.length ?? 0,
          error: null,
        };
      } catch (error) {
        if (!(error instanceof APIError)) throw error;
        return {
          status: error.status ?? 0,
          headers: error.headers,
          images: 0,
          error: error.error as { code: string; message: string; requestId: string },
        };
      }
    }

    /** The row of an answer by its headers: a `Headers`, or @google/genai 1.x's record. */
    const rowOf = (headers: { get(name: string): string | null } | Record<string, string> | undefined) =>
      usageRowById(
        sluice.gateway,
        headers === undefined
          ? null
          : typeof headers.get === "function"
            ? (headers as { get(name: string): string | null }).get("x-request-id")
            : ((headers as Record<string, string>)["x-request-id"] ?? null),
      );

    /** A project of a 1 USD cap with 0.011 USD spent (one low-quality 1024x1024 image): the month's largest call. */
    async function projectWithOneCheapCall() {
      const project = await createTestProject(sluice.gateway, {
        provider: "provider-a",
        monthlySpendCapUsd: 1,
      });
      const first = await generate(project, 1, "low", "1024x1024");
      expect(first.status).toBe(200);
      expect((await rowOf(first.headers)).cost_usd).toBe(0.011);
      return project;
    }

    it("refuses a call whose own price would pass the cap with the cap's 403, before any provider call", async () => {
      const project = await projectWithOneCheapCall();
      const before = fake.requests.length;
      // 20 x 0.25 = 5 USD, against 0.989 left under the cap.
      const refused = await generate(project, 20, "high", "1536x1024");
      expect(refused.status).toBe(403);
      expect(refused.error?.code).toBe("FORBIDDEN");
      expect(refused.error?.message).toContain("price, 5 USD,");
      expect(refused.error?.message).toContain("monthly spend cap of 1 USD");
      expect(refused.error?.requestId).toBe(refused.headers?.get("x-request-id"));
      expect(fake.requests.length).toBe(before);
      expect(await rowOf(refused.headers)).toMatchObject({
        status: 403,
        error_code: "FORBIDDEN",
        model: "gpt-image-1",
        cost_usd: null,
      });
      // Ten such calls at once: none runs.
      const burst = await Promise.all(
        Array.from({ length: 10 }, async () => (await generate(project, 20, "high", "1536x1024")).status),
      );
      expect(burst).toEqual(Array(10).fill(403));
      expect(fake.requests.length).toBe(before);
      // One whose price fits what is left runs, its row priced as before by what its answer names.
      const fits = await generate(project, 3, "high", "1536x1024");
      expect(fits.status).toBe(200);
      expect(fits.images).toBe(3);
      expect((await rowOf(fits.headers)).cost_usd).toBe(0.75);
      // 0.25 more would pass the cap (1.011); 0.167 would not (0.928).
      expect((await generate(project, 1, "high", "1536x1024")).status).toBe(403);
      expect((await generate(project, 1, "high", "1024x1024")).status).toBe(200);
    });

    it("counts a call of known price in flight at its price: calls sent at once whose sum passes the cap are not all admitted", async () => {
      const project = await projectWithOneCheapCall();
      const before = fake.requests.length;
      fake.setLatencyMs(2_000);
      let burst: Awaited<ReturnType<typeof generate>>[];
      try {
        // 2 x 0.25 = 0.50 each: the first admitted (0.011 + 0.50), not a second (1.011).
        burst = await Promise.all(
          Array.from({ length: 10 }, () => generate(project, 2, "high", "1536x1024")),
        );
      } finally {
        fake.setLatencyMs(0);
      }
      const statuses = burst.map((answer) => answer.status);
      expect(statuses.filter((status) => status === 200)).toHaveLength(1);
      // Each would fit alone: the calls in flight's 429, to retry once they end.
      expect(statuses.filter((status) => status === 429)).toHaveLength(9);
      expect(fake.requests.length - before).toBe(1);
      const refused = burst.find((answer) => answer.status === 429);
      expect(refused?.headers?.get("retry-after")).toBe("1");
      expect(refused?.error?.code).toBe("TOO_MANY_REQUESTS");
      expect(await rowOf(refused?.headers)).toMatchObject({
        status: 429,
        error_code: "TOO_MANY_REQUESTS",
        cost_usd: null,
      });
      // It ended (0.511 spent): another 0.50 would pass the cap, 0.25 fits.
      expect((await generate(project, 2, "high", "1536x1024")).status).toBe(403);
      expect((await generate(project, 1, "high", "1536x1024")).status).toBe(200);
    });

    it("leaves a call whose price is not known before it runs as it was: run, priced by its answer", async () => {
      const project = await projectWithOneCheapCall();
      // gpt-image-1's default quality (`auto`) has no price: the call runs, priced by what its answer
      // names (the fake: medium, 1024x1024, 20 x 0.042 = 0.84).
      const unknown = await generate(project, 20);
      expect(unknown.status).toBe(200);
      expect((await rowOf(unknown.headers)).cost_usd).toBe(0.84);
    });

    it("reads the price of a request sent gzip-compressed from its decoded body", async () => {
      const project = await projectWithOneCheapCall();
      const before = fake.requests.length;
      const send = (n: number) =>
        fetch(`${sluice.url}/v1/provider-a/${project.projectId}/images/generations`, {
          method: "POST",
          headers: {
            authorization: `Bearer ${project.bearer("provider-a")}`,
            "content-type": "application/json",
            "content-encoding": "gzip",
          },
          body: gzipSync(
            JSON.stringify({ model: "gpt-image-1", prompt: "a fox", n, quality: "high", size: "1536x1024" }),
          ),
        });
      const refused = await send(20);
      expect(refused.status).toBe(403);
      expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("FORBIDDEN");
      expect(fake.requests.length).toBe(before);
      const fits = await send(1);
      expect(fits.status).toBe(200);
      expect((await rowOf(fits.headers)).cost_usd).toBe(0.25);
    });

    it("refuses with 400 an image generation whose body names a member twice, before any provider call", async () => {
      // RFC 8259 §4: which of two `n` (or `model`, `quality`, `sampleCount`) the provider reads is
      // unpredictable; priced by JSON.parse's last, `"n":20,"n":1` was priced as one image.
      const project = await projectWithOneCheapCall();
      const before = fake.requests.length;
      const send = (provider: "provider-a" | "provider-c", path: string, body: string, key: string) =>
        fetch(`${sluice.url}/v1/${provider}/${project.projectId}/${path}`, {
          method: "POST",
          headers: {
            [provider === "provider-a" ? "authorization" : "x-goog-api-key"]: key,
            "content-type": "application/json",
          },
          body,
        });
      const bearer = `Bearer ${project.bearer("provider-a")}`;
      for (const body of [
        '{"model":"gpt-image-1","prompt":"a fox","n":20,"n":1,"quality":"high","size":"1536x1024"}',
        '{"model":"gpt-image-1","prompt":"a fox","n":20,"\\u006e":1,"quality":"high","size":"1536x1024"}',
        '{"model":"gpt-image-1","prompt":"a fox","n":20,"quality":"high","quality":"low","size":"1536x1024"}',
        '{"model":"gpt-image-1","model":"gpt-image-1-mini","prompt":"a fox","n":20,"size":"1536x1024"}',
      ]) {
        const refused = await send("provider-a", "images/generations", body, bearer);
        expect(refused.status, body).toBe(400);
        const error = ((await refused.json()) as { error: { code: string; message: string } }).error;
        expect(error.code).toBe("BAD_REQUEST");
        expect(error.message).toContain("more than once");
        expect(await rowOf(refused.headers)).toMatchObject({ status: 400, cost_usd: null });
      }
      expect(fake.requests.length).toBe(before);
      // The same call named once runs.
      const once = await send(
        "provider-a",
        "images/generations",
        '{"model":"gpt-image-1","prompt":"a fox","n":1,"quality":"high","size":"1536x1024"}',
        bearer,
      );
      expect(once.status).toBe(200);
      expect((await rowOf(once.headers)).cost_usd).toBe(0.25);
    });

    it("refuses with 400 an Imagen predict call whose parameters name sampleCount twice", async () => {
      const project = await createTestProject(sluice.gateway, {
        provider: "provider-c",
        monthlySpendCapUsd: 0.1,
      });
      const before = fake.requests.length;
      const refused = await fetch(
        `${sluice.url}/v1/provider-c/${project.projectId}/v1beta/models/imagen-4.0-generate-001:predict`,
        {
          method: "POST",
          headers: { "x-goog-api-key": project.bearer("provider-c"), "content-type": "application/json" },
          body: '{"instances":[{"prompt":"a fox"}],"parameters":{"sampleCount":4,"sampleCount":1}}',
        },
      );
      expect(refused.status).toBe(400);
      expect(fake.requests.length).toBe(before);
    });

    it("leaves an edit, which the table has no price for, as it was", async () => {
      const project = await projectWithOneCheapCall();
      const { openai } = sdkClients(sluice, project);
      fake.enqueueResponse({
        status: 200,
        body: providerA.gptImage({
          count: 20,
          quality: "high",
          size: "1536x1024",
          usage: { input_tokens: 10, output_tokens: 100, total_tokens: 110 },
        }),
      });
      const before = fake.requests.length;
      const { response } = await openai.images
        .edit({
          model: "gpt-image-1",
          image: await toFile(tinyPng, "in.png", { type: "image/png" }),
          prompt: "add a hat",
          n: 20,
          quality: "high",
          size: "1536x1024",
        })
        .withResponse();
      expect(response.status).toBe(200);
      expect(fake.requests.length - before).toBe(1);
      // Its row as before: gpt-image-1 has no token prices, and an edit is not priced per image.
      expect(await rowOf(response.headers)).toMatchObject({ model: "gpt-image-1", cost_usd: null });
    });

    it("holds an Imagen predict call (@google/genai 1.x) to its price too", async () => {
      const project = await createTestProject(sluice.gateway, {
        provider: "provider-c",
        monthlySpendCapUsd: 0.1,
      });
      const google = googleGenAiV1Client(sluice, project);
      const before = fake.requests.length;
      // The Gemini API's default of 4 images, 0.04 each: 0.16 passes 0.10.
      const refused = await google.models
        .generateImages({ model: "imagen-4.0-generate-001", prompt: "a lighthouse" })
        .then(
          () => null,
          (error: unknown) => error as { status?: number; message: string },
        );
      expect(refused?.status).toBe(403);
      expect(refused?.message).toContain("FORBIDDEN");
      expect(fake.requests.length).toBe(before);
      const fits = await google.models.generateImages({
        model: "imagen-4.0-generate-001",
        prompt: "a lighthouse",
        config: { numberOfImages: 2 },
      });
      expect(fits.generatedImages).toHaveLength(2);
      expect((await rowOf(fits.sdkHttpResponse?.headers)).cost_usd).toBe(0.08);
    });

    it("leaves an uncapped project's image calls as they were", async () => {
      const project = await createTestProject(sluice.gateway, { provider: "provider-a" });
      const answer = await generate(project, 20, "high", "1536x1024");
      expect(answer.status).toBe(200);
      expect((await rowOf(answer.headers)).cost_usd).toBe(5);
    });
  });
