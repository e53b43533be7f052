import type { IncomingMessage, ServerResponse } from "node:http";
import { GatewayError, isGatewayError } from "../errors.js";
import { isSuccessStatus } from "../net/success-status.js";
import type { Metrics } from "../observability/metrics.js";
import type { ImageCall } from "../providers/image-calls.js";
import type { ProviderAdapter } from "../providers/provider-adapter.js";
import { providerPathProblem, proxyMethods, safeProviderPath } from "../providers/provider-adapter.js";
import { isProviderId, type ProviderId } from "../providers/provider-id.js";
import { imagePriceBeforeCall } from "../proxy/call-cost.js";
import { failedAfterSuccess, forward, type UpstreamPools } from "../proxy/forward.js";
import type { GeneratedImages } from "../proxy/generated-images.js";
import { RequestFacts } from "../proxy/request-facts.js";
import { withStreamUsage, withStreamUsageDecoded } from "../proxy/stream-usage-option.js";
import { reportsNoTokens, type TokenUsage } from "../usage/token-usage.js";
import { type Admit, nothingSent } from "./admission.js";
import { type BodyBudget, type BodyShare, holdInShare } from "./body-budget.js";
import { clientDisconnected } from "./client-watch.js";
import { readBody, requireJsonContentType } from "./read-body.js";
import type { Router } from "./router.js";
import { setHeaders } from "./send.js";

export interface ProxyRouteDeps {
  admit: Admit;
  adapters: Record<ProviderId, ProviderAdapter>;
  pools: UpstreamPools;
  metrics: Metrics;
  maxBodyBytes: number;
  /** The request-body bytes held in memory, these routes' and the structured ones' together. */
  bodyBudget: BodyBudget;
  /** Tokens by the catalogue's token prices; an image generation's images by its per-image prices. */
  costOf(
    provider: ProviderId,
    model: string | null,
    usage: TokenUsage,
    images?: GeneratedImages | null,
  ): number | null;
}

