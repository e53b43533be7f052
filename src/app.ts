import { type IncomingMessage, maxHeaderSize, type ServerResponse } from "node:http";
import type { Socket } from "node:net";
import type { Duplex } from "node:stream";
import { mayBeKey, projectIdRecorded } from "./admin/project-id.js";
import { GatewayError } from "./errors.js";
import { type AdminRouteDeps, registerAdminRoutes } from "./http/admin-routes.js";
import type { ConnectionCap } from "./http/connection-cap.js";
import type { CorsPolicy } from "./http/cors.js";
import { cutConnection } from "./http/cut-answer.js";
import { maxHeaderFields } from "./http/max-header-fields.js";
import { originForm } from "./http/origin-form.js";
import { methodNotForwarded } from "./http/proxy-routes.js";
import { type PublicRouteDeps, registerPublicRoutes } from "./http/public-routes.js";
import { onceAnswerCloses } from "./http/queued-answers.js";
import { type Handler, type Lookup, type RequestContext, Router } from "./http/router.js";
import {
  closeIfBodyUnread,
  lingeringClose,
  providerBIdHeader,
  sendError,
  sendRawError,
  setHeaders,
} from "./http/send.js";
import {
  configuredSecretHeld,
  configuredSecretStartsRedaction,
  configuredSecretsRedaction,
  type Logger,
  shownStart,
} from "./observability/logger.js";
import type { Metrics } from "./observability/metrics.js";
import { createProviderFailureLog } from "./observability/provider-failure-log.js";
import type { SuppressionWindowsRegistry } from "./observability/suppression-windows.js";
import { connectionOptions } from "./proxy/header-policy.js";

export interface AppDeps {
  logger: Logger;
  metrics: Metrics;
  generateRequestId: () => string;
  clientIp: (request: IncomingMessage) => string;
  publicRoutes: PublicRouteDeps;
  adminRoutes: AdminRouteDeps;
  /** Registers the authenticated API routes (proxies, structured, images). */
  registerApiRoutes?: (router: Router) => void;
  /** Cross-origin access for browser apps (`SLUICE_CORS_ORIGINS`); null: no CORS headers at all. */
  cors?: CorsPolicy | null;
  /**
   * The connection caps (`SLUICE_MAX_CONNECTIONS_PER_IP` per address, `SLUICE_MAX_CONNECTIONS` all
   * together); absent: every connection is served.
   */
  connectionCap?: ConnectionCap;
  /** The gateway's suppression windows, whose close writes the provider failures' counts still open. */
  suppressionWindows?: SuppressionWindowsRegistry;
}

export interface App {
  /**
   * The server's `connection`, before Node's HTTP (or TLS) handling sees the socket: false when the
   * connection was refused (its address is over `SLUICE_MAX_CONNECTIONS_PER_IP`, or the gateway
   * holds `SLUICE_MAX_CONNECTIONS`) and must not be
   * served; see `ConnectionCap.admit`.
   */
  admitConnection(socket: Socket, encrypted: boolean): boolean;
  handle(request: IncomingMessage, response: ServerResponse): void;
  /**
   * The server's `clientError`: a request Node could not parse, or not in time, gets the error
   * envelope (400, 408, 413 or 431) instead of Node's bodiless answer, after the answers to the
   * requests before it on the connection.
   */
  answerClientError(error: Error, socket: Duplex): void;
  /** The server's `connect`: CONNECT gets the error envelope (404); Sluice is no forward proxy. */
  answerConnect(request: IncomingMessage, socket: Duplex): void;
}

/**
 * The characters of a path the access line shows; a longer one is cut there, its length given
 * (`shownStart`). Far above a route's paths, far below Node's 16 KiB of head.
 */
const accessLinePathCharacters = 1024;

/**
 * The path as the access line shows it: a project id that may be a secret typed in its place
 * (`mayBeKey`: longer than any, or of a key's form) by its start and length, as the answer and the
 * usage row show it (a DeviceCheck Bearer value there, `partial key.device token`, left the token
 * behind the partial key's `[redacted]`), and the whole cut at `accessLinePathCharacters`. The
 * logger's configured secrets (`redactConfigured`, `configuredSecretsRedaction`: the admin token)
 * are redacted in the whole path before the id is shortened to its start and before the cut, past
 * either of which the logger could no longer tell them (the id may be only the start of one); so is
 * the start of one holding a `?` that the path ends with (`queried`: the target's query cut it).
 */
