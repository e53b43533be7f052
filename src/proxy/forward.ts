import type { ServerResponse } from "node:http";
import { type Dispatcher, Pool } from "undici";
import { GatewayError, isGatewayError } from "../errors.js";
import { type BodyBudget, createBodyBudget } from "../http/body-budget.js";
import { isSuccessStatus } from "../net/success-status.js";
import type { ProviderAdapter } from "../providers/provider-adapter.js";
import type { ProviderId } from "../providers/provider-id.js";
import {
  isUpstreamTimeoutCode,
  notHttpMessage,
  providerTimeout,
  unaskedAnswer,
} from "../providers/sdk-call-failure.js";
import { emptyUsage, type TokenUsage } from "../usage/token-usage.js";
import { type BackgroundRun, backgroundRowId } from "./background-run.js";
import { type GeneratedImages, generatedImages } from "./generated-images.js";
import { upstreamQuery, upstreamRequestHeaders } from "./header-policy.js";
import { type Metering, ProxyExchange } from "./proxy-exchange.js";
import { quotesKey } from "./reflected-key-mask.js";
import type { RequestFacts } from "./request-facts.js";
import { createUpstreamDeadlines } from "./upstream-deadlines.js";
import type { MeterReading } from "./usage-meter.js";

export interface UpstreamTimeouts {
  connectMs: number;
  headersMs: number;
  /** Longest silence between two body chunks. */
  idleMs: number;
}

export interface ForwardCall {
  adapter: ProviderAdapter;
  /** The project the call is made for: a background run it reports is recorded for that project. */
  projectId: string;
  /** The provider path after /v1/provider-x/{projectId}/, already checked by safeProviderPath. */
  path: string;
  query: string;
  method: string;
  /** The client's compressed body was decoded (to set the stream usage option): sent without its content-encoding. */
  bodyDecoded?: boolean;
  /**
   * The body to send and what it named (its model, the images it asked for), read only when the
   * answer does not say; a large body is let go once sent (RequestFacts.release).
   */
  facts: RequestFacts;
  /**
   * Sluice set provider A's stream usage option itself (stream-usage-option.ts): the usage chunk
   * this adds to the stream is metered but not forwarded (see InjectedUsageFilter).
   */
  usageOptionSet?: boolean;
  incomingHeaders: import("node:http").IncomingHttpHeaders;
  providerKey: string;
  response: ServerResponse;
  /** Sluice's own response headers (x-request-id, RateLimit), written with the provider's at once. */
  ownHeaders: Record<string, string>;
  /** Called once the upstream request has been sent: the gateway's own overhead ends here. */
  onSent?: () => void;
  /**
   * SLUICE_MAX_BUFFERED_BODY_BYTES: the bytes over 64 KiB of a JSON answer the usage meter keeps
   * whole count in it until the meter is read (none: they count nowhere).
   */
  bodyBudget?: BodyBudget;
}

/** No budget: a call forwarded without one counts its meter's bytes nowhere. */
const unboundedBudget = createBodyBudget(0);

export type ProxyOutcome = "ok" | "error" | "aborted";

export interface ForwardResult {
  status: number;
  outcome: ProxyOutcome;
  streamed: boolean;
  usage: TokenUsage;
  /** The model the provider says answered, else the one the request named. */
  model: string | null;
  /** From sending upstream to the upstream's response headers, in ms; null when none came. */
  timeToFirstByteMs: number | null;
  /** Set when the gateway itself answered (upstream unreachable or timed out). */
  errorCode: string | null;
  /**
   * A finished background run the answer reported (provider A's Responses API): its tokens, which
   * then are not in `usage` (they are recorded once, on a row of their own).
   */
  backgroundRun: BackgroundRun | null;
  /** An image generation's successful (2xx) answer, JSON or streamed: the images it holds; else null. */
  images: GeneratedImages | null;
}

/**
 * One keep-alive pool per upstream origin. `dispatch` (not fetch, nor `request`) keeps the hot path
 * free of Web Streams and of a Readable per response; bodies are sent with content-length. The
 * headers and idle timeouts are the pools' one sweep's (upstream-deadlines.ts), not undici's.
 */
export function createUpstreamPools(timeouts: UpstreamTimeouts) {
  const pools = new Map<string, Pool>();
  const deadlines = createUpstreamDeadlines(timeouts);
  return {
    timeouts,
    deadlines,
    get(origin: string): Pool {
      let pool = pools.get(origin);
      if (!pool) {
        pool = new Pool(origin, {
          // No cap (as with undici's Agent): a capped pool queues every call beyond it, with no
          // timeout, behind streams that may run for minutes.
          connections: null,
          pipelining: 1,
          keepAliveTimeout: 30_000,
          connect: { timeout: timeouts.connectMs },
          // Off: two timers a request, each held in undici's list until its next tick (see deadlines).
          headersTimeout: 0,
          bodyTimeout: 0,
        });
        pools.set(origin, pool);
      }
      return pool;
    },
    async close(): Promise<void> {
      // The sweep runs until the pools are closed: a call they wait for still times out.
      try {
        await Promise.all([...pools.values()].map((pool) => pool.close()));
      } finally {
        deadlines.close();
      }
      pools.clear();
    },
  };
}

