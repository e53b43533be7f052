import type { IncomingHttpHeaders } from "node:http";
import { keyMayBeEscaped, maskKeyInHeader } from "./reflected-key-mask.js";

/**
 * Which client headers reach the provider and which provider headers reach the client.
 * Requests: an allow-list; credentials, cookies, hop-by-hop headers (RFC 9110 section 7.6.1) and
 * Sluice's own headers never pass. Responses: everything but hop-by-hop headers, cookies and the
 * provider's statements about its own origin.
 *
 * The headers the official SDKs send, each decided (test/e2e/proxy-sdk-headers.test.ts lists them
 * per SDK): forwarded as below; the key headers (`authorization`, `x-api-key`, `x-goog-api-key`)
 * carry the app's Sluice credential and are replaced by the provider key, as `anthropic-version`
 * and `x-goog-api-client` are by Sluice's own (provider-adapter.ts); dropped are the account and
 * billing selectors `openai-organization`, `openai-project`, `x-goog-user-project`,
 * `anthropic-workspace-id` and `anthropic-user-profile-id` (they choose the account or profile a call
 * is billed to, whose limits and models apply: the operator's choice, made with the key, never an
 * app's), the trace context (`traceparent`, `tracestate`, `baggage`: the app's trace, not a hop the
 * provider reports on), Node's fetch's `pragma` (below), and what only calls this proxy does not
 * forward send (`x-goog-upload-*` of C's resumable uploads, `anthropic-worker-id` of a B GET, Vertex
 * AI's `x-vertex-ai-*`). `range` and `if-range`, which an app adds to a download, are forwarded
 * where Sluice does not meter the answer (below).
 */
const forwardedRequestHeaders = new Set([
  "content-type",
  // The body is forwarded as sent, so a compressed one keeps the header that says so.
  "content-encoding",
  "accept",
  "user-agent",
  "idempotency-key",
  "openai-beta",
  // Provider A's own trace id for a request, chosen by the client (shown in its logs and support).
  "x-client-request-id",
  "anthropic-beta",
  "anthropic-dangerous-direct-browser-access",
  // Provider C's deadline for the call, in seconds (`@google/genai` sends its `httpOptions.timeout`).
  "x-server-timeout",
  // Conditional requests (RFC 9110 section 13): a revalidation's answer (304) is passed back as the
  // provider sends it, and a precondition that fails (412) is the provider's to judge. Dropped, a
  // conditional write would become an unconditional one.
  "if-none-match",
  "if-modified-since",
  "if-match",
  "if-unmodified-since",
  // The client's directives to the caches on the way (RFC 9111 section 5.2.1): Node's fetch, which
  // the SDKs send with, sets `no-cache` on every conditional request (the Fetch standard's
  // HTTP-network-or-cache fetch), so that no cache answers it from a stored copy. Its companion
  // `pragma: no-cache` is HTTP/1.0's spelling of the same, deprecated (RFC 9111 section 5.4): dropped.
  "cache-control",
]);
/**
 * Byte ranges (RFC 9110 section 14): a download resumed or read in part (provider A's
 * `files/{id}/content`, `videos/{id}/content`) gets the provider's 206 or 416 as sent. Only with
 * a call whose answer Sluice does not meter: a part of an answer that reports usage (a poll's
 * background run, a compatible server that honoured a range on a POST) would lose or misplace it,
 * and a server may always ignore a range and answer whole (section 14.2), so dropping it is a
 * valid request still. `if-range` means nothing without `range` (section 13.1.5).
 */
const forwardedUnmeteredHeaders = new Set([...forwardedRequestHeaders, "range", "if-range"]);
const forwardedRequestPrefixes = ["x-stainless-"];

