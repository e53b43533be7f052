import type { Socket } from "node:net";
import { GatewayError } from "../errors.js";
import { addressBlock, unmapped } from "../net/ip-address.js";
import { lingeringClose, rawErrorAnswer } from "./send.js";

/**
 * The caps on the connections the gateway holds open, taken before any request is read.
 *
 * SLUICE_MAX_CONNECTIONS_PER_IP: how many connections one peer address may hold open at once. The
 * per-IP rate limits count requests, so without it one address could open thousands of idle or
 * slow connections and use up the file descriptors and memory every client needs
 * (docs/decisions/0016).
 *
 * SLUICE_MAX_CONNECTIONS: how many all addresses together may hold, trusted proxies included:
 * many addresses, or a proxy, could otherwise open connections until the process has no file
 * descriptor left for its own sockets to providers, PostgreSQL or Redis, nor for its files, and
 * the clients already connected fail too (docs/decisions/0018).
 */
export interface ConnectionCap {
  /**
   * The server's `connection` (the TCP socket, before TLS): true when the connection may be served
   * (it is counted until it closes); false when it was over a cap and has been refused: answered
   * 429 (its address's cap) or 503 (the total) and closed (plain HTTP), or cut (`encrypted`: a TLS
   * handshake would cost more than the connection the cap saves).
   */
  admit(socket: Socket, encrypted: boolean): boolean;
  /** How many addresses hold counted connections: none once every connection closed. */
  addresses(): number;
  /** How many counted connections `address` (canonical: IPv4 as such, IPv6 as its /64 block) holds open. */
  openFrom(address: string): number;
  /** How many connections count against the total cap: every live one it admitted; 0 when it is off. */
  open(): number;
}

export interface ConnectionCapOptions {
  /** Connections one address may hold; 0: no cap (nothing is counted per address). */
  maxPerAddress: number;
  /** Connections all addresses together may hold, trusted proxies' included; 0: no cap (none counted). */
  maxTotal: number;
  /** Whether an address is a trusted proxy (SLUICE_TRUST_PROXY), never capped per address; null: none. */
  isTrusted: ((address: string) => boolean) | null;
  generateRequestId: () => string;
  /** A connection was refused by its address's cap; `warn` is true for the first of its address in a minute. */
  onRefused: (address: string, warn: boolean) => void;
  /** A connection (from `address`) was refused by the total cap; `warn` is true for the first in a minute. */
  onFull: (address: string, warn: boolean) => void;
  now?: () => number;
}

/** Seconds a client refused by its address's cap is asked to wait: a connection of its own frees as soon as it closes. */
const retryAfterSeconds = 1;
/**
 * Seconds a client refused by the total cap is asked to wait: a slot frees when someone else's
 * connection closes, which may take a while; a longer wait spreads the retries of many clients.
 */
const fullRetryAfterSeconds = 5;
/**
 * How long a refused connection's bytes are read and dropped after its answer, at most: less than
 * after a request's early answer (send.ts), as a flood of connections over a cap is what it serves.
 */
const lingerMs = 1000;
const lingerBytes = 64 * 1024;
/** One warning per address (the total cap: one in all) per this long. */
const warnEveryMs = 60_000;
/** Addresses remembered for the warnings at most (expired ones are swept first). */
const maxWarned = 10_000;

