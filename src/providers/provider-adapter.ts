import { type ImageCall, imagenPrediction, openAiImageGeneration } from "./image-calls.js";
import { jsonStart, lastMembers, type Span } from "./json-bytes.js";
import type { ProviderId } from "./provider-id.js";

/**
 * What differs between the three providers on the proxy, as data: where requests go, how an
 * official SDK's path maps onto the upstream base URL, where the key goes, and which extra
 * headers the provider expects.
 */
export interface ProviderAdapter {
  id: ProviderId;
  /** Methods the proxy accepts (SPEC: A any, B and C POST). */
  methods: readonly string[];
  /** B and C require a JSON body. */
  requiresJson: boolean;
  /** The header the provider's own SDK sends its key in, also accepted for `<partial>.<token>`. */
  sdkKeyHeader?: "x-api-key" | "x-goog-api-key";
  /** Why a path this provider has is not proxied (404, before authentication); undefined: it is. */
  notProxied?(path: string): string | undefined;
  /** A query parameter the provider reads as its API key (C: `key`): never forwarded from clients. */
  keyQueryParameter?: string;
  /** Maps the client's path (after /v1/provider-x/{projectId}/) to an upstream origin and path. */
  target(path: string): { origin: string; path: string };
  /** Adds the rebuilt key and the provider's required headers to the upstream headers. */
  inject(headers: Record<string, string>, providerKey: string): void;
  /**
   * The model named by the request, for pricing when the response does not say. `contentType` is
   * the request's: a multipart/form-data body is read by the boundary it names.
   */
  requestModel(path: string, body: Buffer, contentType?: string): string | null;
  /**
   * Whether the path asks for a stream that comes as one JSON document rather than SSE (C:
   * `streamGenerateContent` without `?alt=sse` streams a JSON array, chunk by chunk).
   */
  streamsJson?(path: string): boolean;
  /**
   * Provider C: whether a POST to the path creates an interaction (the Interactions API,
   * `v1beta/interactions`), whose answer reports its usage as `usage` with `total_*` counts.
   */
  interactionsCall?(path: string): boolean;
  /**
   * Provider A: whether the call is one of the Responses API's that can report a background run, or
   * a batch's poll (`GET batches/{id}`), which reports a finished batch's tokens the same way.
   */
  responsesCall?(method: string, path: string): ResponsesCall | null;
  /**
   * Whether a POST to the path only changes or cancels a stored object and answers with it, usage
   * included: those tokens were counted when the object was made, so this call counts none.
   */
  answersStored?(path: string): boolean;
  /** Whether the call generates images, priced per image from its answer (A and C). */
  imageCall?(method: string, path: string): ImageCall | null;
  /**
   * Whether the provider bills nothing for the call itself (`path` as the client sent it, its
   * version segment included): reading, listing and deleting objects, counting tokens, moderation,
   * uploads, creating or cancelling a batch (whose tokens are billed when it runs). Such a call that
   * reports no tokens costs 0, not an unknown cost. A call that can be billed later for what it
   * stores or starts (a cache, a vector store, a fine-tuning job) is not listed: its cost is unknown.
   */
  freeCall(method: string, path: string): boolean;
}

/**
 * Provider A's POSTs billed nothing themselves: a moderation, an input token count, a file or upload
 * (and its parts), a batch created or cancelled (its run is billed, and recorded, when it is polled),
 * a background response cancelled (its run's tokens have a row of their own), a stored chat
 * completion's metadata updated, a conversation or its items, a Realtime client secret or session.
 */
const freePostA =
  /^(?:moderations|responses\/input_tokens|files|uploads(?:\/[^/]+\/(?:parts|complete|cancel))?|batches(?:\/[^/]+\/cancel)?|responses\/[^/]+\/cancel|chat\/completions\/[^/]+|conversations(?:\/[^/]+(?:\/items)?)?|realtime\/(?:client_secrets|sessions|transcription_sessions))$/;
/** Provider A's methods that only read, list or delete what is stored. */
const readingMethods = new Set(["GET", "HEAD", "OPTIONS", "DELETE"]);
/** Provider B's free POSTs (after the version): counting a message's tokens, cancelling a batch. */
const freePostB = /^messages\/(?:count_tokens|batches\/[^/]+\/cancel)$/;
/**
 * Provider B's Managed Agents sessions (after the version): created, updated or archived, a session
 * or thread answers with its cumulative usage so far, which its agent used where Sluice cannot see.
 */