function accessLinePath(
  path: string,
  queried: boolean,
  lookup: Lookup,
  redaction: ConfiguredSecretsRedaction,
): string {
  const { redactConfigured } = redaction;
  // The whole path first: a secret holding a `/` (base64 does) spans the id's segment and the next,
  // and the id the route took is only its start.
  let shown = redactConfigured(path);
  if (queried) shown = redaction.redactStart(shown);
  if (lookup.kind === "found") {
    const projectId = lookup.params.projectId;
    if (projectId !== undefined && mayBeKey(projectId)) {
      // The id's segment, still percent-encoded in the path: where the route pattern has it.
      const at = lookup.route.split("/").indexOf(":projectId");
      const segments = shown.split("/");
      // Unless a secret across segments was redacted: the id's segment is no longer at `at`, and
      // what is left of it is `[redacted]`.
      if (at > 0 && at < segments.length && segments.length === path.split("/").length) {
        // `[redacted]` when it is still a secret's start (`held`): not shortened to a piece of it.
        segments[at] = projectIdRecorded(redactConfigured(projectId), redaction.held);
        shown = segments.join("/");
      }
    }
  }
  return shownStart(shown, accessLinePathCharacters, redactConfigured);
}

/** The redactions of a logger's configured secrets `accessLinePath` makes. */
interface ConfiguredSecretsRedaction {
  redactConfigured: (text: string) => string;
  redactStart: (path: string) => string;
  held: (value: string) => boolean;
}

