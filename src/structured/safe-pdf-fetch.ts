import { isIP } from "node:net";
import { Agent, buildConnector, request } from "undici";
import { GatewayError } from "../errors.js";
import { deadlineSignal } from "../net/deadline-signal.js";
import { isFetchBlockedPort } from "../providers/fetch-blocked-ports.js";
import { isPdf } from "./pdf-input.js";
import { isPublicAddress } from "./public-address.js";
import {
  isLocalhostName,
  lookupTimedOut,
  type ResolverSettings,
  resolutionDelayMs,
  resolveHost,
} from "./resolve-host.js";

export interface SafePdfFetcherOptions {
  /**
   * The host's addresses (all of them: each is checked). `signal` aborts at the fetch's deadline
   * and when its caller leaves; the lookup should stop then (one that does not is given up all the
   * same, its answer unused). It calls `answered` when the first of its queries has answered
   * (`refusalFloorMs` counts from then; from the lookup's start when it is not called). Unset:
   * `resolveHost` with `dns`.
   */
  lookup?: (
    hostname: string,
    signal: AbortSignal,
    answered: () => void,
  ) => Promise<Array<{ address: string; family: number }>>;
  /** The resolver's settings for `resolveHost` (tests point it at a nameserver on 127.0.0.1). */
  dns?: ResolverSettings;
  isAllowedAddress?: (ip: string) => boolean;
  allowedProtocols?: readonly string[];
  maxBytes: number;
  timeoutMs: number;
  /**
   * Told why a host was refused for its addresses, which the client is not told (see `hostRefused`);
   * the gateway logs it. Unset: not told.
   */
  logRefusedHost?: (facts: RefusedHost) => void;
  /**
   * Fetches this fetcher runs at once (the gateway builds one: `SLUICE_MAX_PDF_FETCHES`); one more
   * is answered 503. Each may hold up to `maxBytes` until `timeoutMs`. Unset: no cap.
   */
  maxFetches?: number;
  /**
   * Of those, the fetches one project runs at once (`SLUICE_MAX_PDF_FETCHES_PER_PROJECT`); one more
   * of its own is answered 429, so that a project whose PDF hosts are slow cannot take every place
   * and have every other project's PDF URL answered 503 (docs/decisions/0060). Counted for a fetch
   * whose caller names its project. Unset: no cap but `maxFetches`.
   */
  maxFetchesPerProject?: number;
}

/**
 * The default of `SLUICE_MAX_PDF_FETCHES_PER_PROJECT`: half the places, rounded up (4 of the default
 * 8), so that one project leaves the other half to the rest.
 */
export function defaultMaxFetchesPerProject(maxFetches: number): number {
  return Math.ceil(maxFetches / 2);
}

/**
 * What a client is told of a host refused for its addresses, whichever the reason: a name that does
 * not resolve, one that resolves to a non-public address, `localhost`. Told apart, they let a client
 * learn which internal names the gateway's nameservers know (`db.corp.example` resolves to a private
 * address, `nothing.corp.example` does not resolve). `logRefusedHost` is told which it was. So that
 * the time does not tell them apart either, see `refusalFloorMs`.
 */
export const hostRefused = "the PDF URL's host has no public address";

/**
 * The earliest a host refused for what its lookup found (`hostRefused`: no address, a failed lookup,
 * an address not allowed) is answered, counted from the lookup's first answer (the first of its A
 * and AAAA queries to settle, whatever it said). The time told such refusals apart: a name whose
 * nameserver answers A with a private address and drops AAAA was refused once the AAAA query's
 * resolution delay (50 ms) had passed, a name that does not exist, or one whose two answers came at
 * once, at the first answer (0.3 to 1.7 ms measured), so a client could still learn which internal
 * names exist. Every such refusal now ends on this timer: the resolution delay, and 50 ms so that
 * a lookup ended by it is past it too. Counted from the first answer, not the lookup's start, so
 * that a slow nameserver (as slow for a name as for the next) does not push the delayed case past
 * the floor. A lookup that finds only allowed addresses is not delayed; a `localhost` name or an
 * address given in the URL is refused at once (no lookup: nothing to learn). The fetch's deadline
 * and its client leaving end the wait at once.
 */
export const refusalFloorMs = resolutionDelayMs + 50;