const managedAgentSession = /^sessions(?:\/|$)/;
/**
 * Provider C's free POSTs (after the version): counting tokens, cancelling a batch (the colon may be
 * percent-encoded) or a background interaction, minting an ephemeral token for the Live API (whose
 * session, billed, goes to the provider directly, as provider A's Realtime client secrets).
 */
const freePostC =
  /^(?:(?:models|tunedModels)\/[^/]+(?::|%3a)countTokens|batches\/[^/]+(?::|%3a)cancel|interactions\/[^/]+\/cancel|auth_tokens)$/i;

/**
 * A provider A Responses API call: `post` (creating a response, or cancelling one) is metered as
 * any POST; `poll` (`GET responses/{id}`, also as a resumed stream) reports only the tokens of a
 * finished background run. Both read the response object's id, status, background flag and
 * creation time, to record a background run's tokens once (proxy/background-run.ts).
 */
export type ResponsesCall = "post" | "poll";

/** The methods each proxy accepts (SPEC: A any, B and C POST); a project's allow-list names no other. */
export const proxyMethods: Record<ProviderId, readonly string[]> = {
  "provider-a": ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"],
  "provider-b": ["POST"],
  "provider-c": ["POST"],
};

/**
 * The version segment each provider's official SDK puts before its paths, which the upstream base
 * URL already holds (DESIGN: B `v1/messages` -> `messages`; C `v1beta/models/...` -> `models/...`,
 * and C `v1/...` and `v1alpha/...` go to the provider's v1 and v1alpha APIs). Provider A has none:
 * its SDK's base URL ends in `/v1`, as Sluice's upstream base does.
 */
const versionSegments: Record<ProviderId, readonly string[]> = {
  "provider-a": [],
  "provider-b": ["v1/"],
  "provider-c": ["v1beta/", "v1alpha/", "v1/"],
};

/** The version segment an SDK put before `path` (`v1beta/`), or "" when there is none. */
function versionSegmentOf(provider: ProviderId, path: string): string {
  for (const segment of versionSegments[provider]) if (path.startsWith(segment)) return segment;
  return "";
}

/**
 * The path within the provider's API, as the upstream base URL continues it: without the version
 * segment an SDK adds (B `v1/messages` is `messages`, C `v1beta/models/x:generateContent` is
 * `models/x:generateContent`). What a project's proxy allow-list matches.
 */
export function apiPath(provider: ProviderId, path: string): string {
  return path.slice(versionSegmentOf(provider, path).length);
}

export interface ProviderAdapterOptions {
  providerABaseUrl: string;
  providerBBaseUrl: string;
  providerCBaseUrl: string;
  providerBVersion: string;
  /** The client identifier sent to provider C, e.g. `sluice/0.1.0`. */
  clientIdentifier: string;
}

function split(baseUrl: string): { origin: string; basePath: string } {
  const url = new URL(baseUrl);
  return { origin: url.origin, basePath: url.pathname.replace(/\/+$/, "") };
}

/** `responses/{id}`: one response (not its `input_items`). */
const oneResponse = /^responses\/[^/]+$/;
/** `batches/{id}`: one batch (not its cancel). */
const oneBatch = /^batches\/[^/]+$/;
const cancelResponse = /^responses\/[^/]+\/cancel$/;
/** Provider A's POSTs that answer with a stored object: a chat completion's metadata update, a batch's cancel. */
const storedObjectPost = /^(?:chat\/completions\/[^/]+|batches\/[^/]+\/cancel)$/;

/** Other POSTs under `responses` (`input_tokens`, `compact`) are metered as any POST. */
function responsesCall(method: string, path: string): ResponsesCall | null {
  if (method === "POST") return path === "responses" || cancelResponse.test(path) ? "post" : null;
  return method === "GET" && oneResponse.test(path) ? "poll" : null;
}

/** Provider C's Interactions API (after the version, apiPath): creating an interaction, and cancelling a background one. */
const createInteraction = /^interactions$/;
const cancelInteraction = /^interactions\/[^/]+\/cancel$/;

/**
 * The model an interaction's request names (its top-level `model`), else the agent it runs
 * (`agent`, a Deep Research agent, which the catalogue does not price), as the provider reads the
 * body: the last member of that name, escapes decoded. The SDK writes the members in the order the
 * app gives them, so `model` may follow a long `input` (inline images): the top-level members are
 * walked, not searched for in the first bytes. Null when there is neither, or the body is no JSON
 * object.
 */
