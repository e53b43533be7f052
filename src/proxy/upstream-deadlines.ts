import { errors } from "undici";

/**
 * What the sweep reads and writes of one proxied exchange in flight (ProxyExchange): plain fields,
 * so that a body chunk costs one store and no timer object is made per request.
 */
export interface Watched {
  /** Its place in the sweep's list; -1 while not watched. */
  deadlineSlot: number;
  /**
   * Its clock restarted since the last tick (the request sent, headers, a body chunk): the next tick
   * sets its deadline from then, so a deadline is never earlier than undici's timer would have been.
   */
  deadlineRestarted: boolean;
  /** When it times out, in performance.now()'s milliseconds; written by the sweep only. */
  deadline: number;
  /** Waiting for the provider's headers (SLUICE_UPSTREAM_HEADERS_TIMEOUT_MS), else for its next body chunk (the idle timeout). */
  awaitingHeaders: boolean;
  /** The provider is paused for a client or a decompressor behind: its idle clock stops, as undici's did. */
  upstreamPaused(): boolean;
  /** Its time ran out: the upstream request is aborted with undici's own timeout error. */
  timedOut(error: Error): void;
}

export interface DeadlineTimeouts {
  headersMs: number;
  idleMs: number;
}

/**
 * The proxy's upstream headers and idle timeouts, run by one interval for all the exchanges in
 * flight instead of undici's two timers per request (its `headersTimeout` and `bodyTimeout`, set to
 * 0 on the proxy's pools). undici keeps each of those timers in its list until its next ~500 ms
 * tick, several scavenges after the request ended, so they were most of the bytes a request
 * promoted to V8's old space (decision 0005, "RSS after load"). A timeout fires within one tick
 * or two after its time (a tick is 250 ms, or a quarter of the shorter timeout), as undici's own
 * timers fire up to a second late; it fails the call with undici's error (UND_ERR_HEADERS_TIMEOUT,
 * UND_ERR_BODY_TIMEOUT), so the answer is the 504 it was. The interval is unref'd and stopped at close.
 */
export function createUpstreamDeadlines(timeouts: DeadlineTimeouts) {
  const watched: Watched[] = [];
  const tickMs = sweepTickMs(timeouts);
  let interval: NodeJS.Timeout | null = null;
  let closed = false;

  /** One tick: sets the deadlines of the exchanges whose clock restarted, and times out the late ones. */
  function sweep(now: number): void {
    // Backwards: a timed-out exchange leaves the list at once, and its place takes the last one,
    // which this walk has seen already.
    for (let index = watched.length - 1; index >= 0; index--) {
      const exchange = watched[index];
      if (exchange === undefined) continue; // more than one left in one step
      if (exchange.upstreamPaused()) {
        exchange.deadlineRestarted = true;
      } else if (exchange.deadlineRestarted) {
        exchange.deadlineRestarted = false;
        exchange.deadline = now + (exchange.awaitingHeaders ? timeouts.headersMs : timeouts.idleMs);
      } else if (now >= exchange.deadline) {
        unwatch(exchange);
        exchange.timedOut(
          exchange.awaitingHeaders ? new errors.HeadersTimeoutError() : new errors.BodyTimeoutError(),
        );
      }
    }
  }

  function unwatch(exchange: Watched): void {
    const slot = exchange.deadlineSlot;
    if (slot < 0) return;
    exchange.deadlineSlot = -1;
    const last = watched.pop() as Watched;
    if (last !== exchange) {
      watched[slot] = last;
      last.deadlineSlot = slot;
    }
  }

  return {
    tickMs,
    /** Starts (or restarts) an exchange's clock: the request is on its way to the provider. */
    watch(exchange: Watched): void {
      exchange.deadlineRestarted = true;
      if (exchange.deadlineSlot >= 0) return;
      exchange.deadlineSlot = watched.length;
      watched.push(exchange);
      if (interval === null && !closed)
        interval = setInterval(() => sweep(performance.now()), tickMs).unref();
    },
    unwatch,
    sweep,
    /** How many exchanges are watched (for tests). */
    get size(): number {
      return watched.length;
    },
    get running(): boolean {
      return interval !== null;
    },
    close(): void {
      closed = true;
      if (interval !== null) clearInterval(interval);
      interval = null;
    },
  };
}

export type UpstreamDeadlines = ReturnType<typeof createUpstreamDeadlines>;

/** 250 ms, or a quarter of the shorter timeout when that is under a second (1 ms at least). */
function sweepTickMs(timeouts: DeadlineTimeouts): number {
  return Math.max(1, Math.min(250, Math.floor(Math.min(timeouts.headersMs, timeouts.idleMs) / 4)));
}
