import { Resolver } from "node:dns/promises";

export interface ResolverSettings {
  /** Nameservers (`127.0.0.1:5353`, `[::1]:53`); unset: those of /etc/resolv.conf. */
  servers?: readonly string[];
  /** The first try's time-out; each try after it waits up to twice as long as the one before (c-ares jitters it down to as long). */
  timeoutMs?: number;
  /** Tries of each query (A, AAAA) before it fails. */
  tries?: number;
}

/**
 * The first try's time-out and the tries: c-ares waits 2 s, then 2 to 4 more (it jitters its
 * retries), then 4 to 8 more, but Node checks its time-outs on a timer of at most 1 s (the
 * time-out when shorter), so each ends at the tick after it: asked again after 3 s, then 3 or 4 s
 * later, given up 10 to 15 s in all (measured on Node 20; `ETIMEOUT`, told as the fetch's
 * time-out); a fetch's deadline that comes first cancels it.
 */
const defaultTimeoutMs = 2000;
const defaultTries = 3;

/** The code of a lookup whose nameservers did not answer in time (c-ares gave up). */
export const lookupTimedOut = "ETIMEOUT";

/** Answers that say the host has no address of that family (no data, no such name). */
const noAddress = new Set(["ENODATA", "ENOTFOUND"]);

/** NXDOMAIN: the name does not exist, whatever the type asked (RFC 8020). */
const noSuchName = "ENOTFOUND";

/**
 * How long the other family's query is waited for once one has answered with addresses: RFC 8305's
 * Resolution Delay (§3, 50 ms recommended). A nameserver that drops AAAA queries (answers A ones)
 * otherwise held the fetch until the resolver gave up on AAAA (10 to 15 s at the defaults), then
 * failed it as a time-out, though its IPv4 address was known at once.
 */
export const resolutionDelayMs = 50;

/**
 * A host's IPv4 and IPv6 addresses (A and AAAA queries at once; the IPv4 ones first), asked of the
 * nameservers with c-ares (`dns.Resolver`), not the system's getaddrinfo (`dns.lookup`):
 * getaddrinfo runs on libuv's thread pool, which the whole process shares (fs work, other
 * lookups), and cannot be stopped, so a lookup under a domain whose nameserver stalls held a thread
 * until the system's resolver gave up, long after its fetch's deadline. c-ares runs on the event
 * loop and is cancelled here when `signal` aborts (the fetch's deadline, or its client leaving):
 * nothing is left asking once the fetch stopped. Each lookup has its own resolver, as `cancel()`
 * stops every query of a resolver.
 *
 * Once one family has answered with addresses, the other is waited for `resolutionDelayMs` more
 * at most, then given up (cancelled): the lookup answers with the addresses it has. Every address
 * returned was seen, and the caller connects to one of them, so an answer that comes later (or
 * never) cannot take the connection elsewhere. So is the AAAA query once the A query was answered
 * NXDOMAIN (no such name, of any type: RFC 8020): on a nameserver that drops AAAA queries, a name
 * that does not exist was waited for until the resolver gave up on AAAA and ended as a time-out,
 * where one with a private A answer was refused after the delay, and the message told which
 * internal names exist. Not the A query after an AAAA NXDOMAIN: a nameserver that wrongly answers
 * AAAA so for a name with A records is a known breakage (RFC 4074 §4.2), and through a caching
 * resolver its cached NXDOMAIN may come well before a fresh A answer; such a host was refused. A
 * name that does not exist on a nameserver that drops A queries (none known) still ends as a
 * time-out. A "no data" answer (the name exists, without that family) still waits for the other
 * family: an IPv6-only host's A query is often answered from a cache well before its AAAA one.
 *
 * c-ares reads /etc/resolv.conf (nameservers, `options timeout/attempts` are overridden here), not
 * /etc/hosts nor nsswitch.conf, and does not apply the search domains (it queries the name as
 * given). A PDF URL names a public https host; a name only /etc/hosts knows would be an internal
 * one. A family whose query fails other than by "no such address" (a time-out, SERVFAIL) before the
 * lookup ends fails the whole lookup.
 *
 * `answered` is called once, when the first of the two queries has settled (whatever its answer):
 * the caller times its refusals from then (`refusalFloorMs` in safe-pdf-fetch.ts).
 */
export async function resolveHost(
  hostname: string,
  signal: AbortSignal,
  settings: ResolverSettings = {},
  answered?: () => void,
): Promise<Array<{ address: string; family: number }>> {
  signal.throwIfAborted();
  const resolver = new Resolver({
    timeout: settings.timeoutMs ?? defaultTimeoutMs,
    tries: settings.tries ?? defaultTries,
  });
  if (settings.servers) resolver.setServers([...settings.servers]);
  const cancel = () => resolver.cancel();
  signal.addEventListener("abort", cancel, { once: true });
  try {
    const answers = await answersWithin([resolver.resolve4(hostname), resolver.resolve6(hostname)], answered);
    return [...addressesOf(answers[0], 4), ...addressesOf(answers[1], 6)];
  } finally {
    signal.removeEventListener("abort", cancel);
    // Nothing is left running, however the lookup ended: a query still waited for (the family
    // given up after the resolution delay) is cancelled; a no-op once both have settled.
    resolver.cancel();
  }
}

/**
 * The queries' answers once both have settled, or once `resolutionDelayMs` has passed since one
 * answered with addresses, or the A query NXDOMAIN (the other's answer then `undefined`, as a family
 * with no address).
 * `answered` is called when the first query settles.
 */
function answersWithin(
  queries: Array<Promise<string[]>>,
  answered?: () => void,
): Promise<Array<PromiseSettledResult<string[]> | undefined>> {
  const answers: Array<PromiseSettledResult<string[]> | undefined> = queries.map(() => undefined);
  return new Promise((resolve) => {
    let grace: NodeJS.Timeout | undefined;
    const done = () => {
      clearTimeout(grace);
      resolve(answers);
    };
    // Before the answer is kept: only the first query to settle finds none kept.
    const first = () => {
      if (!answers.some(Boolean)) answered?.();
    };
    for (const [index, query] of queries.entries()) {
      query.then(
        (value) => {
          first();
          answers[index] = { status: "fulfilled", value };
          if (answers.every(Boolean)) done();
          else if (value.length > 0) grace ??= setTimeout(done, resolutionDelayMs);
        },
        (reason: unknown) => {
          first();
          answers[index] = { status: "rejected", reason };
          if (answers.every(Boolean)) done();
          // Only the A query's: a wrong NXDOMAIN for AAAA beside real A records is a known breakage
          // (RFC 4074 §4.2), and through a caching resolver that answer may come long before the A
          // one; ended 50 ms after it, such a public host was refused whenever its A record had
          // left the cache.
          else if (index === 0 && (reason as { code?: unknown } | null)?.code === noSuchName)
            grace ??= setTimeout(done, resolutionDelayMs);
        },
      );
    }
  });
}

function addressesOf(answer: PromiseSettledResult<string[]> | undefined, family: 4 | 6) {
  if (answer === undefined) return [];
  if (answer.status === "fulfilled") return answer.value.map((address) => ({ address, family }));
  const code: unknown = (answer.reason as { code?: unknown } | null)?.code;
  if (typeof code === "string" && noAddress.has(code)) return [];
  throw answer.reason;
}

/** `localhost` and the names under it, loopback by RFC 6761 §6.3 whatever a nameserver says. */
export function isLocalhostName(hostname: string): boolean {
  const name = hostname.toLowerCase().replace(/\.$/, "");
  return name === "localhost" || name.endsWith(".localhost");
}