const droppedResponseHeaders = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "transfer-encoding",
  "te",
  "trailer",
  "upgrade",
  "proxy-authenticate",
  "set-cookie",
  // Statements about the provider's origin, which a client would take for Sluice's: HSTS (with
  // `includeSubDomains; preload`, as the providers send it) would pin Sluice's host and its
  // subdomains to HTTPS, and `alt-svc` advertise an HTTP/3 endpoint Sluice does not serve.
  "strict-transport-security",
  "alt-svc",
  // The operator's account behind the key: provider A's organization and project, provider B's
  // organization id. An app needs neither to use an answer, and with them anyone holding a partial
  // key learns which provider account (and which other apps on it) the gateway bills.
  "openai-organization",
  "openai-project",
  "anthropic-organization-id",
  // The name Sluice gives its own id beside a provider's `x-request-id` (`clientResponseHeaders`):
  // a provider's would reach the app as a second id, or the only one, of a row it is not.
  "x-sluice-request-id",
]);

/**
 * The client's headers the provider gets (with the key and the provider's own set by the adapter).
 * `metered`: Sluice reads the answer for usage, and the byte-range headers stay behind. One set is
 * picked per call, so a header still costs one lookup by its name.
 */
export function upstreamRequestHeaders(
  incoming: IncomingHttpHeaders,
  metered: boolean,
): Record<string, string> {
  const out: Record<string, string> = {};
  const hopByHop = connectionOptions(incoming.connection);
  const forwarded = metered ? forwardedRequestHeaders : forwardedUnmeteredHeaders;
  for (const name in incoming) {
    if ((forwarded.has(name) || hasForwardedPrefix(name)) && !hopByHop?.has(name)) {
      const value = incoming[name];
      if (typeof value === "string") out[name] = value;
      else if (Array.isArray(value)) out[name] = value.join(", ");
    }
  }
  // Usage is read from the response while it streams, so it must arrive uncompressed.
  out["accept-encoding"] = "identity";
  return out;
}

/** Whether the name starts with a forwarded prefix (a loop: no closure per header, as `some` made). */
function hasForwardedPrefix(name: string): boolean {
  for (const prefix of forwardedRequestPrefixes) if (name.startsWith(prefix)) return true;
  return false;
}

/**
 * The headers a `Connection` field names, which are hop-by-hop like it (RFC 9110 section 7.6.1);
 * undefined for the usual `keep-alive` or `close`, which name nothing that could be forwarded.
 */
export function connectionOptions(connection: string | undefined): Set<string> | undefined {
  if (connection === undefined || connection === "keep-alive" || connection === "close") return undefined;
  return new Set(connection.split(",").map((option) => option.trim().toLowerCase()));
}

/**
 * The query string for the provider: the client's, byte for byte, without the parameter the
 * provider reads as its API key (`keyParameter`, also when its name is percent-encoded), which
 * would otherwise override or sit beside the injected key.
 */
export function upstreamQuery(query: string, keyParameter: string | undefined): string {
  if (!keyParameter || query === "" || !mayName(query, keyParameter)) return query;
  return query
    .split("&")
    .filter((pair) => {
      const equals = pair.indexOf("=");
      const name = equals < 0 ? pair : pair.slice(0, equals);
      try {
        return decodeURIComponent(name.replaceAll("+", " ")) !== keyParameter;
      } catch {
        return true;
      }
    })
    .join("&");
}

/** Cheap pre-check: the parameter's name can only be there if its letters are (or a `%`). */
function mayName(query: string, name: string): boolean {
  return query.includes("%") || query.includes(name);
}

export interface ClientResponseHead {
  /** Flat `[name, value, …]` for a single `writeHead`; provider names lower-cased. */
  headers: string[];
  /** The provider's content-type ("" when none), to pick the usage meter. */
  contentType: string;
  /** The provider's content-encoding ("" when none), for a provider that ignored `identity`. */
  contentEncoding: string;
  /**
   * The provider's transfer codings besides a last `chunked` ("" when none): undici undoes only
   * `chunked`, so the body it hands on still carries these.
   */
  transferCoding: string;
}

