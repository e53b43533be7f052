/**
 * The request target in origin form (`/path?query`). A server must accept the absolute form
 * (`http://host/path?query`) too, which names the same resource (RFC 9112 §3.2.2).
 */
export function originForm(target: string): string {
  if (target.charCodeAt(0) === 47) return target;
  const authority = /^https?:\/\/[^/?#]*/i.exec(target);
  // `*` (OPTIONS) or `host:port` (CONNECT): no route has them.
  if (!authority) return target;
  const rest = target.slice(authority[0].length);
  return rest.startsWith("/") ? rest : `/${rest}`;
}
