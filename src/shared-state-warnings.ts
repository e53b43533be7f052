import type { Config } from "./config.js";
import type { StartWarning } from "./production-warnings.js";

/**
 * Warnings about state several instances would share. `SLUICE_REDIS_KEY_PREFIX` without
 * `REDIS_URL` does nothing: said, since an operator who set it expects the counts kept apart.
 * A warning when `DATABASE_URL` is set without `REDIS_URL`: PostgreSQL is for several instances
 * (SQLite serves one), but without Redis each instance keeps its own DeviceCheck token ledger and
 * its own counts, so single-use holds, and budgets, the throttle and the limits count, per instance.
 * The URLs are not logged (they may hold a password).
 */
export function sharedStateWarnings(
  config: Pick<Config, "databaseUrl" | "redisUrl" | "redisKeyPrefix">,
): StartWarning[] {
  if (config.redisUrl) return [];
  const warnings: StartWarning[] = [];
  if (config.redisKeyPrefix)
    warnings.push({
      fields: { redisKeyPrefix: config.redisKeyPrefix, redisUrl: false },
      message:
        "SLUICE_REDIS_KEY_PREFIX is set without REDIS_URL, so it has nothing to prefix: the rate limits, the failed-authentication throttle and the DeviceCheck token ledger are kept in this instance's memory",
    });
  if (!config.databaseUrl) return warnings;
  return [
    ...warnings,
    {
      fields: { databaseUrl: true, redisUrl: false },
      message:
        "DATABASE_URL is set without REDIS_URL, so this instance keeps on its own what several instances would share: the DeviceCheck token ledger (a single-use token used here is accepted once more by each other instance, and a cached token gets its request budget on each), the failed-authentication throttle and the rate limits (each instance admits up to the whole limit). If several instances serve this database, set REDIS_URL to the same Redis on all of them",
    },
  ];
}