function interactionModel(body: Buffer): string | null {
  return topLevelName(body, "model", "agent") ?? null;
}

/**
 * The name a JSON object body gives in its last top-level `first` member, else its last `second`
 * one, as the provider reads the body (escapes decoded); null when neither holds a name of 1 to 200
 * characters; undefined when the body is no whole JSON object.
 */
function topLevelName(body: Buffer, first: string, second?: string): string | null | undefined {
  const open = jsonStart(body);
  if (body[open] !== 0x7b /* { */) return undefined;
  try {
    const [named, other] = lastMembers(body, open, first, second);
    return nameAt(body, named ?? other);
  } catch {
    return undefined;
  }
}

/** The string value at `span`, decoded, when it is 1 to 200 characters; else null. */
function nameAt(body: Buffer, span: Span | null): string | null {
  if (span === null || body[span.start] !== 0x22 /* " */) return null;
  const name: unknown = JSON.parse(body.toString("utf8", span.start, span.end));
  return typeof name === "string" && name.length > 0 && name.length <= 200 ? name : null;
}

/** Provider C's Imagen method, after the model's colon (also percent-encoded). */
const predictMethod = /(?::|%3a)predict$/i;

/** Provider C's streaming method, after the model's colon (also percent-encoded). */
const jsonStreamMethod = /(?::|%3a)streamGenerateContent$/i;

const modelField = /"model"\s*:\s*"([^"\\]{1,200})"/;

/**
 * The model a JSON request names, as the provider reads the body: its top-level `model` member (the
 * last one, escapes decoded), found by walking the top-level members. It prices the calls whose
 * answer names no model (`responses/compact`), whose model the SDK writes where the app puts it,
 * after a conversation of any length; a first `"model"` in the first 64 KiB missed one after them,
 * and took a `model` nested in `metadata`, or the first of a repeated one, for it. A body that is no
 * whole JSON object (the provider refuses it, so nothing is priced) names the first model it spells,
 * for the failed call's row. A walk reads about 1 GB/s of messages, far more of base64.
 */
function jsonModel(body: Buffer): string | null {
  const named = topLevelName(body, "model");
  if (named !== undefined) return named;
  const spelt = modelField.exec(body.toString("latin1", 0, Math.min(body.length, 64 * 1024)))?.[1];
  // Matched in latin1 (one character a byte, as the pattern's length counts them), read as the
  // UTF-8 it is written in.
  return spelt === undefined ? null : Buffer.from(spelt, "latin1").toString("utf8");
}

function bodyModel(body: Buffer, contentType: string | undefined): string | null {
  if (body.length === 0) return null;
  // multipart/form-data (a transcription, an image edit): read by its boundary, as the provider does.
  if (contentType !== undefined && multipartType.test(contentType)) return multipartModel(body, contentType);
  return jsonModel(body);
}

const multipartType = /^\s*multipart\/form-data\s*(?:;|$)/i;
/** The boundary parameter (RFC 2046 5.1.1: 1 to 70 characters), quoted or not. */
const boundaryParameter = /;\s*boundary\s*=\s*(?:"([^"]{1,70})"|([^\s;"]{1,70}))\s*(?:;|$)/i;
/** A part's Content-Disposition header, up to its parameters (RFC 7578 4.2). */
const formDataDisposition = /^content-disposition[ \t]*:[ \t]*form-data[ \t]*/im;
/**
 * One parameter of it, read from where the last one ended (sticky): a token, then a token or a
 * quoted string taken whole (RFC 9110 5.6.4, a backslash quoting the next character), so a `;` or a
 * `name=` inside a quoted `filename` (the app user's file name, say) is that file name's text.
 */
