import type { IncomingMessage } from "node:http";

/**
 * The client's address: the socket peer, or, when the peer is a trusted proxy, the right-most
 * x-forwarded-for entry that is not itself a trusted proxy.
 */
export function createClientIpResolver(
  trustedProxies: readonly string[],
): (request: IncomingMessage) => string {
  const trusted = new Set(trustedProxies.map(normalize));
  return (request) => {
    const peer = normalize(request.socket.remoteAddress ?? "");
    if (trusted.size === 0 || !trusted.has(peer)) return peer;
    const forwarded = request.headers["x-forwarded-for"];
    const hops = (Array.isArray(forwarded) ? forwarded.join(",") : (forwarded ?? ""))
      .split(",")
      .map((hop) => normalize(hop.trim()))
      .filter(Boolean);
    for (let index = hops.length - 1; index >= 0; index--) {
      const hop = hops[index] as string;
      if (!trusted.has(hop)) return hop;
    }
    return peer;
  };
}

function normalize(address: string): string {
  return address.startsWith("::ffff:") ? address.slice(7) : address;
}
