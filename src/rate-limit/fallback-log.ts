import type { Logger } from "../observability/logger.js";
import { failureReason } from "../redis/redis-script.js";

/** How long the limits run on Redis again before that is logged (ms): see `limitsFallbackLog`. */
export const sharedAgainLoggedAfterMs = 5_000;

/** Distinct warnings logged per outage; any more are not (the gauge and /health say it). */
const maxWarnings = 20;

/**
 * The log of the rate limits' fallback to per-instance limits (`onFallback` of the limiter), one
 * warning per outage and one line when it ends. A Redis that refuses writes (full under
 * `noeviction`, a replica) still answers a call that writes nothing: the limits' refusal of a
 * request over its count, a ledger lookup of a token it does not hold, a place given back. Such an
 * answer ended the breaker's rest, and the next call that writes failed again, so the fallback went
 * off and on every 2 s (the rest) for as long as Redis stayed full: a warning and "answers again"
 * each time, which said the limits were shared while they were not. A rest now ends only on a write
 * of the breaker's own (`RedisBreaker`), but a Redis at the edge of its memory limit may take that
 * write and refuse the next. So "answers again" is logged
 * only once the limits ran on Redis for `settleMs` without a failure; a failure before then
 * continues the outage, and a warning is logged only for a way of failing not yet logged in it
 * (`failureReason`: a reply's message, the script's digest aside, or no reply at all, however
 * ioredis words it; a demoted primary's READONLY and its connection's replacement take turns). The
 * gauge and /health still follow each change.
 */
export function limitsFallbackLog(
  logger: Logger,
  settleMs = sharedAgainLoggedAfterMs,
): { report(on: boolean, error?: Error): void; close(): void } {
  /** What the warnings of the outage still open said (empty: none open). */
  const warned = new Set<string>();
  let sharedAgain: NodeJS.Timeout | undefined;
  return {
    report(on, error) {
      if (!on) {
        if (warned.size === 0 || sharedAgain) return;
        sharedAgain = setTimeout(() => {
          sharedAgain = undefined;
          warned.clear();
          logger.info("Redis answers again: rate limits are shared again");
        }, settleMs);
        sharedAgain.unref();
        return;
      }
      clearTimeout(sharedAgain);
      sharedAgain = undefined;
      // Without an error the limits found Redis resting: the outage's own warning said why.
      if (warned.size > 0 && !error) return;
      // By reason only: a reply error carries its command's arguments. A reply (OOM when Redis is
      // full, READONLY from a replica) comes from a Redis that is reachable and answers /health; every
      // failure without a reply is one reason (a hang fails the calls in flight in two ways).
      const reply = error?.name === "ReplyError";
      const said = error ? failureReason(error) : "unanswered";
      if (warned.has(said) || warned.size >= maxWarnings) return;
      warned.add(said);
      if (reply)
        logger.warn(
          { redisError: error?.message },
          "Redis answers with an error: rate limits fall back to per-instance limits",
        );
      else
        logger.warn(
          error ? { redisError: error.message } : {},
          "Redis is unreachable: rate limits fall back to per-instance limits",
        );
    },
    close() {
      clearTimeout(sharedAgain);
      sharedAgain = undefined;
    },
  };
}