const dispositionParameter =
  /[ \t]*;[ \t]*([!#$%&'*+.^_`|~0-9A-Za-z-]+)[ \t]*=[ \t]*(?:"((?:[^"\\\r\n]|\\[^\r\n])*)"|([!#$%&'*+.^_`|~0-9A-Za-z-]+))/y;
/**
 * What may end the parameters: a last `;`, spaces, the line's end. The spaces after the `;` are
 * matched only after one: with the `;` optional between two runs of them, a run followed by
 * another byte was split every way, quadratic in its length.
 */
const dispositionEnd = /[ \t]*(?:;[ \t]*)?(?:\r\n|$)/y;
const lineEnd = Buffer.from("\r\n");
const headerEnd = Buffer.from("\r\n\r\n");

/**
 * At most this many parts are read: a form with more names no model. Common servers refuse one
 * (Starlette's and Werkzeug's default limit is 1,000 fields); the SDKs' forms have a few dozen at
 * most (`images.edit`: 16 images and its fields), and each part read costs a few microseconds.
 */
const maxParts = 1000;
/** A part's headers are read when they end within this many bytes. */
const maxHeaderBytes = 4096;

/**
 * The `model` field of a multipart/form-data body, as a multipart parser reads it (RFC 2046 5.1.1,
 * RFC 7578): parts are split at the content type's boundary only, from its first delimiter up to
 * the closing one (a preamble and the epilogue are no parts), so bytes in a file or another field's
 * value that only spell a `model` part (a prompt can hold any text) are not taken for it, which
 * would price an image edit at another model's prices. The last `model` part is the one read; its
 * value is at most 200 bytes. Each search ends at the part's end, so the body is read about once
 * (0.6 ms for an image edit of 20 MiB).
 */
function multipartModel(body: Buffer, contentType: string): string | null {
  const boundary = boundaryParameter.exec(contentType);
  const name = boundary?.[1] ?? boundary?.[2];
  if (name === undefined) return null;
  const delimiter = Buffer.from(`\r\n--${name}`, "latin1");
  // The first delimiter opens the body, or follows a preamble after a line end.
  const opening = body.subarray(0, delimiter.length - 2).equals(delimiter.subarray(2));
  let at = opening ? -2 : body.indexOf(delimiter);
  let model: string | null = null;
  for (let parts = 0; at !== -1; parts++) {
    if (parts === maxParts) return null;
    const afterDelimiter = at + delimiter.length;
    // `--` after a delimiter closes the body: what follows is the epilogue.
    if (body[afterDelimiter] === 0x2d && body[afterDelimiter + 1] === 0x2d) break;
    // The delimiter's line ends at the latest where the next delimiter (which opens with one) starts.
    const line = body.indexOf(lineEnd, afterDelimiter);
    if (line === -1) break;
    const next = body.indexOf(delimiter, line);
    // A part that never ends is no part (the provider refuses the body).
    if (next === -1) break;
    // Its headers end with an empty line before the next delimiter, looked for within the part only.
    const headers = body.subarray(line, Math.min(next, line + maxHeaderBytes)).indexOf(headerEnd);
    if (headers !== -1) {
      const value = line + headers + headerEnd.length;
      if (partName(body.toString("latin1", line + lineEnd.length, value - lineEnd.length)) === "model") {
        const length = next - value;
        // In UTF-8, as the SDKs' forms write a field's value (RFC 7578 5.1).
        model = length >= 1 && length <= 200 ? body.toString("utf8", value, next) : null;
      }
    }
    at = next;
  }
  return model;
}

/**
 * The `name` parameter of a part's Content-Disposition (`headers`: the part's header lines), as a
 * multipart parser reads it: the parameters in turn, quoted strings whole, so only the `name`
 * parameter itself counts (not a `filename` that holds `;name=model;`). Null when the part has no
 * form-data disposition, no `name`, or parameters that do not parse (no parser would name it).
 */
function partName(headers: string): string | null {
  const disposition = formDataDisposition.exec(headers);
  if (disposition === null) return null;
  let at = disposition.index + disposition[0].length;
  let name: string | null = null;
  for (;;) {
    dispositionEnd.lastIndex = at;
    if (dispositionEnd.test(headers)) return name;
    dispositionParameter.lastIndex = at;
    const parameter = dispositionParameter.exec(headers);
    if (parameter === null) return null;
    at = dispositionParameter.lastIndex;
    if (name === null && parameter[1]?.toLowerCase() === "name")
      name = parameter[3] ?? parameter[2]?.replace(/\\(.)/g, "$1") ?? null;
  }
}

export function createProviderAdapters(options: ProviderAdapterOptions): Record<ProviderId, ProviderAdapter> {
  const a = split(options.providerABaseUrl);
  const b = split(options.providerBBaseUrl);
  const c = split(options.providerCBaseUrl);
  // Provider C's SDK may address its v1 or v1alpha API (`httpOptions.apiVersion`); those live beside
  // the configured v1beta base.
  const cV1Path = c.basePath.replace(/\/v1beta$/, "/v1");
  const cV1alphaPath = c.basePath.replace(/\/v1beta$/, "/v1alpha");

  return {
    "provider-a": {
      id: "provider-a",
      methods: proxyMethods["provider-a"],
      requiresJson: false,
      target: (path) => ({ origin: a.origin, path: `${a.basePath}/${path}` }),
      inject(headers, key) {
        headers.authorization = `Bearer ${key}`;
      },
      requestModel: (_path, body, contentType) => bodyModel(body, contentType),
      // Only paths under `responses`, and GETs, pay for more than this one comparison.
      responsesCall: (method, path) =>
        path.startsWith("responses")
          ? responsesCall(method, path)
          : method === "GET" && oneBatch.test(path)
            ? "poll"
            : null,
      answersStored: (path) => storedObjectPost.test(path),
      imageCall: (method, path) =>
        method === "POST" && path === "images/generations" ? openAiImageGeneration : null,
      freeCall: (method, path) => readingMethods.has(method) || (method === "POST" && freePostA.test(path)),
    },
    "provider-b": {
      id: "provider-b",
      methods: proxyMethods["provider-b"],
      requiresJson: true,
      sdkKeyHeader: "x-api-key",
      // The SDK's `beta.files.upload` sends a multipart form here, and files are read back with GET:
      // neither is a JSON POST, which is all this proxy forwards.
      notProxied: (path) =>
        apiPath("provider-b", path) === "files"
          ? "Provider B's Files API does not go through Sluice: uploads are multipart forms and files are read back with GET, while this proxy forwards JSON POST calls; use the provider directly for files"
          : undefined,
      // The official SDK appends /v1/messages to its base URL: `v1/messages` -> `messages`.
      target: (path) => ({ origin: b.origin, path: `${b.basePath}/${apiPath("provider-b", path)}` }),
      inject(headers, key) {
        headers["x-api-key"] = key;
        headers["anthropic-version"] = options.providerBVersion;
      },
      requestModel: (_path, body, contentType) => bodyModel(body, contentType),
      answersStored: (path) => managedAgentSession.test(apiPath("provider-b", path)),
      freeCall: (_method, path) => freePostB.test(apiPath("provider-b", path)),
    },
    "provider-c": {
      id: "provider-c",
      methods: proxyMethods["provider-c"],
      requiresJson: true,
      sdkKeyHeader: "x-goog-api-key",
      keyQueryParameter: "key",
      // The SDK's `files.upload` starts a resumable upload here; the rest goes to Google's upload
      // host at the URL the first answer gives, which Sluice cannot stand in for.
      notProxied: (path) =>
        path.startsWith("upload/")
          ? "Provider C file uploads do not go through Sluice: the resumable upload continues on Google's upload host; upload the file to the provider directly"
          : undefined,
      target(path) {
        const version = versionSegmentOf("provider-c", path);
        const basePath = version === "v1/" ? cV1Path : version === "v1alpha/" ? cV1alphaPath : c.basePath;
        return { origin: c.origin, path: `${basePath}/${path.slice(version.length)}` };
      },
      inject(headers, key) {
        headers["x-goog-api-key"] = key;
        headers["x-goog-api-client"] = options.clientIdentifier;
      },
      requestModel(path, body) {
        const call = apiPath("provider-c", path);
        if (createInteraction.test(call)) return interactionModel(body);
        // A context cache names its model in the body (`models/gemini-2.5-flash`), not in the path.
        if (call === "cachedContents") return topLevelName(body, "model")?.replace(/^models\//, "") || null;
        // The method follows a colon, which a client may send percent-encoded (`x%3Apredict`).
        const segment = /(?:^|\/)models\/([^/]+)/.exec(path)?.[1];
        if (!segment) return null;
        let model: string;
        try {
          model = decodeURIComponent(segment);
        } catch {
          return null;
        }
        return model.split(":")[0] || null;
      },
      streamsJson: (path) => jsonStreamMethod.test(path),
      interactionsCall: (path) => createInteraction.test(apiPath("provider-c", path)),
      // A cancel answers with the interaction it stopped, usage included: a background run, whose
      // tokens Sluice does not see (its polls are GETs, refused on this proxy).
      answersStored: (path) => cancelInteraction.test(apiPath("provider-c", path)),
      imageCall: (_method, path) => (predictMethod.test(path) ? imagenPrediction : null),
      freeCall: (_method, path) => freePostC.test(apiPath("provider-c", path)),
    },
  };
}

/**
 * Rejects paths that could leave the provider's API (`providerPathProblem`): `..` or `.` segments
 * (also percent-encoded), encoded slashes or backslashes, empty segments, and anything that parses
 * as an absolute URL, also when a segment becomes one of those only when decoded again
 * (`%252e%252e`). Returns the path when it is safe, with percent-encoded unreserved characters
 * decoded (`c%6Fmpletions` is `completions`, RFC 3986 6.2.2.2: the same path, written as Sluice's
 * path checks compare it), else null.
 */
export function safeProviderPath(path: string): string | null {
  // The common case (`chat/completions`, `v1/messages`): plain segments, nothing to decode.
  if (path.length <= 2048 && plainPath.test(path)) return path;
  if (providerPathProblem(path) !== null) return null;
  return path.includes("%")
    ? path.replace(encodedUnreserved, (encoded) => decodeURIComponent(encoded))
    : path;
}

/**
 * Why the proxy refuses `path`, for the client's 400 (`it has an empty segment …`), or null when it
 * forwards it (safeProviderPath).
 */
export function providerPathProblem(path: string): string | null {
  if (path.length === 0) return "is empty";
  if (path.length > 2048) return "is longer than 2048 characters";
  if (path.startsWith("/")) return emptySegment;
  if (/^[a-z][a-z0-9+.-]*:/i.test(path)) return "reads as an absolute URL (a scheme such as `http:` first)";
  if (/%2f|%5c|\\/i.test(path)) return encodedSlash;
  if (/%00/.test(path) || hasControlOrSpace(path))
    return "has a space, a control character or an encoded NUL";
  // Only what RFC 3986 allows in a path (`|`, `{`, `<`, `"`, `^`, a backtick and the like must be
  // percent-encoded): a provider's front end may read them otherwise than the server behind it.
  if (!uriPath.test(path))
    return 'has a character a URL path must percent-encode (such as `|`, `{`, `<`, `"` or `^`)';
  for (const segment of path.split("/")) {
    let decoded: string;
    try {
      decoded = decodeURIComponent(segment);
    } catch {
      return "has a `%` that starts no UTF-8 escape (write a percent sign as `%25`)";
    }
    if (decoded === "") return emptySegment;
    if (decoded === "." || decoded === "..") return "has a `.` or `..` segment";
    if (decoded.includes("/")) return encodedSlash;
    if (decoded.includes("%") && hidesTraversal(decoded))
      return "has an escape that decodes, decoded again, to a `.` or `..` segment, a slash, a backslash or a NUL";
  }
  return null;
}

const encodedSlash = "has an encoded slash or backslash";
const emptySegment = "has an empty segment (a leading, trailing or doubled slash)";

/** A percent-encoded unreserved character: ALPHA, DIGIT, `-`, `.`, `_` or `~`. */
const encodedUnreserved = /%(?:4[1-9A-F]|5[0-9A]|6[1-9A-F]|7[0-9A]|3[0-9]|2D|2E|5F|7E)/gi;

/**
 * Whether a segment, decoded once, turns into a `.` or `..` segment, a slash, a backslash or a NUL
 * when decoded again (`%252e%252e` is `%2e%2e` after one decoding and `..` after two): a server
 * behind the provider's front end that decodes once more must not find a traversal.
 */
function hidesTraversal(decoded: string): boolean {
  let value = decoded;
  for (let round = 0; percentEscape.test(value); round++) {
    // Each escape on its own, as a lenient server decodes: a stray `%` elsewhere in the segment
    // (`..%252f..%25`) does not stop the next escape from being read.
    value = value.replace(percentEscapes, (encoded) =>
      String.fromCharCode(Number.parseInt(encoded.slice(1), 16)),
    );
    if (round === 3) return true; // more layers than anyone sends on purpose
    if (value === "." || value === ".." || /[/\\\0]/.test(value)) return true;
  }
  return false;
}

const percentEscape = /%[0-9A-Fa-f]{2}/;
const percentEscapes = /%[0-9A-Fa-f]{2}/g;

const plainPath = /^[A-Za-z0-9_-]+(?:\/[A-Za-z0-9_-]+)*$/;
/** Segments of RFC 3986 path characters: unreserved, percent-encoded, sub-delims, `:` and `@`. */
const uriPath = /^[A-Za-z0-9\-._~%!$&'()*+,;=:@/]+$/;

function hasControlOrSpace(path: string): boolean {
  for (let index = 0; index < path.length; index++) {
    const code = path.charCodeAt(index);
    if (code <= 0x20 || code === 0x7f) return true;
  }
  return false;
}
