import { BlockList, isIPv4, isIPv6 } from "node:net";
import { dottedQuad, ipv6Groups } from "../net/ip-address.js";

/**
 * Whether an IP address is a public unicast address that a server-side fetch may connect to.
 * Everything special-purpose is refused (IANA IPv4/IPv6 Special-Purpose Address Registries,
 * RFC 6890): loopback, unspecified, private (RFC 1918), shared CGNAT (RFC 6598), link-local
 * (including the 169.254.169.254 metadata service), ULA (RFC 4193), multicast, documentation,
 * benchmarking and reserved ranges. IPv6 forms that embed an IPv4 address (mapped ::ffff:0:0/96,
 * translated ::ffff:0:0:0/96, compatible ::/96, NAT64 64:ff9b::/96, 6to4 2002::/16) are judged on that IPv4 address; Teredo
 * (2001::/32) and local-use NAT64 (64:ff9b:1::/48, RFC 8215: it translates to whatever the local
 * network chose) are refused outright. Any other IPv6 address must be global unicast (2000::/3):
 * the rest is reserved by the IETF (`1::1`, `4000::1`), and a network that routes it anyway is a
 * local one. So is the IETF's 2001::/23, but for the assignments IANA lists as globally reachable.
 * Anything unparsable is refused.
 */
const v4 = new BlockList();
for (const [network, prefix] of [
  ["0.0.0.0", 8],
  ["10.0.0.0", 8],
  ["100.64.0.0", 10],
  ["127.0.0.0", 8],
  ["169.254.0.0", 16],
  ["172.16.0.0", 12],
  ["192.0.0.0", 24],
  ["192.0.2.0", 24],
  ["192.88.99.0", 24],
  ["192.168.0.0", 16],
  ["198.18.0.0", 15],
  ["198.51.100.0", 24],
  ["203.0.113.0", 24],
  ["224.0.0.0", 4],
  ["240.0.0.0", 4],
] as const) {
  v4.addSubnet(network, prefix, "ipv4");
}

const v6 = new BlockList();
for (const [network, prefix] of [
  ["::", 128],
  ["::1", 128],
  ["64:ff9b:1::", 48], // local-use NAT64 (RFC 8215)
  ["100::", 64], // discard-only (RFC 6666)
  ["100:0:0:1::", 64], // dummy prefix (RFC 9780)
  ["2001::", 23], // IETF protocol assignments, but for `globalInIetfBlock`
  ["2001::", 32], // Teredo
  ["2001:2::", 48], // benchmarking (RFC 5180)
  ["2001:db8::", 32], // documentation
  ["2001:10::", 28],
  ["2001:20::", 28],
  ["3fff::", 20], // documentation (RFC 9637)
  ["5f00::", 16], // SRv6 SIDs (RFC 9602)
  ["fc00::", 7],
  ["fe80::", 10],
  ["fec0::", 10],
  ["ff00::", 8],
] as const) {
  v6.addSubnet(network, prefix, "ipv6");
}

/** Global unicast (RFC 4291): every public IPv6 address is in it. */
const globalUnicast = new BlockList();
globalUnicast.addSubnet("2000::", 3, "ipv6");

/** The assignments in 2001::/23 IANA's registry marks globally reachable (ORCHIDv2 stays refused). */
const globalInIetfBlock = new BlockList();
for (const [network, prefix] of [
  ["2001:1::1", 128], // Port Control Protocol anycast (RFC 7723)
  ["2001:1::2", 128], // TURN anycast (RFC 8155)
  ["2001:1::3", 128], // DNS-SD service registration anycast (RFC 9665)
  ["2001:3::", 32], // AMT (RFC 7450)
  ["2001:4:112::", 48], // AS112-v6 (RFC 7535)
  ["2001:30::", 28], // drone remote ID DETs (RFC 9374)
] as const) {
  globalInIetfBlock.addSubnet(network, prefix, "ipv6");
}

export function isPublicAddress(ip: string): boolean {
  const address = ip.startsWith("[") && ip.endsWith("]") ? ip.slice(1, -1) : ip;
  if (isIPv4(address)) return !v4.check(address, "ipv4");
  if (!isIPv6(address)) return false;
  const embedded = embeddedIpv4(address);
  if (embedded !== undefined) return embedded !== null && isPublicAddress(embedded);
  if (globalInIetfBlock.check(address, "ipv6")) return true;
  return globalUnicast.check(address, "ipv6") && !v6.check(address, "ipv6");
}

/** The IPv4 address an IPv6 address embeds (undefined: none; null: unparsable). */
function embeddedIpv4(address: string): string | null | undefined {
  const groups = ipv6Groups(address);
  if (!groups) return null;
  const tail = () => dottedQuad(groups[6] ?? 0, groups[7] ?? 0);
  const zeros = (from: number, to: number) => groups.slice(from, to).every((group) => group === 0);
  if (zeros(0, 5) && groups[5] === 0xffff) return tail();
  // IPv4-translated (::ffff:0:0:0/96, RFC 2765's SIIT): a translator on the path makes it IPv4.
  if (zeros(0, 4) && groups[4] === 0xffff && groups[5] === 0) return tail();
  if (zeros(0, 6) && (groups[6] !== 0 || (groups[7] ?? 0) > 1)) return tail();
  if (groups[0] === 0x64 && groups[1] === 0xff9b && zeros(2, 6)) return tail();
  if (groups[0] === 0x2002) return dottedQuad(groups[1] ?? 0, groups[2] ?? 0);
  return undefined;
}
