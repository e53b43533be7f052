import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { redisAvailable, redisUrl } from "../support/services.js";
import { startTcpProxy } from "../support/tcp-proxy.js";
import { startTestGateway, type TestGateway } from "../support/test-gateway.js";

/**
 * /health is public and unthrottled: each request pings the database and Redis. Requests that
 * arrive while a ping is on its way share it, so a flood of them costs a dependency one ping at a
 * time, not one query each queued on its connection (audit: observe).
 */
describe.skipIf(!redisAvailable)("a flood of /health requests", () => {
  let proxy: Awaited<ReturnType<typeof startTcpProxy>>;
  let sluice: TestGateway;

  beforeAll(async () => {
    proxy = await startTcpProxy(Number(new URL(redisUrl).port || 6379));
    sluice = await startTestGateway({ redisUrl: `redis://127.0.0.1:${proxy.port}` });
  });
  afterAll(async () => {
    proxy.cut();
    await sluice.close();
    await proxy.close();
  });

  it("sends Redis one ping while the one on its way has not answered", async () => {
    const health = async () => {
      const response = await fetch(`${sluice.url}/health`);
      return {
        status: response.status,
        body: (await response.json()) as { checks: Record<string, { status: string }> },
      };
    };
    expect((await health()).body.checks.redis?.status).toBe("ok");
    // Redis stops answering: what the gateway sends it is kept, not passed on.
    proxy.stall({ newConnections: true });
    const answers = await Promise.all(Array.from({ length: 50 }, () => health()));
    for (const answer of answers) expect(answer.body.checks.redis?.status).toBe("down");
    const pings = proxy.stalledText().split(/\r\nPING\r\n/i).length - 1;
    expect(pings).toBeGreaterThan(0);
    expect(pings).toBeLessThanOrEqual(2);
  });
});
