import type { Config } from "./config.js";
import type { StartWarning } from "./production-warnings.js";

/**
 * Warnings about state several instances would share. `SLUICE_REDIS_KEY_PREFIX` without
 * `REDIS_URL` does nothing: said, since an operator who set it expects the counts kept apart.
 * A warning when `DATABASE_URL` is set without `REDIS_URL`: PostgreSQL is for several instances
 * (SQLite serves one), but without Redis each instance keeps its own DeviceCheck token ledger and
 * its own counts, so single-use holds, and budgets, the throttle, the limits and the spend cap's
 * calls in flight count, per instance.
 * And one when `DATABASE_URL` is set with the local image vault (no `SLUICE_VAULT_S3_ENDPOINT`):
 * each instance stores images under its own data dir, so a signed vault URL one hands out answers
 * 404 from the others. It is said whatever the projects save now: a project's `saveImagesToVault`
 * can be turned on through the admin API at any time, with no restart to warn then.
 * The URLs are not logged (they may hold a password).
 */
export function sharedStateWarnings(
  config: Pick<Config, "databaseUrl" | "redisUrl" | "redisKeyPrefix" | "vaultS3Endpoint">,
): StartWarning[] {
  const warnings: StartWarning[] = [];
  if (!config.redisUrl && config.redisKeyPrefix)
    warnings.push({
      fields: { redisKeyPrefix: config.redisKeyPrefix, redisUrl: false },
      message:
        "SLUICE_REDIS_KEY_PREFIX is set without REDIS_URL, so it has nothing to prefix: the rate limits, the failed-authentication throttle and the DeviceCheck token ledger are kept in this instance's memory",
    });
  if (!config.databaseUrl) return warnings;
  if (!config.redisUrl)
    warnings.push({
      fields: { databaseUrl: true, redisUrl: false },
      message:
        "DATABASE_URL is set without REDIS_URL, so this instance keeps on its own what several instances would share: the DeviceCheck token ledger (a single-use token used here is accepted once more by each other instance, and a cached token gets its request budget on each), the failed-authentication throttle and the rate limits (each instance admits up to the whole limit), and the spend cap's calls in flight (calls sent at once to several instances can each end about one call above a project's cap). If several instances serve this database, set REDIS_URL to the same Redis on all of them",
    });
  if (!config.vaultS3Endpoint)
    warnings.push({
      fields: { databaseUrl: true, vault: "local" },
      message:
        "DATABASE_URL is set with the local image vault (SLUICE_VAULT_S3_ENDPOINT unset), so the images a project saves to the vault (saveImagesToVault) are stored under this instance's SLUICE_DATA_DIR and served by it alone: a signed vault URL this instance hands out answers 404 from any other instance behind the same load balancer. If several instances serve this database and any project saves images to the vault, now or later, set SLUICE_VAULT_S3_* to the same S3-compatible bucket on all of them",
    });
  return warnings;
}
