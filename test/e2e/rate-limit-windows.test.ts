import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { proxiedChat } from "../support/proxied-chat.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowOf,
} from "../support/test-gateway.js";

/**
 * The RateLimit fields and Retry-After at the edges of a window, on a real gateway whose clock
 * (Date only: its timers run as usual) is moved by the test. The window opens 30 s before midnight
 * UTC: a limit is a minute from a key's first request, never a calendar unit.
 */
describe("rate-limit windows at their edges", () => {
  const opened = Date.UTC(2026, 10, 29, 23, 59, 30);
  let fake: FakeUpstream;
  let sluice: TestGateway;

  beforeAll(async () => {
    vi.useFakeTimers({ toFake: ["Date"], now: opened });
    fake = await startFakeUpstream();
    sluice = await startTestGateway({
      providerABaseUrl: `${fake.url}/a/v1`,
      rateLimitIpPerMinute: 3,
      trustProxy: ["127.0.0.1"],
    });
  });

  afterAll(async () => {
    await sluice.close();
    await fake.close();
    vi.useRealTimers();
  });

  const chat = (project: TestProject, address: string) =>
    proxiedChat(sluice.url, project, {
      body: { model: "gpt-4o-mini", messages: [{ role: "user", content: "Hi" }] },
      headers: { "x-forwarded-for": address },
    });
  const fields = (response: Response) => ({
    status: response.status,
    ratelimit: response.headers.get("ratelimit"),
    retryAfter: response.headers.get("retry-after"),
  });

  it("never reports less than 0 left or less than 1 s to wait, and opens a new window on the minute", async () => {
    vi.setSystemTime(opened);
    const project = await createTestProject(sluice.gateway, { rateLimits: { perMinute: 5 } });
    const counted = [];
    for (let index = 0; index < 3; index++) counted.push(fields(await chat(project, "198.51.100.1")));
    expect(counted.map((answer) => answer.ratelimit)).toEqual([
      '"ip";r=2;t=60',
      '"ip";r=1;t=60',
      '"ip";r=0;t=60',
    ]);
    const upstreamCalls = fake.requests.length;
    expect(fields(await chat(project, "198.51.100.1"))).toEqual({
      status: 429,
      ratelimit: '"ip";r=0;t=60',
      retryAfter: "60",
    });
    // A millisecond before the window ends (past midnight UTC): still refused, 1 s to wait.
    vi.setSystemTime(opened + 59_999);
    const last = await chat(project, "198.51.100.1");
    expect(fields(last)).toEqual({ status: 429, ratelimit: '"ip";r=0;t=1', retryAfter: "1" });
    expect(await usageRowOf(sluice.gateway, last)).toMatchObject({ status: 429, client_ip: "198.51.100.1" });
    expect(fake.requests).toHaveLength(upstreamCalls);
    // The window ended: a new one, a whole minute long.
    vi.setSystemTime(opened + 60_000);
    expect(fields(await chat(project, "198.51.100.1"))).toEqual({
      status: 200,
      ratelimit: '"ip";r=2;t=60',
      retryAfter: null,
    });
  });

  it("applies a limit changed mid-window to the window's count: lowered, removed", async () => {
    vi.setSystemTime(opened);
    const project = await createTestProject(sluice.gateway, { rateLimits: { perMinute: 4 } });
    for (const address of ["198.51.100.11", "198.51.100.12"])
      expect((await chat(project, address)).status).toBe(200);
    await sluice.gateway.admin.updateProject(project.projectId, { rateLimits: { perMinute: 1 } });
    vi.setSystemTime(opened + 20_000);
    const lowered = await chat(project, "198.51.100.13");
    expect(fields(lowered)).toEqual({ status: 429, ratelimit: '"project";r=0;t=40', retryAfter: "40" });
    expect(lowered.headers.get("ratelimit-policy")).toBe('"project";q=1;w=60, "ip";q=3;w=60');
    // Removed: the default (6000) applies, to the same count.
    await sluice.gateway.admin.updateProject(project.projectId, { rateLimits: { perMinute: null } });
    const removed = await chat(project, "198.51.100.13");
    expect(removed.status).toBe(200);
    expect(removed.headers.get("ratelimit-policy")).toBe('"project";q=6000;w=60, "ip";q=3;w=60');
    expect(removed.headers.get("ratelimit")).toBe('"ip";r=2;t=60');
  });

  it("refuses a project at its limit for no longer than the Retry-After it sends when the host's clock is stepped back", async () => {
    vi.setSystemTime(opened);
    const project = await createTestProject(sluice.gateway, { rateLimits: { perMinute: 2 } });
    for (const address of ["198.51.100.21", "198.51.100.22"])
      expect((await chat(project, address)).status).toBe(200);
    expect(fields(await chat(project, "198.51.100.23"))).toMatchObject({ status: 429, retryAfter: "60" });
    // Stepped back ten minutes (NTP, a VM resumed): a refusal still says a minute, and means it.
    const stepped = opened - 600_000;
    vi.setSystemTime(stepped);
    expect(fields(await chat(project, "198.51.100.23"))).toEqual({
      status: 429,
      ratelimit: '"project";r=0;t=60',
      retryAfter: "60",
    });
    vi.setSystemTime(stepped + 60_000);
    expect(fields(await chat(project, "198.51.100.23"))).toEqual({
      status: 200,
      ratelimit: '"project";r=1;t=60',
      retryAfter: null,
    });
  });
});
