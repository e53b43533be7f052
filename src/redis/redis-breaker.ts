import { notSluiceCountReply } from "./redis-script.js";

/** How one call goes: to Redis, to Redis as the probe after a rest, or around Redis. */
export type RedisPass = "redis" | "probe" | "rest";

/**
 * Whether Redis refused a command for what one key holds, not for its own state: a key of another
 * type (`WRONGTYPE`), a string that is no integer under INCR (`ERR value is not an integer or out
 * of range`, also for an overflow), or one a script found to be no count Sluice writes
 * (`notSluiceCountReply`). Something other than Sluice wrote that key inside its prefix;
 * Redis itself answered, so it is a data error of that key (each user decides what it does with the
 * key), never an outage that rests Redis for every user.
 */
export function isKeyDataError(error: unknown): boolean {
  if (!(error instanceof Error) || error.name !== "ReplyError") return false;
  return (
    error.message.startsWith("WRONGTYPE ") ||
    error.message.startsWith("ERR value is not an integer or out of range") ||
    error.message.startsWith("ERR increment or decrement would overflow") ||
    error.message.startsWith(notSluiceCountReply)
  );
}

/**
 * One view of a Redis client's health, shared by everything that uses the client (rate limits, the
 * authentication throttle, the device token ledger, the spend cap's calls in flight).
 *
 * A Redis that hangs instead of closing the connection makes every command wait for the client's
 * command timeout (SLUICE_REDIS_COMMAND_TIMEOUT_MS, 500 ms by default) before it fails. So after a
 * failure, calls go around Redis for `restMs` (each user answers as it does when Redis is down);
 * then one call asks Redis again while the others keep going around it, and Redis is used again
 * once that call succeeds, or as soon as the client reconnects (`ready`). A failure seen by one user
 * rests Redis for all of them.
 *
 * The rest does not grow with the command timeout: only the one probe waits for the timeout, so
 * the rest decides how often one request pays it while Redis hangs, not how many; and a Redis that
 * is slow rather than gone ends the rest sooner anyway, through the reconnect that the timeout makes.
 */
export class RedisBreaker {
  /** While non-zero, Redis failed and calls go around it until then. */
  private restUntil = 0;
  private probing = false;
  private readonly recoveryListeners: Array<() => void> = [];
  private readonly failureListeners: Array<(error: Error | undefined) => void> = [];

  constructor(
    /** The Redis client (only its `ready` event is used). */
    client: { on(event: "ready", listener: () => void): unknown },
    private readonly restMs = 2_000,
  ) {
    client.on("ready", () => this.recover());
  }

  /** Whether Redis failed lately and has not answered since. */
  get resting(): boolean {
    return this.restUntil !== 0;
  }

  /**
   * Calls `listener` each time a rest ends: the client reconnected, or a call (of any user) had an
   * answer from Redis. A user that reports its own fallback (the rate limits' degraded gauge) stops
   * reporting it here, not at its own next call, which may be long in coming.
   */
  onRecovered(listener: () => void): void {
    this.recoveryListeners.push(listener);
  }

  /**
   * Calls `listener` each time a call (of any user) fails and Redis rests, with what the call failed
   * with: the rate limits run per instance from then on, so they report their fallback (the degraded
   * gauge, /health) at once, whichever user saw the failure, not at their own next decision.
   */
  onFailed(listener: (error: Error | undefined) => void): void {
    this.failureListeners.push(listener);
  }

  /** Decides how a call goes; a `probe` must be followed by `leave`, once. */
  enter(): RedisPass {
    if (this.restUntil === 0) return "redis";
    if (this.probing || Date.now() < this.restUntil) return "rest";
    this.probing = true;
    return "probe";
  }

  /**
   * What a call that went to Redis learned: `true` Redis answered, `false` it failed (with `error`),
   * `undefined` nothing. A key's data error (`isKeyDataError`) is an answer.
   */
  leave(pass: RedisPass, answered: boolean | undefined, error?: unknown): void {
    if (pass === "probe") this.probing = false;
    if (pass === "rest" || answered === undefined) return;
    if (answered || isKeyDataError(error)) {
      this.recover();
      return;
    }
    this.restUntil = Date.now() + this.restMs;
    for (const listener of this.failureListeners) listener(error instanceof Error ? error : undefined);
  }

  private recover(): void {
    if (this.restUntil === 0) return;
    this.restUntil = 0;
    for (const listener of this.recoveryListeners) listener();
  }

  /**
   * Runs `call` on Redis, or `around` while Redis rests. A call that rejects counts as a Redis
   * failure (but for a key's data error, an answer) and its error is passed on.
   */
  async run<T>(call: () => Promise<T>, around: () => T | Promise<T>): Promise<T> {
    const pass = this.enter();
    if (pass === "rest") return around();
    try {
      const value = await call();
      this.leave(pass, true);
      return value;
    } catch (error) {
      this.leave(pass, false, error);
      throw error;
    }
  }
}
