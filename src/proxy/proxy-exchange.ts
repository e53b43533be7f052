import { type ServerResponse, STATUS_CODES } from "node:http";
import type { Socket } from "node:net";
import type { Dispatcher, Pool } from "undici";
import { offRefusal, onRefusal } from "../deadline-refusal.js";
import type { GatewayError } from "../errors.js";
import type { BodyBudget, BodyShare } from "../http/body-budget.js";
import { cutAnswer } from "../http/cut-answer.js";
import { offConnectionClose, onConnectionClose, queuedConnection } from "../http/queued-answers.js";
import type { ImageCall } from "../providers/image-calls.js";
import type { ResponsesCall } from "../providers/provider-adapter.js";
import type { ProviderId } from "../providers/provider-id.js";
import { type DecompressingMeter, decompressingMeter, isDecompressing } from "./decompressing-meter.js";
import type { ProxyOutcome } from "./forward.js";
import { clientResponseHeaders, hasHeader, withoutHeaders } from "./header-policy.js";
import { ImageListScanner, withImageList } from "./image-list-scanner.js";
import { ImageStreamEvents } from "./image-stream-events.js";
import { InjectedUsageFilter } from "./injected-usage-filter.js";
import { CompressedKeyMask, maskKeyInHeader, ReflectedKeyMask } from "./reflected-key-mask.js";
import type { RequestFacts } from "./request-facts.js";
import type { UpstreamDeadlines, Watched } from "./upstream-deadlines.js";
import {
  answerCarriesNoUsage,
  createUsageMeter,
  type MeterRoom,
  noUsageMeter,
  type UsageMeter,
} from "./usage-meter.js";

/**
 * What is metered of a call: its own tokens (any POST), a Responses API call's (see ResponsesCall),
 * or an Interactions API call's (provider C's `interactions`, whose answer reports them in its own shape).
 */
export type Metering = "tokens" | "interactions" | ResponsesCall;

// Failures that prove nothing was sent; a reset may come after the body went out, so it is not retried.
const connectFailures = new Set(["ECONNREFUSED", "UND_ERR_CONNECT_TIMEOUT", "ENOTFOUND", "EAI_AGAIN"]);

/**
 * One proxied exchange as an undici dispatch handler: the provider's headers and body chunks are
 * written to the client from undici's own callbacks, so no Readable stream, promise or async
 * resource is built per response (docs/decisions/0005). It implements the callbacks undici's core
 * calls (`onConnect`, `onHeaders`, `onData`, `onComplete`, `onError`), as undici's own `request`
 * does: a handler with the newer `onResponse*` callbacks is wrapped per request in an adapter that
 * parses the raw headers into an object, which costs more than reading them here once.
 * Backpressure: a chunk the client's buffer cannot take pauses the upstream parser (onData returns
 * false) until the client drains. A client that has not drained after `stallMs` (the upstream idle
 * timeout, whose own timer stops while the upstream is paused) is cut as one that left: else a
 * client that stops reading would hold its connection, the provider's and the call's memory for
 * as long as it liked.
 * The upstream headers and idle timeouts are not undici's (its timers are off on the proxy's pools)
 * but the gateway's one sweep's (upstream-deadlines.ts): each chunk only marks the clock restarted.
 */
