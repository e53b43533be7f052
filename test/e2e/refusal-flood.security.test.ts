import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { Config } from "../../src/config.js";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import { type RawAnswer, sendRawHeaders } from "../support/raw-request.js";
import { redisAvailable, redisTestSpace, redisUrl } from "../support/services.js";
import { createTestProject, startTestGateway, type TestGateway } from "../support/test-gateway.js";

/**
 * Refusals a client without valid credentials can repeat as fast as it sends (a credential header
 * or `x-project-id` sent twice) each write a usage row: they count as failed authentications, so
 * the first `SLUICE_AUTH_FAILURE_LIMIT` of a minute keep their rows (and their 400) and the rest get
 * the throttle's 429 with none, as unknown project ids do. A proxied call the project's allow-list
 * leaves out counts against the client's own limits (client IP, device), not the project's.
 */
/** Sends `headers` as given: a list value goes out as that many header lines. */
const send = (url: string, headers: Record<string, string | string[]>, body: string) =>
  sendRawHeaders(url, headers, body);

const limit = 3;
const flood = 12;
const chat = JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] });
const json = { "content-type": "application/json" };

const space = redisTestSpace("refusal-flood");
const stores: Array<{ name: string; available: boolean; config: () => Partial<Config> }> = [
  { name: "in memory", available: true, config: () => ({}) },
  {
    name: "on Redis",
    available: redisAvailable,
    config: () => ({ redisUrl, redisKeyPrefix: `${space.nextPrefix()}:` }),
  },
];

afterAll(() => space.cleanup());

