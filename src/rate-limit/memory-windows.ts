/** What one request learned about its window. */
export interface WindowCount {
  /** Requests counted in the current window, this one included (counted only when within the limit). */
  count: number;
  /** Milliseconds until the window ends. */
  msLeft: number;
}

interface Window {
  count: number;
  endsAt: number;
}

/**
 * Fixed-window request counters for one instance, counted synchronously: a window opens at a
 * key's first request and lasts `windowMs` (rate-limiter-flexible's memory semantics). No promise,
 * result object or timer per request. Each count also looks at the next two stored windows and
 * drops them if they ended, so memory follows the keys seen lately without a pause to sweep.
 * A request over the limit is not stored, so a window holds the admitted requests only.
 */
export class MemoryWindows {
  private readonly windows = new Map<string, Window>();
  private sweeper: Iterator<[string, Window]> = this.windows.entries();

  constructor(private readonly clock: () => number = Date.now) {}

  /** Counts a request against `key`, unless that would take the window over `limit`. */
  count(key: string, windowMs: number, limit = Number.POSITIVE_INFINITY): WindowCount {
    const now = this.clock();
    this.sweep(now);
    this.sweep(now);
    let window = this.windows.get(key);
    if (window === undefined || now >= window.endsAt) {
      window = { count: 0, endsAt: now + windowMs };
      this.windows.set(key, window);
    }
    const count = window.count + 1;
    if (count <= limit) window.count = count;
    return { count, msLeft: window.endsAt - now };
  }

  /** Takes back one request counted in `key`'s current window; nothing once that window ended. */
  uncount(key: string): void {
    const window = this.windows.get(key);
    if (window !== undefined && window.count > 0 && this.clock() < window.endsAt) window.count--;
  }

  /** Drops every ended window: for a timer, so a burst of keys is not kept once traffic stops. */
  dropEnded(): void {
    const now = this.clock();
    for (const [key, window] of this.windows) if (now >= window.endsAt) this.windows.delete(key);
  }

  size(): number {
    return this.windows.size;
  }

  clear(): void {
    this.windows.clear();
  }

  private sweep(now: number): void {
    const next = this.sweeper.next();
    if (next.done) {
      this.sweeper = this.windows.entries();
      return;
    }
    const [key, window] = next.value;
    if (now >= window.endsAt) this.windows.delete(key);
  }
}