export function createConnectionCap(options: ConnectionCapOptions): ConnectionCap {
  const { maxPerAddress, maxTotal, isTrusted, generateRequestId, onRefused, onFull } = options;
  const now = options.now ?? Date.now;
  // Only live connections are counted, and an address leaves at zero: bounded by the open sockets.
  const open = new Map<string, number>();
  const warnedAt = new Map<string, number>();
  let total = 0;
  let fullWarnedAt: number | undefined;

  const shouldWarn = (address: string): boolean => {
    const at = now();
    const last = warnedAt.get(address);
    if (last !== undefined && at - last < warnEveryMs) return false;
    if (last === undefined && warnedAt.size >= maxWarned) {
      for (const [known, when] of warnedAt) if (at - when >= warnEveryMs) warnedAt.delete(known);
      if (warnedAt.size >= maxWarned) warnedAt.clear();
    }
    warnedAt.set(address, at);
    return true;
  };

  const shouldWarnFull = (): boolean => {
    const at = now();
    if (fullWarnedAt !== undefined && at - fullWarnedAt < warnEveryMs) return false;
    fullWarnedAt = at;
    return true;
  };

  return {
    admit(socket, encrypted) {
      if (maxPerAddress === 0 && maxTotal === 0) return true;
      const peer = socket.remoteAddress;
      // Already gone (reset before it was handed over): Node's own handling closes it.
      if (peer === undefined) return true;
      // Node writes the peer canonically (lower-case, no port): only a mapped IPv4 needs undoing.
      const peerAddress = unmapped(peer);
      // An IPv6 client is its /64, as for the per-IP limits: rotating addresses inside it is one client.
      // A trusted proxy has no per-address count, but counts in the total: that cap is about the process.
      const address = maxPerAddress === 0 || isTrusted?.(peerAddress) ? undefined : addressBlock(peerAddress);
      const count = address === undefined ? 0 : (open.get(address) ?? 0);
      if (address !== undefined && count >= maxPerAddress) {
        onRefused(address, shouldWarn(address));
        refuse(socket, encrypted, overAddressCap(maxPerAddress), generateRequestId);
        return false;
      }
      // Checked second: a client over its own cap is told so (429), not that the gateway is full.
      if (maxTotal > 0 && total >= maxTotal) {
        onFull(peerAddress, shouldWarnFull());
        refuse(socket, encrypted, overTotalCap(), generateRequestId);
        return false;
      }
      if (address !== undefined) open.set(address, count + 1);
      if (maxTotal > 0) total++;
      socket.once("close", () => {
        if (maxTotal > 0) total--;
        if (address === undefined) return;
        const left = (open.get(address) ?? 1) - 1;
        if (left > 0) open.set(address, left);
        else open.delete(address);
      });
      return true;
    },
    addresses: () => open.size,
    openFrom: (address) => open.get(address) ?? 0,
    open: () => total,
  };
}

function overAddressCap(limit: number): GatewayError {
  return new GatewayError(
    "TOO_MANY_REQUESTS",
    `This address holds ${limit} connections to the gateway, the most it may hold at once (SLUICE_MAX_CONNECTIONS_PER_IP): reuse one, or close one first`,
    { headers: { "retry-after": String(retryAfterSeconds) } },
  );
}

/** The limit is not named: it would tell every client how many connections take the gateway down. */
function overTotalCap(): GatewayError {
  return new GatewayError(
    "SERVICE_UNAVAILABLE",
    "The gateway holds as many connections as it may at once (SLUICE_MAX_CONNECTIONS): retry shortly",
    { headers: { "retry-after": String(fullRetryAfterSeconds) }, details: { retryable: true } },
  );
}

/**
 * Answers a plain HTTP connection `error` (429 or 503, with its Retry-After) at once, without
 * reading a request, and closes it lingeringly (send.ts): what the client sends meanwhile is read
 * and dropped until it closes its side, for at most `lingerMs` or `lingerBytes`, as closing a
 * socket with unread bytes sends a reset, which can overtake the answer. A TLS connection is cut
 * instead.
 */
function refuse(
  socket: Socket,
  encrypted: boolean,
  error: GatewayError,
  generateRequestId: () => string,
): void {
  // Node's own listeners never see this socket: its errors (a reset) are this function's to take.
  socket.on("error", () => socket.destroy());
  if (encrypted) {
    socket.destroy();
    return;
  }
  socket.write(rawErrorAnswer(error, generateRequestId()).answer);
  lingeringClose(socket, { ms: lingerMs, bytes: lingerBytes });
}