export class ProxyExchange implements Dispatcher.DispatchHandler, Watched, MeterRoom {
  status = 0;
  streamed = false;
  meter: UsageMeter | DecompressingMeter | null = null;
  timeToFirstByteMs: number | null = null;
  /** The client's status line and headers, written with the first chunk (or at the end). */
  /** The provider's reason phrase, forwarded with its status. */
  private reason = "";
  private head: string[] | null = null;
  private headWritten = false;
  /** The head is written and every body byte is forwarded as it comes: onData's one test. */
  private verbatim = false;
  /**
   * Set when the usage chunk Sluice asked for is kept from the client, or when an answer that is not
   * a success may quote the key back; else the body passes as is.
   */
  private filter: InjectedUsageFilter | ReflectedKeyMask | CompressedKeyMask | MeteredOnly | null = null;
  private abortUpstream: ((reason: Error) => void) | null = null;
  private resumeUpstream: (() => void) | null = null;
  private sentAt = 0;
  private clientGone = false;
  /** The shutdown's deadline came before the answer began: the call fails with this (503). */
  private refusal: GatewayError | null = null;
  private retried = false;
  private drainListening = false;
  /** Made at the first stall only, and refreshed at each later one: no timer on the fast path. */
  private stallTimer: NodeJS.Timeout | null = null;
  private resolve: (outcome: ProxyOutcome | "gone-before-headers") => void = () => {};
  private reject: (error: unknown) => void = () => {};
  private settled = false;
  /** The connection, watched for a client that leaves while this request waits in a pipeline. */
  private queuedOn: Socket | null = null;
  /** The provider's answer is complete and a compressed error's body is being decoded (endDecoded). */
  private decoding = false;
  /**
   * The meter, when it reads a compressed answer through a decompressor: its queue for the
   * decompressor is bounded by pausing the provider as a full client buffer does (decoderKeepsUp).
   */
  private decompressing: DecompressingMeter | null = null;
  /** The provider is paused until the decompressor catches up (as `drainListening` for the client). */
  private decoderWaiting = false;
  /**
   * The JSON meter's kept answer bytes over 64 KiB in the body budget (MeterRoom): a share of its
   * own, taken at the first such byte (the request body's may be given back already), released
   * with `releaseRoom` when the call ends.
   */
  private meterShare: BodyShare | null = null;
  // The sweep's fields (Watched): set from onConnect until the provider's answer ends.
  deadlineSlot = -1;
  deadlineRestarted = false;
  deadline = 0;
  awaitingHeaders = true;

  constructor(
    private readonly provider: ProviderId,
    /** What the meter reads; null: no meter. */
    private readonly metering: Metering | null,
    /** The call asked for a stream sent as one JSON document (provider C's JSON array). */
    private readonly jsonStream: boolean,
    /** An image generation: a successful answer's images are counted too (JSON, or provider A's stream). */
    private readonly imageCall: ImageCall | null,
    /** Sluice set the stream usage option: an SSE answer's usage chunk is not forwarded. */
    private readonly usageOptionSet: boolean,
    /** The key injected: masked wherever the answer's headers, or a body that is no success, quote it. */
    private readonly providerKey: string,
    private readonly response: ServerResponse,
    private readonly ownHeaders: Record<string, string>,
    private readonly pool: Pool,
    private readonly options: Dispatcher.DispatchOptions,
    /** The request's body and what it named: let go of once undici has sent it. */
    private readonly facts: RequestFacts,
    /** How long a client may leave a write waiting for `drain` before it is cut. */
    private readonly stallMs: number,
    /** The sweep that runs the upstream headers and idle timeouts. */
    private readonly deadlines: UpstreamDeadlines,
    /** SLUICE_MAX_BUFFERED_BODY_BYTES: where a JSON answer's bytes kept whole for its usage count. */
    private readonly budget: BodyBudget,
  ) {}

  takeRoom(bytes: number): boolean {
    this.meterShare ??= this.budget.share();
    return this.meterShare.takeIfRoom(bytes);
  }

  giveRoom(bytes: number): void {
    this.meterShare?.giveBack(bytes);
  }

  /** The call has ended and its meter was read: the bytes it kept count no more. */
  releaseRoom(): void {
    this.meterShare?.release();
  }

  run(): Promise<ProxyOutcome | "gone-before-headers"> {
    return new Promise((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
      this.response.once("close", this.onClientClose);
      onRefusal(this.response, this.onRefused);
      // A pipelined request waiting behind another on its connection has no socket yet, and its
      // response hears no `close` when the client goes: the connection's own close is watched.
      this.queuedOn = queuedConnection(this.response);
      if (this.queuedOn !== null) onConnectionClose(this.queuedOn, this.onClientClose);
      this.sentAt = performance.now();
      this.pool.dispatch(this.options, this);
    });
  }

  // `close` also follows a completed response: only a response that did not finish means the
  // client went away.
  private readonly onClientClose = () => {
    if (this.settled || this.response.writableFinished) return;
    this.clientGone = true;
    // The provider's answer is all in, and its body is being decoded (endDecoded): nothing is left
    // to abort, and the call ends now rather than when the decode does.
    if (this.decoding) {
      this.finish("aborted");
      return;
    }
    // Until undici starts the request there is no abort function: onConnect aborts it then.
    this.abortUpstream?.(new Error("The client disconnected"));
  };

