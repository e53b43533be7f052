import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type DeviceCheckStage, startDeviceCheckStage } from "../support/device-check-stage.js";
import { usageRowOf } from "../support/test-gateway.js";

/**
 * A project's own per-device limit (`rateLimits.devicePerMinute`), on a real gateway with DeviceCheck
 * tokens the fake Apple verifies: it counts one device token's requests on every endpoint and by
 * either method that carries the token, refuses the next with 429 and the RateLimit fields, and
 * leaves other devices, and the test key, to the project's and the address's limits.
 */
describe("the per-device rate limit", () => {
  let stage: DeviceCheckStage;
  let fake: DeviceCheckStage["fake"];
  let sluice: DeviceCheckStage["sluice"];
  let project: DeviceCheckStage["project"];

  beforeAll(async () => {
    stage = await startDeviceCheckStage({ rateLimits: { perMinute: 100, devicePerMinute: 2 } });
    ({ fake, sluice, project } = stage);
  });
  afterAll(() => stage.close());

  const partialKey = () => project.partialKeys["provider-a"];

  const text = (headers: Record<string, string>) =>
    fetch(`${sluice.url}/v1/text/${project.projectId}`, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: JSON.stringify({ text: "A calm lake at dawn" }),
    });
  const chat = (headers: Record<string, string>) =>
    fetch(`${sluice.url}/v1/provider-a/${project.projectId}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Hi" }] }),
    });

  it("refuses a device's third request in a minute with 429, whichever endpoint and method it uses, and admits another device", async () => {
    const device = stage.deviceToken();
    const bearer = { authorization: `Bearer ${partialKey()}.${device}` };
    const first = await chat(bearer);
    expect(first.status).toBe(200);
    expect(first.headers.get("ratelimit-policy")).toContain('"device";q=2;w=60');
    const second = await text(bearer);
    expect(second.status).toBe(200);
    expect(second.headers.get("ratelimit")).toMatch(/^"device";r=0;t=\d+$/);
    const upstreamCalls = fake.requests.length;

    // The same token on the legacy header: the same device, over its limit on either endpoint.
    for (const refused of [
      await chat({ "x-device-token": device, "x-ai-key": partialKey() }),
      await text(bearer),
    ]) {
      expect(refused.status).toBe(429);
      expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("TOO_MANY_REQUESTS");
      expect(refused.headers.get("ratelimit")).toMatch(/^"device";r=0;t=\d+$/);
      expect(Number(refused.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      expect(await usageRowOf(sluice.gateway, refused)).toMatchObject({
        status: 429,
        error_code: "TOO_MANY_REQUESTS",
      });
    }
    expect(fake.requests).toHaveLength(upstreamCalls);

    // Another device of the project, from the same address, has its own allowance.
    expect((await text({ authorization: `Bearer ${partialKey()}.${stage.deviceToken()}` })).status).toBe(200);
  });

  it("does not hold the test key, shared by every tester, to a device limit", async () => {
    const statuses: number[] = [];
    let last: Response | undefined;
    for (let index = 0; index < 3; index++) {
      last = await text({ authorization: `Bearer ${project.bearer("provider-a")}` });
      statuses.push(last.status);
    }
    expect(statuses).toEqual([200, 200, 200]);
    expect(last?.headers.get("ratelimit-policy")).not.toContain('"device"');
  });
});