/** Why a host was refused for its addresses, for the operator's log (never the URL's path or query). */
export interface RefusedHost {
  /** The URL's host name (a redirect's, on a redirect). */
  host: string;
  /** No address (the lookup's answers were empty, or it failed), one not public, or a `localhost` name. */
  reason: "noAddress" | "nonPublicAddress" | "localhost";
  /** The first address refused (nonPublicAddress). */
  address?: string;
  /** The resolver's error code (`ESERVFAIL`, `EREFUSED`), when the lookup failed (noAddress). */
  code?: string;
  /** The request's id, when the caller named it. */
  requestId?: string;
}

/**
 * Fetches a PDF by URL without letting a client reach internal addresses (SSRF): every address
 * the host resolves to must be allowed (public by default) before any connection; the connection
 * is pinned to the checked address so DNS cannot change between check and connect; redirects are
 * followed by hand (at most 3), each hop checked again (a URL with credentials, or on a port
 * fetch refuses, is refused on any hop); size and time are capped, the time cap covering every
 * hop's DNS lookup and connection (TLS handshake included) too; the content must start with `%PDF-`. Every refusal is 400 BAD_REQUEST (413 over the size cap). The caller's
 * `signal` (the client left) stops the fetch at once, wherever it is, as the deadline does. At most
 * `maxFetches` run at once: one more is 503 SERVICE_UNAVAILABLE, the gateway's capacity; and at most
 * `maxFetchesPerProject` of one project: one more of its own is 429 TOO_MANY_REQUESTS, checked
 * first. Host lookups (`resolveHost`: c-ares, on the event loop) run side by side, each stopped with
 * its fetch.
 */