/** The router with every route registered explicitly, and the request lifecycle. No I/O here. */
export function createApp(deps: AppDeps): App {
  const router = new Router();
  registerPublicRoutes(router, deps.publicRoutes);
  registerAdminRoutes(router, deps.adminRoutes);
  deps.registerApiRoutes?.(router);

  const { logger, metrics } = deps;
  const answering = new WeakSet<Duplex>();
  /**
   * Connections whose framing can no longer be trusted (a malformed request was answered with
   * `connection: close`): a request Node already parsed behind it is not served, as it may be the
   * tail of a body the client framed otherwise (request smuggling); the connection is closed.
   */
  const closing = new WeakSet<Duplex>();
  const corsPolicy = deps.cors ?? null;
  const accessLog = logger.isLevelEnabled("debug");
  const redaction: ConfiguredSecretsRedaction = {
    redactConfigured: configuredSecretsRedaction(logger),
    redactStart: configuredSecretStartsRedaction(logger),
    held: configuredSecretHeld(logger),
  };
  const logProviderFailure = createProviderFailureLog(logger, { registry: deps.suppressionWindows });

  async function run(handler: Handler, context: RequestContext, route: string): Promise<void> {
    try {
      await handler(context);
    } catch (error) {
      // A client that left is no provider's failure, though its aborted call may look like one.
      const clientGone = context.request.socket.destroyed;
      if (context.corsHeaders && context.writesOwnHeaders && !context.response.headersSent)
        setHeaders(context.response, context.corsHeaders);
      const status = sendError(context.response, error, context.requestId);
      if (status >= 500 && !(error instanceof GatewayError)) {
        logger.error({ err: error, requestId: context.requestId, route }, "request failed");
      } else if (status >= 500 && !clientGone && error instanceof GatewayError) {
        logProviderFailure(error, context.requestId, route, context.projectId);
      }
    }
  }

  const connectionCap = deps.connectionCap;
  return {
    admitConnection: connectionCap
      ? (socket, encrypted) => connectionCap.admit(socket, encrypted)
      : () => true,
    handle(request, response) {
      if (closing.has(request.socket)) {
        request.socket.destroy();
        return;
      }
      const startedAt = performance.now();
      const requestId = deps.generateRequestId();
      // HTTP/1.0 has no chunked coding (RFC 9112 §6.1), though Node uses it when a 1.0 request's TE
      // asks: a streamed answer to 1.0 is delimited by the connection's close instead.
      if (request.httpVersionMinor === 0) response.useChunkedEncodingByDefault = false;
      // Node serves an Upgrade request as a plain one, but drops what arrived behind it on the
      // connection: closing after the answer leaves a pipelined request unanswered, not hanging. Only
      // one whose Connection names it (llhttp's upgrade): Node parses what follows any other as it
      // would any request, and runs it, which a close after the first answer would leave unanswered.
      if (
        request.headers.upgrade !== undefined &&
        connectionOptions(request.headers.connection)?.has("upgrade")
      )
        response.shouldKeepAlive = false;
      const url = originForm(request.url ?? "/");
      const queryAt = url.indexOf("?");
      const path = queryAt < 0 ? url : url.slice(0, queryAt);
      const query = queryAt < 0 ? "" : url.slice(queryAt + 1);
      const origin = corsPolicy ? request.headers.origin : undefined;
      const cors = corsPolicy?.covers(path) ? corsPolicy : null;
      const preflight =
        cors !== null &&
        origin !== undefined &&
        request.method === "OPTIONS" &&
        request.headers["access-control-request-method"] !== undefined;
      const malformed = malformedTarget(request, url);
      const lookup = router.find(request.method ?? "GET", path);
      const writesOwnHeaders =
        malformed === null && !preflight && lookup.kind === "found" && lookup.writesOwnHeaders;
      if (!writesOwnHeaders) response.setHeader("x-request-id", requestId);
      const corsHeaders = cors && !preflight ? cors.headersFor(origin) : null;
      if (corsHeaders && !writesOwnHeaders) setHeaders(response, corsHeaders);
      const route = malformed
        ? "malformed"
        : preflight
          ? "preflight"
          : lookup.kind === "found"
            ? lookup.route
            : lookup.kind;
      // Also when the client leaves while this answer waits behind another on its connection.
      onceAnswerCloses(response, () => {
        const seconds = (performance.now() - startedAt) / 1000;
        // A client that left before the answer began got none: 499, as its usage row says, not the
        // 200 Node holds before anything is sent.
        const status = response.headersSent ? response.statusCode : 499;
        metrics.observeRequest(route, request.method ?? "GET", status, seconds);
        // The path only: a query string may carry a credential (e.g. provider C's `key=`).
        if (accessLog) {
          logger.debug(
            {
              requestId,
              method: request.method,
              path: accessLinePath(path, queryAt >= 0, lookup, redaction),
              route,
              status,
              // The answer was cut short (a stream the client or the provider ended).
              ...(response.writableFinished ? {} : { aborted: true }),
              ms: Math.round(seconds * 1e6) / 1000,
              clientIp: context.clientIp,
            },
            "request",
          );
        }
      });
      const context: RequestContext = {
        request,
        response,
        params: lookup.kind === "found" ? lookup.params : {},
        requestId,
        startedAt,
        clientIp: deps.clientIp(request),
        path,
        query,
        writesOwnHeaders,
        corsHeaders,
        // Set by admission: present from the start, so every context has the one shape.
        projectId: undefined,
      };
      if (malformed) {
        request.resume();
        if (malformed.headers.connection === "close") closing.add(request.socket);
        sendError(response, malformed, requestId);
      } else if (preflight) {
        request.resume();
        answerPreflight(cors, origin as string, context);
      } else if (lookup.kind === "found") {
        void run(lookup.handler, context, route);
      } else if (lookup.kind === "method-not-allowed") {
        request.resume();
        sendError(
          response,
          new GatewayError(
            "METHOD_NOT_ALLOWED",
            methodNotForwarded(request.method ?? "GET", path, request.headers.upgrade) ??
              `${request.method} is not allowed on this path`,
            { headers: { allow: lookup.allowed.join(", ") } },
          ),
          requestId,
        );
      } else {
        request.resume();
        const error =
          lookup.kind === "bad-path"
            ? new GatewayError("BAD_REQUEST", "The path is not valid percent-encoded UTF-8")
            : new GatewayError(
                "NOT_FOUND",
                lookup.kind === "not-found" && lookup.inexactFor !== undefined
                  ? `No such route: ${lookup.inexactFor} is matched exactly, without a trailing slash or an empty segment`
                  : "No such route",
              );
        sendError(response, error, requestId);
      }
    },
    answerClientError,
    answerConnect(request, socket) {
      // Node hands the connection over as soon as it parses CONNECT, without its error listener.
      socket.on("error", () => socket.destroy());
      relayDrain(socket);
      const requestId = deps.generateRequestId();
      afterPendingAnswers(socket, () => {
        const error = new GatewayError("NOT_FOUND", "No such route: Sluice is not a forward proxy (CONNECT)");
        const status = sendRawError(socket, error, requestId);
        metrics.observeRequest("malformed", request.method ?? "CONNECT", status, 0);
        if (accessLog)
          logger.debug({ requestId, method: request.method, route: "malformed", status, ms: 0 }, "request");
      });
    },
  };

  /**
   * Node's `clientError`. The answer waits for the answers to requests pipelined before the bad
   * one, as HTTP/1.1 answers go in order (RFC 9112 §9.3.2); Node's own handler would send its 400
   * in their place.
   */
  function answerClientError(error: Error, socket: Duplex): void {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "ECONNRESET" || socket.destroyed) {
      socket.destroy();
      return;
    }
    // Node reports every further chunk of a connection it cannot parse: answer once.
    if (socket.writableEnded || answering.has(socket)) return;
    answering.add(socket);
    const requestId = deps.generateRequestId();
    const answer = () => {
      const pending = pendingResponse(socket);
      if (socket.writableEnded || socket.destroyed) return;
      // The bad request is pipelined behind one still being answered: that one goes first.
      if (pending?.req.complete) {
        onceAnswered(pending, answer);
        return;
      }
      // The unparsable request is the one being answered, and its answer has begun: cut it.
      if (pending?.headersSent && !pending.writableEnded) {
        cutConnection(socket);
        return;
      }
      // What Node could not read is the body of a request answered already (a refusal sent before
      // it was read, written whole, or gone already): a second answer would be taken for the next
      // request's. Only the close is left, a lingering one, so the client gets to read that answer.
      if (pending ? pending.writableEnded : parsedRequest(socket)?.complete === false) {
        lingeringClose(socket);
        logger.debug({ code }, "malformed body after its answer: connection closed");
        return;
      }
      // Still pending here, the response is the refused request's own: Node read its head, and its
      // path says whether the answer takes CORS headers and provider B's `request-id`, as any other.
      const extra = pending
        ? { ...corsHeadersOf(pending.req), ...providerBIdHeader(pending.req.url ?? "/", requestId) }
        : null;
      const status = sendRawError(socket, clientErrorOf(error), requestId, extra);
      metrics.observeRequest("malformed", "none", status, 0);
      logger.debug({ requestId, status, code }, "malformed request");
    };
    answer();
  }

  /**
   * The CORS headers of an answer to `request`, by the rule `handle` follows (null: none), for an
   * answer written without its ServerResponse. Only a request whose head Node read has an Origin
   * and a path to decide by; Node hands over nothing of a head it could not finish (431, a
   * malformed request line), so that answer gets none (docs/decisions/0007).
   */
  function corsHeadersOf(request: IncomingMessage): Record<string, string> | null {
    if (!corsPolicy) return null;
    const url = originForm(request.url ?? "/");
    const queryAt = url.indexOf("?");
    const path = queryAt < 0 ? url : url.slice(0, queryAt);
    return corsPolicy.covers(path) ? corsPolicy.headersFor(request.headers.origin) : null;
  }

  /**
   * A browser's preflight (OPTIONS with Access-Control-Request-Method), answered here and never
   * forwarded or authenticated: browsers send it without credentials. No usage row: it reaches no
   * provider.
   */
  function answerPreflight(cors: CorsPolicy, origin: string, context: RequestContext): void {
    const { response, requestId } = context;
    const methods = router.methodsOf(context.path);
    if (methods.length === 0 || !cors.allows(origin)) {
      // Answered as any other request from `origin`: `Vary: Origin` with a list of origins (a 403
      // depends on it), and the origin's own CORS headers when it is listed.
      const headers = cors.headersFor(origin);
      if (headers) setHeaders(response, headers);
      const named = JSON.stringify(origin.slice(0, 200));
      const error =
        methods.length === 0
          ? new GatewayError("NOT_FOUND", "No such route")
          : new GatewayError("FORBIDDEN", `Origin ${named} may not call this gateway (SLUICE_CORS_ORIGINS)`);
      sendError(response, error, requestId);
      return;
    }
    setHeaders(response, cors.preflightHeaders(origin, methods, context.request.headers));
    response.statusCode = 204;
    closeIfBodyUnread(response);
    response.end();
  }
}

