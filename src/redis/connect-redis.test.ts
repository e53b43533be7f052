import { describe, expect, it, vi } from "vitest";
import { startLocalTcpServer } from "../../test/support/local-server.js";
import { redisAvailable } from "../../test/support/services.js";
import { createLogger } from "../observability/logger.js";
import { connectRedis } from "./connect-redis.js";

describe("connectRedis", () => {
  it.skipIf(!redisAvailable)(
    "logs a password Redis does not require as a warning naming REDIS_URL, never the password, and nothing on the console",
    async () => {
      const console = vi.spyOn(globalThis.console, "warn");
      const lines: Array<Record<string, unknown>> = [];
      const logger = createLogger("info", { write: (line: string) => void lines.push(JSON.parse(line)) });
      const client = await connectRedis("redis://:not-the-password@127.0.0.1:6379/11", logger, 500);
      try {
        expect(client.status).toBe("ready");
        expect(console).not.toHaveBeenCalled();
        expect(lines).toEqual([
          expect.objectContaining({
            level: "warn",
            setting: "REDIS_URL",
            msg: "REDIS_URL gives a password, but this Redis requires none (its default user has no password): the password is not used, and anyone who can reach this Redis can use it",
          }),
        ]);
        expect(JSON.stringify(lines)).not.toContain("not-the-password");
      } finally {
        client.disconnect();
        console.mockRestore();
      }
    },
  );

  it("gives the client the command timeout it is given", async () => {
    const server = await startLocalTcpServer((socket) => socket.on("error", () => {}));
    const client = await connectRedis(
      `redis://127.0.0.1:${server.port}`,
      createLogger("silent", { write: () => {} }),
      1200,
    );
    try {
      expect(client.options.commandTimeout).toBe(1200);
    } finally {
      client.disconnect();
      await server.close();
    }
  });

  it("logs each error once per outage when Redis's errors alternate, not two lines per reconnect", async () => {
    // A Redis behind a proxy or load balancer that takes connections and drops them (the Redis
    // behind it is down): each reconnect fails twice, with two messages in turn ("write EPIPE",
    // then the command's), which a check against the last message alone let through every time.
    const server = await startLocalTcpServer((socket) => {
      socket.on("error", () => {});
      socket.destroy();
    });
    const lines: Array<Record<string, unknown>> = [];
    const logger = createLogger("info", { write: (line: string) => void lines.push(JSON.parse(line)) });
    const client = await connectRedis(`redis://127.0.0.1:${server.port}`, logger, 500);
    try {
      const until = Date.now() + 2500;
      while (Date.now() < until) {
        await client.get("key").catch(() => undefined);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      const errors = lines.filter((line) => line.msg === "Redis client error").map((line) => line.redisError);
      expect(errors.length).toBeGreaterThan(0);
      expect(errors).toEqual([...new Set(errors)]);
      // The operator is told which setting names the Redis that fails.
      for (const line of lines.filter((entry) => entry.msg === "Redis client error"))
        expect(line.setting).toBe("REDIS_URL");
    } finally {
      client.disconnect();
      await server.close();
    }
  });
});