export function createSafePdfFetcher(options: SafePdfFetcherOptions) {
  const resolve =
    options.lookup ??
    ((hostname: string, signal: AbortSignal, answered: () => void) =>
      resolveHost(hostname, signal, options.dns, answered));
  const allowed = options.isAllowedAddress ?? isPublicAddress;
  const protocols = options.allowedProtocols ?? ["https:"];
  const maxRedirects = 3;
  const maxFetches = options.maxFetches ?? Number.POSITIVE_INFINITY;
  const maxFetchesPerProject = options.maxFetchesPerProject ?? Number.POSITIVE_INFINITY;
  let fetchesRunning = 0;
  /** The fetches running of each project that has any (an entry goes with its last fetch). */
  const runningOf = new Map<string, number>();

  /**
   * `leave` gives the fetch's place among `maxFetches` back: a refusal does so before it waits for
   * `refusalFloorMs`, which holds no PDF and no connection.
   */
  async function checkedAddress(
    url: URL,
    deadline: AbortSignal,
    leave: () => void,
    requestId?: string,
  ): Promise<string> {
    if (!protocols.includes(url.protocol))
      throw refuse(`the PDF URL must use ${protocols.map((scheme) => scheme.slice(0, -1)).join(" or ")}`);
    // Checked on every hop: a redirect may not add what the first URL may not carry.
    if (url.username || url.password) throw refuse("the PDF URL must not contain credentials");
    // The ports a browser's fetch refuses (mail, IRC, LDAP…): a PDF is not served there, and a
    // request sent there would speak to another protocol's server on the client's behalf.
    if (url.port && isFetchBlockedPort(Number(url.port)))
      throw refuse(`the PDF URL's port ${url.port} is one fetch refuses to call`);
    const host = url.hostname.startsWith("[") ? url.hostname.slice(1, -1) : url.hostname;
    const refuseHost = (facts: Omit<RefusedHost, "host" | "requestId">) => {
      options.logRefusedHost?.({ host, ...facts, ...(requestId === undefined ? {} : { requestId }) });
      return refuse(hostRefused);
    };
    // Loopback by RFC 6761, which the resolver's nameservers need not know (it reads no /etc/hosts).
    if (isLocalhostName(host)) throw refuseHost({ reason: "localhost" });
    if (isIP(host)) {
      if (!allowed(host)) throw refuseHost({ reason: "nonPublicAddress", address: host });
      return host;
    }
    const lookupStarted = performance.now();
    let firstAnswer: number | undefined;
    const answered = () => {
      firstAnswer ??= performance.now();
    };
    // Answered at `refusalFloorMs` after the first answer at the earliest, whatever the reason.
    const refuseLookedUp = async (facts: Omit<RefusedHost, "host" | "requestId">) => {
      const refusal = refuseHost(facts);
      leave();
      await until((firstAnswer ?? lookupStarted) + refusalFloorMs, deadline);
      return refusal;
    };
    const addresses = await lookUp(host, deadline, answered, (code) =>
      refuseLookedUp({ reason: "noAddress", code }),
    );
    if (addresses.length === 0) throw await refuseLookedUp({ reason: "noAddress" });
    const notAllowed = addresses.find(({ address }) => !allowed(address));
    if (notAllowed) throw await refuseLookedUp({ reason: "nonPublicAddress", address: notAllowed.address });
    return addresses[0]!.address;
  }

  /**
   * The lookup runs under the fetch's deadline: one that takes longer fails as the time-out does,
   * and one still running when the caller's signal aborts is given up as well. The lookup hears of
   * both through the same signal, and stops (`resolveHost` cancels its queries). A lookup that
   * failed otherwise is refused by `noAddress`, with the resolver's error code.
   */
  async function lookUp(
    host: string,
    deadline: AbortSignal,
    answered: () => void,
    noAddress: (code?: string) => Promise<GatewayError>,
  ) {
    if (deadline.aborted) throw stopped(deadline);
    let onAbort = () => {};
    const timedOut = new Promise<never>((_resolve, reject) => {
      onAbort = () => reject(stopped(deadline));
      deadline.addEventListener("abort", onAbort, { once: true });
    });
    try {
      return await Promise.race([(async () => resolve(host, deadline, answered))(), timedOut]);
    } catch (error) {
      if (error instanceof GatewayError) throw error;
      if (deadline.aborted) throw stopped(deadline);
      // The resolver gave up before the deadline: told as the deadline would have, not as a host
      // that has no address (which of the two comes first is chance: c-ares jitters its retries).
      const code: unknown = (error as { code?: unknown } | null)?.code;
      if (code === lookupTimedOut) throw refuse("fetching the PDF took too long");
      throw await noAddress(typeof code === "string" ? code : undefined);
    } finally {
      deadline.removeEventListener("abort", onAbort);
    }
  }

  /**
   * `requestId` names the request in what `logRefusedHost` is told; `hold` counts the PDF's bytes as
   * they arrive (the call's share of the body budget), and stops the fetch when they do not fit;
   * `projectId` names the project whose share of the places (`maxFetchesPerProject`) the fetch takes.
   */
  return async function fetchPdf(
    start: URL,
    signal?: AbortSignal,
    requestId?: string,
    hold?: FetchedBytesHold,
    projectId?: string,
  ): Promise<Uint8Array> {
    // Counted until the fetch has settled (its connection is destroyed then, and what it read is
    // either its caller's or garbage), or until a refusal's wait for `refusalFloorMs` begins, which
    // holds neither: held through it, a flood of refused URLs kept the places taken.
    const projectRunning = projectId === undefined ? 0 : (runningOf.get(projectId) ?? 0);
    // Checked first: a project over its own share is told so (429), not that the instance is full.
    if (projectRunning >= maxFetchesPerProject) throw projectBusy(maxFetchesPerProject);
    if (fetchesRunning >= maxFetches)
      throw busy("Too many PDF fetches are running on this instance (SLUICE_MAX_PDF_FETCHES)");
    fetchesRunning++;
    if (projectId !== undefined) runningOf.set(projectId, projectRunning + 1);
    let left = false;
    const leave = () => {
      if (left) return;
      left = true;
      fetchesRunning--;
      if (projectId === undefined) return;
      const running = (runningOf.get(projectId) ?? 1) - 1;
      if (running > 0) runningOf.set(projectId, running);
      else runningOf.delete(projectId);
    };
    try {
      return await fetchWithDeadline(start, leave, signal, requestId, hold);
    } finally {
      leave();
    }
  };

  async function fetchWithDeadline(
    start: URL,
    leave: () => void,
    signal?: AbortSignal,
    requestId?: string,
    hold?: FetchedBytesHold,
  ): Promise<Uint8Array> {
    // Not AbortSignal.any with AbortSignal.timeout, whose timer a garbage collection can take
    // (deadline-signal.ts): the fetch then ran as long as the server kept sending.
    const { signal: deadline, clear } = deadlineSignal(options.timeoutMs, signal);
    try {
      return await fetchWithin(start, deadline, leave, requestId, hold);
    } finally {
      clear();
    }
  }

  async function fetchWithin(
    start: URL,
    deadline: AbortSignal,
    leave: () => void,
    requestId?: string,
    hold?: FetchedBytesHold,
  ): Promise<Uint8Array> {
    let url = start;
    for (let hop = 0; hop <= maxRedirects; hop++) {
      if (deadline.aborted) throw stopped(deadline);
      const address = await checkedAddress(url, deadline, leave, requestId);
      const agent = pinnedAgent(address, options.timeoutMs, deadline);
      try {
        const response = await request(url, {
          dispatcher: agent,
          method: "GET",
          signal: deadline,
          // undici's request inflates nothing, and the size cap counts the bytes as they come: a
          // body compressed by a server that may (no Accept-Encoding: any, RFC 9110 §12.5.3) would be
          // refused as no PDF.
          headers: { accept: "application/pdf", "accept-encoding": "identity" },
        });
        if (response.statusCode >= 300 && response.statusCode < 400 && response.headers.location) {
          await response.body.dump();
          url = new URL(String(response.headers.location), url);
          continue;
        }
        if (response.statusCode < 200 || response.statusCode >= 300) {
          await response.body.dump();
          throw refuse(`could not fetch the PDF: the server answered ${response.statusCode}`);
        }
        // Refused on its Content-Length before any of the body is read, as a request body is.
        const announced = Number(response.headers["content-length"]);
        if (announced > options.maxBytes) throw tooLarge(options.maxBytes);
        if (announced > 0) hold?.announced(announced);
        return await readCapped(response.body, options.maxBytes, hold);
      } catch (error) {
        if (error instanceof GatewayError) throw error;
        throw deadline.aborted ? stopped(deadline) : refuse("could not fetch the PDF");
      } finally {
        // Destroyed, not closed: closing after an aborted request had undici connect to the host
        // again, for nothing.
        void agent.destroy();
      }
    }
    throw refuse(`the PDF URL redirected more than ${maxRedirects} times`);
  }
}

