import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { postgresAvailable, postgresBaseUrl, redisAvailable, redisUrl } from "../support/services.js";
import { freePort, type SpawnedGateway, spawnGateway } from "../support/spawned-gateway.js";

/** The start's `sluice listening on …` line, parsed. */
function listeningLine(output: string): Record<string, unknown> {
  const line = output.split("\n").find((text) => text.includes('"msg":"sluice listening on '));
  if (line === undefined) throw new Error(`no start line in:\n${output}`);
  return JSON.parse(line) as Record<string, unknown>;
}

describe("the start line names the database and Redis the gateway uses", () => {
  let gateway: SpawnedGateway | undefined;
  const dirs: string[] = [];
  afterEach(async () => {
    await gateway?.remove();
    gateway = undefined;
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });

  it("names the embedded database's file, and no Redis without REDIS_URL", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "sluice-start-line-"));
    dirs.push(dataDir);
    gateway = await spawnGateway({ env: { SLUICE_DATA_DIR: dataDir } });
    const line = listeningLine(gateway.output());
    expect(line).toMatchObject({
      database: "sqlite",
      databaseAt: join(dataDir, "sluice.sqlite"),
      redis: false,
    });
    expect(line).not.toHaveProperty("redisAt");
    expect(line).not.toHaveProperty("redisConnected");
  }, 30_000);

  it.skipIf(!postgresAvailable || !redisAvailable)(
    "names PostgreSQL and Redis by their URLs without a password or query",
    async () => {
      const database = new URL(postgresBaseUrl);
      database.password = "not-the-db-password";
      database.searchParams.set("application_name", "sluice-start-line");
      const redis = new URL(redisUrl);
      // This Redis requires none: the start warns and goes on without it.
      redis.password = "not-the-redis-password";
      redis.pathname = "/3";
      gateway = await spawnGateway({ env: { DATABASE_URL: database.href, REDIS_URL: redis.href } });
      const line = listeningLine(gateway.output());
      expect(line).toMatchObject({
        database: "postgres",
        databaseAt: `postgres://postgres@${database.host}/test`,
        redis: true,
        redisAt: `redis://${redis.host}/3`,
        redisConnected: true,
      });
      expect(gateway.output()).not.toContain("not-the-db-password");
      expect(gateway.output()).not.toContain("not-the-redis-password");
    },
    30_000,
  );

  it("says Redis is not connected when REDIS_URL names a port nobody listens on", async () => {
    // Picked free, then left closed: every connection to it is refused.
    const redisAt = `redis://127.0.0.1:${await freePort()}`;
    gateway = await spawnGateway({ env: { REDIS_URL: redisAt } });
    const line = listeningLine(gateway.output());
    expect(line).toMatchObject({ redis: true, redisAt, redisConnected: false });
  }, 30_000);
});
