import type { IncomingMessage } from "node:http";
import { BlockList, isIP } from "node:net";
import { detachedString } from "../detached-string.js";
import { normalizeAddress, trustedEntry, unmapped } from "../net/ip-address.js";

/**
 * The client's address: the socket peer, or, when the peer is a trusted proxy, the right-most
 * x-forwarded-for entry that is not itself a trusted proxy (the left-most entry when all are).
 * Trusted proxies are addresses or subnets (`10.0.0.0/8`, `2001:db8::/32`), as load balancers whose
 * addresses change need.
 *
 * Entries are read as addresses, whatever the proxy wrote around them: a port (`192.0.2.1:53211`,
 * `[2001:db8::1]:443`, as some load balancers write them) or brackets are dropped, an IPv4-mapped
 * IPv6 address is its IPv4 address, and IPv6 hex is lower-cased. Otherwise one client would count
 * as a new one per source port in the rate limits and the failed-authentication throttle. An
 * entry that is not an address (`unknown`, `_hidden`, text a client made up, an IPv6 address with a
 * zone, `%eth0`) ends the walk: the client is then the nearest trusted proxy, so free text never
 * becomes a rate-limit key or a usage row's address, and varying it cannot dodge the per-IP limit.
 */
export function createClientIpResolver(
  trustedProxies: readonly string[],
): (request: IncomingMessage) => string {
  const isTrusted = trustMatcher(trustedProxies);
  return (request) => {
    // Node writes the peer canonically (lower-case, no port): only a mapped IPv4 needs undoing.
    const peer = unmapped(request.socket.remoteAddress ?? "");
    if (isTrusted === null || !isTrusted(peer)) return peer;
    const forwarded = request.headers["x-forwarded-for"];
    const list = Array.isArray(forwarded) ? forwarded.join(",") : (forwarded ?? "");
    const client = forwardedClient(list, peer, isTrusted);
    // A copy: the address is cut from a header the client may fill with 16 KiB of entries of its
    // own, and a usage row waiting out an outage or a rate-limit window keeps it (detachedString).
    return client === peer ? client : detachedString(client);
  };
}

/** The client `list` (x-forwarded-for) names, as `peer`, a trusted proxy, passed it on. */
function forwardedClient(list: string, peer: string, isTrusted: (address: string) => boolean): string {
  // From the right: the entries a trusted proxy appended, then the first it did not vouch for.
  let nearest = peer;
  let end = list.length;
  while (end > 0) {
    const start = list.lastIndexOf(",", end - 1);
    const hop = normalizeAddress(list.slice(start + 1, end));
    end = Math.max(start, 0);
    if (!hop) continue;
    // Not an address (`unknown`, an obfuscated name, a client's free text): nothing left of it
    // can be believed, so the client is the nearest trusted hop that wrote it. Nor is one with an
    // IPv6 zone (`fe80::1%eth0`): it names an interface of the machine that wrote it, never a
    // remote client's, and isIP takes a zone of any length (free text up to Node's 16 KiB of head).
    if (isIP(hop) === 0 || hop.includes("%")) return nearest;
    if (!isTrusted(hop)) return hop;
    nearest = hop;
  }
  // Every entry is a trusted address: the left-most, vouched for by the hop to its right, is the
  // client (an internal service calling through the load balancer), not the proxy that carried it.
  return nearest;
}

/**
 * Whether an address belongs to a trusted proxy; null when none is configured. Exact addresses
 * are a set lookup; subnet answers are remembered per address (a few proxies, bounded anyway; each
 * address kept as a copy, made once per address), since a `BlockList` check costs about a
 * microsecond. A malformed subnet stops the start-up instead of trusting nothing in silence.
 */
export function trustMatcher(entries: readonly string[]): ((address: string) => boolean) | null {
  const exact = new Set<string>();
  const subnets = new BlockList();
  let hasSubnets = false;
  for (const entry of entries) {
    const parsed = trustedEntry(entry);
    if (parsed === null)
      throw new Error(`SLUICE_TRUST_PROXY: ${JSON.stringify(entry)} is neither an address nor a subnet`);
    if (parsed.bits === undefined) exact.add(parsed.address);
    else {
      subnets.addSubnet(parsed.address, parsed.bits, parsed.family === 6 ? "ipv6" : "ipv4");
      hasSubnets = true;
    }
  }
  if (!hasSubnets) return exact.size === 0 ? null : (address) => exact.has(address);
  const decided = new Map<string, boolean>();
  return (address) => {
    if (exact.has(address)) return true;
    let trusted = decided.get(address);
    if (trusted === undefined) {
      const family = isIP(address);
      trusted = family !== 0 && subnets.check(address, family === 6 ? "ipv6" : "ipv4");
      if (decided.size >= 10_000) decided.clear();
      // A copy: an x-forwarded-for hop is cut from a header the client may pad to 16 KiB (detachedString).
      decided.set(detachedString(address), trusted);
    }
    return trusted;
  };
}