  // The drain refuses only a response whose head is not sent; the head may be held back still
  // (waiting for the first chunk), and is then never sent.
  private readonly onRefused = (refusal: GatewayError) => {
    if (this.settled || this.headWritten) return;
    this.refusal = refusal;
    this.abortUpstream?.(refusal);
  };

  // Node also emits `drain` from inside a write of the answer queued behind this one on the same
  // connection (a pipelined call's: its pending bytes' bookkeeping runs the server's drain handler),
  // and that call writes from inside undici's parser of its own provider connection. undici's resume
  // runs this call's parser at once, which it refuses while another one runs: an assertion, thrown
  // into the other call (its answer cut), and this call's provider left paused until the idle
  // timeout. The provider is resumed once the work under way is done.
  private readonly onDrain = () => {
    this.drainListening = false;
    if (!this.decoderWaiting) queueMicrotask(this.resumeAfterDrain);
  };

  private readonly resumeAfterDrain = () => {
    if (!this.drainListening && !this.decoderWaiting && !this.settled) this.resumeUpstream?.();
  };

  /**
   * Still waiting for `drain`: the client read nothing for stallMs. Cut as a client that leaves is
   * (onClientClose: the upstream request aborted, the row records what was seen, outcome aborted).
   * A timer that runs out after a drain is left alone until the next stall refreshes it.
   */
  private cutStalled(): void {
    if (this.drainListening && !this.settled) cutAnswer(this.response);
  }

  private finish(outcome: ProxyOutcome | "gone-before-headers"): void {
    this.settle(() => this.resolve(outcome));
  }

  /** Stops listening to the client and reports, once. */
  private settle(report: () => void): void {
    if (this.settled) return;
    this.settled = true;
    this.response.off("close", this.onClientClose);
    offRefusal(this.response, this.onRefused);
    if (this.queuedOn !== null) offConnectionClose(this.queuedOn, this.onClientClose);
    if (this.drainListening) this.response.off("drain", this.onDrain);
    if (this.stallTimer !== null) clearTimeout(this.stallTimer);
    this.deadlines.unwatch(this);
    report();
  }

  upstreamPaused(): boolean {
    return this.drainListening || this.decoderWaiting;
  }

  timedOut(error: Error): void {
    this.abortUpstream?.(error);
  }

  /** undici has written the whole request body: a large one is not kept for the rest of the answer. */
  onRequestSent(): void {
    // undici's headers timer restarted when the body was written: so does the sweep's clock.
    this.deadlineRestarted = true;
    this.facts.release(this.imageCall);
  }

