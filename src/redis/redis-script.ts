import { createHash } from "node:crypto";
import type { Redis } from "ioredis";

/**
 * A Lua script run atomically on Redis: by EVALSHA, its digest computed once, and sent whole
 * (EVAL) only when the server does not have it cached yet (after a restart or SCRIPT FLUSH).
 */
export class RedisScript {
  private readonly sha: string;

  constructor(private readonly source: string) {
    this.sha = createHash("sha1").update(source).digest("hex");
  }

  /** Runs the script over `keys` (KEYS) and `args` (ARGV); rejects as the command does. */
  async run(redis: Redis, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown> {
    try {
      return await redis.evalsha(this.sha, keys.length, ...keys, ...args);
    } catch (error) {
      if (!(error instanceof Error) || !error.message.startsWith("NOSCRIPT")) throw error;
      return redis.eval(this.source, keys.length, ...keys, ...args);
    }
  }
}
