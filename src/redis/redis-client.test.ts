import type { Redis } from "ioredis";
import { afterEach, describe, expect, it, vi } from "vitest";
// In CI (CI=true) an unreachable Redis makes this import throw, so the suite fails instead of skipping.
import { startLocalTcpServer } from "../../test/support/local-server.js";
import { startPasswordRedis } from "../../test/support/password-redis.js";
import { redisServerInstalled, startPrivateRedis } from "../../test/support/private-redis.js";
import { redisAvailable, redisUrl } from "../../test/support/services.js";
import { startTcpProxy } from "../../test/support/tcp-proxy.js";
import { createRedisClient, RedisSetupError } from "./redis-client.js";

const made: Redis[] = [];
const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  vi.restoreAllMocks();
  for (const client of made.splice(0)) client.disconnect();
  for (const close of closers.splice(0)) await close();
});

async function client(url: string, errors?: Error[]): Promise<Redis> {
  const built = await createRedisClient(url, { onError: (error) => errors?.push(error) });
  made.push(built);
  return built;
}

async function proxy() {
  const started = await startTcpProxy(6379);
  closers.push(started.close);
  return started;
}

/** Polls `check` every 50 ms until it holds or `ms` passed; says whether it held. */
async function eventually(check: () => Promise<boolean>, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await check().catch(() => false)) return true;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return false;
}