/** `/v1/provider-x/{projectId}/{path}`: authenticate, forward unchanged, record usage. */
export function registerProxyRoutes(router: Router, deps: ProxyRouteDeps): void {
  for (const adapter of Object.values(deps.adapters)) {
    router.on(
      adapter.methods as Parameters<Router["on"]>[0],
      `/v1/${adapter.id}/:projectId/*`,
      async (context) => {
        const { request, response, params } = context;
        // Checked and forwarded as the client sent it: the router's `*` param is percent-decoded,
        // which would let `%2F` pass as a slash and `%3F` start a query string upstream.
        const path = safeProviderPath(afterPrefix(context.path));
        if (path === null) {
          // safeProviderPath refused it: there is a problem to name.
          const problem = providerPathProblem(afterPrefix(context.path)) as string;
          throw new GatewayError(
            "BAD_REQUEST",
            `The provider path is not allowed: it ${problem} (docs/proxy.md#paths)`,
          );
        }
        // A WebSocket handshake can never succeed here (Sluice forwards HTTP calls only): answered at
        // once, rather than forwarded as the plain GET it would become (Upgrade is hop-by-hop).
        if (opensWebSocket(request.method, request.headers.upgrade))
          throw new GatewayError("NOT_FOUND", webSocketRefusal[adapter.id]);
        const notProxied = adapter.notProxied?.(path);
        if (notProxied !== undefined) throw new GatewayError("NOT_FOUND", notProxied);
        let call: Awaited<ReturnType<Admit>>;
        try {
          const admitted = deps.admit(context, {
            endpoint: "proxy",
            projectId: params.projectId,
            provider: adapter.id,
            proxyPath: path,
            ...(adapter.sdkKeyHeader ? { sdkKeyHeader: adapter.sdkKeyHeader } : {}),
          });
          call = admitted instanceof Promise ? await admitted : admitted;
        } catch (error) {
          throw withMissingProjectHint(error, adapter.id, params.projectId ?? "", path);
        }
        const ownHeaders = {
          "x-request-id": context.requestId,
          ...call.rateLimitHeaders,
          ...context.corsHeaders,
        };
        // What the request named, kept for the failure row: a call that fails once its body was read
        // (a provider timeout, say) still names its model.
        let facts: RequestFacts | null = null;
        // Whether the request went on to the provider: one refused before (its price) sent nothing.
        let sending = false;
        // Given back when the body is sent (RequestFacts.release, a body over 64 KiB) or the call ends.
        const share = deps.bodyBudget.share();
        try {
          // After authentication, as on every route: a client without credentials gets 401, an
          // unknown project 404, and the refusal is counted and has its row.
          if (adapter.requiresJson && !untypedAction(request, path)) requireJsonContentType(request);
          const sent = await readProxiedBody(request, response, adapter, path, deps.maxBodyBytes, share);
          facts = sent.facts;
          // A key revoked (or the project disabled or deleted) while the body arrived: not sent.
          const recheck = call.recheck();
          if (recheck) await recheck;
          // A capped project's image generation whose price the table gives before it runs is held
          // to it, as a /v1/image call is (decision 0042, amended): refused here, nothing sent.
          // Only an image call waits for it: another capped call goes on at once.
          const imageCall = call.priceKnown
            ? (adapter.imageCall?.(request.method ?? "GET", path) ?? null)
            : null;
          if (call.priceKnown && imageCall !== null)
            await holdToImagePrice(call.priceKnown, adapter.id, imageCall, facts);
          // A client gone while those were awaited (its credentials read again, its price counted in
          // Redis): nothing is sent, as for one gone before admission. The exchange hears of a client
          // leaving only from its start: the call was sent, ran and was billed for nobody.
          if (request.socket.destroyed) throw clientDisconnected();
          sending = true;
          const result = await forward(deps.pools, {
            adapter,
            projectId: call.project.id,
            path,
            query: context.query,
            method: request.method ?? "GET",
            bodyDecoded: sent.decoded,
            facts,
            usageOptionSet: sent.usageOptionSet,
            incomingHeaders: request.headers,
            providerKey: call.providerKey,
            response,
            ownHeaders,
            bodyBudget: deps.bodyBudget,
            onSent: () =>
              deps.metrics.observeOverhead(adapter.id, (performance.now() - context.startedAt) / 1000),
          });
          if (result.timeToFirstByteMs !== null)
            deps.metrics.observeTimeToFirstByte(adapter.id, result.timeToFirstByteMs / 1000);
          const run = result.backgroundRun;
          const method = request.method ?? "GET";
          call.finish({
            status: result.status,
            outcome: result.outcome,
            provider: adapter.id,
            model: result.model,
            usage: result.usage,
            // A call the provider bills nothing for that reported no tokens is free, not unpriced:
            // so is a 304 Not Modified, a revalidation answered without content (ran nothing).
            costUsd:
              reportsNoTokens(result.usage) && (result.status === 304 || adapter.freeCall(method, path))
                ? 0
                : deps.costOf(adapter.id, result.model, result.usage, result.images),
            streamed: result.streamed,
            timeToFirstByteMs: result.timeToFirstByteMs,
            errorCode: result.errorCode,
            // The provider's own status (a call it never answered has the gateway's 499 or none):
            // a 2xx it cut short, or whose usage did not come, was billed all the same.
            providerAnswered: isSuccessStatus(result.status),
            backgroundRun: run && {
              rowId: run.rowId,
              model: run.model,
              usage: run.usage,
              // A batch is billed at the provider's batch prices, which the catalogue does not list.
              costUsd: run.batch ? null : deps.costOf(adapter.id, run.model, run.usage),
              streamed: result.streamed,
            },
          });
        } catch (error) {
          // Before its body was read, nothing went to the provider.
          if (facts === null) call.fail(error, adapter.id, null, nothingSent);
          else {
            const model = facts.model();
            // A 2xx the provider cut before any of its body came through: billed all the same.
            const spend = !sending
              ? nothingSent
              : failedAfterSuccess(error)
                ? { usage: null, costUsd: null, providerAnswered: true }
                : undefined;
            call.fail(error, adapter.id, model instanceof Promise ? await model : model, spend);
          }
          // The error answer (sent by the app) still reports the limits.
          if (!response.headersSent) setHeaders(response, call.rateLimitHeaders);
          throw error;
        } finally {
          share.release();
        }
      },
      { writesOwnHeaders: true },
    );
  }
}

/**
 * Tells `priceKnown` (`AdmittedCall.priceKnown`, a capped call's) the price of an image generation
 * (`imageCall`, the adapter's) the pricing table gives before it runs (`imagePriceBeforeCall`: the
 * model the provider reads from the body or path, and the n, size and quality asked for), which
 * throws the cap's 403 or the calls in flight's 429 when it does not fit; a body that names a
 * member twice is refused (400), as its price cannot be read as the provider reads it, and a
 * compressed one whose decoded copy does not fit in the body budget 503 (as the copy the stream
 * usage option makes is). One whose price is not
 * known before its answer (a body that does not read, a model priced by the token or not in the
 * table, `auto`) is left as it was: counted at the month's largest call, priced by its answer.
 */
