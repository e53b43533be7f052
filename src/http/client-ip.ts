import type { IncomingMessage } from "node:http";
import { BlockList, isIP, isIPv6 } from "node:net";

/**
 * The client's address: the socket peer, or, when the peer is a trusted proxy, the right-most
 * x-forwarded-for entry that is not itself a trusted proxy. Trusted proxies are addresses or
 * subnets (`10.0.0.0/8`, `2001:db8::/32`), as load balancers whose addresses change need.
 *
 * Entries are read as addresses, whatever the proxy wrote around them: a port (`192.0.2.1:53211`,
 * `[2001:db8::1]:443`, as some load balancers write them) or brackets are dropped, an IPv4-mapped
 * IPv6 address is its IPv4 address, and IPv6 hex is lower-cased. Otherwise one client would count
 * as a new one per source port in the rate limits and the failed-authentication throttle.
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
    // From the right: the entries a trusted proxy appended, then the first it did not vouch for.
    let end = list.length;
    while (end > 0) {
      const start = list.lastIndexOf(",", end - 1);
      const hop = normalizeAddress(list.slice(start + 1, end));
      if (hop && !isTrusted(hop)) return hop;
      end = Math.max(start, 0);
    }
    return peer;
  };
}

/**
 * Whether an address belongs to a trusted proxy; null when none is configured. Exact addresses
 * are a set lookup; subnet answers are remembered per address (a few proxies, bounded anyway),
 * since a `BlockList` check costs about a microsecond. A malformed subnet stops the start-up
 * instead of trusting nothing in silence.
 */
function trustMatcher(entries: readonly string[]): ((address: string) => boolean) | null {
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
      decided.set(address, trusted);
    }
    return trusted;
  };
}

/**
 * SLUICE_TRUST_PROXY's comma-separated addresses and subnets, or what is wrong with them (for
 * config.ts, which refuses to start on it: a host name or a mistyped subnet would trust nothing,
 * and every client would then look like the load balancer).
 */
export function parseTrustedProxies(value: string): string[] | string {
  const entries = value
    .split(",")
    .map((entry) => entry.trim())
    .filter(Boolean);
  const wrong = entries.filter((entry) => trustedEntry(entry) === null);
  if (wrong.length > 0)
    return `${wrong.map((entry) => JSON.stringify(entry)).join(", ")}: not an IP address or subnet (10.0.0.0/8, 2001:db8::/32)`;
  return entries;
}

/** An address, or a subnet with its prefix length; null for anything else. */
function trustedEntry(entry: string): { address: string; family: number; bits?: number } | null {
  const slash = entry.indexOf("/");
  const address = normalizeAddress(slash < 0 ? entry : entry.slice(0, slash));
  const family = isIP(address);
  if (family === 0) return null;
  if (slash < 0) return { address, family };
  const prefix = entry.slice(slash + 1).trim();
  const bits = Number(prefix);
  if (!/^\d+$/.test(prefix) || bits > (family === 6 ? 128 : 32)) return null;
  return { address, family, bits };
}

/** An address as one canonical string (see above); anything else is returned trimmed, as is. */
export function normalizeAddress(value: string): string {
  let address = value.trim();
  if (address.startsWith("[")) {
    // `[2001:db8::1]` or `[2001:db8::1]:443`
    const close = address.indexOf("]");
    if (close > 0) address = address.slice(1, close);
  } else {
    // One colon after a dotted address is a port (`192.0.2.1:53211`); IPv6 has two or more.
    const colon = address.indexOf(":");
    if (colon > 0 && colon === address.lastIndexOf(":") && address.includes("."))
      address = address.slice(0, colon);
  }
  return address.includes(":") ? unmapped(address.toLowerCase()) : address;
}

/** `::ffff:192.0.2.1` (an IPv4 client of a dual-stack socket) is `192.0.2.1`. */
function unmapped(address: string): string {
  return address.startsWith("::ffff:") && address.includes(".") ? address.slice(7) : address;
}

/**
 * An IPv4 address as is; an IPv6 address as its /64 prefix (`2001:db8:0:1::/64`), the block one
 * end site (a phone, a home) usually holds: rotating addresses inside it is one client.
 */
export function addressBlock(address: string): string {
  if (!address.includes(":")) return address; // IPv4, the usual case: no parsing
  const bare = address.split("%")[0] ?? address;
  if (!isIPv6(bare)) return address;
  const [head = "", tail = ""] = bare.split("::");
  const left = head ? head.split(":") : [];
  const right = tail ? tail.split(":") : [];
  // An embedded IPv4 address (`::ffff:192.0.2.1`) fills the last two groups.
  const rightCount = right.reduce((sum, group) => sum + (group.includes(".") ? 2 : 1), 0);
  // `::` stands for the zero groups between the two sides; the right side may reach into the
  // first four (`2001:db8::1:0:0:0:1` is in 2001:db8:0:1::/64).
  const groups = bare.includes("::")
    ? [...left, ...Array<string>(8 - left.length - rightCount).fill("0"), ...right]
    : left;
  const prefix = groups.slice(0, 4);
  return `${prefix.map((group) => Number.parseInt(group, 16).toString(16)).join(":")}::/64`;
}
