import { createSocket } from "node:dgram";
import { isIPv4 } from "node:net";
import { ipv6Groups } from "../../src/net/ip-address.js";

/** A query the server received: its name (lower case, no trailing dot) and type ("A", "AAAA"…). */
export interface DnsQuery {
  name: string;
  type: string;
  at: number;
}

export interface LocalDns {
  /** `127.0.0.1:PORT`, for `Resolver.setServers`. */
  server: string;
  queries: DnsQuery[];
  close(): Promise<void>;
}

const types: Record<number, string> = { 1: "A", 28: "AAAA" };

/**
 * A DNS server over UDP on 127.0.0.1, answering by hand: `records` maps a name to the addresses it
 * resolves to (A for IPv4, AAAA for IPv6; a type with none is answered with no data), a name in
 * `stalled` is never answered, nor the queries of a name in `stalledTypes` of the types it lists
 * (`{"v4.test": ["AAAA"]}`: a nameserver that drops AAAA queries), a name in `failing` is answered
 * SERVFAIL, any other name is NXDOMAIN. A name in `nxTypes` is answered NXDOMAIN for the types it
 * lists though it has records (RFC 4074 §4.2: a broken nameserver that answers AAAA so for a name
 * with A records), and a name's types in `delayedTypes` are answered after the milliseconds given
 * (`{"slow.test": {"A": 150}}`: a caching resolver that has the other answer cached, not this one).
 * It records every query it receives.
 */
export async function startLocalDns(options: {
  records?: Record<string, string[]>;
  stalled?: string[];
  stalledTypes?: Record<string, string[]>;
  failing?: string[];
  nxTypes?: Record<string, string[]>;
  delayedTypes?: Record<string, Record<string, number>>;
}): Promise<LocalDns> {
  const records = options.records ?? {};
  const stalled = new Set(options.stalled ?? []);
  const stalledTypes = options.stalledTypes ?? {};
  const failing = new Set(options.failing ?? []);
  const queries: DnsQuery[] = [];
  const socket = createSocket("udp4");
  socket.on("message", (message, remote) => {
    const question = readQuestion(message);
    if (!question) return;
    const type = types[question.type] ?? String(question.type);
    queries.push({ name: question.name, type, at: Date.now() });
    if (stalled.has(question.name) || stalledTypes[question.name]?.includes(type)) return;
    const known = Object.hasOwn(records, question.name) && !options.nxTypes?.[question.name]?.includes(type);
    const addresses = (records[question.name] ?? []).filter((address) =>
      type === "A" ? isIPv4(address) : type === "AAAA" ? !isIPv4(address) : false,
    );
    const header = Buffer.alloc(12);
    message.copy(header, 0, 0, 2);
    // QR, the query's RD, RA; SERVFAIL for a failing name, NXDOMAIN for a name not listed.
    const rcode = failing.has(question.name) ? 2 : known ? 0 : 3;
    header.writeUInt16BE(0x8180 | (message.readUInt16BE(2) & 0x0100) | rcode, 2);
    header.writeUInt16BE(1, 4);
    header.writeUInt16BE(addresses.length, 6);
    const answers = addresses.map((address) => {
      const data = type === "A" ? Buffer.from(address.split(".").map(Number)) : ipv6Bytes(address);
      const answer = Buffer.alloc(12);
      answer.writeUInt16BE(0xc00c, 0); // the name: a pointer to the question's
      answer.writeUInt16BE(question.type, 2);
      answer.writeUInt16BE(1, 4); // IN
      answer.writeUInt32BE(60, 6);
      answer.writeUInt16BE(data.length, 10);
      return Buffer.concat([answer, data]);
    });
    const send = () =>
      socket.send(
        Buffer.concat([header, message.subarray(12, question.end), ...answers]),
        remote.port,
        remote.address,
      );
    const delayMs = options.delayedTypes?.[question.name]?.[type];
    if (delayMs === undefined) send();
    else setTimeout(send, delayMs);
  });
  await new Promise<void>((resolve) => socket.bind(0, "127.0.0.1", resolve));
  return {
    server: `127.0.0.1:${socket.address().port}`,
    queries,
    close: () => new Promise((resolve) => socket.close(() => resolve())),
  };
}

/** The first question's name, type and where it ends, or undefined for what is not a query. */
function readQuestion(message: Buffer): { name: string; type: number; end: number } | undefined {
  if (message.length < 12 || message.readUInt16BE(4) < 1) return undefined;
  const labels: string[] = [];
  let offset = 12;
  while (offset < message.length) {
    const length = message[offset]!;
    offset++;
    if (length === 0) break;
    labels.push(message.toString("latin1", offset, offset + length));
    offset += length;
  }
  if (offset + 4 > message.length) return undefined;
  return { name: labels.join(".").toLowerCase(), type: message.readUInt16BE(offset), end: offset + 4 };
}

function ipv6Bytes(address: string): Buffer {
  const groups = ipv6Groups(address);
  if (!groups) throw new Error(`not an IPv6 address: ${address}`);
  const bytes = Buffer.alloc(16);
  for (const [index, group] of groups.entries()) bytes.writeUInt16BE(group, index * 2);
  return bytes;
}