/** What makes a request unanswerable on any route (RFC 9112 §3.2); null when nothing does. */
function malformedTarget(request: IncomingMessage, target: string): GatewayError | null {
  // llhttp also passes HTTP/2.0 and a request line without a version (read as HTTP/0.9, headers
  // and all); neither is HTTP/1.x, so neither is served. The connection closes after the answer:
  // what the client sends next is in a framing Sluice does not speak.
  if (request.httpVersionMajor !== 1) return notHttp1(request);
  // A request without Transfer-Encoding pays this one property read.
  const transferCoding = request.headers["transfer-encoding"];
  if (transferCoding !== undefined) {
    // HTTP/1.0 has no Transfer-Encoding: a 1.0 message that carries it is faulty framing, and what
    // follows on the connection cannot be trusted (RFC 9112 §6.1); an intermediary speaking 1.0
    // would read the body, and any request after it, otherwise.
    if (request.httpVersionMinor === 0)
      return new GatewayError("BAD_REQUEST", "An HTTP/1.0 request must not carry Transfer-Encoding", {
        headers: { connection: "close" },
      });
    // A final coding other than chunked leaves the body without a length (RFC 9112 §6.3: 400, then
    // close), and Sluice undoes no other coding (gzip, chunked). llhttp refuses the first only
    // after this handler ran: a route that answers without reading the body would have sent its
    // own status first (a 404, a 405), and another route the parser's 400, as timing fell.
    if (!chunkedAlone(transferCoding))
      return new GatewayError(
        "BAD_REQUEST",
        "The request's Transfer-Encoding must be chunked alone: Sluice reads no other transfer coding",
        { headers: { connection: "close" } },
      );
  }
  // Node drops the header lines past its count without a word (and keeps at most a few dozen more
  // in rawHeaders): what they said, a second Host or credential header say, would go unchecked.
  if (request.rawHeaders.length >= maxHeaderFields * 2)
    return new GatewayError(
      "REQUEST_HEADER_FIELDS_TOO_LARGE",
      `The request carries ${maxHeaderFields} header fields or more`,
    );
  // An empty Host is valid; a missing one is not, in HTTP/1.1 (Node's own check refuses both).
  const host = request.headers.host;
  if (host === undefined && request.httpVersionMinor === 1)
    return new GatewayError("BAD_REQUEST", "An HTTP/1.1 request must carry a Host header");
  // RFC 9112 §3.2: two Host lines, or one that is not a host and port, are 400 (Node keeps the
  // first of two; an intermediary in front may have routed by the other).
  if (host !== undefined && (!validHost.test(host) || hostLines(request.rawHeaders) > 1))
    return new GatewayError(
      "BAD_REQUEST",
      "The request must carry one Host header with a host and an optional port",
    );
  // A fragment is the client's own; forwarded, it would reach the provider as part of the path.
  if (target.includes("#"))
    return new GatewayError("BAD_REQUEST", "The request target must not contain a fragment (#)");
  return null;
}

