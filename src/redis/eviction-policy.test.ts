import type { Redis } from "ioredis";
import { describe, expect, it, vi } from "vitest";
import { redisServerInstalled, startPrivateRedis } from "../../test/support/private-redis.js";
import { createLogger } from "../observability/logger.js";
import { connectRedis } from "./connect-redis.js";
import { evictingPolicy } from "./eviction-policy.js";
import { createRedisClient } from "./redis-client.js";

/** `INFO memory` as Redis 7 answers it, with the two fields that matter given. */
const infoMemory = (maxmemory: string, policy: string) =>
  [
    "# Memory",
    "used_memory:1103552",
    "used_memory_human:1.05M",
    `maxmemory:${maxmemory}`,
    "maxmemory_human:64.00M",
    `maxmemory_policy:${policy}`,
    "allocator_frag_ratio:1.15",
    "",
  ].join("\r\n");

describe("evictingPolicy", () => {
  it("names the policy of a Redis with a memory limit that evicts", () => {
    for (const policy of [
      "allkeys-lru",
      "allkeys-lfu",
      "allkeys-random",
      "volatile-lru",
      "volatile-lfu",
      "volatile-random",
      "volatile-ttl",
    ])
      expect(evictingPolicy(infoMemory("67108864", policy))).toBe(policy);
    expect(evictingPolicy(infoMemory("67108864", "allkeys-lru").replaceAll("\r\n", "\n"))).toBe(
      "allkeys-lru",
    );
  });

  it("names none for noeviction, for no memory limit, or when INFO does not say", () => {
    expect(evictingPolicy(infoMemory("67108864", "noeviction"))).toBeUndefined();
    expect(evictingPolicy(infoMemory("0", "allkeys-lru"))).toBeUndefined();
    expect(evictingPolicy(infoMemory("", "allkeys-lru"))).toBeUndefined();
    expect(evictingPolicy(infoMemory("lots", "allkeys-lru"))).toBeUndefined();
    expect(evictingPolicy(infoMemory("67108864", ""))).toBeUndefined();
    expect(evictingPolicy("# Memory\r\nmaxmemory:67108864\r\n")).toBeUndefined();
    expect(evictingPolicy("# Memory\r\nmaxmemory_policy:allkeys-lru\r\n")).toBeUndefined();
    expect(evictingPolicy("")).toBeUndefined();
  });
});

const evictionWarning = (line: Record<string, unknown>) =>
  line.level === "warn" && typeof line.msg === "string" && line.msg.includes("maxmemory-policy");

/** Resolves once every command `client` sent before has been answered (one connection, in order). */
async function answered(client: Redis): Promise<void> {
  await client.ping();
  await new Promise((resolve) => setImmediate(resolve));
}

/** A reconnect of `client` made ready, with what its 'ready' listeners sent answered. */
async function reconnected(client: Redis, cause: () => Promise<void> | void): Promise<void> {
  const ready = new Promise((resolve) => client.once("ready", resolve));
  await cause();
  await ready;
  await answered(client);
}

describe.skipIf(!redisServerInstalled)("connectRedis and a Redis's eviction policy", () => {
  it("warns once per policy of a Redis that may evict keys, naming the policy and the fix, never the password", async () => {
    const password = "evict-warn-secret-pw";
    const redis = await startPrivateRedis(
      "--maxmemory",
      "64mb",
      "--maxmemory-policy",
      "allkeys-lru",
      "--requirepass",
      password,
    );
    const lines: Array<Record<string, unknown>> = [];
    const logger = createLogger("debug", { write: (line: string) => void lines.push(JSON.parse(line)) });
    const url = `redis://:${password}@127.0.0.1:${redis.port}`;
    const client = await connectRedis(url, logger, 500);
    try {
      await answered(client);
      expect(lines.filter(evictionWarning)).toEqual([
        expect.objectContaining({ setting: "REDIS_URL", maxmemoryPolicy: "allkeys-lru" }),
      ]);
      const [warning] = lines.filter(evictionWarning);
      for (const said of [
        "allkeys-lru",
        "maxmemory-policy noeviction",
        "no maxmemory",
        "DeviceCheck",
        "spend cap",
      ])
        expect(warning?.msg).toContain(said);

      // A reconnect (Redis restarted, with the same settings) to the same policy: nothing new.
      await reconnected(client, () => redis.restart());
      expect(lines.filter(evictionWarning)).toHaveLength(1);

      // Another policy, heard on the next connection: one warning of its own.
      const admin = await createRedisClient(url);
      await admin.config("SET", "maxmemory-policy", "volatile-lru");
      admin.disconnect();
      await reconnected(client, () => client.disconnect(true));
      await reconnected(client, () => client.disconnect(true));
      expect(lines.filter(evictionWarning).map((line) => line.maxmemoryPolicy)).toEqual([
        "allkeys-lru",
        "volatile-lru",
      ]);
      const logged = JSON.stringify(lines);
      expect(logged).not.toContain(password);
      expect(logged).not.toContain(url);
    } finally {
      client.disconnect();
      await redis.stop();
    }
  });

  it("says nothing of a Redis with a memory limit under noeviction, nor of one without a limit", async () => {
    for (const args of [
      ["--maxmemory", "64mb", "--maxmemory-policy", "noeviction"],
      ["--maxmemory-policy", "allkeys-lru"],
    ]) {
      const redis = await startPrivateRedis(...args);
      const lines: Array<Record<string, unknown>> = [];
      const logger = createLogger("debug", { write: (line: string) => void lines.push(JSON.parse(line)) });
      const client = await connectRedis(redis.url, logger, 500);
      try {
        const info = vi.spyOn(client, "info");
        await answered(client);
        await reconnected(client, () => client.disconnect(true));
        // It was asked, on the reconnect too, and said nothing.
        expect(info).toHaveBeenCalledWith("memory");
        expect(lines).toEqual([]);
      } finally {
        client.disconnect();
        await redis.stop();
      }
    }
  });

  it("logs an INFO an ACL refuses at debug level only, and the client works", async () => {
    const redis = await startPrivateRedis("--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru");
    const admin = await createRedisClient(redis.url);
    await admin.call("ACL", "SETUSER", "sluice", "on", ">acl-pw", "~*", "&*", "+@all", "-info");
    admin.disconnect();
    // ioredis's own ready check says on the console that it skips itself when INFO is refused.
    const console = vi.spyOn(globalThis.console, "warn").mockImplementation(() => {});
    const lines: Array<Record<string, unknown>> = [];
    const logger = createLogger("debug", { write: (line: string) => void lines.push(JSON.parse(line)) });
    const client = await connectRedis(`redis://sluice:acl-pw@127.0.0.1:${redis.port}`, logger, 500);
    try {
      expect(client.status).toBe("ready");
      await answered(client);
      expect(await client.set("key", "value")).toBe("OK");
      expect(lines).toEqual([
        expect.objectContaining({
          level: "debug",
          setting: "REDIS_URL",
          redisError: expect.stringContaining("NOPERM"),
          msg: "Redis's INFO memory failed: its eviction policy is not checked",
        }),
      ]);
      expect(JSON.stringify(lines)).not.toContain("acl-pw");
    } finally {
      client.disconnect();
      console.mockRestore();
      await redis.stop();
    }
  });
});
