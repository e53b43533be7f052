import { type ChildProcess, spawn } from "node:child_process";
import { type AddressInfo, createServer, Socket } from "node:net";

/**
 * Whether a `redis-server` binary is on the PATH, for the tests that start Redis servers of their
 * own; in CI (where the shared Redis runs from the same package) its absence throws, so those tests
 * fail loudly rather than skip, as services.ts does for the shared servers.
 */
export const redisServerInstalled = await new Promise<boolean>((resolve) => {
  const probe = spawn("redis-server", ["--version"], { stdio: "ignore" });
  probe.once("error", () => resolve(false));
  probe.once("exit", (code) => resolve(code === 0));
});
if (!redisServerInstalled && process.env.CI === "true")
  throw new Error("redis-server is not on the PATH, and CI=true requires it (apt-get install redis-server)");

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

async function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = new Socket();
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
    socket.connect(port, "127.0.0.1");
  });
}

/**
 * A Redis server of a test's own (no persistence), for what the shared one must not be put
 * through: a restart (`restart()`: killed and started again on the same port, empty, its scripts
 * gone), a memory limit, a demotion to a replica, a hang (`signal("SIGSTOP")`, then `"SIGCONT"`: the
 * server takes connections, in the kernel, and answers none). `stop()` ends it.
 */
export async function startPrivateRedis(...args: string[]): Promise<{
  port: number;
  url: string;
  restart(): Promise<void>;
  signal(signal: NodeJS.Signals): void;
  stop(): Promise<void>;
}> {
  const port = await freePort();
  let child: ChildProcess | undefined;
  async function start(): Promise<void> {
    child = spawn(
      "redis-server",
      ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", ...args],
      { stdio: "ignore" },
    );
    const deadline = Date.now() + 5_000;
    while (!(await accepts(port))) {
      if (Date.now() > deadline) throw new Error(`redis-server did not start on port ${port}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
  async function stop(): Promise<void> {
    const running = child;
    child = undefined;
    if (!running || running.exitCode !== null) return;
    const exited = new Promise((resolve) => running.once("exit", resolve));
    running.kill("SIGKILL");
    await exited;
  }
  await start();
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    async restart() {
      await stop();
      await start();
    },
    signal(signal) {
      child?.kill(signal);
    },
    stop,
  };
}