async function holdToImagePrice(
  priceKnown: (costUsd: number) => void | Promise<void>,
  provider: ProviderId,
  imageCall: ImageCall,
  facts: RequestFacts,
): Promise<void> {
  const read = facts.requestedImages(imageCall);
  const asked = read instanceof Promise ? await read : read;
  // A compressed body decoded for them whose copy does not fit in the body budget: 503, not sent.
  facts.requireDecodedHeld();
  // A member named twice (`"n":1,"n":20`): which one the provider reads is unpredictable (RFC 8259
  // §4), and pricing the last one JSON.parse keeps let a provider that reads the first run more.
  if (asked.repeated !== undefined)
    throw new GatewayError(
      "BAD_REQUEST",
      `The image generation's body names ${asked.repeated.map((path) => `\`${path}\``).join(", ")} more than once: which one the provider reads is not defined, so its price is not known before it runs; send each member once`,
    );
  const named = facts.imageModel(imageCall);
  const model = named instanceof Promise ? await named : named;
  if (model === null) return;
  const price = imagePriceBeforeCall(provider, model, asked);
  if (price !== null) await priceKnown(price);
}

/**
 * A cancel (`…/cancel`, `…:cancel`) or an archive (`…/archive`) that declares no content type and
 * carries no body (`content-length: 0`, or neither a length nor a transfer coding): B's
 * `messages.batches.cancel` and its Managed Agents' `archive` calls are POSTs its SDK sends so, and
 * there is no content for a type to describe. Every other call keeps SPEC's rule that B and C
 * require `Content-Type: application/json`, a bodiless POST included.
 */
function untypedAction(request: IncomingMessage, path: string): boolean {
  if (!bodilessAction.test(path)) return false;
  const { headers } = request;
  if (headers["content-type"] !== undefined) return false;
  const length = headers["content-length"];
  return length === undefined ? headers["transfer-encoding"] === undefined : length.trim() === "0";
}

/**
 * Reads the body and sets the stream usage option where it applies. In a function of its own, so
 * that the route's frame, which waits for the whole answer, holds no reference to the body: only
 * the returned RequestFacts does, and it lets a large body go once it is sent.
 */
async function readProxiedBody(
  request: IncomingMessage,
  response: ServerResponse,
  adapter: ProviderAdapter,
  path: string,
  maxBodyBytes: number,
  share: BodyShare,
): Promise<{ facts: RequestFacts; decoded: boolean; usageOptionSet: boolean }> {
  const sent = await readBody(request, maxBodyBytes, { share, response });
  // Content in a GET or HEAD has no meaning (RFC 9110 9.3.1): a server on the provider's side that
  // reads none would take it for the next request on a connection Sluice shares between clients.
  if (sent.length > 0 && (request.method === "GET" || request.method === "HEAD"))
    throw new GatewayError(
      "BAD_REQUEST",
      `A ${request.method} request carries no body: Sluice does not forward one (send the call without it)`,
    );
  const coding = request.headers["content-encoding"];
  const type = request.headers["content-type"];
  if (coding === undefined) {
    const body = withStreamUsage(adapter.id, path, sent);
    return {
      facts: new RequestFacts(adapter, path, body, undefined, maxBodyBytes, null, type, share),
      decoded: false,
      // A changed body is one that now asks for usage the client did not ask for.
      usageOptionSet: body !== sent,
    };
  }
  const { body, decoded, plain } = await withStreamUsageDecoded(adapter.id, path, sent, coding, maxBodyBytes);
  // The decoded body is held too, until it is sent: up to SLUICE_MAX_BODY_BYTES from a few KiB of
  // gzip. Sent decoded (the option set), it is all that is held: the compressed bytes are let go.
  if (plain !== null) {
    holdInShare(share, plain.length);
    if (decoded) share.giveBack(sent.length);
  }
  return {
    // A body forwarded compressed is decoded for them only when they are asked for.
    facts: new RequestFacts(
      adapter,
      path,
      body,
      decoded ? undefined : coding,
      maxBodyBytes,
      plain,
      type,
      share,
    ),
    decoded,
    usageOptionSet: decoded,
  };
}

const bodilessAction = /[/:]cancel$|\/archive$/;

/**
 * Whether a request opens a WebSocket: a GET whose `Upgrade` names `websocket` (RFC 6455 §4.1), as
 * provider A's Realtime API and Responses API WebSocket mode and provider C's Live API are reached.
 */
function opensWebSocket(method: string | undefined, upgrade: string | undefined): boolean {
  return method === "GET" && upgrade !== undefined && /(?:^|[\s,])websocket(?:$|[\s,/])/i.test(upgrade);
}

/** Why a WebSocket handshake on a provider's proxy is refused (404 on A, 405 on B and C). */
const webSocketRefusal: Record<ProviderId, string> = {
  "provider-a":
    "WebSocket connections do not go through Sluice: connect to the provider directly (the Realtime API with a short-lived key minted through Sluice, realtime.clientSecrets.create); see docs/proxy.md",
  "provider-b":
    "WebSocket connections do not go through Sluice: this proxy forwards POST calls only; see docs/proxy.md",
  "provider-c":
    "WebSocket connections do not go through Sluice: connect to the provider directly for the Live API (live.connect, with an ephemeral token minted through Sluice, authTokens.create); see docs/proxy.md",
};

/** A path of a provider's proxy: the provider and the provider path. */
const proxyPath = /^\/v1\/([^/]+)\/[^/]+\/(.+)$/;

/**
 * The message of the 405 a method gets on a proxy that forwards no reads (B's and C's, POST only:
 * their SDKs' retrievals, lists, downloads, updates and deletions, `messages.batches.retrieve`,
 * `caches.get`…), which names the provider, the call and why it does not pass, rather than only that
 * the method is not allowed. Null for a method the proxy takes, for a proxy that takes reads, and for
 * any other path (the generic message). The methods are the ones its route is registered with
 * (`proxyMethods`). A WebSocket handshake (`upgrade`) is told so instead.
 */
export function methodNotForwarded(method: string, path: string, upgrade?: string): string | null {
  const match = proxyPath.exec(path);
  const provider = match?.[1];
  if (!isProviderId(provider)) return null;
  const methods = proxyMethods[provider];
  if (methods.includes(method) || methods.includes("GET")) return null;
  if (opensWebSocket(method, upgrade))
    return `${method} is not allowed on this path: ${webSocketRefusal[provider]}`;
  return `${method} is not allowed on this path: ${provider}'s proxy forwards ${methods.join(", ")} calls only: ${method} ${(match?.[2] ?? "").slice(0, 200)} does not go through Sluice (retrieving, listing, downloading, updating or deleting a batch, file, cache or operation is done with the provider directly; see docs/proxy.md)`;
}