  onConnect(abort: (reason?: Error) => void): void {
    this.abortUpstream = abort;
    if (this.clientGone) abort(new Error("The client disconnected"));
    else if (this.refusal) abort(this.refusal);
    else {
      this.awaitingHeaders = true;
      this.deadlines.watch(this);
    }
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void, statusText: string): boolean {
    // Each head restarts the clock; an informational one's the headers timeout (the final answer follows).
    this.deadlineRestarted = true;
    if (statusCode < 200) return true;
    this.awaitingHeaders = false;
    this.timeToFirstByteMs = performance.now() - this.sentAt;
    const head = clientResponseHeaders(rawHeaders, this.ownHeaders, this.providerKey);
    if (head.transferCoding !== "") {
      // Its body would reach the client still so coded, with nothing saying so (transfer-encoding
      // is hop-by-hop), and its usage would go unread: refused as an answer that is not HTTP (502).
      this.abortUpstream?.(new UnofferedTransferCoding(head.transferCoding));
      return false;
    }
    this.status = statusCode;
    const reason = reasonAsSent(statusText) ?? standardReason(statusCode);
    // The reason phrase is the provider's text as a header value is: a server that names the key it
    // refused there (`401 Invalid API key sk-…`) is masked as in its headers. A phrase shorter than
    // the key (every usual one) cannot quote it, plain or escaped, and costs one comparison.
    this.reason =
      reason.length >= this.providerKey.length && this.providerKey !== ""
        ? maskKeyInHeader(reason, this.providerKey)
        : reason;
    this.resumeUpstream = resume;
    // A 204 has no body (RFC 9112 6.3) and stands for no representation: its sender must not send a
    // content-length (RFC 9110 8.6), which an HTTP client after Sluice may count the body against
    // (undici's `request` does).
    this.head = statusCode === 204 ? withoutHeaders(head.headers, ["content-length"]) : head.headers;
    // Media types are case-insensitive (`Text/Event-Stream`).
    const sse = isEventStream(head.contentType);
    // A JSON-array stream is a stream too, though its usage is read as a JSON body is.
    this.streamed = sse || (this.jsonStream && statusCode < 300);
    if (this.metering !== null) {
      const options = {
        streaming: sse,
        responses: this.metering === "post" || this.metering === "poll" ? this.metering : undefined,
        interactions: this.metering === "interactions",
        // A JSON answer's bytes kept whole count in the body budget (an event stream keeps one event).
        room: sse ? undefined : this,
      };
      // Not when the bytes cannot lose an event unseen: compressed (it would have to be decoded and
      // compressed again), or with a content-length the client would then not get.
      if (
        this.usageOptionSet &&
        sse &&
        statusCode < 300 &&
        statusCode !== 205 &&
        head.contentEncoding === "" &&
        !hasHeader(head.headers, "content-length")
      ) {
        this.filter = new InjectedUsageFilter((tap) => createUsageMeter(this.provider, { ...options, tap }));
        this.meter = this.filter.meter;
        return true;
      }
      // An answer whose type holds no JSON (speech's audio, a file's bytes) reports no usage: none
      // of its bytes is kept (a JSON body's are, up to 4 MiB) nor decoded, and the row records none.
      let meter =
        !sse && answerCarriesNoUsage(head.contentType)
          ? noUsageMeter
          : createUsageMeter(this.provider, options);
      if (this.imageCall !== null && statusCode < 300)
        meter = withImageList(
          meter,
          sse ? new ImageStreamEvents() : new ImageListScanner(this.imageCall.list, this.imageCall.imageKeys),
        );
      // A provider that ignored `accept-encoding: identity`: usage is read through a decompressor,
      // while the client still gets the provider's bytes and its content-encoding.
      this.meter =
        head.contentEncoding === "" || meter === noUsageMeter
          ? meter
          : decompressingMeter(meter, head.contentEncoding);
      if (isDecompressing(this.meter)) this.decompressing = this.meter;
    }
    if (statusCode === 205) {
      // A 205 has no content (RFC 9110 15.3.6), and its sender must say so: a provider's body is
      // metered and not forwarded, and the 205 goes with a content-length of 0 (its content-encoding,
      // which no byte carries, left out), so the connection stays fit for the next request.
      this.filter = new MeteredOnly(this.meter);
      this.head = [
        ...withoutHeaders(head.headers, ["content-length", "content-encoding"]),
        "content-length",
        "0",
      ];
    } else if (statusCode >= 300 && head.contentEncoding === "")
      this.filter = new ReflectedKeyMask(Buffer.from(this.providerKey, "latin1"), this.meter);
    else if (statusCode >= 300) {
      // A compressed body cannot be masked byte for byte (Sluice asks for identity, and a provider
      // compressed anyway): it is held, decoded and masked whole, and the client gets it decoded.
      this.filter = new CompressedKeyMask(
        Buffer.from(this.providerKey, "latin1"),
        head.contentEncoding,
        this.meter,
      );
      this.head = withoutHeaders(head.headers, ["content-encoding", "content-length"]);
    }
    return true;
  }

  /**
   * Writes the status line and headers with the first bytes forwarded, as they would leave anyway: until
   * then a provider that fails or goes silent can still be answered with a clean 502 or 504.
   * Returns the error when Node refuses the provider's headers: nothing reached the client, so
   * that is a 502 too.
   */
  private writeHead(): Error | null {
    try {
      // One flat list and nothing set before: Node writes it without per-header bookkeeping. The
      // reason phrase is the provider's (reasonAsSent); one Node refuses (a character it does not
      // write) is Node's.
      try {
        this.response.writeHead(this.status, this.reason, this.head ?? []);
      } catch (error) {
        if ((error as { code?: unknown }).code !== "ERR_INVALID_CHAR" || this.response.headersSent)
          throw error;
        this.response.writeHead(this.status, standardReason(this.status), this.head ?? []);
      }
      this.headWritten = true;
      // A compressed answer's meter may ask to pause the provider: its chunks take the longer path.
      this.verbatim = this.filter === null && this.decompressing === null;
      return null;
    } catch (error) {
      return error as Error;
    }
  }