export type UpstreamPools = ReturnType<typeof createUpstreamPools>;

/**
 * The failures `forward` threw after the provider's answer had begun with a success (2xx): its
 * status line and headers came, and the connection failed before any of its body reached the client.
 */
const answeredFailures = new WeakSet<GatewayError>();

/**
 * Whether `forward` failed with `error` after the provider had answered with a success (2xx): the
 * call was billed all the same, though nothing of the answer reached the client (502).
 */
export function failedAfterSuccess(error: unknown): boolean {
  return isGatewayError(error) && answeredFailures.has(error);
}

/**
 * Forwards one authenticated call and copies the provider's answer to the client as it arrives:
 * status, headers (minus hop-by-hop) and body bytes unchanged, with backpressure, reading usage
 * on the way. A client disconnect aborts the upstream request at once. The request is sent at
 * most once more, and only when the first connection attempt failed before anything was sent.
 */
export async function forward(pools: UpstreamPools, call: ForwardCall): Promise<ForwardResult> {
  const { adapter } = call;
  const target = adapter.target(call.path);
  const responses = adapter.responsesCall?.(call.method, call.path) ?? null;
  // Only a POST makes the model do work. A GET reads a result that was already counted (a stored
  // response or chat completion, a batch, a file of batch output, a list of them), and on every
  // poll; but a background run's tokens are only ever reported that way (see BackgroundRun). A POST
  // that updates or cancels a stored object and answers with it counts nothing either.
  const metering =
    responses ??
    (call.method === "POST" && !adapter.answersStored?.(call.path) ? postMetering(adapter, call.path) : null);
  // A metered answer is asked for whole: the byte-range headers stay behind (header-policy.ts).
  const headers = upstreamRequestHeaders(call.incomingHeaders, metering !== null);
  if (call.bodyDecoded) delete headers["content-encoding"];
  adapter.inject(headers, call.providerKey);
  const { facts } = call;
  // Every body goes framed by its length (a GET's or HEAD's is refused before, proxy-routes.ts).
  // undici leaves out a 0 where the method expects no body (a DELETE, an OPTIONS), and closes the
  // connection that carried a body on such a method once its answer is in: a server that ignored
  // the body never reads it as the next call (test/e2e/proxy-edge-cases.test.ts).
  if (facts.length > 0 || (call.method !== "GET" && call.method !== "HEAD"))
    headers["content-length"] = String(facts.length);
  const query = upstreamQuery(call.query, adapter.keyQueryParameter);
  const imageCall = adapter.imageCall?.(call.method, call.path) ?? null;
  const exchange = new ProxyExchange(
    adapter.id,
    metering,
    adapter.streamsJson?.(call.path) ?? false,
    imageCall,
    call.usageOptionSet ?? false,
    call.providerKey,
    call.response,
    call.ownHeaders,
    pools.get(target.origin),
    {
      path: query ? `${target.path}?${query}` : target.path,
      method: call.method as Dispatcher.HttpMethod,
      headers,
      // undici writes an iterable body too (its types leave it out); content-length is set above.
      body: facts.upstreamBody() as Dispatcher.DispatchOptions["body"],
    },
    facts,
    pools.timeouts.idleMs,
    pools.deadlines,
    call.bodyBudget ?? unboundedBudget,
  );
  call.onSent?.();
  let outcome: ProxyOutcome | "gone-before-headers";
  try {
    outcome = await exchange.run();
  } catch (error) {
    exchange.releaseRoom();
    // A GatewayError is the gateway's own refusal (the shutdown's deadline), not the provider's failure.
    if (isGatewayError(error)) throw error;
    const failure = upstreamError(error, adapter.id);
    if (isSuccessStatus(exchange.status)) answeredFailures.add(failure);
    throw failure;
  }
  // An image generation's model is read from the parsed body, as the provider reads it (the last
  // top-level `model`), for its price.
  const requestedModel = () => (imageCall === null ? facts.model() : facts.imageModel(imageCall));
  if (outcome === "gone-before-headers") {
    exchange.releaseRoom();
    const model = requestedModel();
    return failed(499, "aborted", null, model instanceof Promise ? await model : model);
  }
  const reading = exchange.meter?.finish() ?? { usage: emptyUsage(), model: null };
  // Only a decompressing meter answers later: it waits for its decompressor to catch up.
  const read: MeterReading = reading instanceof Promise ? await reading : reading;
  // A model the answer names that quotes the key is not taken (the model asked is named instead): a
  // compatible server that echoes the request may name it there, a success's body is never masked
  // (docs/decisions/0010), and the row would keep the whole key in plain text, shown by the admin
  // API's usage report and `sluice usage`.
  const seen: MeterReading =
    read.model !== null && quotesKey(read.model, call.providerKey) ? { ...read, model: null } : read;
  // Read: the answer bytes the meter kept count no more.
  exchange.releaseRoom();
  // The model the request named: only read when the provider's answer does not say (a promise only
  // for a compressed body, decoded for it).
  const named = responses === "poll" || seen.model === null ? requestedModel() : null;
  const requestModel = named instanceof Promise ? await named : named;
  const backgroundRun = responses === null ? null : finishedRun(call.projectId, seen, requestModel);
  // A stream whose error event came before any completed image is an error answer, which records
  // no cost (its partial images were billed as tokens the catalogue has no price for), not the 0 of
  // no image: priced by its tokens, where it has any.
  const generated =
    imageCall === null || seen.images === undefined || (seen.failed === true && seen.images.images === 0)
      ? null
      : generatedImages(seen.images, outcome !== "ok", () => facts.requestedImages(imageCall));
  const images = generated instanceof Promise ? await generated : generated;
  return {
    status: exchange.status,
    // A stream that began 200 and then carried the provider's error event failed too.
    outcome: outcome === "ok" && (exchange.status >= 400 || seen.failed === true) ? "error" : outcome,
    streamed: exchange.streamed,
    // A poll's own row records no tokens and no model, as any GET's.
    usage: backgroundRun !== null || responses === "poll" ? emptyUsage() : seen.usage,
    model: responses === "poll" ? requestModel : (seen.model ?? requestModel),
    timeToFirstByteMs: exchange.timeToFirstByteMs,
    errorCode: null,
    backgroundRun,
    images,
  };
}

