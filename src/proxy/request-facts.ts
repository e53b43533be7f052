import { type BodyShare, bodyBudgetFull } from "../http/body-budget.js";
import type { ImageCall, RequestedImages } from "../providers/image-calls.js";
import type { ProviderAdapter } from "../providers/provider-adapter.js";
import { decodeRequestBody } from "./request-body-coding.js";

const empty = Buffer.alloc(0);

/**
 * Bodies up to this size are handed to undici as the Buffer they are, which undici keeps until the
 * answer ends (at most this much per call) and writes without an iterator's promises; larger ones
 * as a one-shot iterable, let go once written (see `RequestFacts.upstreamBody`).
 */
const keptBodyBytes = 64 * 1024;

/**
 * What a request named, as the accessors answered it just before the body was let go (a promise
 * for a body being decoded); the image facts only for an image generation.
 */
interface Named {
  model: string | null | Promise<string | null>;
  imageModel: string | null | Promise<string | null>;
  requested: RequestedImages | Promise<RequestedImages> | null;
}

/**
 * A proxied request's body, as it is sent upstream, and what it named, read from it only when the
 * answer does not say: its model (for a failure row, or an answer that names none) and the images
 * it asked for (for a cut image generation). A body forwarded as sent in a `content-encoding`
 * shows nothing in its compressed bytes: it is decoded for these facts on the first read only,
 * once, off the event loop and within the same cap as decodeRequestBody. One that does not decode
 * (an unknown coding, corrupt bytes, beyond the cap) reads as empty, so it names no model and asks
 * for the provider's default count: the call went out already, and its row must not fail for it.
 * An uncompressed body is read as it is, with no promise.
 *
 * A body over 64 KiB is not kept once undici has sent it (`release`): a stream can run for minutes,
 * and up to SLUICE_MAX_BODY_BYTES held for each would let a few clients that stop reading hold
 * gigabytes. Its facts are read at that moment instead, and kept as the few values they are.
 */
export class RequestFacts {
  /** The body's length, as sent. */
  readonly length: number;
  private body: Buffer;
  /** The most bytes this holds: the body, or its decoded copy when that is larger. */
  private readonly held: number;
  /** The bytes of a compressed body's decoded copy counted in `share` besides the body's own. */
  private readonly copied: number;
  /** The body as its JSON reads; null until a compressed one is first asked for. */
  private plain: Buffer | Promise<Buffer> | null;
  /** What a released body named; null while the body is kept. */
  private named: Named | null = null;
  /** Whether undici has written the body (`release`). */
  private sent = false;
  /** The bytes of a copy decoded before the body was sent (`read`), counted in `share` until it is. */
  private decodedEarly = 0;
  /** The bytes of such a copy that did not fit in `share` when decoded (`requireDecodedHeld`). */
  private decodedUnheld = 0;

  constructor(
    private readonly adapter: ProviderAdapter,
    private readonly path: string,
    /** The body exactly as it is sent upstream. */
    body: Buffer,
    /** The body's content-encoding, when it is still in it; undefined for a body as its JSON reads. */
    private readonly contentEncoding: string | undefined,
    private readonly maxBytes: number,
    /** A compressed body already decoded (to set the stream usage option): not decoded again. */
    decoded: Buffer | null = null,
    /** The request's content-type: a multipart body's model is read by the boundary it names. */
    private readonly contentType?: string,
    /**
     * The body's part of SLUICE_MAX_BUFFERED_BODY_BYTES (and its decoded copy's, for a compressed
     * one decoded already): given back as each is let go.
     */
    private readonly share?: BodyShare,
  ) {
    this.body = body;
    this.length = body.length;
    this.plain = contentEncoding === undefined || body.length === 0 ? body : decoded;
    this.held = Math.max(body.length, decoded?.length ?? 0);
    this.copied = contentEncoding === undefined ? 0 : (decoded?.length ?? 0);
  }

  /**
   * The body for undici's dispatch: null when empty, the Buffer up to 64 KiB, else an iterable that
   * yields it once (undici keeps a Buffer body for the whole exchange, an iterable's chunks only
   * while it writes them).
   */
  upstreamBody(): Buffer | Iterable<Buffer> | null {
    if (this.length === 0) return null;
    if (this.length <= keptBodyBytes) return this.body;
    return {
      [Symbol.iterator]: () => {
        let done = false;
        return {
          next: (): IteratorResult<Buffer> => {
            if (done || this.named !== null) return { done: true, value: undefined };
            done = true;
            return { done: false, value: this.body };
          },
        };
      },
    };
  }

