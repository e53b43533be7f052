import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { proxiedChat } from "../support/proxied-chat.js";
import { redisAvailable, redisTestSpace, redisUrl } from "../support/services.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowOf,
} from "../support/test-gateway.js";

describe("the client-IP limit, on the embedded default", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway({ providerABaseUrl: `${fake.url}/a/v1`, rateLimitIpPerMinute: 2 });
  });

  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });

  it("counts one address within each project, refuses with 429 and the RateLimit headers, and records the refusal", async () => {
    const [first, second] = [
      await createTestProject(sluice.gateway),
      await createTestProject(sluice.gateway),
    ];
    const call = (project: typeof first) =>
      proxiedChat(sluice.url, project, {
        body: { model: "gpt-4o-mini", messages: [{ role: "user", content: "Hi" }] },
      });
    expect((await call(first)).status).toBe(200);
    const last = await call(first);
    expect(last.status).toBe(200);
    expect(last.headers.get("ratelimit")).toMatch(/^"ip";r=0;t=\d+$/);
    const upstreamCalls = fake.requests.length;

    const refused = await call(first);
    expect(refused.status).toBe(429);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("TOO_MANY_REQUESTS");
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(refused.headers.get("ratelimit-policy")).toContain('"ip";q=2;w=60');
    expect(fake.requests).toHaveLength(upstreamCalls);
    expect(await usageRowOf(sluice.gateway, refused)).toMatchObject({
      status: 429,
      error_code: "TOO_MANY_REQUESTS",
    });

    // The same address has its own allowance in another project.
    expect((await call(second)).status).toBe(200);
  });

  it("believes no forwarding header without SLUICE_TRUST_PROXY: a client cannot pick a new address per request", async () => {
    const project = await createTestProject(sluice.gateway);
    const spoofed = (index: number) =>
      proxiedChat(sluice.url, project, {
        headers: {
          "x-forwarded-for": `203.0.113.${index}`,
          forwarded: `for=203.0.113.${index}`,
          "x-real-ip": `203.0.113.${index}`,
        },
      });
    expect((await spoofed(1)).status).toBe(200);
    const second = await spoofed(2);
    expect(second.status).toBe(200);
    expect(await usageRowOf(sluice.gateway, second)).toMatchObject({ client_ip: "127.0.0.1" });
    expect((await spoofed(3)).status).toBe(429);
  });
});

// Redis keys of a space of their own (SLUICE_REDIS_KEY_PREFIX), removed afterwards.
const space = redisTestSpace("rate-limits");
afterAll(() => space.cleanup());

for (const store of [
  { name: "in memory", available: true, redis: {} },
  {
    name: "on Redis",
    available: redisAvailable,
    redis: { redisUrl, redisKeyPrefix: `${space.nextPrefix()}:` },
  },
]) {
  describe.skipIf(!store.available)(`the client-IP limit behind a trusted proxy, ${store.name}`, () => {
    let fake: FakeUpstream;
    let sluice: TestGateway;

    beforeAll(async () => {
      fake = await startFakeUpstream();
      sluice = await startTestGateway({
        providerABaseUrl: `${fake.url}/a/v1`,
        rateLimitIpPerMinute: 2,
        trustProxy: ["127.0.0.1"],
        ...store.redis,
      });
    });

    afterAll(async () => {
      await sluice.close();
      await fake.close();
    });

    it("uses up none of the other limits: a client over its IP limit leaves its project's allowance to others", async () => {
      const project = await createTestProject(sluice.gateway, { rateLimits: { perMinute: 4 } });
      const from = (address: string) => chatFrom(sluice, project, address);
      const greedy = [];
      for (let index = 0; index < 8; index++) greedy.push((await from("198.51.100.1")).status);
      expect(greedy).toEqual([200, 200, 429, 429, 429, 429, 429, 429]);
      // Two of the project's four requests were used: another client of the project gets both.
      const other = await from("198.51.100.2");
      expect(other.status).toBe(200);
      expect(other.headers.get("ratelimit-policy")).toBe('"project";q=4;w=60, "ip";q=2;w=60');
      expect(other.headers.get("ratelimit")).toMatch(/^"(project|ip)";r=1;t=\d+$/);
      expect((await from("198.51.100.3")).status).toBe(200);
      const exhausted = await from("198.51.100.4");
      expect(exhausted.status).toBe(429);
      expect(exhausted.headers.get("ratelimit")).toMatch(/^"project";r=0;t=\d+$/);
    });

    it("counts IPv6 clients per /64: rotating addresses inside one block is one client", async () => {
      const project = await createTestProject(sluice.gateway);
      const from = (address: string) => chatFrom(sluice, project, address);
      expect((await from("2001:db8:0:1::a")).status).toBe(200);
      expect((await from("2001:db8:0:1:ffff::b")).status).toBe(200);
      const rotated = await from("2001:db8::1:1234:5678:9abc:def0");
      expect(rotated.status).toBe(429);
      // The usage row keeps the address itself.
      expect(await usageRowOf(sluice.gateway, rotated)).toMatchObject({
        client_ip: "2001:db8::1:1234:5678:9abc:def0",
      });
      // Another block, and an IPv4 client, have their own allowance.
      expect((await from("2001:db8:0:2::a")).status).toBe(200);
      expect((await from("198.51.100.7")).status).toBe(200);
    });

    it("counts an IPv4 client the proxy writes as IPv4-mapped IPv6 as that IPv4 client, however it is written", async () => {
      const project = await createTestProject(sluice.gateway);
      const from = (address: string) => chatFrom(sluice, project, address);
      expect((await from("::ffff:c633:640a")).status).toBe(200);
      const expanded = await from("0:0:0:0:0:ffff:198.51.100.10");
      expect(expanded.status).toBe(200);
      expect(await usageRowOf(sluice.gateway, expanded)).toMatchObject({ client_ip: "198.51.100.10" });
      expect((await from("198.51.100.10")).status).toBe(429);
      // Another IPv4 client written the same way is not in a block with the first.
      expect((await from("::ffff:c633:640b")).status).toBe(200);
    });
  });
}

/** A chat call to provider A from `address`, as the trusted proxy in front of Sluice reports it. */
function chatFrom(sluice: TestGateway, project: TestProject, address: string): Promise<Response> {
  return proxiedChat(sluice.url, project, {
    body: { model: "gpt-4o-mini", messages: [{ role: "user", content: "Hi" }] },
    headers: { "x-forwarded-for": address },
  });
}
