import { EventEmitter } from "node:events";
import { afterEach, describe, expect, it, vi } from "vitest";
import { isKeyDataError, RedisBreaker } from "./redis-breaker.js";

const fails = () => Promise.reject(new Error("Command timed out"));
const answers = () => Promise.resolve("redis");
const around = () => "around";

afterEach(() => {
  vi.useRealTimers();
});

describe("RedisBreaker", () => {
  it("goes around Redis for the rest after a failure, then lets one call probe it", async () => {
    vi.useFakeTimers({ now: 0 });
    const breaker = new RedisBreaker(new EventEmitter(), 2_000);
    expect(await breaker.run(answers, around)).toBe("redis");
    await expect(breaker.run(fails, around)).rejects.toThrow("timed out");
    expect(breaker.resting).toBe(true);

    const asked = vi.fn(answers);
    expect(await breaker.run(asked, around)).toBe("around");
    vi.setSystemTime(1_999);
    expect(await breaker.run(asked, around)).toBe("around");
    expect(asked).not.toHaveBeenCalled();

    vi.setSystemTime(2_000);
    let release: (value: string) => void = () => {};
    const probe = breaker.run(() => new Promise<string>((resolve) => (release = resolve)), around);
    // While the probe is out, the others still go around.
    expect(await breaker.run(asked, around)).toBe("around");
    release("redis");
    expect(await probe).toBe("redis");
    expect(breaker.resting).toBe(false);
    expect(await breaker.run(asked, around)).toBe("redis");
    expect(asked).toHaveBeenCalledOnce();
  });

  it("rests again when the probe fails", async () => {
    vi.useFakeTimers({ now: 0 });
    const breaker = new RedisBreaker(new EventEmitter(), 100);
    await expect(breaker.run(fails, around)).rejects.toThrow();
    vi.setSystemTime(100);
    await expect(breaker.run(fails, around)).rejects.toThrow();
    vi.setSystemTime(150);
    expect(await breaker.run(answers, around)).toBe("around");
    vi.setSystemTime(200);
    expect(await breaker.run(answers, around)).toBe("redis");
  });

  it("ends the rest when the client reconnects", async () => {
    const client = new EventEmitter();
    const breaker = new RedisBreaker(client, 60_000);
    await expect(breaker.run(fails, around)).rejects.toThrow();
    expect(await breaker.run(answers, around)).toBe("around");
    client.emit("ready");
    expect(await breaker.run(answers, around)).toBe("redis");
  });

  it("tells its listeners when a rest ends, by a reconnect or an answer, once per rest", async () => {
    vi.useFakeTimers({ now: 0 });
    const client = new EventEmitter();
    const breaker = new RedisBreaker(client, 100);
    const recovered = vi.fn();
    breaker.onRecovered(recovered);
    client.emit("ready");
    expect(await breaker.run(answers, around)).toBe("redis");
    expect(recovered).not.toHaveBeenCalled();
    await expect(breaker.run(fails, around)).rejects.toThrow();
    client.emit("ready");
    client.emit("ready");
    expect(recovered).toHaveBeenCalledOnce();
    await expect(breaker.run(fails, around)).rejects.toThrow();
    vi.setSystemTime(100);
    expect(await breaker.run(answers, around)).toBe("redis");
    expect(recovered).toHaveBeenCalledTimes(2);
  });

  it("takes a key's wrong type or value as an answer: the error is passed on, Redis does not rest", async () => {
    const breaker = new RedisBreaker(new EventEmitter(), 60_000);
    for (const message of [
      "WRONGTYPE Operation against a key holding the wrong kind of value script: 62017de6, on @user_script:1.",
      "ERR value is not an integer or out of range script: f793247d, on @user_script:1.",
    ]) {
      const error = Object.assign(new Error(message), { name: "ReplyError" });
      await expect(breaker.run(() => Promise.reject(error), around)).rejects.toBe(error);
      expect(isKeyDataError(error)).toBe(true);
      expect(breaker.resting).toBe(false);
    }
    // A Redis that refuses every write (full, a replica) rests as one that is gone.
    const full = Object.assign(new Error("OOM command not allowed when used memory > 'maxmemory'."), {
      name: "ReplyError",
    });
    expect(isKeyDataError(full)).toBe(false);
    await expect(breaker.run(() => Promise.reject(full), around)).rejects.toBe(full);
    expect(breaker.resting).toBe(true);
  });

  it("tells its failure listeners when a call fails, with the error", async () => {
    const breaker = new RedisBreaker(new EventEmitter(), 60_000);
    const failed = vi.fn();
    breaker.onFailed(failed);
    const error = new Error("Command timed out");
    await expect(breaker.run(() => Promise.reject(error), around)).rejects.toBe(error);
    expect(failed).toHaveBeenCalledWith(error);
  });

  it("a call that learned nothing leaves the state as it was, and frees the probe", () => {
    vi.useFakeTimers({ now: 0 });
    const breaker = new RedisBreaker(new EventEmitter(), 100);
    breaker.leave(breaker.enter(), false);
    vi.setSystemTime(100);
    const probe = breaker.enter();
    expect(probe).toBe("probe");
    expect(breaker.enter()).toBe("rest");
    breaker.leave(probe, undefined);
    expect(breaker.resting).toBe(true);
    expect(breaker.enter()).toBe("probe");
  });
});