/**
 * An agent whose every connection goes to `address`, whatever the host name resolves to now, and
 * ends when `deadline` aborts, TLS handshake included: undici hears of a request's abort only once
 * its connection is made, and its own connect timeout starts after the DNS lookup, so a host that
 * took the TCP connection and never answered the handshake held the fetch past the deadline and
 * past the client's leaving. No connection starts once the deadline has aborted: a socket given a
 * signal that has already aborted is destroyed, then connected all the same, and never closed.
 */
function pinnedAgent(address: string, timeoutMs: number, deadline: AbortSignal): Agent {
  const family = isIP(address);
  const connect = buildConnector({
    timeout: timeoutMs,
    signal: deadline,
    // net.connect asks for all addresses when it races address families (autoSelectFamily).
    lookup: (_hostname, lookupOptions, callback) => {
      if ((lookupOptions as { all?: boolean }).all) callback(null, [{ address, family }] as never, family);
      else callback(null, address, family);
    },
  });
  return new Agent({
    // The connector calls net.connect (or tls.connect) at once: no abort can come in between.
    connect: (connectOptions, callback) => {
      if (deadline.aborted) callback(new Error("The PDF fetch stopped"), null);
      else connect(withoutTrailingDot(connectOptions), callback);
    },
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
  });
}

/**
 * The connection's TLS server name without the host's trailing dot: undici sends the URL's host as
 * it is (its `servername`, or else its `hostname`), and a fully qualified one (`example.com.`) kept
 * the dot, which RFC 6066 §3 leaves out of the name (a server that holds to that refused the
 * handshake or chose another certificate). Browsers and curl leave it out too, and keep it in Host,
 * as undici does. The certificate is checked against the name sent. An IP address never ends with a
 * dot (the URL parser drops it) and is sent no name, as before.
 */
function withoutTrailingDot(connectOptions: buildConnector.Options): buildConnector.Options {
  const name = connectOptions.servername || connectOptions.hostname;
  return name?.endsWith(".") ? { ...connectOptions, servername: name.replace(/\.+$/, "") } : connectOptions;
}