describe("createRedisClient's first connection", () => {
  it.skipIf(!redisAvailable)(
    "answers commands as soon as it is built (no offline queue to hide a connect)",
    async () => {
      const built = await client(redisUrl);
      expect(built.status).toBe("ready");
      expect(await built.ping()).toBe("PONG");
      expect(built.options.keepAlive).toBeGreaterThan(0);
    },
  );

  it("does not wait for a Redis that refuses connections", async () => {
    const errors: Error[] = [];
    const built = await client("redis://127.0.0.1:1", errors);
    // Built on the first refusal, before the client tries again (200 ms later, then 400 ms after
    // that): counted, not timed. Waiting for the connect timeout (1 s) would have seen three.
    expect(errors.map((error) => error.message)).toEqual([expect.stringContaining("ECONNREFUSED")]);
    await expect(built.ping()).rejects.toThrow();
  });

  it.skipIf(!redisAvailable)(
    "refuses a database index the server does not have, instead of using database 0",
    async () => {
      const started = createRedisClient(`${redisUrl}/99`);
      await expect(started).rejects.toThrow(RedisSetupError);
      await expect(started).rejects.toThrow(/SELECT 99 .*DB index is out of range/);
    },
  );

  it.skipIf(!redisAvailable)(
    "refuses a user and password Redis does not accept, never naming the password",
    async () => {
      const started = createRedisClient("redis://sluice-test-nobody:not-the-password@127.0.0.1:6379");
      await expect(started).rejects.toThrow(/AUTH .*WRONGPASS/);
      await expect(started).rejects.not.toThrow(/not-the-password/);
    },
  );

  it("refuses a rediss:// URL whose server answers in plain text, saying so, never naming the password", async () => {
    const redis = await startPasswordRedis();
    closers.push(redis.close);
    const started = createRedisClient(`rediss://:not-the-password@127.0.0.1:${redis.port}/0`);
    await expect(started).rejects.toThrow(RedisSetupError);
    await expect(started).rejects.toThrow(
      `the URL is rediss:// (TLS), but the Redis at 127.0.0.1:${redis.port} answers without TLS: write redis://, or turn TLS on in Redis`,
    );
    await expect(started).rejects.not.toThrow(/not-the-password/);
  });

  it("does not wait for a TLS Redis that refuses connections, nor take it for a plain one", async () => {
    const errors: Error[] = [];
    const built = await client("rediss://127.0.0.1:1", errors);
    // Built on the first refusal (the plain-text probe refused at once too), before the client tries
    // again 200 ms later: counted, not timed. Waiting for the connect timeout (1 s) would have seen
    // three refusals, for the probe's time-out (500 ms) two.
    expect(errors.map((error) => error.message)).toEqual([expect.stringContaining("ECONNREFUSED")]);
    await expect(built.ping()).rejects.toThrow();
  });

  it("names the missing password when Redis asks for one, whatever command it refused, and says nothing more", async () => {
    const redis = await startPasswordRedis();
    closers.push(redis.close);
    const errors: Error[] = [];
    // With a database index, SELECT is the first command Redis refuses; without, the ready check.
    for (const path of ["/3", ""]) {
      const started = createRedisClient(`redis://127.0.0.1:${redis.port}${path}`, {
        onError: (error) => errors.push(error),
      });
      await expect(started).rejects.toThrow(RedisSetupError);
      await expect(started).rejects.toThrow(
        "Redis refused the connection (it requires a password, and the URL gives none): NOAUTH",
      );
    }
    const wrong = createRedisClient(`redis://:not-the-password@127.0.0.1:${redis.port}/3`, {
      onError: (error) => errors.push(error),
    });
    await expect(wrong).rejects.toThrow("Redis refused AUTH (the user and password in the URL): WRONGPASS");
    // The start's failure says it all: no client error is reported for it, then or after.
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(errors).toEqual([]);
  });

  it("does not ask for a password the URL gives when an old Redis did not take its AUTH", async () => {
    const old = await startPasswordRedis("-ERR wrong number of arguments for 'auth' command");
    closers.push(old.close);
    const console = vi.spyOn(globalThis.console, "warn");
    const warnings: string[] = [];
    const started = createRedisClient(`redis://app:the-password@127.0.0.1:${old.port}/2`, {
      onError: () => {},
      onWarning: (message) => warnings.push(message),
    });
    await expect(started).rejects.toThrow(
      "Redis refused the connection (it still requires authentication after the URL's AUTH; Redis 5 and older take a password without a user name): NOAUTH",
    );
    await expect(started).rejects.not.toThrow(/the-password/);
    // ioredis's own `[ERROR] The server returned "wrong number of arguments …"` line is not printed.
    expect(console).not.toHaveBeenCalled();
    expect(warnings).toEqual([
      "REDIS_URL gives a user name, which Redis 5 and older do not take: its AUTH was not used; write the URL without the user (redis://:password@host)",
    ]);
  });

  it.skipIf(!redisAvailable)(
    "reports a password Redis does not require to onWarning once, not on the console, and runs on the URL's database",
    async () => {
      const console = vi.spyOn(globalThis.console, "warn");
      const warnings: string[] = [];
      const built = await createRedisClient("redis://:not-the-password@127.0.0.1:6379/11", {
        onWarning: (message) => warnings.push(message),
      });
      made.push(built);
      expect(built.status).toBe("ready");
      expect(await built.client("INFO")).toMatch(/ db=11 /);
      // A new connection's AUTH gets the same reply: it is not reported again.
      built.disconnect(true);
      expect(await eventually(async () => (await built.ping()) === "PONG", 3_000)).toBe(true);
      expect(console).not.toHaveBeenCalled();
      expect(warnings).toEqual([
        "REDIS_URL gives a password, but this Redis requires none (its default user has no password): the password is not used, and anyone who can reach this Redis can use it",
      ]);
    },
  );

  it.skipIf(!redisAvailable)(
    "drops a later connection whose SELECT Redis refuses (Redis was down at start) rather than use database 0",
    async () => {
      const tcp = await proxy();
      tcp.cut();
      const errors: Error[] = [];
      const built = await client(`redis://127.0.0.1:${tcp.port}/99`, errors);
      tcp.restore();
      const refused = await eventually(
        async () => errors.some((error) => /DB index is out of range/.test(error.message)),
        3_000,
      );
      expect(refused).toBe(true);
      // Never used on database 0: every command fails.
      const keys = Array.from({ length: 10 }, (_, attempt) => `sluice-test:db99:${attempt}`);
      try {
        for (const key of keys) {
          await expect(built.set(key, "x")).rejects.toThrow();
          await new Promise((resolve) => setTimeout(resolve, 30));
        }
      } finally {
        await (await client(redisUrl)).del(...keys);
      }
    },
  );
});

