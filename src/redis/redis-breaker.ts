import type { Redis } from "ioredis";
import { redisKeyPrefixes } from "./redis-keys.js";
import { notSluiceCountReply, RedisScript } from "./redis-script.js";

/** How one call goes: to Redis, or around it while it rests. */
export type RedisPass = "redis" | "rest";

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
 * The write probe: a key of Sluice's own (`writeProbe` of `redisKeyPrefixes`) written with a short
 * expiry, by a script as every write of Sluice is (so it needs no command Sluice does not send
 * already). SET takes memory and writes: a Redis full under `noeviction` refuses it (OOM), a replica
 * (READONLY) too, whatever key another program left there.
 */
const probeScript = new RedisScript(`redis.call("SET", KEYS[1], "1", "PX", ARGV[1])
return 1`);

/** How long the probe's key lasts (ms): the key is gone soon after Redis answers again. */
const probeKeyTtlMs = 5_000;

/**
 * How many times `restMs` a rest grows to at most, doubled at each relapse (`RedisBreaker`); a failure
 * that long after a rest ended is no relapse, and rests `restMs`.
 */
const restGrowsTo = 16;

/**
 * One view of a Redis client's health, shared by everything that uses the client (rate limits, the
 * authentication throttle, the device token ledger, the spend cap's calls in flight).
 *
 * A Redis that hangs instead of closing the connection makes every command wait for the client's
 * command timeout (SLUICE_REDIS_COMMAND_TIMEOUT_MS, 500 ms by default) before it fails. So after a
 * failure Redis rests: every call goes around it (each user answers as it does when Redis is down)
 * until a write of the breaker's own succeeds. That write (the probe: `probeScript`, a key of
 * Sluice's own with a 5 s expiry) is sent `restMs` after the failure, and again every `restMs` while
 * it fails (longer after a relapse, below), and at once when the client reconnects (`ready`). A
 * failure seen by one user rests Redis for all of them.
 *
 * Only a write ends a rest. A Redis that refuses writes (full under `noeviction`: OOM; a replica:
 * READONLY) still answers calls that write nothing (a limit's refusal of a request over its count, a
 * ledger lookup of a token it does not hold, a place given back), and its reconnects get ready; ended
 * by those, the rest flapped every 2 s (the degraded gauge, /health) for as long as Redis stayed full.
 * So an answer of a user's call, sent before the rest began and heard during it, ends nothing either.
 *
 * A Redis at the edge of its memory limit may take the probe's write and refuse the next call (the
 * probe replaces its own key, a call may write a new one): a relapse. The rest after a relapse is
 * twice the one before, up to 16 times `restMs` (32 s), so such a Redis makes the limits flap every
 * 32 s at most, not every 2 s; once Redis has taken calls that long, a failure rests `restMs` again.
 * A reconnect still sends the probe at once, so a Redis that hangs again and again is not kept
 * unused by a long rest: a command it leaves unanswered (the probe's too) replaces the connection
 * (`createRedisClient`), which the client logs, and the new one's `ready` probes.
 *
 * No user's call waits for the probe, nor pays a round trip for it: only the probe waits for the
 * timeout of a Redis that hangs, and none is sent while Redis answers.
 */
export class RedisBreaker {
  private restingNow = false;
  /** How long the rest now open lasts between probes: `restMs`, doubled at each relapse. */
  private restNowMs: number;
  /** When the last rest ended (ms since the epoch). */
  private recoveredAt = Number.NEGATIVE_INFINITY;
  private probing = false;
  private closed = false;
  private probeTimer: NodeJS.Timeout | undefined;
  private readonly recoveryListeners: Array<() => void> = [];
  private readonly failureListeners: Array<(error: Error | undefined) => void> = [];

  constructor(
    /** The Redis client: the probe is sent on it, and its `ready` event sends one at once. */
    private readonly client: Redis,
    private readonly restMs = 2_000,
    /** The probe's key (`writeProbe` of `redisKeyPrefixes`, under SLUICE_REDIS_KEY_PREFIX). */
    private readonly probeKey = redisKeyPrefixes().writeProbe,
  ) {
    this.restNowMs = restMs;
    client.on("ready", () => {
      if (this.restingNow) this.probe();
    });
  }