/**
 * The client's response headers from the provider's raw header list (undici's alternating
 * name/value Buffers, read here once instead of through a parsed object): the provider's (as
 * above), then Sluice's own (`own`: x-request-id, RateLimit, CORS). A provider header of the same
 * name wins, except the provider's `x-request-id`, which stays where its SDK reads it while
 * Sluice's id moves to `x-sluice-request-id` (a provider's own of that name is dropped). The
 * provider's `access-control-*` headers are always dropped: the gateway's CORS policy (the ones
 * `own` carries, or none) decides who may call it, and Sluice's `vary` is added beside the
 * provider's. A value that quotes `providerKey`, the key Sluice injected, has it replaced by
 * `[redacted]` (a server that echoes the request would hand the client the key), and a header whose
 * name quotes it is dropped.
 */
export function clientResponseHeaders(
  raw: readonly (Buffer | string)[],
  own: Record<string, string> = {},
  providerKey = "",
): ClientResponseHead {
  let headers: string[] = [];
  let contentType = "";
  let contentEncoding = "";
  let connection = "";
  let transferEncoding = "";
  // Names are compared lower-cased, as they are read.
  const keyInName = providerKey.toLowerCase();
  const escapable = providerKey !== "" && keyMayBeEscaped(providerKey);
  for (let index = 0; index + 1 < raw.length; index += 2) {
    const name = headerName(raw[index] as Buffer | string);
    // Several Connection lines are one list (RFC 9110 section 5.3): each names headers to drop.
    if (name === "connection")
      connection = `${connection}${connection === "" ? "" : ","}${latin1(raw[index + 1] as Buffer | string)}`;
    else if (name === "transfer-encoding") {
      // Masked as any value is (before the codings are lower-cased): an unoffered coding is quoted
      // in the refusal's log line (proxy-exchange.ts).
      const coding = latin1(raw[index + 1] as Buffer | string);
      transferEncoding = `${transferEncoding}${transferEncoding === "" ? "" : ","}${providerKey === "" ? coding : maskKeyInHeader(coding, providerKey, escapable)}`;
    }
    if (droppedResponseHeaders.has(name) || name.startsWith("access-control-")) continue;
    // A server that names a header after a value it echoes: the name cannot be masked as a value is.
    if (keyInName !== "" && name.includes(keyInName)) continue;
    let value = latin1(raw[index + 1] as Buffer | string);
    if (providerKey !== "") value = maskKeyInHeader(value, providerKey, escapable);
    if (name === "content-type" && contentType === "") contentType = value;
    // (Several fields are one list, RFC 9110 section 5.3: `gzip` then `br` means both, in that order.)
    else if (name === "content-encoding") {
      // `identity` is no coding (RFC 9110 §8.4.1): an answer so marked is read, and masked, as plain.
      const coding = withoutIdentity(value);
      if (coding !== "") contentEncoding = contentEncoding === "" ? coding : `${contentEncoding}, ${coding}`;
    }
    headers.push(name, value);
  }
  // Usually just `keep-alive` or `close`: nothing more to drop.
  if (connection !== "" && connection !== "keep-alive" && connection !== "close") {
    const listed = connection
      .toLowerCase()
      .split(",")
      .map((name) => name.trim());
    headers = withoutHeaders(headers, listed);
  }
  for (const name in own) {
    const value = own[name] as string;
    if (!hasHeader(headers, name) || name === "vary") headers.push(name, value);
    else if (name === "x-request-id") headers.push("x-sluice-request-id", value);
  }
  return { headers, contentType, contentEncoding, transferCoding: unreadTransferCoding(transferEncoding) };
}

/**
 * The transfer codings of a `transfer-encoding` list that undici leaves on the body: all of them
 * unless the list is `chunked` alone (in any case, with any spaces), which is all a server may
 * send to a request without a `TE` (RFC 9110 10.1.4), and all that providers send.
 */
function unreadTransferCoding(value: string): string {
  if (value === "" || value === "chunked") return "";
  const codings = value
    .split(",")
    .map((coding) => coding.trim().toLowerCase())
    .filter((coding) => coding !== "");
  return codings.length === 1 && codings[0] === "chunked" ? "" : codings.join(", ");
}

