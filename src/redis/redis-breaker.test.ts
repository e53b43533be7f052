import { EventEmitter } from "node:events";
import type { Redis } from "ioredis";
import { afterEach, describe, expect, it, vi } from "vitest";
import { isKeyDataError, RedisBreaker } from "./redis-breaker.js";

const fails = () => Promise.reject(new Error("Command timed out"));
const answers = () => Promise.resolve("redis");
const around = () => "around";
const replyError = (message: string) => Object.assign(new Error(message), { name: "ReplyError" });
const oom = () => replyError("OOM command not allowed when used memory > 'maxmemory'.");

/**
 * A client whose `ready` a test emits, and whose scripts (the breaker's write probe) take writes
 * while `writable` is true, else fail as a full Redis does; `sent` holds each probe's keys and args.
 */
function fakeClient() {
  const sent: unknown[][] = [];
  const client = Object.assign(new EventEmitter(), {
    status: "ready",
    writable: true,
    sent,
    evalsha: vi.fn(async (_sha: string, _count: number, ...rest: unknown[]) => {
      sent.push(rest);
      if (!client.writable) throw oom();
      return 1;
    }),
  });
  return Object.assign(client, { redis: client as unknown as Redis });
}

afterEach(() => {
  vi.useRealTimers();
});

describe("RedisBreaker", () => {
  it("goes around Redis after a failure until its write probe, sent after the rest, succeeds", async () => {
    vi.useFakeTimers({ now: 0 });
    const client = fakeClient();
    const breaker = new RedisBreaker(client.redis, 2_000, "p:sluice:write-probe");
    expect(await breaker.run(answers, around)).toBe("redis");
    await expect(breaker.run(fails, around)).rejects.toThrow("timed out");
    expect(breaker.resting).toBe(true);

    const asked = vi.fn(answers);
    expect(await breaker.run(asked, around)).toBe("around");
    await vi.advanceTimersByTimeAsync(1_999);
    expect(await breaker.run(asked, around)).toBe("around");
    expect(client.sent).toEqual([]);

    await vi.advanceTimersByTimeAsync(1);
    // A key of Sluice's own, written with a short expiry.
    expect(client.sent).toEqual([["p:sluice:write-probe", 5_000]]);
    expect(breaker.resting).toBe(false);
    expect(await breaker.run(asked, around)).toBe("redis");
    expect(asked).toHaveBeenCalledOnce();
  });

  it("ends no rest on an answer: a Redis that refuses writes still answers calls that write nothing", async () => {
    vi.useFakeTimers({ now: 0 });
    const client = fakeClient();
    const breaker = new RedisBreaker(client.redis, 100);
    const recovered = vi.fn();
    breaker.onRecovered(recovered);
    client.writable = false;
    // Two calls on their way: one writes (refused), the other is a refusal over a limit (answered).
    const refusal = breaker.enter();
    await expect(breaker.run(() => Promise.reject(oom()), around)).rejects.toThrow("OOM");
    breaker.leave(refusal, true);
    expect(breaker.resting).toBe(true);
    // Each probe is refused while Redis stays full: it rests on, probed every 100 ms.
    await vi.advanceTimersByTimeAsync(1_000);
    expect(client.sent).toHaveLength(10);
    expect(breaker.resting).toBe(true);
    expect(await breaker.run(answers, around)).toBe("around");
    expect(recovered).not.toHaveBeenCalled();

    client.writable = true;
    await vi.advanceTimersByTimeAsync(100);
    expect(breaker.resting).toBe(false);
    expect(recovered).toHaveBeenCalledOnce();
    // No probe while Redis answers.
    await vi.advanceTimersByTimeAsync(1_000);
    expect(client.sent).toHaveLength(11);
  });

  it("rests twice as long each time Redis refuses a call soon after taking the probe's write, and 2 s again once it stayed so", async () => {
    vi.useFakeTimers({ now: 0 });
    const client = fakeClient();
    const breaker = new RedisBreaker(client.redis, 2_000);
    const recoveredAt: number[] = [];
    breaker.onRecovered(() => recoveredAt.push(Date.now()));
    /** A call every 100 ms for `ms`, each failing as a Redis at the edge of its memory limit: it
     * takes the probe's write (its key replaced, no more memory) and refuses the next one (OOM). */
    const edge = async (ms: number) => {
      for (let at = 0; at < ms; at += 100) {
        await breaker.run(() => Promise.reject(oom()), around).catch(() => undefined);
        await vi.advanceTimersByTimeAsync(100);
      }
    };
    await edge(10_000);
    // Before, every 2 s (2, 4, 6, 8, 10 s), each back to ok until the next call.
    expect(recoveredAt).toEqual([2_000, 6_000]);
    await edge(60_000);
    // 2, 4, 8, 16, then 32 s at most.
    expect(recoveredAt).toEqual([2_000, 6_000, 14_000, 30_000, 62_000]);
    // Redis takes writes for good from the next probe on (94 s): once it took them for the longest
    // rest, a failure is no relapse and rests 2 s.
    await vi.advanceTimersByTimeAsync(24_000);
    expect(recoveredAt.at(-1)).toBe(94_000);
    await vi.advanceTimersByTimeAsync(32_000);
    await expect(breaker.run(fails, around)).rejects.toThrow();
    const failedAt = Date.now();
    await vi.advanceTimersByTimeAsync(2_000);
    expect(recoveredAt.at(-1)).toBe(failedAt + 2_000);
    breaker.close();
  });

  it("probes at once when the client reconnects, and rests on if the new connection refuses writes (READONLY)", async () => {
    vi.useFakeTimers({ now: 0 });
    const client = fakeClient();
    const breaker = new RedisBreaker(client.redis, 60_000);
    // Ready while Redis answers: nothing to probe.
    client.emit("ready");
    expect(client.sent).toHaveLength(0);
    await expect(breaker.run(fails, around)).rejects.toThrow();
    client.writable = false;
    client.emit("ready");
    expect(client.sent).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(0);
    expect(breaker.resting).toBe(true);
    client.writable = true;
    client.emit("ready");
    await vi.advanceTimersByTimeAsync(0);
    expect(client.sent).toHaveLength(2);
    expect(breaker.resting).toBe(false);
    expect(await breaker.run(answers, around)).toBe("redis");
  });

  it("sends one probe at a time, and none once closed or once the client ended", async () => {
    vi.useFakeTimers({ now: 0 });
    const client = fakeClient();
    let release: () => void = () => {};
    client.evalsha.mockImplementationOnce(
      (_sha, _count, ...rest) =>
        new Promise((resolve) => {
          client.sent.push(rest);
          release = () => resolve(1);
        }),
    );
    const breaker = new RedisBreaker(client.redis, 100);
    await expect(breaker.run(fails, around)).rejects.toThrow();
    await vi.advanceTimersByTimeAsync(100);
    client.emit("ready");
    await vi.advanceTimersByTimeAsync(500);
    expect(client.sent).toHaveLength(1);
    release();
    await vi.advanceTimersByTimeAsync(0);
    expect(breaker.resting).toBe(false);

    client.writable = false;
    await expect(breaker.run(fails, around)).rejects.toThrow();
    breaker.close();
    client.emit("ready");
    await vi.advanceTimersByTimeAsync(1_000);
    expect(client.sent).toHaveLength(1);
    expect(vi.getTimerCount()).toBe(0);

    const ended = fakeClient();
    ended.status = "end";
    const orphan = new RedisBreaker(ended.redis, 100);
    await expect(orphan.run(fails, around)).rejects.toThrow();
    await vi.advanceTimersByTimeAsync(1_000);
    expect(ended.sent).toHaveLength(0);
    expect(vi.getTimerCount()).toBe(0);
  });

  it("tells its listeners when a rest ends, once per rest", async () => {
    vi.useFakeTimers({ now: 0 });
    const client = fakeClient();
    const breaker = new RedisBreaker(client.redis, 100);
    const recovered = vi.fn();
    breaker.onRecovered(recovered);
    expect(await breaker.run(answers, around)).toBe("redis");
    await expect(breaker.run(fails, around)).rejects.toThrow();
    client.emit("ready");
    client.emit("ready");
    await vi.advanceTimersByTimeAsync(200);
    expect(recovered).toHaveBeenCalledOnce();
    // Failed again right after: a relapse, which rests twice as long.
    await expect(breaker.run(fails, around)).rejects.toThrow();
    await vi.advanceTimersByTimeAsync(199);
    expect(recovered).toHaveBeenCalledOnce();
    await vi.advanceTimersByTimeAsync(1);
    expect(recovered).toHaveBeenCalledTimes(2);
  });

  it("takes a key's wrong type or value as an answer: the error is passed on, Redis does not rest", async () => {
    const breaker = new RedisBreaker(fakeClient().redis, 60_000);
    for (const message of [
      "WRONGTYPE Operation against a key holding the wrong kind of value script: 62017de6, on @user_script:1.",
      "ERR value is not an integer or out of range script: f793247d, on @user_script:1.",
    ]) {
      const error = replyError(message);
      await expect(breaker.run(() => Promise.reject(error), around)).rejects.toBe(error);
      expect(isKeyDataError(error)).toBe(true);
      expect(breaker.resting).toBe(false);
    }
    // A Redis that refuses every write (full, a replica) rests as one that is gone.
    const full = oom();
    expect(isKeyDataError(full)).toBe(false);
    await expect(breaker.run(() => Promise.reject(full), around)).rejects.toBe(full);
    expect(breaker.resting).toBe(true);
    breaker.close();
  });

  it("tells its failure listeners when a call fails, with the error", async () => {
    const breaker = new RedisBreaker(fakeClient().redis, 60_000);
    const failed = vi.fn();
    breaker.onFailed(failed);
    const error = new Error("Command timed out");
    await expect(breaker.run(() => Promise.reject(error), around)).rejects.toBe(error);
    expect(failed).toHaveBeenCalledWith(error);
    breaker.close();
  });

  it("tells its failure listeners what Redis answered the write probe, not that the probe met no connection", async () => {
    vi.useFakeTimers({ now: 0 });
    const client = fakeClient();
    const breaker = new RedisBreaker(client.redis, 100);
    const failed = vi.fn();
    breaker.onFailed(failed);
    await expect(breaker.run(fails, around)).rejects.toThrow();
    client.writable = false;
    await vi.advanceTimersByTimeAsync(100);
    expect(failed).toHaveBeenLastCalledWith(
      expect.objectContaining({ message: expect.stringMatching(/^OOM/) }),
    );
    client.evalsha.mockRejectedValueOnce(
      new Error("Stream isn't writeable and enableOfflineQueue options is false"),
    );
    await vi.advanceTimersByTimeAsync(100);
    // The second probe was sent, and failed without an answer: nothing more for the listeners.
    expect(client.evalsha).toHaveBeenCalledTimes(2);
    expect(failed).toHaveBeenCalledTimes(2);
    await vi.advanceTimersByTimeAsync(100);
    expect(failed).toHaveBeenCalledTimes(3);
    breaker.close();
  });

  it("a call that learned nothing leaves the state as it was", () => {
    const breaker = new RedisBreaker(fakeClient().redis, 60_000);
    breaker.leave(breaker.enter(), undefined);
    expect(breaker.resting).toBe(false);
    breaker.leave(breaker.enter(), false);
    breaker.leave("redis", undefined);
    expect(breaker.resting).toBe(true);
    expect(breaker.enter()).toBe("rest");
    breaker.close();
  });
});
