import { describe, expect, it, vi } from "vitest";
import { useFakeUpstreamStage } from "../support/fake-upstream-stage.js";
import { redisServerInstalled, startPrivateRedis } from "../support/private-redis.js";
import { proxiedChatStatus } from "../support/proxied-chat.js";
import { createTestProject, logLinesOf, startTestGateway } from "../support/test-gateway.js";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * What the log says of one hang of a Redis that answered until then (SIGSTOP, then SIGCONT), with
 * requests on their way when it began: one line each for the hang (the client's), the limits'
 * fallback, the new connection and the limits shared again.
 */
describe.skipIf(!redisServerInstalled)("the log of a Redis that hangs once", () => {
  const stage = useFakeUpstreamStage();
  const { closers } = stage;

  it("warns once that the limits fall back, though the calls in flight fail in two ways (timed out, then their connection replaced)", async () => {
    const redis = await startPrivateRedis();
    closers.push(redis.stop);
    const sluice = await startTestGateway({
      redisUrl: redis.url,
      providerABaseUrl: `${stage.fake.url}/a/v1`,
      redisCommandTimeoutMs: 300,
    });
    closers.push(sluice.close);
    const project = await createTestProject(sluice.gateway);
    expect(await proxiedChatStatus(sluice.url, project)).toBe(200);
    const from = sluice.logs.length;
    redis.signal("SIGSTOP");
    try {
      // Two requests' limits sent to the hanging Redis: the first times out and replaces the
      // connection, which fails the second ("max retries per request", ioredis's words for a command
      // whose connection closed).
      const first = proxiedChatStatus(sluice.url, project);
      await sleep(100);
      const second = proxiedChatStatus(sluice.url, project);
      expect(await Promise.all([first, second])).toEqual([200, 200]);
    } finally {
      redis.signal("SIGCONT");
    }
    const lines = () =>
      logLinesOf(sluice, from)
        .filter((line) => line.level !== "debug" && String(line.msg).startsWith("Redis"))
        .map((line) => `${line.msg}${line.redisError ? `: ${line.redisError}` : ""}`);
    await vi.waitFor(() => expect(lines()).toContain("Redis answers again: rate limits are shared again"), {
      timeout: 9_000,
      interval: 50,
    });
    const limits = lines().filter((line) => line.includes("rate limits"));
    expect(limits).toEqual([
      expect.stringMatching(/^Redis is unreachable: rate limits fall back to per-instance limits: /),
      "Redis answers again: rate limits are shared again",
    ]);
    expect(lines()).toContain("Redis client error: Redis did not answer within 300 ms: connection replaced");
  }, 20_000);
});