describe.skipIf(!redisAvailable)("a connection that goes silent", () => {
  it("is replaced once: Redis answers again on a new connection within a few seconds", async () => {
    const tcp = await proxy();
    const errors: Error[] = [];
    const built = await client(`redis://127.0.0.1:${tcp.port}`, errors);
    expect(await built.ping()).toBe("PONG");
    const before = tcp.connections();
    tcp.stall();
    // Several commands time out on the silent socket together: one replacement, not one per command.
    const stalled = await Promise.allSettled([built.ping(), built.ping(), built.ping()]);
    expect(stalled.map((result) => result.status)).toEqual(["rejected", "rejected", "rejected"]);
    expect(await eventually(async () => (await built.ping()) === "PONG", 4_000)).toBe(true);
    expect(tcp.connections()).toBe(before + 1);
    expect(errors.map((error) => error.message)).toContain(
      "Redis did not answer within 500 ms: connection replaced",
    );
  });

  it("is kept, and its answer used, when Redis answered while this process was stalled past the command timeout", async () => {
    const errors: Error[] = [];
    // Straight to Redis: a proxy in this process would stall too.
    const built = await client(redisUrl, errors);
    expect(await built.ping()).toBe("PONG");
    const socket = built.stream;
    const late = built.ping();
    // The event loop held past the command timeout (a long GC pause, a burst of synchronous work):
    // Redis's answer waits in the socket, and the timer comes first when the loop turns again.
    const until = performance.now() + 700;
    while (performance.now() < until) {}
    // Redis answered in time: the command has its answer, not a timeout ...
    expect(await late).toBe("PONG");
    // ... and the connection answered: it is kept, not replaced.
    expect(await built.ping()).toBe("PONG");
    expect(built.stream).toBe(socket);
    expect(socket.destroyed).toBe(false);
    expect(errors).toEqual([]);
  });
});

