import { EventEmitter } from "node:events";
import type { ServerResponse } from "node:http";
import { Pool } from "undici";
import { GatewayError } from "../errors.js";
import type { ProviderAdapter } from "../providers/provider-adapter.js";
import type { TokenUsage } from "../usage/token-usage.js";
import { clientResponseHeaders, upstreamRequestHeaders } from "./header-policy.js";
import { createUsageMeter } from "./usage-meter.js";

export interface UpstreamTimeouts {
  connectMs: number;
  headersMs: number;
  /** Longest silence between two body chunks. */
  idleMs: number;
}

export interface ForwardCall {
  adapter: ProviderAdapter;
  /** The provider path after /v1/provider-x/{projectId}/, already checked by safeProviderPath. */
  path: string;
  query: string;
  method: string;
  body: Buffer;
  incomingHeaders: import("node:http").IncomingHttpHeaders;
  providerKey: string;
  response: ServerResponse;
  /** Called once the upstream request has been sent: the gateway's own overhead ends here. */
  onSent?: () => void;
}

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
}

// Failures that prove nothing was sent; a reset may come after the body went out, so it is not retried.
const connectFailures = new Set(["ECONNREFUSED", "UND_ERR_CONNECT_TIMEOUT", "ENOTFOUND", "EAI_AGAIN"]);

/**
 * One keep-alive pool per upstream origin. `request` (not fetch) keeps the hot path free of Web
 * Streams; bodies are sent with content-length.
 */
export function createUpstreamPools(timeouts: UpstreamTimeouts) {
  const pools = new Map<string, Pool>();
  return {
    timeouts,
    get(origin: string): Pool {
      let pool = pools.get(origin);
      if (!pool) {
        pool = new Pool(origin, {
          connections: 256,
          pipelining: 1,
          keepAliveTimeout: 30_000,
          connect: { timeout: timeouts.connectMs },
          headersTimeout: timeouts.headersMs,
          bodyTimeout: timeouts.idleMs,
        });
        pools.set(origin, pool);
      }
      return pool;
    },
    async close(): Promise<void> {
      await Promise.all([...pools.values()].map((pool) => pool.close()));
      pools.clear();
    },
  };
}

export type UpstreamPools = ReturnType<typeof createUpstreamPools>;

/**
 * Forwards one authenticated call and copies the provider's answer to the client as it arrives:
 * status, headers (minus hop-by-hop) and body bytes unchanged, with backpressure, reading usage
 * on the way. A client disconnect aborts the upstream request at once. The request is sent at
 * most once more, and only when the first connection attempt failed before anything was sent.
 */
export async function forward(pools: UpstreamPools, call: ForwardCall): Promise<ForwardResult> {
  const { adapter, response } = call;
  const target = adapter.target(call.path);
  const headers = upstreamRequestHeaders(call.incomingHeaders);
  adapter.inject(headers, call.providerKey);
  if (call.body.length > 0 || call.method !== "GET") headers["content-length"] = String(call.body.length);
  const requestModel = adapter.requestModel(call.path, call.body);

  // undici takes an EventEmitter as its abort signal: far cheaper per request than an AbortController.
  const abort = new EventEmitter();
  let aborted = false;
  // One `close` listener for the whole call: until the response body flows it aborts the upstream
  // request, then it stops the copy. `close` also follows a completed response (on the next tick,
  // before this function resumes): only a response that did not finish means the client went away.
  let onClientGone = () => {
    aborted = true;
    abort.emit("abort");
  };
  const onClose = () => {
    if (!response.writableFinished) onClientGone();
  };
  response.once("close", onClose);
  const pool = pools.get(target.origin);
  const path = call.query ? `${target.path}?${call.query}` : target.path;
  const sentAt = performance.now();
  call.onSent?.();

  let upstream: Awaited<ReturnType<Pool["request"]>>;
  try {
    upstream = await sendWithConnectRetry(pool, () => aborted, {
      path,
      method: call.method as "POST",
      headers,
      body: call.body.length > 0 ? call.body : null,
      signal: abort,
    });
  } catch (error) {
    response.off("close", onClose);
    if (aborted) return failed(499, "aborted", null, requestModel);
    throw upstreamError(error);
  }

  const timeToFirstByteMs = performance.now() - sentAt;
  const contentType = String(upstream.headers["content-type"] ?? "");
  const streamed = contentType.startsWith("text/event-stream");
  const meter = createUsageMeter(adapter.id, { streaming: streamed, contentType });
  response.writeHead(upstream.statusCode, clientResponseHeaders(upstream.headers));
  // (no flushHeaders: the headers leave with the first chunk, as soon as it arrives)

  const outcome = await copyBody(
    upstream.body,
    response,
    (chunk) => meter.push(chunk),
    (stop) => {
      onClientGone = stop;
    },
  );
  response.off("close", onClose);
  const seen = meter.finish();
  return {
    status: upstream.statusCode,
    outcome: outcome === "ok" && upstream.statusCode >= 400 ? "error" : outcome,
    streamed,
    usage: seen.usage,
    model: seen.model ?? requestModel,
    timeToFirstByteMs,
    errorCode: null,
  };
}

async function sendWithConnectRetry(
  pool: Pool,
  aborted: () => boolean,
  options: Parameters<Pool["request"]>[0],
): Promise<Awaited<ReturnType<Pool["request"]>>> {
  try {
    return await pool.request(options);
  } catch (error) {
    const code = (error as { code?: string }).code ?? "";
    if (!connectFailures.has(code) || aborted()) throw error;
    return await pool.request(options);
  }
}

/**
 * Copies the upstream body to the client chunk by chunk, pausing while the client's buffer is full.
 * `onClientGone` receives the function that stops the copy when the client disconnects.
 */
function copyBody(
  body: NodeJS.ReadableStream & { destroy(error?: Error): void },
  response: ServerResponse,
  onChunk: (chunk: Buffer) => void,
  onClientGone: (stop: () => void) => void,
): Promise<ProxyOutcome> {
  return new Promise((resolve) => {
    let settled = false;
    const settle = (outcome: ProxyOutcome) => {
      if (settled) return;
      settled = true;
      response.off("drain", onDrain);
      resolve(outcome);
    };
    const onDrain = () => body.resume();
    onClientGone(() => {
      body.destroy();
      settle("aborted");
    });
    body.on("data", (chunk: Buffer) => {
      onChunk(chunk);
      if (!response.write(chunk)) {
        body.pause();
        // Registered only when the client's buffer is full, which most responses never reach.
        response.once("drain", onDrain);
      }
    });
    body.once("end", () => {
      response.end();
      settle("ok");
    });
    body.once("error", () => {
      // The provider cut the stream or went silent: the client sees the cut too.
      response.destroy();
      settle(response.writableFinished ? "ok" : "error");
    });
  });
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
  };
}

/** Maps a failure to reach the provider onto the error table; retry advice goes in Retry-After. */
export function upstreamError(error: unknown): GatewayError {
  const code = (error as { code?: string }).code ?? "";
  if (code === "UND_ERR_HEADERS_TIMEOUT" || code === "UND_ERR_BODY_TIMEOUT") {
    return new GatewayError("PROVIDER_TIMEOUT", "The provider did not answer in time", { cause: error });
  }
  return new GatewayError("PROVIDER_ERROR", "The provider could not be reached", {
    cause: error,
    headers: { "retry-after": "1" },
  });
}