/**
 * The first segments of the providers' own API paths. An SDK whose base URL leaves out the project
 * id (`…/v1/provider-a` instead of `…/v1/provider-a/{projectId}`) sends its path's first segment
 * where the project id goes: `/v1/provider-a/chat/completions` looks up project "chat".
 */
const providerPathStarts: Record<ProviderId, ReadonlySet<string>> = {
  "provider-a": new Set([
    "v1",
    "chat",
    "completions",
    "responses",
    "embeddings",
    "images",
    "audio",
    "files",
    "uploads",
    "batches",
    "moderations",
    "models",
    "fine_tuning",
    "vector_stores",
    "assistants",
    "threads",
    "conversations",
    "realtime",
  ]),
  "provider-b": new Set(["v1", "messages", "models", "complete"]),
  "provider-c": new Set(["v1", "v1beta", "v1alpha", "models", "interactions", "cachedContents", "batches"]),
};

/**
 * An unknown project whose id is where a provider path begins: the refusal says where the project
 * id goes, with the path the client most likely meant. Any other error is returned as it is.
 */
function withMissingProjectHint(
  error: unknown,
  provider: ProviderId,
  projectId: string,
  path: string,
): unknown {
  if (!isGatewayError(error) || error.code !== "PROJECT_NOT_FOUND") return error;
  if (!providerPathStarts[provider].has(projectId)) return error;
  return new GatewayError(
    "PROJECT_NOT_FOUND",
    `${error.message}; the project id comes right after the provider in the path: did you mean /v1/${provider}/{projectId}/${projectId}/${path.slice(0, 200)}? (an SDK's base URL ends with /v1/${provider}/{projectId})`,
    { headers: error.headers, cause: error },
  );
}

/** The raw path after `/v1/provider-x/{projectId}/` (the fourth slash). */
function afterPrefix(path: string): string {
  let at = 0;
  for (let slashes = 0; slashes < 4; slashes++) {
    at = path.indexOf("/", at) + 1;
    if (at === 0) return "";
  }
  return path.slice(at);
}
