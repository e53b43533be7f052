import { randomBytes } from "node:crypto";
import { Socket } from "node:net";
import type { Redis } from "ioredis";
import pg from "pg";
import { createRedisClient } from "../../src/redis/redis-client.js";

type RedisClientOptions = Parameters<typeof createRedisClient>[1];

/**
 * The shared PostgreSQL and Redis of the machine (127.0.0.1:5432 database `test`, 127.0.0.1:6379).
 * In CI (`CI=true`) they must be there: a suite that needs them fails instead of skipping.
 */
export const postgresBaseUrl = "postgres://postgres@127.0.0.1:5432/test";
export const redisUrl = "redis://127.0.0.1:6379";
const inCi = process.env.CI === "true";

function reachable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = new Socket();
    socket.setTimeout(1000);
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
    socket.once("timeout", () => {
      socket.destroy();
      resolve(false);
    });
    socket.connect(port, "127.0.0.1");
  });
}

/** True when the service answers; in CI an absent service throws so the suite fails loudly. */
async function serviceAvailable(name: "postgres" | "redis"): Promise<boolean> {
  const ok = await reachable(name === "postgres" ? 5432 : 6379);
  if (!ok && inCi) throw new Error(`${name} is not reachable on 127.0.0.1, and CI=true requires it`);
  return ok;
}

export const postgresAvailable = await serviceAvailable("postgres");
export const redisAvailable = await serviceAvailable("redis");

/**
 * A fresh schema of its own for one test file, in the shared database or `baseUrl`'s; `drop()`
 * removes it.
 */
export async function createPostgresSchema(
  baseUrl = postgresBaseUrl,
): Promise<{ url: string; drop(): Promise<void> }> {
  const schema = `sluice_test_${randomBytes(6).toString("hex")}`;
  const client = new pg.Client({ connectionString: baseUrl });
  await client.connect();
  await client.query(`create schema ${schema}`);
  await client.end();
  const url = `${baseUrl}?options=${encodeURIComponent(`-c search_path=${schema}`)}`;
  return {
    url,
    async drop() {
      const dropper = new pg.Client({ connectionString: baseUrl });
      await dropper.connect();
      await dropper.query(`drop schema if exists ${schema} cascade`);
      await dropper.end();
    },
  };
}

/**
 * Redis clients and key prefixes for one test file, under a random root of its own: every client
 * is built by `createRedisClient` (as the gateway builds it) and `cleanup()` deletes the root's keys
 * and disconnects them all.
 */
export function redisTestSpace(area: string) {
  const root = `sluice-test:${area}:${randomBytes(6).toString("hex")}`;
  let prefixes = 0;
  const clients: Redis[] = [];
  async function client(url: string, options?: RedisClientOptions): Promise<Redis> {
    const made = await createRedisClient(url, options);
    clients.push(made);
    return made;
  }
  async function readyClient(url = redisUrl): Promise<Redis> {
    const made = await client(url);
    if (made.status !== "ready") await new Promise((resolve) => made.once("ready", resolve));
    return made;
  }
  return {
    nextPrefix: () => `${root}:${++prefixes}`,
    readyClient,
    /** A client to a closed port: every command fails, and it keeps trying to reconnect. */
    unreachableClient: (options?: RedisClientOptions) => client("redis://127.0.0.1:1", options),
    async cleanup(): Promise<void> {
      if (redisAvailable) {
        const cleaner = await readyClient();
        const keys = await cleaner.keys(`${root}:*`);
        if (keys.length > 0) await cleaner.del(...keys);
      }
      for (const made of clients) made.disconnect();
    },
  };
}
