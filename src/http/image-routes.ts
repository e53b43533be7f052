import type { IncomingHttpHeaders } from "node:http";
import { pipeline, type Readable } from "node:stream";
import { GatewayError } from "../errors.js";
import { generateImages, type ImageGenerationDeps, imageModelFor } from "../images/generate-image.js";
import type { AnswerReservation } from "../images/image-answer-size.js";
import { parseImageRequest } from "../images/image-request.js";
import type { VaultFile } from "../images/local-vault.js";
import type { UrlSigner } from "../images/signed-url.js";
import { mediaTypeOf, vaultMaxAgeSeconds } from "../images/vault-store.js";
import type { Logger } from "../observability/logger.js";
import { providerFailureFacts } from "../observability/provider-failure-log.js";
import {
  createSuppressionWindows,
  type SuppressionWindowsOptions,
} from "../observability/suppression-windows.js";
import { type Admit, nothingSent } from "./admission.js";
import { type BodyBudget, type BodyShare, holdInShare } from "./body-budget.js";
import { requestedRange } from "./byte-range.js";
import { clientDisconnected } from "./client-watch.js";
import { answerWithJson, type CallSoFar } from "./json-answer-call.js";
import { jsonBodyLimits } from "./json-shape.js";
import { parseJsonObject } from "./read-body.js";
import type { RequestContext, Router } from "./router.js";
import { closeIfBodyUnread, setHeaders } from "./send.js";

export interface ImageRouteDeps extends ImageGenerationDeps {
  admit: Admit;
  /**
   * The request-body bytes held in memory by this route and the structured ones together, where a
   * call reserves the images it will hold too (decision 0054).
   */
  bodyBudget: BodyBudget;
  maxBodyBytes: number;
  /** SLUICE_MAX_PROVIDER_RESPONSE_BYTES: no image reserved is larger than an answer that can hold it. */
  maxProviderResponseBytes: number;
  /** For a vault file that fails to read once its answer has begun (no error answer can say it then). */
  logger: Pick<Logger, "warn">;
  /**
   * The windows those lines are coalesced in (default: 10 s, an unref'd timer each; the clock for
   * tests), and the gateway's `registry`, whose close writes the counts of those still open.
   */
  vaultReadWindows?: Partial<
    Pick<SuppressionWindowsOptions<unknown>, "windowMs" | "now" | "schedule" | "registry">
  >;
  /** Present when the vault is local: the gateway serves its files through signed URLs. */
  localVault?: { signer: UrlSigner; open(path: string): Promise<VaultFile | null> };
}

const vaultRoute = "/v1/vault/*";

/** Windows beyond this many close at once (one per error code: Node's codes are few). */
const maxVaultReadKeys = 50;

/**
 * Logs a local vault file's read that failed once its answer had begun, at warn, at most once per
 * error code per window (10 s), as provider-failure-log.ts does the other dependency failures: a
 * failing disk under traffic fails every answer, and a line each would drown the log. The others
 * of the window are counted, and when it ends with any counted, one more line says how many
 * (`vault read failures suppressed`).
 */
function createVaultReadLog(logger: Pick<Logger, "warn">, options: ImageRouteDeps["vaultReadWindows"] = {}) {
  const windowMs = options.windowMs ?? 10_000;
  const windows = createSuppressionWindows<{ code: string }>({
    // The test clock and timers, and the gateway's registry, as given.
    ...options,
    windowMs,
    maxKeys: maxVaultReadKeys,
    onSuppressed: ({ code }, suppressed) =>
      logger.warn(
        { dependency: "vault", code, route: vaultRoute, suppressed, windowMs },
        "vault read failures suppressed",
      ),
  });
  return (error: unknown, path: string, requestId: string): void => {
    const { code, cause } = providerFailureFacts("vault", error);
    if (!windows.open(code, { code })) return;
    logger.warn(
      { dependency: "vault", code, cause, path, requestId, route: vaultRoute },
      "vault read failed",
    );
  };
}