/**
 * Counts a fetched PDF's bytes where its call holds them (the body budget, decision 0025). Either
 * throws to stop the fetch: the rest of the PDF is not read, and its connection is closed.
 */
export interface FetchedBytesHold {
  /** Whether a PDF of `bytes` (its Content-Length) would fit now; nothing is held for it. */
  announced(bytes: number): void;
  /** The PDF's bytes received so far, `total` of them: what is held grows to match. */
  received(total: number): void;
}

/** The body read up to `maxBytes` (413 past it), each chunk counted in `hold` as it arrives. */
async function readCapped(
  body: AsyncIterable<Buffer>,
  maxBytes: number,
  hold?: FetchedBytesHold,
): Promise<Uint8Array> {
  const chunks: Buffer[] = [];
  let size = 0;
  // Told by its first bytes: a page that is no PDF is refused as they come, not read to the cap.
  let headChecked = false;
  for await (const chunk of body) {
    chunks.push(chunk);
    size += chunk.length;
    if (!headChecked && size >= pdfMagicLength) {
      headChecked = true;
      if (!isPdf(Buffer.concat(chunks, pdfMagicLength))) throw notPdf();
    }
    if (size > maxBytes) throw tooLarge(maxBytes);
    hold?.received(size);
  }
  const bytes = Buffer.concat(chunks, size);
  if (!isPdf(bytes)) throw notPdf();
  return bytes;
}

/** The length of the `%PDF-` a PDF starts with. */
const pdfMagicLength = 5;

function notPdf(): GatewayError {
  return refuse("the URL did not return a PDF (it does not start with %PDF-)");
}

function tooLarge(maxBytes: number): GatewayError {
  return new GatewayError("PAYLOAD_TOO_LARGE", `The PDF exceeds ${maxBytes} bytes`, {
    details: { maxBytes },
  });
}

/**
 * The gateway's own capacity is taken (not the client's doing, so not a 429): 503 with a
 * Retry-After. The message names the setting, not its value, which would tell a flood its size.
 */
function busy(message: string): GatewayError {
  return new GatewayError("SERVICE_UNAVAILABLE", `${message}; retry shortly`, {
    headers: { "retry-after": "5" },
    details: { retryable: true },
  });
}

/**
 * A project's own share of the places is taken (429, its doing, not the instance's): a place comes
 * back when one of its fetches ends, so `Retry-After: 1` and no RateLimit fields, which describe a
 * quota over a window (as the calls in flight under a spend cap, docs/decisions/0056).
 */
function projectBusy(limit: number): GatewayError {
  return new GatewayError(
    "TOO_MANY_REQUESTS",
    `This project has ${limit} PDF fetches running on this instance, the most one project may run at once (SLUICE_MAX_PDF_FETCHES_PER_PROJECT); retry when one ends`,
    { headers: { "retry-after": "1" } },
  );
}

function refuse(message: string): GatewayError {
  return new GatewayError("BAD_REQUEST", message);
}

/**
 * Settles once `performance.now()` has reached `at` (a timer may fire early by the event loop's
 * cached clock: it is set again for what is left), or rejects as the fetch stopped as soon as
 * `deadline` aborts. Its timer and its listener are gone either way.
 */
function until(at: number, deadline: AbortSignal): Promise<void> {
  if (deadline.aborted) return Promise.reject(stopped(deadline));
  return new Promise((resolve, reject) => {
    let timer: NodeJS.Timeout | undefined;
    const stop = () => {
      clearTimeout(timer);
      reject(stopped(deadline));
    };
    const wait = () => {
      const left = at - performance.now();
      if (left > 0) {
        timer = setTimeout(wait, Math.ceil(left));
        return;
      }
      deadline.removeEventListener("abort", stop);
      resolve();
    };
    deadline.addEventListener("abort", stop, { once: true });
    wait();
  });
}

/** Why an aborted fetch stopped: its own deadline passed, or the caller gave it up. */
function stopped(deadline: AbortSignal): GatewayError {
  const reason: unknown = deadline.reason;
  return reason instanceof Error && reason.name === "TimeoutError"
    ? refuse("fetching the PDF took too long")
    : refuse("fetching the PDF was cancelled");
}

export type FetchPdf = ReturnType<typeof createSafePdfFetcher>;