  /** Whether Redis failed lately and has not taken a write since. */
  get resting(): boolean {
    return this.restingNow;
  }

  /**
   * Calls `listener` each time a rest ends: the probe's write succeeded. A user that reports its own
   * fallback (the rate limits' degraded gauge) stops reporting it here, not at its own next call,
   * which may be long in coming.
   */
  onRecovered(listener: () => void): void {
    this.recoveryListeners.push(listener);
  }

  /**
   * Calls `listener` each time a call (of any user) fails, with what the call failed with: the rate
   * limits run per instance from then on, so they report their fallback (the degraded gauge,
   * /health) at once, whichever user saw the failure, not at their own next decision. Also each time
   * Redis answers the write probe with an error (a reply error: OOM, READONLY, NOPERM), so a reason
   * that changes while Redis rests (no user's call reaches it) is heard.
   */
  onFailed(listener: (error: Error | undefined) => void): void {
    this.failureListeners.push(listener);
  }

  /** Decides how a call goes: to Redis, or around it while it rests. */
  enter(): RedisPass {
    return this.restingNow ? "rest" : "redis";
  }

  /**
   * What a call that went to Redis learned: `true` Redis answered, `false` it failed (with `error`),
   * `undefined` nothing. A key's data error (`isKeyDataError`) is an answer. An answer ends no rest
   * (it may have written nothing): only the probe does.
   */
  leave(pass: RedisPass, answered: boolean | undefined, error?: unknown): void {
    if (pass === "rest" || answered !== false || isKeyDataError(error)) return;
    if (!this.restingNow) {
      this.restingNow = true;
      // A relapse: Redis took the probe's write and refused a call soon after (at the edge of its
      // memory limit). The rest doubles, up to the longest, so the limits do not flap every rest.
      const longest = this.restMs * restGrowsTo;
      const relapse = Date.now() - this.recoveredAt < longest;
      this.restNowMs = relapse ? Math.min(this.restNowMs * 2, longest) : this.restMs;
      this.schedule();
    }
    for (const listener of this.failureListeners) listener(error instanceof Error ? error : undefined);
  }

  /** Stops probing: the client is being closed. */
  close(): void {
    this.closed = true;
    clearTimeout(this.probeTimer);
    this.probeTimer = undefined;
  }

  private schedule(): void {
    if (this.closed || this.probeTimer) return;
    this.probeTimer = setTimeout(() => {
      this.probeTimer = undefined;
      this.probe();
    }, this.restNowMs);
    this.probeTimer.unref();
  }

  /** Sends the probe (one at a time); the rest ends if it writes, else it is sent again after `restMs`. */
  private probe(): void {
    // A client closed for good (`disconnect`, `quit`) reconnects no more: nothing to wait for.
    if (this.probing || this.closed || this.client.status === "end") return;
    clearTimeout(this.probeTimer);
    this.probeTimer = undefined;
    this.probing = true;
    probeScript.run(this.client, [this.probeKey], [probeKeyTtlMs]).then(
      () => {
        this.probing = false;
        this.recover();
      },
      (error: unknown) => {
        this.probing = false;
        if (!this.restingNow) return;
        this.schedule();
        // Redis answered the probe with an error, maybe another than the failure that began the rest
        // (OOM, then NOPERM after a stricter ACL, or READONLY): its listeners hear it, as they hear a
        // call's. A probe that met no connection or timed out tells nothing the client's own errors
        // do not (it is sent every rest while Redis is gone).
        if (error instanceof Error && error.name === "ReplyError")
          for (const listener of this.failureListeners) listener(error);
      },
    );
  }

  private recover(): void {
    if (!this.restingNow) return;
    this.restingNow = false;
    this.recoveredAt = Date.now();
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