/** POST /v1/image, /v1/image/{projectId}, and GET /v1/vault/{path} for the local vault. */
export function registerImageRoutes(router: Router, deps: ImageRouteDeps): void {
  const generate = (context: RequestContext) => handleGenerate(deps, context);
  router.on("POST", "/v1/image", generate);
  router.on("POST", "/v1/image/:projectId", generate);
  const local = deps.localVault;
  if (local) {
    const logReadFailure = createVaultReadLog(deps.logger, deps.vaultReadWindows);
    router.on("GET", vaultRoute, async ({ params, query, request, requestId, response }) => {
      const path = params["*"] ?? "";
      const search = new URLSearchParams(query);
      const verified = local.signer.verify(path, search);
      if (verified.verdict !== "ok")
        throw new GatewayError(
          "FORBIDDEN",
          verified.verdict === "expired" ? "This vault URL has expired" : "This vault URL is not valid",
        );
      const file = await local.open(path).catch((error: unknown) => {
        throw unreadable(error);
      });
      if (!file) throw new GatewayError("NOT_FOUND", "No such vault object");
      const maxAge = vaultMaxAgeSeconds(verified.lastSecond, deps.now().getTime());
      // A file is never rewritten (a new image gets a new name): its size and time name its bytes,
      // so a client whose copy is stale (past its max-age) revalidates it instead of fetching it.
      const etag = `"${Math.trunc(file.modified.getTime()).toString(16)}-${file.size.toString(16)}"`;
      const fileHeaders = {
        "accept-ranges": "bytes",
        "cache-control": `private, max-age=${maxAge}`,
        etag,
        "last-modified": file.modified.toUTCString(),
        // Served from Sluice's origin: a browser must take it for the image type it says, never sniff.
        "x-content-type-options": "nosniff",
      };
      setHeaders(response, fileHeaders);
      closeIfBodyUnread(response);
      if (notModified(request.headers, etag, file.modified)) {
        await file.close();
        response.statusCode = 304;
        response.end();
        return;
      }
      // Range is for GET alone (RFC 9110 §14.2): a HEAD describes the whole file.
      const range = request.method === "GET" ? requestedRange(request.headers, file.size, etag) : null;
      if (range === "past-end" || range === "empty-suffix") {
        await file.close();
        throw new GatewayError(
          "RANGE_NOT_SATISFIABLE",
          range === "past-end"
            ? `The range asked for starts at or past the end of this ${file.size}-byte file`
            : `The range asked for is the last 0 bytes of this ${file.size}-byte file: ask for at least one`,
          { headers: { "content-range": `bytes */${file.size}` } },
        );
      }
      const length = range ? range.last - range.first + 1 : file.size;
      setHeaders(response, { "content-type": mediaTypeOf(path), "content-length": String(length) });
      if (range) {
        response.statusCode = 206;
        response.setHeader("content-range", `bytes ${range.first}-${range.last}/${file.size}`);
      }
      if (request.method === "HEAD" || length === 0) {
        await file.close();
        response.end();
        return;
      }
      // A read that fails before its first chunk (EIO, EISDIR) leaves the answer unbegun: it is the
      // 503 of a file that cannot be read, without the file's headers (a max-age on it could keep
      // it), the file closed (the failed stream is destroyed).
      const body = file.stream(range ?? undefined);
      await firstChunk(body).catch((error: unknown) => {
        for (const name of [...Object.keys(fileHeaders), "content-type", "content-length", "content-range"])
          response.removeHeader(name);
        throw unreadable(error);
      });
      // Streamed as the client takes it: the file is never held whole, however many clients read it
      // slowly at once. A client that leaves, or a file that fails to read once the answer is under
      // way, ends it cut short (pipeline destroys both), with the file closed. The answer has begun,
      // so no 503 can say it: the read's failure is logged (a client that left is none), once per
      // error code and window, the others of the window counted (createVaultReadLog).
      pipeline(body, response, (error) => {
        if (!error || (error as NodeJS.ErrnoException).code === "ERR_STREAM_PREMATURE_CLOSE") return;
        logReadFailure(error, path, requestId);
      });
    });
  }
}

/**
 * A vault file that cannot be read (its open, or its first read): the vault's directory is a
 * dependency that failed, as when storing: 503, logged by its code and message (the file's path at
 * most; the route, not the URL, so no signature).
 */
function unreadable(error: unknown): GatewayError {
  return new GatewayError("SERVICE_UNAVAILABLE", "The image vault could not read this file", {
    cause: error,
    headers: { "retry-after": "5" },
    dependency: "vault",
    details: { retryable: true },
  });
}

/**
 * Resolves once `stream` has its first chunk, which it keeps (put back, to be read first), or has
 * ended or closed without one (its pipeline says so); rejects with its error if it fails first.
 * The stream is left paused. Its error listener stays: an error in the ticks before the caller's
 * pipeline takes the stream would otherwise be thrown (a settled promise ignores it; the pipeline
 * gets it from the stream's state).
 */
