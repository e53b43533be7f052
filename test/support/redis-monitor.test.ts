import type { Socket } from "node:net";
import { afterAll, describe, expect, it, vi } from "vitest";
import { redisRelay } from "./held-redis-replies.js";
import { monitorArguments, redisMonitor } from "./redis-monitor.js";
// In CI (CI=true) an unreachable Redis makes this import throw, so the suite fails instead of skipping.
import { redisAvailable, redisTestSpace, redisUrl } from "./services.js";

const { nextPrefix, readyClient, cleanup } = redisTestSpace("redis-monitor");
afterAll(cleanup);

describe("monitorArguments", () => {
  it("unquotes each argument as Redis quotes it, a script's commands too", () => {
    expect(monitorArguments('+1796208903.927604 [0 127.0.0.1:35486] "evalsha" "a b" "1" "k:gone"')).toEqual([
      "evalsha",
      "a b",
      "1",
      "k:gone",
    ]);
    expect(monitorArguments('+1.2 [0 lua] "SET" "say \\"hi\\"\\n" "back\\\\slash" "\\xc3\\xa9"')).toEqual([
      "SET",
      'say "hi"\n',
      "back\\slash",
      "é",
    ]);
    expect(monitorArguments("+OK")).toEqual([]);
  });
});

describe.skipIf(!redisAvailable)("redisMonitor", () => {
  it("reports the lines that come in the same chunk as MONITOR's +OK, and no error", async () => {
    // A busy server sends other clients' commands right behind MONITOR's +OK, in one chunk: ioredis's
    // monitor() took them for replies to commands it never sent ("Command queue state error").
    const answered = new WeakSet<Socket>();
    const relay = await redisRelay(redisUrl, {
      replied(socket, data) {
        const first = !answered.has(socket);
        answered.add(socket);
        socket.write(
          first && data.toString().startsWith("+OK\r\n")
            ? Buffer.concat([
                data,
                Buffer.from('+1796208903.927604 [0 127.0.0.1:35486] "get" "from another"\r\n'),
              ])
            : data,
        );
      },
    });
    const prefix = nextPrefix();
    const seen: string[][] = [];
    const monitor = await redisMonitor(relay.url, (args) => seen.push(args));
    try {
      const client = await readyClient();
      await client.exists(`${prefix}:after`);
      await vi.waitFor(() => expect(seen).toContainEqual(["exists", `${prefix}:after`]), {
        timeout: 5_000,
        interval: 20,
      });
      expect(seen[0]).toEqual(["get", "from another"]);
      expect(monitor.failure()).toBeUndefined();
    } finally {
      await monitor.close();
      await relay.close();
    }
  });

  it("rejects when the connection fails before MONITOR is on", async () => {
    await expect(redisMonitor("redis://127.0.0.1:1", () => {})).rejects.toThrow();
  });
});