  /**
   * The body was sent: one over 64 KiB (or its decoded copy) is let go, and its share of the body
   * budget given back, after what it named is read
   * (the image facts only for an image generation). A smaller one is kept: undici holds it anyway,
   * and reading it only when asked saves every call the read. A small compressed body whose decoded
   * copy is let go keeps its own share: undici still holds its bytes. So is a copy decoded before the
   * body was sent (`read`), what it named read first: kept, it held up to SLUICE_MAX_BODY_BYTES from
   * a few KiB for the whole answer.
   */
  release(imageCall: ImageCall | null): void {
    this.sent = true;
    if (this.named !== null) return;
    // A kept body's copy decoded for its facts before it was sent (a capped image generation's
    // price): let go all the same, its facts kept, as a large body's is.
    const decodedEarly = this.plain instanceof Promise;
    if (this.held <= keptBodyBytes && !decodedEarly) return;
    // Read by the accessors themselves: a compressed body is decoded once for all of them, and not
    // at all when the path names the model and no image facts are needed.
    this.named = {
      model: this.model(),
      imageModel: imageCall === null ? null : this.imageModel(imageCall),
      requested: imageCall === null ? null : this.requestedImages(imageCall),
    };
    this.plain = empty;
    const early = this.decodedEarly;
    this.decodedEarly = 0;
    if (this.held <= keptBodyBytes) {
      this.share?.giveBack(early);
      return;
    }
    this.body = empty;
    if (this.length > keptBodyBytes) this.share?.release();
    else this.share?.giveBack(this.copied + early);
  }

  /**
   * Throws the 503 of a body past SLUICE_MAX_BUFFERED_BODY_BYTES when the copy decoded for a fact
   * read before the body was sent (`read`) did not fit in its share: the call must not go on to
   * hold it while it is priced and sent. Asked once those facts are read, before anything is sent.
   */
  requireDecodedHeld(): void {
    const unheld = this.decodedUnheld;
    if (unheld === 0 || this.sent || !this.share) return;
    // Asked again, counted as a refusal when it still does not fit (the 503 is answered).
    if (!this.share.take(unheld)) throw bodyBudgetFull();
    this.decodedUnheld = 0;
    this.decodedEarly = unheld;
  }

  /** The model the request named (its body's, or provider C's path's). */
  model(): string | null | Promise<string | null> {
    if (this.named !== null) return this.named.model;
    if (this.plain === null) {
      // A model the path names (provider C's) needs no body: a compressed one stays undecoded.
      const fromPath = this.adapter.requestModel(this.path, empty, this.contentType);
      if (fromPath !== null) return fromPath;
    }
    return this.read((body) => this.adapter.requestModel(this.path, body, this.contentType));
  }

  /**
   * The model an image generation's request named, as its provider reads the body (the answer names
   * none, and the price depends on it); else the model the request named, as `model()` reads it.
   */
  imageModel(imageCall: ImageCall): string | null | Promise<string | null> {
    const read = imageCall.model;
    if (read === undefined) return this.model();
    if (this.named !== null) return this.named.imageModel;
    return this.read((body) => read(body));
  }

  /** The images an image generation asked for. */
  requestedImages(imageCall: ImageCall): RequestedImages | Promise<RequestedImages> {
    if (this.named !== null) return this.named.requested ?? imageCall.requested(empty);
    return this.read((body) => imageCall.requested(body));
  }

  private read<T>(fact: (body: Buffer) => T): T | Promise<T> {
    this.plain ??= decodeRequestBody(this.body, this.contentEncoding ?? "", this.maxBytes).then(
      (plain) => {
        // Decoded before the body was sent (a capped image generation's price, read from it first):
        // held until it is, up to SLUICE_MAX_BODY_BYTES from a few KiB, so taken into the share
        // as the decoded copy the stream usage option makes is: one that does not fit is refused
        // (`requireDecodedHeld`), not counted past the budget while the call goes on. Not counted
        // as a refusal here: a failure row's read of a call refused before it was priced is none.
        if (!this.sent && this.share) {
          if (this.share.takeIfRoom(plain.length)) this.decodedEarly = plain.length;
          else this.decodedUnheld = plain.length;
        }
        return plain;
      },
      () => empty,
    );
    return this.plain instanceof Promise ? this.plain.then(fact) : fact(this.plain);
  }
}
