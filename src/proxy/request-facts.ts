import type { ImageCall, RequestedImages } from "../providers/image-calls.js";
import type { ProviderAdapter } from "../providers/provider-adapter.js";
import { decodeRequestBody } from "./request-body-coding.js";

const empty = Buffer.alloc(0);

/**
 * What a proxied request named, read from its body only when the answer does not say: its model
 * (for a failure row, or an answer that names none) and the images it asked for (for a cut image
 * generation). A body forwarded as sent in a `content-encoding` shows nothing in its compressed
 * bytes: it is decoded for these facts on the first read only, once, off the event loop and within
 * the same cap as decodeRequestBody. One that does not decode (an unknown coding, corrupt bytes,
 * beyond the cap) reads as empty, so it names no model and asks for the provider's default count:
 * the call went out already, and its row must not fail for it. An uncompressed body is read as it
 * is, with no promise.
 */
export class RequestFacts {
  /** The body as its JSON reads; null until a compressed one is first asked for. */
  private plain: Buffer | Promise<Buffer> | null;

  constructor(
    private readonly adapter: ProviderAdapter,
    private readonly path: string,
    private readonly body: Buffer,
    /** The body's content-encoding, when it is still in it; undefined for a body as its JSON reads. */
    private readonly contentEncoding: string | undefined,
    private readonly maxBytes: number,
  ) {
    this.plain = contentEncoding === undefined || body.length === 0 ? body : null;
  }

  /** The model the request named (its body's, or provider C's path's). */
  model(): string | null | Promise<string | null> {
    if (this.plain === null) {
      // A model the path names (provider C's) needs no body: a compressed one stays undecoded.
      const fromPath = this.adapter.requestModel(this.path, empty);
      if (fromPath !== null) return fromPath;
    }
    return this.read((body) => this.adapter.requestModel(this.path, body));
  }

  /**
   * The model an image generation's request named, as its provider reads the body (the answer names
   * none, and the price depends on it); else the model the request named, as `model()` reads it.
   */
  imageModel(imageCall: ImageCall): string | null | Promise<string | null> {
    const read = imageCall.model;
    return read === undefined ? this.model() : this.read((body) => read(body));
  }

  /** The images an image generation asked for. */
  requestedImages(imageCall: ImageCall): RequestedImages | Promise<RequestedImages> {
    return this.read((body) => imageCall.requested(body));
  }

  private read<T>(fact: (body: Buffer) => T): T | Promise<T> {
    this.plain ??= decodeRequestBody(this.body, this.contentEncoding ?? "", this.maxBytes).catch(() => empty);
    return this.plain instanceof Promise ? this.plain.then(fact) : fact(this.plain);
  }
}