for (const store of stores) {
  describe.skipIf(!store.available)(`a flood of refused requests, ${store.name}`, () => {
    let fake: FakeUpstream;
    let sluice: TestGateway;

    beforeAll(async () => {
      fake = await startFakeUpstream();
      sluice = await startTestGateway({
        ...providerBaseUrls(fake),
        authFailureLimit: limit,
        rateLimitIpPerMinute: limit,
        trustProxy: ["127.0.0.1"],
        ...store.config(),
      });
    });

    afterAll(async () => {
      await sluice?.close();
      await fake?.close();
    });

    beforeEach(() => fake.clear());

    /** The usage rows written for requests from `address`, by status. */
    async function rowsFrom(address: string): Promise<Record<number, number>> {
      await sluice.gateway.flushUsage();
      const rows = await sluice.gateway.database.db
        .selectFrom("usage_records")
        .select(["status"])
        .where("client_ip", "=", address)
        .execute();
      const byStatus: Record<number, number> = {};
      for (const row of rows) byStatus[row.status] = (byStatus[row.status] ?? 0) + 1;
      return byStatus;
    }

    /** `flood` requests one after the other: their statuses. */
    async function statusesOf(next: (index: number) => Promise<RawAnswer>): Promise<number[]> {
      const statuses: number[] = [];
      for (let index = 0; index < flood; index++) statuses.push((await next(index)).status);
      return statuses;
    }

    const firstThenThrottled = (first: number) => [
      ...Array<number>(limit).fill(first),
      ...Array<number>(flood - limit).fill(429),
    ];

    it("a credential header sent twice: the limit's rows and 400s, then 429 with no row; others unaffected", async () => {
      const project = await createTestProject(sluice.gateway);
      const url = `${sluice.url}/v1/provider-a/${project.projectId}/chat/completions`;
      const bearer = `Bearer ${project.bearer("provider-a")}`;
      const address = "198.51.100.10";
      const statuses = await statusesOf(() =>
        send(url, { ...json, authorization: [bearer, bearer], "x-forwarded-for": address }, chat),
      );
      expect(statuses).toEqual(firstThenThrottled(400));
      expect(await rowsFrom(address)).toEqual({ 400: limit });
      // Throttled as a wrong credential is: the right one alone from there waits out the window too.
      const single = await send(url, { ...json, authorization: bearer, "x-forwarded-for": address }, chat);
      expect(single.status).toBe(429);
      expect(single.headers["retry-after"]).toBeDefined();
      // Another address is not throttled.
      const other = await send(
        url,
        { ...json, authorization: bearer, "x-forwarded-for": "198.51.100.11" },
        chat,
      );
      expect(other.status).toBe(200);
      expect(await rowsFrom("198.51.100.11")).toEqual({ 200: 1 });
      expect(fake.requests).toHaveLength(1);
    });

    it("the 400 keeps its message while under the limit", async () => {
      const project = await createTestProject(sluice.gateway);
      const answer = await send(
        `${sluice.url}/v1/provider-a/${project.projectId}/chat/completions`,
        { ...json, "x-api-key": ["a", "b"], "x-ai-key": ["c", "d"], "x-forwarded-for": "198.51.100.12" },
        chat,
      );
      expect(answer.status).toBe(400);
      expect(JSON.parse(answer.body).error.message).toBe(
        "The x-ai-key header was sent more than once; send each credential header once",
      );
    });

    it("x-project-id sent twice: the limit's rows and 400s, then 429 with no row; others unaffected", async () => {
      const project = await createTestProject(sluice.gateway);
      const credentials = {
        "x-sluice-test-key": project.testKey,
        "x-ai-key": project.partialKeys["provider-a"],
      };
      const address = "198.51.100.20";
      const text = JSON.stringify({ text: "hi" });
      const statuses = await statusesOf(() =>
        send(
          `${sluice.url}/v1/text`,
          { ...json, ...credentials, "x-project-id": [project.projectId, "p2"], "x-forwarded-for": address },
          text,
        ),
      );
      expect(statuses).toEqual(firstThenThrottled(400));
      expect(await rowsFrom(address)).toEqual({ 400: limit });
      // Another address authenticates (the project has no output schema, checked after: 422).
      const other = await send(
        `${sluice.url}/v1/text`,
        { ...json, ...credentials, "x-project-id": project.projectId, "x-forwarded-for": "198.51.100.21" },
        text,
      );
      expect(other.status).toBe(422);
    });

    it("a credential header sent twice with a new made-up project id each time is counted on the address", async () => {
      const address = "198.51.100.30";
      const statuses = await statusesOf((index) =>
        send(
          `${sluice.url}/v1/provider-a/made-up-${index}-${Date.now()}/chat/completions`,
          { ...json, authorization: ["Bearer a.b", "Bearer c.d"], "x-forwarded-for": address },
          chat,
        ),
      );
      expect(statuses).toEqual(firstThenThrottled(400));
      expect(await rowsFrom(address)).toEqual({ 400: limit });
      const project = await createTestProject(sluice.gateway);
      const other = await send(
        `${sluice.url}/v1/provider-a/${project.projectId}/chat/completions`,
        {
          ...json,
          authorization: `Bearer ${project.bearer("provider-a")}`,
          "x-forwarded-for": "198.51.100.31",
        },
        chat,
      );
      expect(other.status).toBe(200);
    });

    it("a burst sent at once is held to the limit too", async () => {
      const project = await createTestProject(sluice.gateway);
      const url = `${sluice.url}/v1/provider-a/${project.projectId}/chat/completions`;
      const address = "198.51.100.40";
      const answers = await Promise.all(
        Array.from({ length: flood }, () =>
          send(
            url,
            { ...json, authorization: ["Bearer a.b", "Bearer a.b"], "x-forwarded-for": address },
            chat,
          ),
        ),
      );
      const rows = await rowsFrom(address);
      expect(rows[400] ?? 0).toBeLessThanOrEqual(limit);
      expect(rows[429]).toBeUndefined();
      expect(answers.filter((answer) => answer.status === 400)).toHaveLength(rows[400] ?? 0);
      expect(answers.filter((answer) => answer.status === 429)).toHaveLength(flood - (rows[400] ?? 0));
    });

    it("calls the allow-list leaves out count against the client's IP limit, not the project's", async () => {
      const project = await createTestProject(sluice.gateway, {
        proxyAllowList: { "provider-a": ["POST chat/completions"] },
        rateLimits: { perMinute: limit + 1 },
      });
      const bearer = `Bearer ${project.bearer("provider-a")}`;
      const address = "198.51.100.50";
      const statuses = await statusesOf(() =>
        send(
          `${sluice.url}/v1/provider-a/${project.projectId}/embeddings`,
          { ...json, authorization: bearer, "x-forwarded-for": address },
          JSON.stringify({ model: "text-embedding-3-small", input: "hi" }),
        ),
      );
      // The first refusals are 403; once over its own IP limit the client gets 429 and Retry-After.
      expect(statuses).toEqual(firstThenThrottled(403));
      const rows = await rowsFrom(address);
      expect(rows[403]).toBe(limit);
      // The project's allowance (limit + 1) is untouched: another client's allowed calls pass.
      for (const other of ["198.51.100.51", "198.51.100.52"]) {
        const answer = await send(
          `${sluice.url}/v1/provider-a/${project.projectId}/chat/completions`,
          { ...json, authorization: bearer, "x-forwarded-for": other },
          chat,
        );
        expect(answer.status).toBe(200);
      }
      expect(fake.requests).toHaveLength(2);
    });
  });
}
