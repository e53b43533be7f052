import { describe, expect, it, vi } from "vitest";
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
      const client = await connectRedis("redis://:not-the-password@127.0.0.1:6379/11", logger);
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
});