  onData(chunk: Buffer): boolean {
    this.deadlineRestarted = true;
    // One test per chunk, as before the filter existed: a call without it pays nothing for it.
    if (!this.verbatim) {
      if (this.filter !== null) {
        const forwarded = this.filter.pass(chunk);
        // Held back whole (an unfinished first event, an error's tail that may start the key): the
        // head waits with it, so a provider that fails now is still answered with a clean 502 or 504.
        if (forwarded === null || forwarded.length === 0)
          return this.decompressing === null || this.decoderKeepsUp(true);
        if (!this.headWritten && !this.headWrittenFor()) return false;
        const written = this.write(forwarded);
        return this.decompressing === null ? written : this.decoderKeepsUp(written);
      }
      if (!this.headWritten && !this.headWrittenFor()) return false;
      if (this.decompressing !== null) {
        this.decompressing.push(chunk);
        return this.decoderKeepsUp(this.write(chunk));
      }
    }
    this.meter?.push(chunk);
    return this.write(chunk);
  }

  /** Writes the head before the first bytes forwarded; false (the call aborted) when Node refuses it. */
  private headWrittenFor(): boolean {
    const refused = this.writeHead();
    if (refused) this.abortUpstream?.(refused); // undici reports it through onError
    return refused === null;
  }

  /**
   * A compressed answer's chunk went to the decompressing meter, and to the client (`written`: its
   * buffer took it). The provider is paused (false) also while the decompressor lags more than its
   * cap behind, until it catches up: a provider sending faster than the thread pool decodes would
   * otherwise have its whole body queued for it, however fast the client reads. Resumed once both
   * the client and the decompressor have room.
   */
  private decoderKeepsUp(written: boolean): boolean {
    const meter = this.decompressing as DecompressingMeter;
    if (!meter.full) return written;
    if (!this.decoderWaiting) {
      this.decoderWaiting = true;
      meter.whenRoom(() => this.onDecoderRoom());
    }
    return false;
  }

  private onDecoderRoom(): void {
    this.decoderWaiting = false;
    if (!this.drainListening && !this.settled) this.resumeUpstream?.();
  }

  /** Writes to the client; false (pause the provider) until it drains when its buffer is full. */
  private write(chunk: Buffer): boolean {
    if (this.response.write(chunk)) return true;
    // Listened for only when the client's buffer is full, which most responses never reach.
    if (!this.drainListening) {
      this.drainListening = true;
      this.response.once("drain", this.onDrain);
      if (this.stallTimer === null)
        this.stallTimer = setTimeout(() => this.cutStalled(), this.stallMs).unref();
      else this.stallTimer.refresh();
    }
    return false;
  }

  onComplete(): void {
    this.deadlines.unwatch(this);
    const refused = this.headWritten ? null : this.writeHead();
    if (refused) {
      this.settle(() => this.reject(refused));
      return;
    }
    // The clean end: the meter reads an unterminated last event where the provider's client does
    // (first: the usage filter judges that event by it). Never on a cut stream (onError).
    this.meter?.end();
    // An unterminated last event the filter held: the provider's bytes, all of them, but for the
    // usage chunk. (On a cut stream, onError, it is not forwarded: no client dispatches it.) A
    // compressed error's body is decoded off the event loop first: only that filter answers later.
    const rest = this.filter?.end();
    if (rest instanceof Promise) {
      this.decoding = true;
      void rest.then((body) => this.endDecoded(body));
      return;
    }
    if (rest) this.response.write(rest);
    this.endResponse();
    this.finish("ok");
  }

