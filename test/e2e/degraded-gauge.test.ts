import { describe, expect, it } from "vitest";
import { startProxiedPostgresGateway } from "../support/proxied-postgres-gateway.js";
import { refusedPort } from "../support/refused-port.js";
import { postgresAvailable, redisAvailable, redisUrl } from "../support/services.js";
import { startTestGateway } from "../support/test-gateway.js";

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
      redisUrl: `redis://127.0.0.1:${refusedPort}`,
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

describe.skipIf(!postgresAvailable)("sluice_degraded on a quiet instance", () => {
  it("says what /health finds: database 1 while it cannot be reached, 0 once it answers, with no request", async () => {
    const setup = await startProxiedPostgresGateway({ metricsEnabled: true });
    try {
      const { sluice, proxy } = setup;
      proxy.cut();
      const down = await fetch(`${sluice.url}/health`);
      expect(
        ((await down.json()) as { checks: { database: { status: string } } }).checks.database.status,
      ).toBe("down");
      // Before, the gauge stayed 0 until a request's usage write failed.
      expect(await degradedLines(sluice.url)).toContain('sluice_degraded{component="database"} 1');
      proxy.restore();
      expect((await fetch(`${sluice.url}/health`)).status).toBe(200);
      expect(await degradedLines(sluice.url)).toContain('sluice_degraded{component="database"} 0');
    } finally {
      await setup.close();
    }
  }, 20_000);

  it("follows a database /health found down until it answers: the gauge returns to 0 with no other /health", async () => {
    const setup = await startProxiedPostgresGateway({ metricsEnabled: true });
    try {
      const { sluice, proxy } = setup;
      proxy.cut();
      const down = (await (await fetch(`${sluice.url}/health`)).json()) as {
        checks: { database: { status: string } };
      };
      expect(down.checks.database.status).toBe("down");
      expect(await degradedLines(sluice.url)).toContain('sluice_degraded{component="database"} 1');
      proxy.restore();
      // Before, it stayed 1 until the next /health, however long after the database came back.
      const started = Date.now();
      while (!(await degradedLines(sluice.url)).includes('sluice_degraded{component="database"} 0')) {
        expect(Date.now() - started, "the gauge still says 1").toBeLessThan(12_000);
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    } finally {
      await setup.close();
    }
  }, 30_000);
});
