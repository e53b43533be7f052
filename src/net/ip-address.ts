import { isIP, isIPv6 } from "node:net";

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

/**
 * An address, or a subnet with its prefix length; null for anything else. An IPv4-mapped subnet
 * (`::ffff:10.0.0.0/104`) is the IPv4 subnet it maps (`10.0.0.0/8`), as its addresses are read.
 */
export function trustedEntry(entry: string): { address: string; family: number; bits?: number } | null {
  const slash = entry.indexOf("/");
  const written = slash < 0 ? entry : entry.slice(0, slash);
  const address = normalizeAddress(written);
  const family = isIP(address);
  if (family === 0) return null;
  if (slash < 0) return { address, family };
  const prefix = entry.slice(slash + 1).trim();
  if (!/^\d+$/.test(prefix)) return null;
  // Written as IPv6, read as IPv4: the first 96 bits are the mapping's.
  const bits = Number(prefix) - (family === 4 && written.includes(":") ? 96 : 0);
  if (bits < 0 || bits > (family === 6 ? 128 : 32)) return null;
  return { address, family, bits };
}

/**
 * An address as one canonical string, whatever was written around it: a port (`192.0.2.1:53211`,
 * `[2001:db8::1]:443`) or brackets are dropped, an IPv4-mapped IPv6 address is its IPv4 address
 * however it is written (`::ffff:192.0.2.1`, `::ffff:c000:201`, `0:0:0:0:0:ffff:192.0.2.1`), and
 * IPv6 hex is lower-cased. Anything else is returned trimmed, as is.
 */
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
  if (!address.includes(":")) return address;
  address = address.toLowerCase();
  const dotted = unmapped(address);
  if (dotted !== address || !address.includes("ffff")) return dotted;
  // The other spellings of ::ffff:0:0/96: otherwise every IPv4 client a proxy writes so would be
  // one IPv6 client, all in the block 0:0:0:0::/64, sharing one per-IP limit.
  const groups = ipv6Groups(address);
  if (groups === null || groups[5] !== 0xffff || groups.slice(0, 5).some((group) => group !== 0))
    return address;
  return dottedQuad(groups[6] ?? 0, groups[7] ?? 0);
}

/** The IPv4 address two 16-bit IPv6 groups hold (`c000`, `201` → `192.0.2.1`). */
export function dottedQuad(high: number, low: number): string {
  return `${high >> 8}.${high & 255}.${low >> 8}.${low & 255}`;
}

/**
 * `::ffff:192.0.2.1` (an IPv4 client of a dual-stack socket, as Node writes it) is `192.0.2.1`.
 * Only that form: `::ffff:0:192.0.2.1` is another block, and stays IPv6.
 */
export function unmapped(address: string): string {
  return address.startsWith("::ffff:") && address.includes(".") && address.indexOf(":", 7) < 0
    ? address.slice(7)
    : address;
}

/**
 * An IPv4 address as is; an IPv6 address as its /64 prefix (`2001:db8:0:1::/64`), the block one
 * end site (a phone, a home) usually holds: rotating addresses inside it is one client.
 */
export function addressBlock(address: string): string {
  if (!address.includes(":")) return address; // IPv4, the usual case: no parsing
  const groups = ipv6Groups(address);
  if (groups === null) return address;
  return `${groups
    .slice(0, 4)
    .map((group) => group.toString(16))
    .join(":")}::/64`;
}

/** The eight 16-bit groups of an IPv6 address (a zone, `%eth0`, left out); null when it is not one. */
export function ipv6Groups(address: string): number[] | null {
  const bare = address.split("%")[0] ?? address;
  if (!isIPv6(bare)) return null;
  const [head = "", tail = ""] = bare.split("::");
  const left = head ? groupsOf(head) : [];
  const right = tail ? groupsOf(tail) : [];
  // `::` stands for the zero groups between the two sides; the right side may reach into the
  // first four (`2001:db8::1:0:0:0:1` is in 2001:db8:0:1::/64).
  return bare.includes("::")
    ? [...left, ...Array<number>(8 - left.length - right.length).fill(0), ...right]
    : left;
}

/** One side of `::`: hex groups, an embedded IPv4 address (`::ffff:192.0.2.1`) as the last two. */
function groupsOf(side: string): number[] {
  return side.split(":").flatMap((group) => {
    if (!group.includes(".")) return [Number.parseInt(group, 16)];
    const [a = 0, b = 0, c = 0, d = 0] = group.split(".").map(Number);
    return [(a << 8) | b, (c << 8) | d];
  });
}
