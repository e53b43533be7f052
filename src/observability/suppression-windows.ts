export interface SuppressionWindowsOptions<T> {
  windowMs: number;
  /** Called when a window ends having counted any: its context (the first's) and the count. */
  onSuppressed: (context: T, count: number) => void;
  now?: () => number;
  /** Runs `close` when a window ends (default: an unref'd timer, so it never holds the process open). */
  schedule?: (close: () => void, ms: number) => void;
  /** Windows open at once beyond this close at once, writing their counts (keys may be many). */
  maxKeys?: number;
  /** The gateway's windows, flushed together when it closes (`closeGateway`): these join them. */
  registry?: SuppressionWindowsRegistry;
}

/**
 * Every set of suppression windows of one gateway, made with it (`registry`), so that its close
 * writes the counts of the windows still open once (their timers, unref'd, would not run before
 * the exit), in one place: no log has a shutdown step of its own to forget.
 */
export interface SuppressionWindowsRegistry {
  add(windows: { flush(): void }): void;
  /** Flushes every set added: each open window that counted any writes its count. */
  flush(): void;
}

export function createSuppressionWindowsRegistry(): SuppressionWindowsRegistry {
  const added = new Set<{ flush(): void }>();
  return {
    add: (windows) => void added.add(windows),
    flush() {
      for (const windows of added) windows.flush();
    },
  };
}

/**
 * Log lines for something that repeats (a provider that is down, a full usage queue): at most one
 * line per key and window. `open` says whether an occurrence is its window's first (the caller
 * writes its line) or is counted; when a window ends with any counted, `onSuppressed` hears how
 * many, so the count is written even when nothing follows. No timer per occurrence: one per window.
 */
export function createSuppressionWindows<T>(options: SuppressionWindowsOptions<T>) {
  const { windowMs, onSuppressed } = options;
  const now = options.now ?? Date.now;
  const schedule = options.schedule ?? ((close, ms) => setTimeout(close, ms).unref());
  const maxKeys = options.maxKeys ?? Number.POSITIVE_INFINITY;
  type Window = { context: T; startedAt: number; counted: number };
  const windows = new Map<string, Window>();
  // Closes this window only: a timer that outlived it (it was closed sooner) leaves a newer one be.
  const close = (key: string, window: Window): void => {
    if (windows.get(key) !== window) return;
    windows.delete(key);
    if (window.counted > 0) onSuppressed(window.context, window.counted);
  };
  const suppression = {
    /** True for the first occurrence of `key`'s window (write it); false when it is counted (`weight`). */
    open(key: string, context: T, weight = 1): boolean {
      const at = now();
      const current = windows.get(key);
      if (current !== undefined && at - current.startedAt < windowMs) {
        current.counted += weight;
        return false;
      }
      // A window whose timer has not run yet (a late timer, a clock that jumped) is closed here.
      if (current !== undefined) close(key, current);
      if (windows.size >= maxKeys) for (const [open, window] of windows) close(open, window);
      const window: Window = { context, startedAt: at, counted: 0 };
      windows.set(key, window);
      schedule(() => close(key, window), windowMs);
      return true;
    },
    /** Closes every window now, writing its count (at shutdown: their timers would not run). */
    flush(): void {
      for (const [key, window] of windows) close(key, window);
    },
  };
  options.registry?.add(suppression);
  return suppression;
}