/**
 * A provider header's name, lower-cased. A common one (every answer's `content-type`, `date`,
 * `connection`, the providers' rate-limit headers) is matched on its bytes, in any case, and given
 * as its constant: making a string of the bytes, lower-casing it and hashing it for the lookups
 * below cost ~800 instructions a header. Any other is decoded (a byte that is not ASCII never
 * matches, so a name is taken this way only when `toLowerCase` gives the same).
 */
function headerName(raw: Buffer | string): string {
  if (typeof raw === "string") return raw.toLowerCase();
  const length = raw.length;
  if (length > 0) {
    const known =
      commonNames[nameSlot(length, raw[0] as number, raw[length >> 1] as number, raw[length - 1] as number)];
    if (known !== undefined && known.codes.length === length) {
      const { codes } = known;
      let at = 0;
      while (at < length && codes[at] === asciiLower(raw[at] as number)) at++;
      if (at === length) return known.name;
    }
  }
  return raw.toString("latin1").toLowerCase();
}

function asciiLower(byte: number): number {
  return byte >= 0x41 && byte <= 0x5a ? byte | 0x20 : byte;
}

/** A common name's place: by its length and its first, middle and last bytes (lower-cased), which tell these apart. */
function nameSlot(length: number, first: number, middle: number, last: number): number {
  return (
    (((length * 31 + asciiLower(first)) * 31 + asciiLower(middle)) * 31 + asciiLower(last)) & nameSlotMask
  );
}

const nameSlotMask = 1023;
/** (A slot an earlier name took leaves a later one to be decoded: slower, never wrong. These take one each.) */
const commonNames: ({ name: string; codes: number[] } | undefined)[] = new Array(nameSlotMask + 1).fill(
  undefined,
);
for (const name of [
  "content-type",
  "content-length",
  "content-encoding",
  "transfer-encoding",
  "date",
  "connection",
  "keep-alive",
  "server",
  "vary",
  "cache-control",
  "x-request-id",
  "request-id",
  "openai-processing-ms",
  "openai-version",
  "openai-organization",
  "openai-project",
  "x-ratelimit-limit-requests",
  "x-ratelimit-limit-tokens",
  "x-ratelimit-remaining-requests",
  "x-ratelimit-remaining-tokens",
  "x-ratelimit-reset-requests",
  "x-ratelimit-reset-tokens",
  "anthropic-organization-id",
  "strict-transport-security",
  "alt-svc",
  "set-cookie",
  "cf-ray",
  "cf-cache-status",
  "x-content-type-options",
  "x-envoy-upstream-service-time",
  "server-timing",
]) {
  const codes = [...Buffer.from(name, "latin1")];
  const slot = nameSlot(
    codes.length,
    codes[0] as number,
    codes[codes.length >> 1] as number,
    codes[codes.length - 1] as number,
  );
  commonNames[slot] ??= { name, codes };
}

function latin1(value: Buffer | string): string {
  return typeof value === "string" ? value : value.toString("latin1");
}

/** A flat `[name, value, …]` list (lower-case names) without the `names` headers. */
export function withoutHeaders(flat: readonly string[], names: readonly string[]): string[] {
  const kept: string[] = [];
  for (let index = 0; index + 1 < flat.length; index += 2)
    if (!names.includes(flat[index] as string)) kept.push(flat[index] as string, flat[index + 1] as string);
  return kept;
}

/** Whether a flat `[name, value, …]` list (lower-case names) holds `name`. */
export function hasHeader(flat: readonly string[], name: string): boolean {
  for (let index = 0; index < flat.length; index += 2) if (flat[index] === name) return true;
  return false;
}

/** A content-encoding list without its `identity` members (any case), "" when nothing else is left. */
function withoutIdentity(value: string): string {
  if (!/identity/i.test(value)) return value;
  return value
    .split(",")
    .map((coding) => coding.trim())
    .filter((coding) => coding !== "" && coding.toLowerCase() !== "identity")
    .join(", ");
}