/** `chunked`, in any case (Node has taken off the spaces around a single line's value already). */
function chunkedAlone(transferCoding: string): boolean {
  return transferCoding === "chunked" || transferCoding.trim().toLowerCase() === "chunked";
}

/** RFC 3986 host (an IP literal, or letters, digits and the characters a reg-name allows) and port. */
const validHost = /^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9\-._~%!$&'()*+,;=]*)(?::[0-9]*)?$/;

/** How many Host lines the request has (Node's `headers.host` holds only the first). */
function hostLines(rawHeaders: readonly string[]): number {
  let lines = 0;
  for (let index = 0; index < rawHeaders.length; index += 2) {
    const name = rawHeaders[index] as string;
    if (name.length === 4 && name.toLowerCase() === "host") lines++;
  }
  return lines;
}

function notHttp1(request: IncomingMessage): GatewayError {
  const version = `HTTP/${request.httpVersionMajor}.${request.httpVersionMinor}`;
  const read = version === "HTTP/0.9" ? "a request line without HTTP/1.1 or HTTP/1.0" : version;
  return new GatewayError("BAD_REQUEST", `The request is not valid HTTP/1.1: ${read} is not served`, {
    headers: { connection: "close" },
  });
}

/**
 * Runs `then` once the answers to the requests pipelined before, still pending on `socket`, are
 * all sent, as HTTP/1.1 answers go in order (RFC 9112 §9.3.2); never when the connection goes
 * first. Node hands over a CONNECT as soon as it parses it: its answer, written at once, was taken
 * for the first of those, whose own answer was cut (a proxied call then recorded as aborted).
 */