describe.skipIf(!redisServerInstalled)("a failover", () => {
  /**
   * Two Redis servers of this test's own behind one name (the proxy): the first is demoted to a
   * replica of the second, which is promoted, and the name then points to the second, as a managed
   * Redis's failover does. The demoted server keeps its connections open and answers every write
   * READONLY.
   */
  async function failover() {
    const [first, second] = [await startPrivateRedis(), await startPrivateRedis()];
    closers.push(first.stop, second.stop);
    const name = await startTcpProxy(first.port);
    closers.push(name.close);
    return {
      url: `redis://127.0.0.1:${name.port}`,
      /** Demotes the first; `moveName: false` leaves the name on it (a REDIS_URL naming a replica). */
      async run({ moveName = true } = {}) {
        const admin = await client(first.url);
        await admin.call("REPLICAOF", "127.0.0.1", String(second.port));
        if (moveName) name.retarget(second.port);
      },
      connections: () => name.connections(),
    };
  }

  it("moves to the new primary: a connection answered READONLY is replaced, once", async () => {
    const servers = await failover();
    const errors: Error[] = [];
    const built = await client(servers.url, errors);
    expect(await built.incr("counter")).toBe(1);
    await servers.run();
    // Several writes refused together: one replacement, not one per write.
    const refused = await Promise.allSettled([built.incr("counter"), built.incr("counter")]);
    expect(refused.map((result) => result.status)).toEqual(["rejected", "rejected"]);
    expect(await eventually(async () => (await built.incr("counter")) === 1, 3_000)).toBe(true);
    expect(servers.connections()).toBe(2);
    expect(errors.map((error) => error.message)).toContain(
      "Redis answered READONLY (a replica, as after a failover): connection replaced",
    );
  });

  it("replaces a connection to a Redis that stays a replica at most once in 5 s, not at each write", async () => {
    const servers = await failover();
    const built = await client(servers.url);
    await servers.run({ moveName: false });
    const until = Date.now() + 1_500;
    let refusals = 0;
    while (Date.now() < until) {
      await built.set("key", "value").catch(() => refusals++);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(refusals).toBeGreaterThan(10);
    expect(servers.connections()).toBeLessThanOrEqual(2);
  });
});

describe("the command timeout", () => {
  /**
   * A Redis that answers the client's set-up (CLIENT SETINFO, then the ready check's INFO) and then
   * nothing: a server far away or hung, whose connection stays open.
   */
  async function silentRedis() {
    const server = await startLocalTcpServer((socket) => {
      socket.on("error", () => {});
      socket.on("data", (chunk: Buffer) => {
        for (const [, name] of chunk.toString("latin1").matchAll(/\*\d+\r\n\$\d+\r\n(\w+)/g)) {
          if (name?.toLowerCase() === "client") socket.write("+OK\r\n");
          if (name?.toLowerCase() === "info") socket.write("$9\r\nloading:0\r\n");
        }
      });
    });
    closers.push(server.close);
    return `redis://127.0.0.1:${server.port}`;
  }

  const failureAfter = async (built: Redis) => {
    expect(built.status).toBe("ready");
    const started = performance.now();
    await expect(built.ping()).rejects.toThrow("Command timed out");
    return performance.now() - started;
  };

  it("is the one configured: a command waits that long before it fails, and its connection is replaced", async () => {
    const errors: Error[] = [];
    const built = await createRedisClient(await silentRedis(), {
      commandTimeoutMs: 1500,
      onError: (error) => errors.push(error),
    });
    made.push(built);
    const waited = await failureAfter(built);
    // The wait's length is said by the message below; a busy machine may add to the clock's reading.
    expect(waited).toBeGreaterThanOrEqual(1450);
    await eventually(async () => errors.length > 0, 1000);
    expect(errors.map((error) => error.message)).toContain(
      "Redis did not answer within 1500 ms: connection replaced",
    );
  });

  it("is 500 ms when none is given", async () => {
    const errors: Error[] = [];
    const built = await client(await silentRedis(), errors);
    const waited = await failureAfter(built);
    expect(waited).toBeGreaterThanOrEqual(450);
    await eventually(async () => errors.length > 0, 1000);
    expect(errors.map((error) => error.message)).toContain(
      "Redis did not answer within 500 ms: connection replaced",
    );
  });
});

describe("a reply nested deeper than the stack", () => {
  it("fails its command and replaces the connection, without crashing the process", async () => {
    // A Redis (or whatever answers on its port: a plain-TCP path is open to one on the way) whose
    // PING reply is an array nested 200,000 deep. ioredis 5's parser recursed once per level and threw
    // out of the socket's data listener: an uncaught exception that ended the process.
    let connections = 0;
    const server = await startLocalTcpServer((socket) => {
      connections++;
      socket.on("data", (chunk: Buffer) => {
        for (const [, name] of chunk.toString("latin1").matchAll(/\*\d+\r\n\$\d+\r\n(\w+)/g)) {
          const command = name?.toLowerCase();
          if (command === "info") socket.write("$9\r\nloading:0\r\n");
          else if (command === "ping") socket.write(`${"*1\r\n".repeat(200_000)}*0\r\n`);
          else socket.write("+OK\r\n");
        }
      });
    });
    closers.push(server.close);
    const errors: Error[] = [];
    const built = await createRedisClient(`redis://127.0.0.1:${server.port}`, {
      commandTimeoutMs: 5_000,
      onError: (error) => errors.push(error),
    });
    made.push(built);
    expect(built.status).toBe("ready");
    // Failed by the parser (its RangeError), not by the command timeout 5 s on ("Command timed out").
    const failure = await built.ping().then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(failure).toBeInstanceOf(RangeError);
    expect(await eventually(async () => connections === 2 && built.status === "ready", 3_000)).toBe(true);
    expect(errors.length).toBeGreaterThan(0);
  });
});
