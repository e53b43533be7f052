import type { Socket } from "node:net";
import { GatewayError } from "../errors.js";
import { addressBlock, unmapped } from "../net/ip-address.js";
import { rawErrorAnswer } from "./send.js";

/**
 * SLUICE_MAX_CONNECTIONS_PER_IP: how many connections one peer address may hold open at once. The
 * per-IP rate limits count requests, so without it one address could open thousands of idle or
 * slow connections and use up the file descriptors and memory every client needs
 * (docs/decisions/0016).
 */
export interface ConnectionCap {
  /**
   * The server's `connection` (the TCP socket, before TLS): true when the connection may be served
   * (it is counted until it closes); false when it was over the cap and has been refused: answered
   * 429 and closed (plain HTTP), or cut (`encrypted`: a TLS handshake would cost more than the
   * connection the cap saves).
   */
  admit(socket: Socket, encrypted: boolean): boolean;
  /** How many addresses hold counted connections: none once every connection closed. */
  addresses(): number;
  /** How many counted connections `address` (canonical: IPv4 as such, IPv6 as its /64 block) holds open. */
  openFrom(address: string): number;
}

export interface ConnectionCapOptions {
  /** Connections one address may hold; 0: no cap (nothing is counted). */
  maxPerAddress: number;
  /** Whether an address is a trusted proxy (SLUICE_TRUST_PROXY), never capped; null: none. */
  isTrusted: ((address: string) => boolean) | null;
  generateRequestId: () => string;
  /** A connection was refused; `warn` is true for the first of its address in a minute. */
  onRefused: (address: string, warn: boolean) => void;
  now?: () => number;
}

/** Seconds a refused client is asked to wait: a connection of its own frees as soon as it closes. */
const retryAfterSeconds = 1;
/** How long a refused connection's bytes are read and dropped after its answer, at most. */
const lingerMs = 1000;
const lingerBytes = 64 * 1024;
/** One warning per address per this long. */
const warnEveryMs = 60_000;
/** Addresses remembered for the warnings at most (expired ones are swept first). */
const maxWarned = 10_000;

export function createConnectionCap(options: ConnectionCapOptions): ConnectionCap {
  const { maxPerAddress, isTrusted, generateRequestId, onRefused } = options;
  const now = options.now ?? Date.now;
  // Only live connections are counted, and an address leaves at zero: bounded by the open sockets.
  const open = new Map<string, number>();
  const warnedAt = new Map<string, number>();

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

  return {
    admit(socket, encrypted) {
      if (maxPerAddress === 0) return true;
      const peer = socket.remoteAddress;
      // Already gone (reset before it was handed over): Node's own handling closes it.
      if (peer === undefined) return true;
      // Node writes the peer canonically (lower-case, no port): only a mapped IPv4 needs undoing.
      const peerAddress = unmapped(peer);
      if (isTrusted?.(peerAddress)) return true;
      // An IPv6 client is its /64, as for the per-IP limits: rotating addresses inside it is one client.
      const address = addressBlock(peerAddress);
      const count = open.get(address) ?? 0;
      if (count >= maxPerAddress) {
        onRefused(address, shouldWarn(address));
        refuse(socket, encrypted, maxPerAddress, generateRequestId);
        return false;
      }
      open.set(address, count + 1);
      socket.once("close", () => {
        const left = (open.get(address) ?? 1) - 1;
        if (left > 0) open.set(address, left);
        else open.delete(address);
      });
      return true;
    },
    addresses: () => open.size,
    openFrom: (address) => open.get(address) ?? 0,
  };
}

/**
 * Answers a plain HTTP connection 429 `TOO_MANY_REQUESTS`, at once, without reading a request, and
 * half-closes it; what the client sends meanwhile is read and dropped until it closes its side, for
 * at most `lingerMs` or `lingerBytes`: closing a socket with unread bytes sends a reset, which can
 * overtake the answer. A TLS connection is cut instead.
 */
function refuse(socket: Socket, encrypted: boolean, limit: number, generateRequestId: () => string): void {
  // Node's own listeners never see this socket: its errors (a reset) are this function's to take.
  socket.on("error", () => socket.destroy());
  if (encrypted) {
    socket.destroy();
    return;
  }
  const error = new GatewayError(
    "TOO_MANY_REQUESTS",
    `This address holds ${limit} connections to the gateway, the most it may hold at once (SLUICE_MAX_CONNECTIONS_PER_IP): reuse one, or close one first`,
    { headers: { "retry-after": String(retryAfterSeconds) } },
  );
  const timer = setTimeout(() => socket.destroy(), lingerMs);
  timer.unref();
  socket.once("close", () => clearTimeout(timer));
  let read = 0;
  socket.on("data", (chunk: Buffer) => {
    read += chunk.length;
    if (read > lingerBytes) socket.destroy();
  });
  socket.once("end", () => socket.destroy());
  socket.end(rawErrorAnswer(error, generateRequestId()).answer);
}
