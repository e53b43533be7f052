import pg from "pg";
import { describe, expect, it } from "vitest";
import { proxiedChat } from "../support/proxied-chat.js";
import { startProxiedPostgresGateway } from "../support/proxied-postgres-gateway.js";
import { postgresAvailable } from "../support/services.js";
import { createTestProject } from "../support/test-gateway.js";

describe.skipIf(!postgresAvailable)("usage rows survive a database outage", () => {
  it("loses and duplicates no usage row when PostgreSQL drops out during load", async () => {
    const { schema, proxy, sluice, close } = await startProxiedPostgresGateway({
      rateLimitProjectPerMinute: 100_000,
      rateLimitIpPerMinute: 100_000,
      usageFlushIntervalMs: 20,
    });
    try {
      const project = await createTestProject(sluice.gateway);
      const ids: string[] = [];
      const statuses: number[] = [];
      const burst = async (count: number) => {
        await Promise.all(
          Array.from({ length: count }, async () => {
            const response = await proxiedChat(sluice.url, project, {
              body: { model: "gpt-4o-mini", messages: [], stream: statuses.length % 2 === 0 },
            });
            await response.arrayBuffer();
            statuses.push(response.status);
            ids.push(response.headers.get("x-request-id") ?? "missing");
          }),
        );
      };
      for (let round = 0; round < 5; round++) await burst(20);
      proxy.cut();
      const outageEnds = Date.now() + 3000;
      while (Date.now() < outageEnds) {
        await burst(20);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      expect(sluice.gateway.database.engine).toBe("postgres");
      proxy.restore();
      for (let round = 0; round < 5; round++) await burst(20);
      await sluice.gateway.flushUsage();

      expect(statuses.every((status) => status === 200)).toBe(true);
      const client = new pg.Client({ connectionString: schema.url });
      await client.connect();
      const { rows } = await client.query<{ request_id: string; n: string }>(
        "select request_id, count(*) as n from usage_records where project_id = $1 group by request_id",
        [project.projectId],
      );
      await client.end();
      expect(rows.every((row) => row.n === "1")).toBe(true);
      expect(rows.map((row) => row.request_id).sort()).toEqual([...ids].sort());
      expect(ids.length).toBeGreaterThan(200);
    } finally {
      await close();
    }
  }, 60_000);

  it("keeps the rows of calls when requests refused at authentication fill the queue", async () => {
    const { schema, proxy, sluice, close } = await startProxiedPostgresGateway({
      usageQueueMax: 100,
      authFailureLimit: 100_000,
    });
    try {
      const project = await createTestProject(sluice.gateway);
      // One call first: the project and its key are then known without the database.
      const first = await proxiedChat(sluice.url, project);
      await first.arrayBuffer();
      const calls = [first.headers.get("x-request-id") ?? "missing"];
      await sluice.gateway.flushUsage();
      proxy.cut();
      // A client with a wrong test key: each refusal has a row (evidence of the attempt), queued.
      const wrong = `${project.bearer("provider-a").split(".")[0]}.tk_wrong`;
      for (let index = 0; index < 150; index++) {
        const response = await proxiedChat(sluice.url, {
          projectId: project.projectId,
          bearer: wrong,
        });
        await response.arrayBuffer();
        expect(response.status).toBe(401);
      }
      for (let index = 0; index < 5; index++) {
        const response = await proxiedChat(sluice.url, project);
        await response.arrayBuffer();
        expect(response.status).toBe(200);
        calls.push(response.headers.get("x-request-id") ?? "missing");
      }
      proxy.restore();
      await sluice.gateway.flushUsage();

      const client = new pg.Client({ connectionString: schema.url });
      await client.connect();
      const { rows } = await client.query<{ request_id: string }>(
        "select request_id from usage_records where project_id = $1 and status = 200",
        [project.projectId],
      );
      await client.end();
      // Before, the queue kept the first 100 refusals and dropped every call's row.
      expect(rows.map((row) => row.request_id).sort()).toEqual(calls.sort());
    } finally {
      await close();
    }
  }, 60_000);
});
