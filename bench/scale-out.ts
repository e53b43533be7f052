import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { Redis } from "ioredis";
import { pidCpuMicros } from "./processes.js";

/**
 * `npm run bench -- --scale-out`: what the benchmark needs to run Sluice as several instances run
 * it, on PostgreSQL (`DATABASE_URL`) and Redis (`REDIS_URL`): a scratch database made for the run
 * and dropped after, a key prefix of the run's own whose keys are deleted after, and the CPU the
 * two servers spend, read from /proc as the targets' is.
 */
export interface ScaleOut {
  databaseName: string;
  databaseUrl: string;
  redisUrl: string;
  redisPrefix: string;
  /** The environment a Sluice process runs with on these (added to the bench's own). */
  env: Record<string, string>;
  /** CPU µs so far of the redis-server process, and of each PostgreSQL backend serving the database. */
  serviceCpu(): ServiceCpu;
  /**
   * Scripts (EVALSHA, EVAL) the Redis server has run so far, every client's: one round trip each
   * (the commands a script runs inside are not). Sluice's only other commands are a removal (ZREM)
   * once a capped call ends and /health's PING.
   */
  redisScripts(): Promise<number>;
  /** Drops the database (after the Sluice processes stopped) and deletes the prefix's keys. */
  cleanUp(): Promise<void>;
}

export interface ServiceCpu {
  redis: number;
  /** By backend pid: a backend that started since an earlier reading counts from 0. */
  postgres: Map<number, number>;
}

/** CPU µs the two servers spent between two readings. */
export function serviceCpuSpent(before: ServiceCpu, after: ServiceCpu): { redis: number; postgres: number } {
  let postgres = 0;
  for (const [pid, micros] of after.postgres) postgres += micros - (before.postgres.get(pid) ?? 0);
  return { redis: after.redis - before.redis, postgres };
}

const host = process.env.BENCH_PG_HOST ?? "127.0.0.1";
const user = process.env.BENCH_PG_USER ?? "postgres";

export async function startScaleOut(): Promise<ScaleOut> {
  const tag = randomBytes(4).toString("hex");
  const databaseName = `sluice_bench_${tag}`;
  const redisUrl = process.env.BENCH_REDIS_URL ?? "redis://127.0.0.1:6379";
  const redisPrefix = `sluice-bench-${tag}:`;
  execFileSync("createdb", ["-h", host, "-U", user, databaseName], { stdio: "inherit" });
  const databaseUrl = `postgres://${user}@${host}:5432/${databaseName}`;
  const redis = new Redis(redisUrl, { maxRetriesPerRequest: 1 });
  const info = await redis.info("server");
  const redisPid = Number(/process_id:(\d+)/.exec(info)?.[1]);

  /** The pids of the backends connected to the bench's database (Sluice's pool), read when asked. */
  const postgresPids = (): number[] =>
    execFileSync(
      "psql",
      [
        "-h",
        host,
        "-U",
        user,
        "-d",
        "postgres",
        "-Atc",
        `select pid from pg_stat_activity where datname = '${databaseName}' and pid <> pg_backend_pid()`,
      ],
      { encoding: "utf8" },
    )
      .split("\n")
      .filter(Boolean)
      .map(Number);

  let cleaned = false;
  return {
    databaseName,
    databaseUrl,
    redisUrl,
    redisPrefix,
    env: {
      DATABASE_URL: databaseUrl,
      REDIS_URL: redisUrl,
      SLUICE_REDIS_KEY_PREFIX: redisPrefix,
    },
    serviceCpu: () => ({
      redis: processCpu(redisPid),
      postgres: new Map(postgresPids().map((pid) => [pid, processCpu(pid)])),
    }),
    async redisScripts() {
      const stats = await redis.info("commandstats");
      const calls = (command: string) =>
        Number(new RegExp(`cmdstat_${command}:calls=(\\d+)`).exec(stats)?.[1] ?? 0);
      return calls("evalsha") + calls("eval");
    },
    async cleanUp() {
      if (cleaned) return;
      cleaned = true;
      try {
        let cursor = "0";
        do {
          const [next, keys] = await redis.scan(cursor, "MATCH", `${redisPrefix}*`, "COUNT", 1000);
          cursor = next;
          if (keys.length > 0) await redis.del(...keys);
        } while (cursor !== "0");
      } finally {
        redis.disconnect();
        execFileSync("dropdb", ["-h", host, "-U", user, "--if-exists", "--force", databaseName], {
          stdio: "inherit",
        });
      }
    },
  };
}

/** User + system CPU µs of any process (0 once it is gone, or when it cannot be read). */
function processCpu(pid: number): number {
  try {
    return pidCpuMicros(pid);
  } catch {
    return 0;
  }
}
