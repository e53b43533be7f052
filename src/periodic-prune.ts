/**
 * The earliest cutoff a prune takes, the first day of the year 0 (UTC): a retention reaching back
 * further (its setting has no upper bound) deletes nothing, rather than giving a date before the
 * year 0 or past what a Date holds (a RangeError that ended a pruner's timer and the gateway).
 */
export const earliestCutoffMs = Date.parse("0000-01-01T00:00:00Z");

/** A prune run on a timer (`schedulePrunes`). */
export interface ScheduledPrunes {
  /** Ends the timer, and the prune under way at its next step: resolves once it has ended. */
  stop(): Promise<void>;
}

export interface PruneSchedule {
  /** How long after the start the first prune runs (default: a minute, clear of the start's work). */
  firstRunDelayMs?: number | undefined;
  /** How long after a prune ends the next one starts (default: an hour). */
  intervalMs?: number | undefined;
  /** A prune that failed: the next one, an interval later, retries. */
  onFailed: (error: unknown) => void;
}

/**
 * Runs `prune` (usage rows past SLUICE_USAGE_RETENTION_DAYS, the vault's days past
 * SLUICE_VAULT_RETENTION_DAYS) on a timer that does not keep the process alive, the first after
 * `firstRunDelayMs`, each next one `intervalMs` after the one before ended: runs never overlap.
 * `prune` asks `stopped()` between its steps and ends there once `stop` was called. Whatever it
 * throws, its cutoff's computation included, goes to `onFailed`: a throw out of the timer would be
 * unhandled, and end the gateway.
 */
export function schedulePrunes(
  prune: (stopped: () => boolean) => Promise<void>,
  { firstRunDelayMs = 60_000, intervalMs = 3_600_000, onFailed }: PruneSchedule,
): ScheduledPrunes {
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> = Promise.resolve();

  const run = async () => {
    try {
      await prune(() => stopped);
    } catch (error) {
      onFailed(error);
    }
  };
  const schedule = (delayMs: number) => {
    if (stopped) return;
    timer = setTimeout(() => {
      running = run().then(() => schedule(intervalMs));
    }, delayMs);
    timer.unref();
  };
  schedule(firstRunDelayMs);

  return {
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await running;
    },
  };
}
