import { getHeapStatistics } from "node:v8";
import { GatewayError } from "../errors.js";

/**
 * The request-body bytes the proxies and the structured and image endpoints (/v1/text, /v1/vision,
 * /v1/pdf, /v1/image) hold in memory, all their calls together: `SLUICE_MAX_BUFFERED_BODY_BYTES`
 * (docs/decisions/0025). Each call's body is capped on its own (SLUICE_MAX_BODY_BYTES, more for an
 * image or a PDF in base64), but thousands of connections each uploading one would hold tens of GiB
 * and the process would be killed, every other call with it. A proxied body over 64 KiB is given
 * back once sent (`RequestFacts.release`): undici holds it no longer. An image call reserves the
 * images it will hold before its provider call (docs/decisions/0054).
 */
export interface BodyBudget {
  /** A share for one call's body, holding nothing yet. */
  share(): BodyShare;
  /** The bytes all shares hold now. */
  held(): number;
  /** The bodies refused so far (a `fits` or `take` that answered false). */
  refused(): number;
  /** The budget (0: none). */
  maxBytes: number;
}

/** One call's part of the budget: what its body holds so far, given back once when the call ends. */
export interface BodyShare {
  /**
   * Whether `bytes` more of the body fit, counted as they arrive; if so the share holds them.
   * A body no other call holds any of always fits: its own cap bounds it alone, and a budget set
   * below that cap must not refuse it forever.
   */
  take(bytes: number): boolean;
  /**
   * As `take`, for bytes the call can do without (the usage meter's whole copy of a proxied answer,
   * which it can read from its ends instead): a no is no refusal, and is not counted as one.
   */
  takeIfRoom(bytes: number): boolean;
  /** Whether a body of `bytes` (its content-length) would fit now; nothing is held for it (a no is a refusal). */
  fits(bytes: number): boolean;
  /**
   * Counts `bytes` more whether they fit or not: bytes the call holds already (an image answer
   * larger than its reservation, decision 0054), which a refusal would not free.
   */
  hold(bytes: number): void;
  /**
   * Gives back `bytes` of what the share holds (a copy let go before the call ends: a proxied
   * body's compressed bytes once decoded, or its decoded copy once sent); the rest is kept.
   */
  giveBack(bytes: number): void;
  /** Gives back all the share holds; it holds nothing afterwards, and takes nothing more. */
  release(): void;
}

/**
 * The budget when SLUICE_MAX_BUFFERED_BODY_BYTES is unset: an eighth of V8's heap limit (which
 * `--max-old-space-size` sets, and Node otherwise sizes from the machine's memory, up to 4144 MiB).
 * A call holds about 6 times its body while it waits for its provider (measured at /v1/pdf: the
 * body parsed into a string, the PDF decoded, the provider's request built in base64 and JSON),
 * about half of it strings in V8's heap: an eighth leaves most of the heap to everything else, and
 * the heap, not the machine's memory, is what a burst of large bodies runs out of first.
 */
export function defaultMaxBufferedBodyBytes(heapLimit = getHeapStatistics().heap_size_limit): number {
  return Math.max(1, Math.floor(heapLimit / 8));
}

/** A budget of `maxBytes` (0: none; every share takes anything and counts nothing). */
export function createBodyBudget(maxBytes: number): BodyBudget {
  if (maxBytes === 0) return { share: () => unbounded, held: () => 0, refused: () => 0, maxBytes };
  const total: Total = { held: 0, refused: 0 };
  return {
    maxBytes,
    held: () => total.held,
    refused: () => total.refused,
    share: () => new Share(total, maxBytes),
  };
}

/** What all shares of a budget hold, and the bodies it refused. */
interface Total {
  held: number;
  refused: number;
}

/** A share as one object, no closures: every proxied call takes one (the hot path, decision 0005). */
class Share implements BodyShare {
  private mine = 0;
  private released = false;

  constructor(
    private readonly total: Total,
    private readonly maxBytes: number,
  ) {}

  fits(bytes: number): boolean {
    if (this.room(bytes)) return true;
    this.total.refused++;
    return false;
  }

  take(bytes: number): boolean {
    if (this.takeIfRoom(bytes)) return true;
    if (!this.released) this.total.refused++;
    return false;
  }

  takeIfRoom(bytes: number): boolean {
    if (this.released || !this.room(bytes)) return false;
    this.hold(bytes);
    return true;
  }

  hold(bytes: number): void {
    if (this.released) return;
    this.mine += bytes;
    this.total.held += bytes;
  }

  private room(bytes: number): boolean {
    return this.total.held === this.mine || this.total.held + bytes <= this.maxBytes;
  }

  giveBack(bytes: number): void {
    const given = Math.min(bytes, this.mine);
    this.mine -= given;
    this.total.held -= given;
  }

  release(): void {
    this.total.held -= this.mine;
    this.mine = 0;
    this.released = true;
  }
}

const unbounded: BodyShare = {
  take: () => true,
  takeIfRoom: () => true,
  fits: () => true,
  hold: () => {},
  giveBack: () => {},
  release: () => {},
};

/**
 * Takes `bytes` more into `share`, held beside a body already read (what a call makes of it: a
 * decoded body, a PDF fetched by URL), or throws the refusal of a body that does not fit.
 */
export function holdInShare(share: BodyShare, bytes: number): void {
  if (!share.take(bytes)) throw bodyBudgetFull();
}

/**
 * The refusal of a body that does not fit: 503, as SLUICE_MAX_PDF_FETCHES and SLUICE_MAX_CONNECTIONS
 * refuse (the client did nothing wrong: the instance is busy), naming the setting but not its value.
 */
export function bodyBudgetFull(): GatewayError {
  return new GatewayError(
    "SERVICE_UNAVAILABLE",
    "Too many request bodies are held in memory on this instance (SLUICE_MAX_BUFFERED_BODY_BYTES); retry shortly",
    { headers: { "retry-after": "5" }, details: { retryable: true } },
  );
}
