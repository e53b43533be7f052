import type { Redis } from "ioredis";
import type { Logger } from "../observability/logger.js";

/**
 * The `maxmemory-policy` under which the Redis that answered `info` (the text of `INFO memory`) may
 * evict keys: its `maxmemory` is above 0 and its policy is not `noeviction`. Undefined when it
 * evicts nothing (no memory limit, or `noeviction`, under which a full Redis refuses writes
 * instead), or when the text does not say (a Redis-compatible server without these fields).
 * Never throws.
 */
export function evictingPolicy(info: string): string | undefined {
  const fields = new Map<string, string>();
  for (const line of info.split(/\r?\n/)) {
    const colon = line.indexOf(":");
    if (colon > 0 && !line.startsWith("#")) fields.set(line.slice(0, colon), line.slice(colon + 1).trim());
  }
  const maxmemory = Number(fields.get("maxmemory"));
  const policy = fields.get("maxmemory_policy");
  if (!Number.isFinite(maxmemory) || maxmemory <= 0 || !policy || policy === "noeviction") return undefined;
  return policy;
}

/**
 * Asks the ready `client` for `INFO memory` (not `CONFIG GET`, which managed services often
 * disable), without awaiting: nothing waits for it, and it runs once per connection made ready,
 * never on a request. A Redis that may evict keys (`evictingPolicy`) is named in one warning per
 * policy in `warned` (the client's: one per process), since it drops Sluice's keys (each has an
 * expiry, so even the volatile-* policies take them) under memory pressure. An INFO that fails
 * (refused by an ACL, the connection gone) is logged at debug level only.
 */
export function checkEvictionPolicy(client: Redis, logger: Logger, warned: Set<string>): void {
  if (client.status !== "ready") return;
  client.info("memory").then(
    (info) => {
      const policy = evictingPolicy(info);
      if (policy === undefined || warned.has(policy)) return;
      warned.add(policy);
      logger.warn(
        { setting: "REDIS_URL", maxmemoryPolicy: policy },
        `Redis has a maxmemory limit with maxmemory-policy ${policy}: under memory pressure it evicts Sluice's keys (all have an expiry), so rate-limit windows and the failed-authentication throttle reopen early, single-use DeviceCheck tokens can be used again, and the spend cap's calls in flight are forgotten; set maxmemory-policy noeviction on this Redis (a full Redis then refuses writes and the limits fall back to per-instance limits), or give it no maxmemory`,
      );
    },
    (error: unknown) =>
      logger.debug(
        { setting: "REDIS_URL", redisError: error instanceof Error ? error.message : String(error) },
        "Redis's INFO memory failed: its eviction policy is not checked",
      ),
  );
}
