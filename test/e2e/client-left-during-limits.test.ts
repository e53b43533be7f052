import { describe, expect, it, vi } from "vitest";
import { useFakeUpstreamStage } from "../support/fake-upstream-stage.js";
import { redisServerInstalled, startPrivateRedis } from "../support/private-redis.js";
import { proxiedChatStatus } from "../support/proxied-chat.js";
import { createTestProject, projectUsageRows, startTestGateway } from "../support/test-gateway.js";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A client that leaves after its credentials were checked, while its rate limits are asked of a
 * Redis slow to answer: its answer's `close` comes before the call watches for it (watchClient,
 * ProxyExchange.run hear no `close` already past), and the call is told by the read of its body,
 * after admission, which fails on the closed connection: it does not go to the provider for no one.
 */
describe.skipIf(!redisServerInstalled)("a client that leaves while its limits are asked", () => {
  const stage = useFakeUpstreamStage();
  const { closers } = stage;

  it("is not sent to the provider once the limits answer, and its row records the disconnect", async () => {
    const redis = await startPrivateRedis();
    closers.push(redis.stop);
    const sluice = await startTestGateway({
      redisUrl: redis.url,
      providerABaseUrl: `${stage.fake.url}/a/v1`,
      redisCommandTimeoutMs: 3000,
    });
    closers.push(sluice.close);
    const project = await createTestProject(sluice.gateway);
    expect(await proxiedChatStatus(sluice.url, project)).toBe(200);
    stage.fake.clear();
    redis.signal("SIGSTOP");
    try {
      const leaving = new AbortController();
      // A call without a body: its empty body is still read after admission.
      const call = fetch(`${sluice.url}/v1/provider-a/${project.projectId}/models/gpt-4o-mini`, {
        headers: { authorization: `Bearer ${project.bearer("provider-a")}` },
        signal: leaving.signal,
      }).catch(() => "left");
      await sleep(300);
      leaving.abort();
      expect(await call).toBe("left");
      await sleep(200);
    } finally {
      redis.signal("SIGCONT");
    }
    const rows = await vi.waitFor(
      async () => {
        const all = await projectUsageRows(sluice, project);
        expect(all).toHaveLength(2);
        return all;
      },
      { timeout: 5000, interval: 50 },
    );
    expect(rows.map((row) => row.status).sort()).toEqual([200, 499]);
    // Give a call sent anyway the time to reach the provider.
    await sleep(300);
    expect(stage.fake.requests).toHaveLength(0);
  }, 20_000);
});