/** How a POST's own tokens are read: as its provider reports them, or as the Interactions API does (provider C). */
function postMetering(adapter: ProviderAdapter, path: string): Metering {
  return adapter.interactionsCall?.(path) ? "interactions" : "tokens";
}

/** The background run a Responses API answer reports finished, with its tokens; null when none. */
function finishedRun(
  projectId: string,
  seen: MeterReading,
  requestModel: string | null,
): BackgroundRun | null {
  if (seen.usage.inputTokens === null && seen.usage.outputTokens === null) return null;
  const rowId = backgroundRowId(projectId, seen.response);
  if (rowId === null) return null;
  return {
    rowId,
    usage: seen.usage,
    model: seen.model ?? requestModel,
    batch: seen.response?.object === "batch",
  };
}

function failed(
  status: number,
  outcome: ProxyOutcome,
  errorCode: string | null,
  model: string | null,
): ForwardResult {
  return {
    status,
    outcome,
    streamed: false,
    usage: { inputTokens: null, outputTokens: null, cachedInputTokens: null, reasoningTokens: null },
    model,
    timeToFirstByteMs: null,
    errorCode,
    backgroundRun: null,
    images: null,
  };
}

/**
 * Maps a failure to reach the provider onto the error table; retry advice goes in Retry-After. A
 * provider not reached, or that closed the connection, may answer the next try: retryable, after a
 * second. An answer that is not HTTP (or HTTP Sluice will not read) comes back the same on every
 * try, as a base URL naming another protocol's port does: not retryable, and no Retry-After to
 * retry on, until the operator mends the base URL or the server.
 */
function upstreamError(error: unknown, provider: ProviderId): GatewayError {
  const code = (error as { code?: unknown }).code;
  if (isUpstreamTimeoutCode(code)) return providerTimeout(error, provider);
  const refused = unaskedAnswer(error);
  const message = refused?.answer ?? upstreamFailure(error, code);
  const retryable = refused === null && message !== notHttpMessage;
  return new GatewayError("PROVIDER_ERROR", message, {
    cause: refused ?? error,
    provider,
    ...(retryable ? { headers: { "retry-after": "1" } } : {}),
    details: { retryable },
  });
}

/**
 * What went wrong before the provider's answer began, by the error's code: the client (and the
 * operator reading its error) learns whether the provider was not reached at all, closed the
 * connection on the request, or answered with something that is not HTTP (a self-hosted server
 * behind the wrong port, a middlebox).
 */
function upstreamFailure(error: unknown, code: unknown): string {
  // llhttp's errors carry an `HPE_` code, except the first line's, which undici checks itself.
  if ((error as { name?: unknown }).name === "HTTPParserError") return notHttpMessage;
  if (typeof code === "string") {
    if (code === "UND_ERR_HEADERS_OVERFLOW" || code === "SLUICE_UNOFFERED_TRANSFER_CODING")
      return notHttpMessage;
    // undici reports a head announcing a body the connection then lacks (`connection: close`) as a
    // content-length mismatch, as it reports two content-lengths: the one may be a cut, so it is
    // retryable, and named for what the client can check rather than as an answer not HTTP.
    if (code === "UND_ERR_RES_CONTENT_LENGTH_MISMATCH") return lengthMismatchMessage;
    if (code === "UND_ERR_SOCKET" || code === "ECONNRESET" || code === "EPIPE")
      return "The provider closed the connection before answering";
  }
  return "The provider could not be reached";
}

const lengthMismatchMessage = "The provider's answer was not the length its content-length announced";