function firstChunk(stream: Readable): Promise<void> {
  return new Promise((resolve, reject) => {
    const stop = () => {
      stream.off("data", onData);
      stream.off("end", onEnd);
      stream.off("close", onEnd);
    };
    const onData = (chunk: Buffer) => {
      stop();
      stream.pause();
      stream.unshift(chunk);
      resolve();
    };
    const onEnd = () => {
      stop();
      resolve();
    };
    stream.on("data", onData);
    stream.once("error", (error) => {
      stop();
      reject(error);
    });
    stream.once("end", onEnd);
    stream.once("close", onEnd);
  });
}

/**
 * Whether the client's copy is current (RFC 9110 §13.1.2, §13.1.3): If-None-Match naming the file's
 * tag (weakly compared) or `*`; else, without If-None-Match, If-Modified-Since at or after the
 * file's time (in whole seconds, as Last-Modified says it). A date that does not parse is ignored.
 */
function notModified(headers: IncomingHttpHeaders, etag: string, modified: Date): boolean {
  const noneMatch = headers["if-none-match"];
  if (noneMatch !== undefined)
    return noneMatch
      .split(",")
      .map((tag) => tag.trim().replace(/^W\//, ""))
      .some((tag) => tag === "*" || tag === etag);
  const since = Date.parse(headers["if-modified-since"] ?? "");
  return Number.isFinite(since) && Math.floor(modified.getTime() / 1000) * 1000 <= since;
}

function handleGenerate(deps: ImageRouteDeps, context: RequestContext): Promise<void> {
  return answerWithJson(
    deps.admit,
    deps.bodyBudget,
    context,
    "image",
    async (call, signal, soFar, readBody, share) => {
      const body = parseImageRequest(
        parseJsonObject(await readBody(deps.maxBodyBytes), {
          limits: jsonBodyLimits,
          takes:
            '/v1/image takes one JSON object such as {"prompt": "…", "providerOptions": {…}} (docs/images.md)',
        }),
      );
      const model = imageModelFor(call.provider, call.project, body, deps.defaultImageModels);
      soFar.model = model;
      // Nothing goes to the provider before its images are reserved, just before its call: a call
      // refused before (its price past the cap) or whose client left (while its price was counted
      // in Redis) sent nothing, and its row says so (no cost), not that the provider may have run.
      soFar.spend = nothingSent;
      const { result, costUsd, usage } = await generateImages(
        deps,
        call,
        body,
        // Heard only once a provider call answered with a success (2xx), its images billed.
        (billed, billedUsage) => {
          soFar.spend = { usage: billedUsage, costUsd: billed, providerAnswered: true };
        },
        signal,
        sendingOnceReserved(reserveImages(share, deps.maxProviderResponseBytes), signal, soFar),
      );
      return { body: result, model, usage, costUsd, providerAnswered: true };
    },
  );
}

/**
 * `reservation`, whose `reserve` comes just before the provider call (`generateImages`): a client
 * gone by then (its signal aborted) stops the call there, nothing sent; otherwise the call's row is
 * no longer one of nothing sent (`soFar.spend`) once its images are reserved.
 */
function sendingOnceReserved(
  reservation: AnswerReservation,
  signal: AbortSignal,
  soFar: CallSoFar,
): AnswerReservation {
  return {
    reserve(images, bytesEach) {
      if (signal.aborted) throw clientDisconnected();
      reservation.reserve(images, bytesEach);
      delete soFar.spend;
    },
    settle: (bytes) => reservation.settle(bytes),
  };
}

/**
 * A call's images counted in its share of the body budget (decision 0054): reserved before the
 * provider call, each at most `maxImageBytes` (an answer past SLUICE_MAX_PROVIDER_RESPONSE_BYTES is
 * refused, so no image that comes is larger), as a body is (`holdInShare`: the 503 of a body that
 * does not fit, and a call no other holds any of beside it always fits); then the images' real
 * size in its place, more held (counted though past the budget: they are already in memory) or
 * given back. The share gives all back when the call ends, however it ends.
 */
function reserveImages(share: BodyShare, maxImageBytes: number): AnswerReservation {
  let reserved = 0;
  return {
    reserve(images, bytesEach) {
      const bytes = images * Math.min(bytesEach, maxImageBytes);
      holdInShare(share, bytes);
      reserved = bytes;
    },
    settle(bytes) {
      if (bytes > reserved) share.hold(bytes - reserved);
      else share.giveBack(reserved - bytes);
      reserved = bytes;
    },
  };
}
