import { type AddressInfo, isIPv6 } from "node:net";

/**
 * The base URL of the address a server listens on (`server.address()`), `http(s)://host:port`,
 * with an IPv6 address in brackets (RFC 3986 §3.2.2: `http://[::1]:8787`; `http://::1:8787` is no
 * URL). Before the server listens (null), or on a pipe (a path), the configured host and port. A
 * wildcard address (`0.0.0.0`, `::`) is written as it is: clients then need SLUICE_PUBLIC_URL.
 */
export function listeningUrl(
  listening: AddressInfo | string | null,
  configured: { host: string; port: number },
  secure: boolean,
): string {
  const { address, port } =
    typeof listening === "object" && listening !== null
      ? listening
      : { address: configured.host, port: configured.port };
  return `${secure ? "https" : "http"}://${isIPv6(address) ? `[${address}]` : address}:${port}`;
}
