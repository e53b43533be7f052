import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { type FakeApple, generateAppleKeyPair, startFakeApple } from "../fakes/fake-apple.js";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { proxiedChat } from "../support/proxied-chat.js";
import { redisAvailable, redisUrl } from "../support/services.js";
import {
  appleKeyId,
  appleTeamId,
  createDeviceCheckProject,
  startTestGateway,
  type TestGateway,
} from "../support/test-gateway.js";

const token = (name: string) => Buffer.from(`${name}-${randomBytes(12).toString("hex")}`).toString("base64");

/**
 * A client that leaves while Sluice waits for Apple's answer about its device token was not
 * admitted: its request goes nowhere, and the token's use is given back, as for a request refused
 * after authentication, so the app's retry with the same single-use token passes (once).
 */
describe.each([
  { engine: "memory", redis: false },
  { engine: "redis", redis: true },
])("a single-use device token whose client left during the Apple call ($engine ledger)", ({ redis }) => {
  let fake: FakeUpstream;
  let apple: FakeApple;
  let sluice: TestGateway;
  const keys = generateAppleKeyPair();
  const skip = redis && !redisAvailable;

  beforeAll(async () => {
    if (skip) return;
    fake = await startFakeUpstream();
    apple = await startFakeApple({ label: "production" });
    apple.registerKey(appleKeyId, { teamId: appleTeamId, publicKeyPem: keys.publicKeyPem });
    sluice = await startTestGateway({
      providerABaseUrl: `${fake.url}/a/v1`,
      deviceCheckProductionUrl: apple.url,
      trustProxy: ["127.0.0.1"],
      ...(redis ? { redisUrl } : {}),
    });
  });
  afterAll(async () => {
    if (skip) return;
    await sluice.close();
    await apple.close();
    await fake.close();
  });

  it.skipIf(skip)(
    "is given back, so the app's retry passes once, and nothing reached the provider",
    async () => {
      const project = await createDeviceCheckProject(sluice.gateway, keys.privateKeyPem, "single-use");
      const ip = `198.51.${randomBytes(1)[0]}.9`;
      const call = (deviceToken: string, signal?: AbortSignal) =>
        fetch(`${sluice.url}/v1/provider-a/${project.projectId}/chat/completions`, {
          method: "POST",
          headers: {
            authorization: `Bearer ${project.partialKeys["provider-a"]}.${deviceToken}`,
            "content-type": "application/json",
            "x-forwarded-for": ip,
          },
          body: JSON.stringify({ model: "gpt-4o-mini", messages: [] }),
          ...(signal ? { signal } : {}),
        });
      const deviceToken = token("left");
      apple.registerValidToken(deviceToken);
      apple.delay(300);
      const appleCalls = apple.calls.length;
      const upstreamCalls = fake.requests.length;
      const leaving = new AbortController();
      const left = call(deviceToken, leaving.signal).catch((error: unknown) => error);
      await vi.waitFor(() => expect(apple.calls.length).toBe(appleCalls + 1), { timeout: 2000 });
      leaving.abort();
      expect(await left).toBeInstanceOf(Error);
      // Apple answers (valid) after the client left; Sluice then refuses the request it cannot answer.
      await sleep(600);
      apple.delay(0);
      expect(fake.requests.length).toBe(upstreamCalls);

      const retry = await proxiedChat(
        sluice.url,
        { projectId: project.projectId, bearer: `${project.partialKeys["provider-a"]}.${deviceToken}` },
        { headers: { "x-forwarded-for": ip } },
      );
      await retry.arrayBuffer();
      expect(retry.status).toBe(200);
      const replay = await call(deviceToken);
      await replay.arrayBuffer();
      expect(replay.status).toBe(401);
      expect(apple.calls.length).toBe(appleCalls + 1);
      expect(fake.requests.length).toBe(upstreamCalls + 1);
      // The request that left is recorded as the proxies record a disconnect.
      await sluice.gateway.flushUsage();
      const rows = await sluice.gateway.database.db
        .selectFrom("usage_records")
        .select(["status", "outcome"])
        .where("project_id", "=", project.projectId)
        .orderBy("created_at")
        .execute();
      expect(rows).toEqual([
        { status: 499, outcome: "aborted" },
        { status: 200, outcome: "ok" },
        { status: 401, outcome: "error" },
      ]);
    },
  );

  // A client with no credentials (a device token Apple refuses) that leaves during the Apple call has
  // its row under the project the path names, aborted: nothing went to the provider, so it costs 0,
  // not an unknown cost. Before, each counted toward the project's spend cap at the estimate of a
  // call of unknown cost (decision 0057): anyone who knew a project's id could use up its cap.
  it.skipIf(skip)("costs the project nothing when its credentials failed, under its spend cap", async () => {
    const project = await createDeviceCheckProject(sluice.gateway, keys.privateKeyPem, "single-use", {
      monthlySpendCapUsd: 0.3,
    });
    apple.delay(300);
    try {
      for (let index = 0; index < 3; index++) {
        const appleCalls = apple.calls.length;
        const leaving = new AbortController();
        const left = fetch(`${sluice.url}/v1/provider-a/${project.projectId}/chat/completions`, {
          method: "POST",
          headers: {
            authorization: `Bearer ${project.partialKeys["provider-a"]}.${token("refused")}`,
            "content-type": "application/json",
            "x-forwarded-for": `198.51.${randomBytes(1)[0]}.10`,
          },
          body: JSON.stringify({ model: "gpt-4o-mini", messages: [] }),
          signal: leaving.signal,
        }).catch((error: unknown) => error);
        await vi.waitFor(() => expect(apple.calls.length).toBe(appleCalls + 1), { timeout: 2000 });
        leaving.abort();
        expect(await left).toBeInstanceOf(Error);
      }
      await vi.waitFor(
        async () => {
          await sluice.gateway.flushUsage();
          const rows = await sluice.gateway.database.db
            .selectFrom("usage_records")
            .select(["status", "outcome", "cost_usd"])
            .where("project_id", "=", project.projectId)
            .execute();
          expect(rows).toEqual(Array(3).fill({ status: 499, outcome: "aborted", cost_usd: 0 }));
        },
        { timeout: 5000, interval: 50 },
      );
    } finally {
      apple.delay(0);
    }
    // Three calls at the 0.10 USD estimate would be the 0.30 USD cap.
    const deviceToken = token("after");
    apple.registerValidToken(deviceToken);
    const response = await proxiedChat(sluice.url, {
      projectId: project.projectId,
      bearer: `${project.partialKeys["provider-a"]}.${deviceToken}`,
    });
    await response.arrayBuffer();
    expect(response.status).toBe(200);
  });
});