  /**
   * Ends the client's answer. Its last bytes may still wait in the gateway's buffer, for a client
   * that stopped reading with its kernel buffers full: no write of them waited for `drain` (each
   * took less than the buffer's high-water mark), so no stall timer runs, and Node's keep-alive
   * timer starts only once they are flushed. Such a connection is closed when they have waited
   * stallMs unread, as a stalled stream is cut; the call, its provider's answer whole, is done.
   * An answer flushed at once (the fast path) sets no timer.
   */
  private endResponse(): void {
    const { response } = this;
    response.end();
    if (response.writableLength === 0) return;
    const unread = setTimeout(() => {
      if (!response.writableFinished) response.destroy();
    }, this.stallMs).unref();
    response.once("close", () => clearTimeout(unread));
  }

  /**
   * Ends a compressed error's answer with its decoded, masked body (CompressedKeyMask). The client
   * may have left meanwhile, or the shutdown cut its connection: onClientClose finished the call
   * (aborted), and nothing is written. (A method, not a bound field: no call but this one pays for it.)
   */
  private endDecoded(body: Buffer | null): void {
    this.decoding = false;
    if (this.settled) return;
    if (this.clientGone || this.response.destroyed) {
      this.finish("aborted");
      return;
    }
    if (body) this.response.write(body);
    this.endResponse();
    this.finish("ok");
  }

  onError(error: Error): void {
    this.deadlines.unwatch(this);
    if (this.settled) return;
    if (!this.headWritten) {
      // Nothing reached the client yet.
      const code = (error as { code?: string }).code ?? "";
      if (this.clientGone) this.finish("gone-before-headers");
      else if (this.refusal) this.settle(() => this.reject(this.refusal));
      else if (this.status === 0 && connectFailures.has(code) && !this.retried) {
        this.retried = true;
        this.abortUpstream = null;
        this.pool.dispatch(this.options, this);
      } else if (
        (this.status === 304 || this.status === 204) &&
        code === "UND_ERR_RES_CONTENT_LENGTH_MISMATCH"
      ) {
        // A 304's content-length is the size of the representation it stands for (RFC 9110 8.6), and
        // a 204's one it must not have sent (dropped in onHeaders): neither has a body (RFC 9112
        // 6.3), and the head is all of it. undici counts the body's bytes against the length anyway,
        // and drops the connection: the answer is whole, and goes to the client.
        this.onComplete();
      } else this.settle(() => this.reject(error));
      return;
    }
    // The provider cut the stream or went silent, or the client left: the client sees the cut too.
    cutAnswer(this.response);
    this.finish(this.clientGone ? "aborted" : this.response.writableFinished ? "ok" : "error");
  }
}

/**
 * A body that is read for its usage and forwarded none of (a 205's, see onHeaders): every chunk is
 * held back whole, so the head waits for the end, and a provider that fails meanwhile is answered
 * with a clean 502 or 504.
 */
class MeteredOnly {
  constructor(private readonly meter: UsageMeter | DecompressingMeter | null) {}

  pass(chunk: Buffer): null {
    this.meter?.push(chunk);
    return null;
  }

  end(): null {
    return null;
  }
}

/**
 * The provider's reason phrase as it sent it, in the form Node writes a status line in (one latin-1
 * character a byte): undici decodes its bytes as UTF-8, which this undoes. Null for one that was not
 * UTF-8 (decoded to U+FFFD), whose bytes are lost: Node's standard phrase goes instead. Written as
 * decoded, a reason of characters from U+0080 to U+00FF reached the client as one byte each, not
 * the provider's two.
 */
function reasonAsSent(decoded: string): string | null {
  if (!/[\u0080-\uffff]/.test(decoded)) return decoded;
  if (decoded.includes("\ufffd")) return null;
  return Buffer.from(decoded, "utf8").toString("latin1");
}

/** Node's reason phrase for a status code, as writeHead without one writes it. */
function standardReason(status: number): string {
  return STATUS_CODES[status] ?? "unknown";
}

/** The provider sent a transfer coding Sluice did not offer (it sends no `TE`): see onHeaders. */
class UnofferedTransferCoding extends Error {
  readonly code = "SLUICE_UNOFFERED_TRANSFER_CODING";

  constructor(coding: string) {
    super(`The provider sent the transfer coding "${coding.slice(0, 100)}", which Sluice did not offer`);
  }
}

const eventStream = "text/event-stream";

function isEventStream(contentType: string): boolean {
  return (
    contentType.startsWith(eventStream) ||
    contentType.slice(0, eventStream.length).toLowerCase() === eventStream
  );
}
