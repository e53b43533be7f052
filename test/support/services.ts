import { randomBytes } from "node:crypto";
import { Socket } from "node:net";
import pg from "pg";

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
export async function serviceAvailable(name: "postgres" | "redis"): Promise<boolean> {
  const ok = await reachable(name === "postgres" ? 5432 : 6379);
  if (!ok && inCi) throw new Error(`${name} is not reachable on 127.0.0.1, and CI=true requires it`);
  return ok;
}

export const postgresAvailable = await serviceAvailable("postgres");
export const redisAvailable = await serviceAvailable("redis");

/** A fresh schema of its own for one test file; `drop()` removes it. */
export async function createPostgresSchema(): Promise<{ url: string; drop(): Promise<void> }> {
  const schema = `sluice_test_${randomBytes(6).toString("hex")}`;
  const client = new pg.Client({ connectionString: postgresBaseUrl });
  await client.connect();
  await client.query(`create schema ${schema}`);
  await client.end();
  const url = `${postgresBaseUrl}?options=${encodeURIComponent(`-c search_path=${schema}`)}`;
  return {
    url,
    async drop() {
      const dropper = new pg.Client({ connectionString: postgresBaseUrl });
      await dropper.connect();
      await dropper.query(`drop schema if exists ${schema} cascade`);
      await dropper.end();
    },
  };
}
