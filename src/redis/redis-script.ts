import { createHash } from "node:crypto";
import type { Redis } from "ioredis";

/**
 * A Lua script run atomically on Redis: by EVALSHA, its digest computed once, and sent whole
 * (EVAL) only when the server does not have it cached yet (after a restart or SCRIPT FLUSH).
 */
export class RedisScript {
  private readonly sha: string;

  constructor(private readonly source: string) {
    this.sha = createHash("sha1").update(source).digest("hex");
  }

  /** Runs the script over `keys` (KEYS) and `args` (ARGV); rejects as the command does. */
  async run(redis: Redis, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown> {
    try {
      return await redis.evalsha(this.sha, keys.length, ...keys, ...args);
    } catch (error) {
      if (!(error instanceof Error) || !error.message.startsWith("NOSCRIPT")) throw error;
      return redis.eval(this.source, keys.length, ...keys, ...args);
    }
  }
}

/**
 * A Redis error's message up to the script it names (` script: <digest>…`, which Redis appends to an
 * error a script raised): the reason alone, the same whichever script or digest raised it.
 */
export function errorReason(message: string): string {
  return message.replace(/ script: .*$/s, "");
}

/**
 * What a failed call says of Redis, the same for failures that say the same: a reply error's reason
 * (`errorReason`: OOM, READONLY, NOPERM, each its own), and one `unanswered` for every failure without
 * a reply. ioredis words each way of getting none its own way: a command that timed out ("Command
 * timed out"), one whose connection was replaced under it ("Reached the max retries per request
 * limit (which is 0)"), one sent while there was none ("Stream isn't writeable…", "Connection is
 * closed."); a single hang of Redis gives the first two, on calls sent a moment apart.
 */
export function failureReason(error: Error): string {
  return error.name === "ReplyError" ? `reply:${errorReason(error.message)}` : "unanswered";
}

/**
 * A decision made as the part of another Lua script, in the same round trip as what that script
 * decides first (the DeviceCheck ledger's lookup of a token): `lua(keyOffset, argOffset)` runs over
 * KEYS after the script's first `keyOffset` and ARGV after its first `argOffset`, given `keys` and
 * `args`, and leaves `admitted` (1 when what it decided admits the call, else 0) and `reply` (its
 * reply, a table of integers), returning nothing. `decide` reports that reply as the part's owner
 * reports its own script's. `lua` is one function per kind of part, so a script built from it can be
 * kept by it.
 */
export interface ScriptPart<T> {
  lua: (keyOffset: number, argOffset: number) => string;
  keys: string[];
  args: (string | number)[];
  decide(reply: readonly number[]): T;
  /** The script was sent and failed: Redis may have run it all the same (it answered past the timeout). */
  failed?(): void;
}

/**
 * Lua: whether `value`, a count's key read with `redis.pcall("GET", …)` (or `redis.call`), holds
 * what Sluice never writes there: a key of another type (pcall's error table) or a string that is
 * not a count as INCR writes it (digits, no leading zero, at most 15 so INCR can still take it).
 * Everything else Lua's `tonumber` would read as a number ("-5", "1e3", "0x10", " 7", "007", "inf")
 * or INCR would refuse is none. Written by another program inside the key prefix; the scripts that
 * keep counts (the limits, the authentication throttle) delete such a key and count afresh, the
 * throttle's read takes it for no count, and the DeviceCheck ledger's scripts leave it as it is and
 * reply `notSluiceCountReply`.
 */
export const luaNotSluiceCount = `type(value) == "table" or (value and (#value > 15 or not string.find(value, "^%d+$") or string.find(value, "^0.")))`;

/**
 * The error reply (`redis.error_reply`) of a script that finds a key holding what Sluice never writes
 * there (`luaNotSluiceCount`) and leaves it as it is: like Redis's own WRONGTYPE, a data error of that
 * key (`isKeyDataError`), never a failure of Redis.
 */
export const notSluiceCountReply = "ERR value is not a count Sluice writes";
