import { EventEmitter } from "node:events";
import type { Redis } from "ioredis";
import { afterEach, describe, expect, it, vi } from "vitest";
import { createLogger } from "../observability/logger.js";
import { RedisBreaker } from "../redis/redis-breaker.js";
import { limitsFallbackLog } from "./fallback-log.js";
import { createRateLimiter } from "./rate-limiter.js";

function logged() {
  const lines: Record<string, unknown>[] = [];
  const logger = createLogger("info", { write: (line: string) => void lines.push(JSON.parse(line)) });
  return { lines, messages: () => lines.map((line) => line.msg), logger };
}

/** A reply error as ioredis raises it, from one script or another. */
function reply(message: string, script = "780bc2437b059b5a5f8d7d0ed2211764170aa252"): Error {
  return Object.assign(new Error(`${message} script: ${script}, on @user_script:19.`), {
    name: "ReplyError",
  });
}

const readonly = "READONLY You can't write against a read only replica.";
const oom = "OOM command not allowed when used memory > 'maxmemory'.";
const noperm = "NOPERM this user has no permissions to access one of the keys used as arguments";
const fallsBackOnReply = "Redis answers with an error: rate limits fall back to per-instance limits";
const fallsBackUnreachable = "Redis is unreachable: rate limits fall back to per-instance limits";
const sharedAgain = "Redis answers again: rate limits are shared again";

describe("the log of the limits' fallback", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it("warns once for a Redis that refuses writes while answers in between end each rest, and says it answers again once it stayed so", () => {
    vi.useFakeTimers();
    const { lines, messages, logger } = logged();
    const log = limitsFallbackLog(logger, 5_000);
    log.report(true, reply(readonly));
    for (let rest = 0; rest < 10; rest++) {
      // The rest ends (once at any answer, as a refusal's; now at a write that Redis took, as one at
      // the edge of its memory limit may); the next count fails again, in another script.
      vi.advanceTimersByTime(2_000);
      log.report(false);
      vi.advanceTimersByTime(5);
      log.report(true, reply(readonly, "97bd1acf159f90c650240a8fb14c48a9e3bafb9a"));
      // The demoted primary's connection replaced meanwhile: the limits' command met no connection.
      if (rest % 3 === 0)
        log.report(true, new Error("Stream isn't writeable and enableOfflineQueue options is false"));
    }
    expect(messages()).toEqual([fallsBackOnReply, fallsBackUnreachable]);
    expect(lines[0]).toMatchObject({ level: "warn", redisError: expect.stringMatching(/^READONLY/) });
    log.report(false);
    vi.advanceTimersByTime(4_999);
    expect(messages()).toHaveLength(2);
    vi.advanceTimersByTime(1);
    expect(messages()).toEqual([fallsBackOnReply, fallsBackUnreachable, sharedAgain]);
    // A later outage is a new one: its warning is logged, the same words as before.
    log.report(true, reply(readonly));
    expect(messages()).toEqual([fallsBackOnReply, fallsBackUnreachable, sharedAgain, fallsBackOnReply]);
  });

  it("says nothing more for the limits finding Redis resting, and nothing once closed", () => {
    vi.useFakeTimers();
    const { messages, logger } = logged();
    const log = limitsFallbackLog(logger, 5_000);
    log.report(false);
    log.report(true, new Error("Command timed out"));
    log.report(false);
    log.report(true);
    expect(messages()).toEqual([fallsBackUnreachable]);
    log.report(false);
    log.close();
    vi.advanceTimersByTime(10_000);
    expect(messages()).toEqual([fallsBackUnreachable]);
  });

  it("warns once for every way of getting no reply, which a hang gives in turn, and once for each reply", () => {
    const { lines, messages, logger } = logged();
    const log = limitsFallbackLog(logger, 5_000);
    log.report(true, new Error("Command timed out"));
    // The calls in flight on the connection the timeout replaced, then one sent before the new one.
    log.report(
      true,
      Object.assign(new Error("Reached the max retries per request limit (which is 0)."), {
        name: "MaxRetriesPerRequestError",
      }),
    );
    log.report(true, new Error("Stream isn't writeable and enableOfflineQueue options is false"));
    log.report(true, new Error("Connection is closed."));
    log.report(true);
    expect(messages()).toEqual([fallsBackUnreachable]);
    expect(lines[0]).toMatchObject({ redisError: "Command timed out" });
    // A reply is another reason: Redis answered.
    log.report(true, reply(oom));
    log.report(true, new Error("Command timed out"));
    expect(messages()).toEqual([fallsBackUnreachable, fallsBackOnReply]);
    log.close();
  });

  it("warns again when the reason Redis gives changes while it rests, once for each reason", async () => {
    vi.useFakeTimers({ now: 0 });
    const { lines, messages, logger } = logged();
    // A Redis whose every script (the limits', the breaker's write probe) fails with `refusal`.
    const redis = Object.assign(new EventEmitter(), {
      status: "ready",
      refusal: oom as string | undefined,
      evalsha: vi.fn(async () => {
        if (redis.refusal === "lost")
          throw new Error("Stream isn't writeable and enableOfflineQueue options is false");
        if (redis.refusal) throw reply(redis.refusal);
        return [1, 1, 60_000];
      }),
    });
    const log = limitsFallbackLog(logger, 5_000);
    const limiter = createRateLimiter({
      redis: redis as unknown as Redis,
      breaker: new RedisBreaker(redis as unknown as Redis, 100),
      onFallback: (on, error) => log.report(on, error),
    });
    const request = () => limiter.consumeAll([{ name: "project", key: "p", limit: 10 }]);
    await request();
    // Full, then refusing Sluice's keys (a stricter ACL), back and forth, then gone: requests go
    // around Redis while it rests, only the probe (every 100 ms, twice as long after a relapse) meets it.
    for (const refusal of [noperm, oom, noperm, "lost", oom]) {
      redis.refusal = refusal;
      await vi.advanceTimersByTimeAsync(500);
      await request();
    }
    expect(messages()).toEqual([fallsBackOnReply, fallsBackOnReply]);
    expect(lines.map((line) => String(line.redisError).split(" ")[0])).toEqual(["OOM", "NOPERM"]);
    redis.refusal = undefined;
    await vi.advanceTimersByTimeAsync(5_200);
    expect(messages()).toEqual([fallsBackOnReply, fallsBackOnReply, sharedAgain]);
    await limiter.close();
    log.close();
  });
});
