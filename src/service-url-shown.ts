/**
 * DATABASE_URL as a message or the start line may show it: scheme, user, host, port and database.
 * Never the password, nor the query string, which may hold one (`?password=`, `sslpassword=`).
 */
export function describeDatabaseUrl(databaseUrl: string): string {
  if (!URL.canParse(databaseUrl)) return "not a URL";
  const url = new URL(databaseUrl);
  if (url.protocol === "socket:") return `socket:${url.pathname}`;
  return `${url.protocol}//${url.username ? `${url.username}@` : ""}${url.host}${url.pathname}`;
}

/**
 * REDIS_URL as the start line shows it: scheme, user, host, port and database index. Never the
 * password, nor the query string (ioredis takes its options there, `?password=` among them).
 */
export function describeRedisUrl(redisUrl: string): string {
  return describeDatabaseUrl(redisUrl);
}