function afterPendingAnswers(socket: Duplex, then: () => void): void {
  if (socket.writableEnded || socket.destroyed) return;
  const pending = pendingResponse(socket);
  if (!pending) {
    then();
    return;
  }
  onceAnswered(pending, () => afterPendingAnswers(socket, then));
}

/**
 * Hands the socket's `drain` on to the answer being written on it, as Node's own listener did until
 * Node handed the socket over with a CONNECT (it takes its listeners off then). The answers to the
 * requests pipelined before the CONNECT are still written on it: one larger than the socket's
 * buffer waited for a `drain` that never came, until the upstream idle timeout cut it (the
 * CONNECT's 404, sent after it, never came either).
 */
function relayDrain(socket: Duplex): void {
  socket.on("drain", () => {
    const pending = pendingResponse(socket);
    if (pending?.writableNeedDrain) pending.emit("drain");
  });
}

/** Runs `then` once, when `pending` is sent or its connection closes first. */
function onceAnswered(pending: ServerResponse, then: () => void): void {
  let settled = false;
  const next = () => {
    if (settled) return;
    settled = true;
    then();
  };
  pending.once("finish", next).once("close", next);
}

/**
 * The response Node is writing on `socket`, if any: the field Node's own `clientError` handling
 * reads for the same decision.
 */
function pendingResponse(socket: Duplex): ServerResponse | null {
  return (socket as Duplex & { _httpMessage?: ServerResponse | null })._httpMessage ?? null;
}

/**
 * The request Node's parser on `socket` read the head of last, if any (the parser's own field:
 * it is still attached when `clientError` is emitted).
 */
function parsedRequest(socket: Duplex): IncomingMessage | null {
  return (
    (socket as Duplex & { parser?: { incoming?: IncomingMessage | null } | null }).parser?.incoming ?? null
  );
}

/** The error for what Node's parser refused, with the status Node itself would have sent. */
function clientErrorOf(error: Error): GatewayError {
  const { code, reason } = error as Error & { code?: string; reason?: unknown };
  if (code === "HPE_HEADER_OVERFLOW")
    return new GatewayError(
      "REQUEST_HEADER_FIELDS_TOO_LARGE",
      `The request line and headers exceed ${maxHeaderSize} bytes`,
    );
  if (code === "HPE_CHUNK_EXTENSIONS_OVERFLOW")
    return new GatewayError("PAYLOAD_TOO_LARGE", "The request's chunk extensions are too large");
  if (code === "ERR_HTTP_REQUEST_TIMEOUT")
    return new GatewayError("REQUEST_TIMEOUT", "The request was not received in time");
  if (code === "HPE_PAUSED_H2_UPGRADE")
    return new GatewayError(
      "BAD_REQUEST",
      "Sluice speaks HTTP/1.1; HTTP/2 with prior knowledge is not served",
    );
  // llhttp's reasons are fixed phrases ("Invalid header value char"), never the request's bytes.
  const why = typeof reason === "string" && reason !== "" ? `: ${reason.slice(0, 200)}` : "";
  return new GatewayError("BAD_REQUEST", `The request is not valid HTTP/1.1${why}`);
}
