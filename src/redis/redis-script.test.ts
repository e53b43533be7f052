import { randomBytes } from "node:crypto";
import { afterAll, describe, expect, it, vi } from "vitest";
// In CI (CI=true) an unreachable Redis makes this import throw, so the suite fails instead of skipping.
import { redisAvailable, redisTestSpace } from "../../test/support/services.js";
import { RedisScript } from "./redis-script.js";

const { nextPrefix, readyClient, cleanup } = redisTestSpace("script");

afterAll(cleanup);

describe.skipIf(!redisAvailable)("RedisScript", () => {
  it("sends the script whole only when Redis does not have it cached, then by its digest", async () => {
    const redis = await readyClient();
    // A comment of its own, so no other test has loaded this script.
    const script = new RedisScript(`-- ${randomBytes(8).toString("hex")}
return redis.call("INCRBY", KEYS[1], ARGV[1])`);
    const whole = vi.spyOn(redis, "eval");
    const key = `${nextPrefix()}:counter`;
    expect(await script.run(redis, [key], [2])).toBe(2);
    expect(await script.run(redis, [key], [3])).toBe(5);
    expect(whole).toHaveBeenCalledTimes(1);
  });

  it("passes on an error that is not a missing script", async () => {
    const redis = await readyClient();
    const script = new RedisScript(`return redis.call("INCR", KEYS[1])`);
    const key = `${nextPrefix()}:text`;
    await redis.set(key, "not a number");
    await expect(script.run(redis, [key], [])).rejects.toThrow(/not an integer/);
  });
});
