/**
 * DATABASE_URL or REDIS_URL as a message or the start line may show it: scheme, user, host, port
 * and database (Redis: its index). Never the password, nor the query string, which may hold one
 * (`?password=`, `sslpassword=`; ioredis takes its options there).
 */
export function serviceUrlShown(serviceUrl: string): string {
  if (!URL.canParse(serviceUrl)) return "not a URL";
  const url = new URL(serviceUrl);
  if (url.protocol === "socket:") return `socket:${url.pathname}`;
  return `${url.protocol}//${url.username ? `${url.username}@` : ""}${url.host}${url.pathname}`;
}
