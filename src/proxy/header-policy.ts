import type { IncomingHttpHeaders } from "node:http";

/**
 * Which client headers reach the provider and which provider headers reach the client.
 * Requests: an allow-list; credentials, cookies, hop-by-hop headers (RFC 9110 section 7.6.1) and
 * Sluice's own headers never pass. Responses: everything but hop-by-hop headers and cookies.
 */
const forwardedRequestHeaders = new Set([
  "content-type",
  "accept",
  "user-agent",
  "idempotency-key",
  "openai-organization",
  "openai-project",
  "openai-beta",
  "anthropic-beta",
  "anthropic-dangerous-direct-browser-access",
  "x-goog-user-project",
]);
const forwardedRequestPrefixes = ["x-stainless-"];

const droppedResponseHeaders = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "transfer-encoding",
  "te",
  "trailer",
  "upgrade",
  "proxy-authenticate",
  "set-cookie",
]);

export function upstreamRequestHeaders(incoming: IncomingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name in incoming) {
    if (
      forwardedRequestHeaders.has(name) ||
      forwardedRequestPrefixes.some((prefix) => name.startsWith(prefix))
    ) {
      const value = incoming[name];
      if (typeof value === "string") out[name] = value;
      else if (Array.isArray(value)) out[name] = value.join(", ");
    }
  }
  // Usage is read from the response while it streams, so it must arrive uncompressed.
  out["accept-encoding"] = "identity";
  return out;
}

/**
 * The client's response headers as one flat `[name, value, …]` list for a single `writeHead`:
 * the provider's (as above), then Sluice's own (`own`: x-request-id, RateLimit). A provider header
 * of the same name wins, except the provider's `x-request-id`, which stays where its SDK reads it
 * while Sluice's id moves to `x-sluice-request-id`.
 */
export function clientResponseHeaders(
  upstream: Record<string, string | string[] | undefined>,
  own: Record<string, string> = {},
): string[] {
  const out: string[] = [];
  const connection = upstream.connection;
  // Usually just `keep-alive` or `close`: nothing more to drop.
  const listed =
    typeof connection === "string" && connection !== "keep-alive" && connection !== "close"
      ? connection
          .toLowerCase()
          .split(",")
          .map((name) => name.trim())
      : [];
  for (const name in upstream) {
    if (droppedResponseHeaders.has(name) || listed.includes(name)) continue;
    const value = upstream[name];
    if (typeof value === "string") out.push(name, value);
    else if (value !== undefined) for (const item of value) out.push(name, item);
  }
  for (const name in own) {
    if (upstream[name] === undefined) out.push(name, own[name] as string);
    else if (name === "x-request-id") out.push("x-sluice-request-id", own[name] as string);
  }
  return out;
}
