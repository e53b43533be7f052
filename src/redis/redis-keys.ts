/**
 * Where every key Sluice keeps in Redis begins, one entry per user of the client; each user adds
 * the rest of its keys after it (see docs/architecture.md, "Several instances"). Every key is
 * passed to its Lua script in KEYS, none is built inside a script, so these prefixes cover them all.
 *
 * `prefix` (SLUICE_REDIS_KEY_PREFIX) goes before each as written: deployments that share one Redis
 * with prefixes of their own count apart. Without one the keys are those of earlier versions, so
 * an upgrade, even a rolling one, keeps the counts and the ledger.
 */
export function redisKeyPrefixes(prefix = "") {
  return {
    /** Rate-limit windows: `sluice:rl:<limit name>:<window s>:<key>`. */
    rateLimits: `${prefix}sluice:rl`,
    /** The failed-authentication throttle of /v1: `sluice:auth:ip:<address>[:project:<id>]`, `sluice:auth:project:<id>`. */
    authFailures: `${prefix}sluice:auth`,
    /** The failed-authentication throttle of /admin/v1: `sluice:admin-auth:ip:<address>`. */
    adminAuthFailures: `${prefix}sluice:admin-auth`,
    /** The DeviceCheck token ledger: `sluice:device-token:<project>:<digest>` and its `…:verified`. */
    deviceTokens: `${prefix}sluice:device-token:`,
    /** The spend cap's calls in flight: `sluice:spend-in-flight:<project>`, a sorted set of places. */
    spendInFlight: `${prefix}sluice:spend-in-flight`,
    /** The breaker's write probe while Redis rests after a failure (`RedisBreaker`): `sluice:write-probe`, 5 s. */
    writeProbe: `${prefix}sluice:write-probe`,
  } as const;
}
