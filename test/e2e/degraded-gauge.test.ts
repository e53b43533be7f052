import { createServer } from "node:net";
import { describe, expect, it } from "vitest";
import { redisAvailable, redisUrl } from "../support/services.js";
import { startTestGateway } from "../support/test-gateway.js";

async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

async function degradedLines(url: string): Promise<string[]> {
  const metrics = await (await fetch(`${url}/metrics`)).text();
  return metrics.split("\n").filter((line) => line.startsWith("sluice_degraded{"));
}

describe("sluice_degraded from the start", () => {
  it("has a database sample of 0 on a healthy instance before any request", async () => {
    const sluice = await startTestGateway({ metricsEnabled: true });
    try {
      expect(await degradedLines(sluice.url)).toEqual(['sluice_degraded{component="database"} 0']);
    } finally {
      await sluice.close();
    }
  });

  it("is 1 for redis when Redis is unreachable at start, before any request reaches the limiter", async () => {
    const sluice = await startTestGateway({
      metricsEnabled: true,
      redisUrl: `redis://127.0.0.1:${await closedPort()}`,
    });
    try {
      const health = await (await fetch(`${sluice.url}/health`)).json();
      expect(health).toMatchObject({ status: "degraded" });
      expect((await degradedLines(sluice.url)).sort()).toEqual([
        'sluice_degraded{component="database"} 0',
        'sluice_degraded{component="redis"} 1',
      ]);
    } finally {
      await sluice.close();
    }
  });

  it.skipIf(!redisAvailable)("is 0 for redis when Redis answers at start", async () => {
    const sluice = await startTestGateway({ metricsEnabled: true, redisUrl });
    try {
      expect((await degradedLines(sluice.url)).sort()).toEqual([
        'sluice_degraded{component="database"} 0',
        'sluice_degraded{component="redis"} 0',
      ]);
    } finally {
      await sluice.close();
    }
  });
});
