import { fork } from "node:child_process";
import { fileURLToPath } from "node:url";
import { startTcpProxy } from "./tcp-proxy.js";

type Proxy = Awaited<ReturnType<typeof startTcpProxy>>;
/** The proxy's controls that a test awaits here (each is a message to the proxy's process). */
type Control = "cut" | "stall" | "restore";

/**
 * `startTcpProxy` (./tcp-proxy.ts) in a process of its own, for a file whose gateways reach a shared
 * service through the proxy under a command timeout while the test process itself is busy (a burst
 * of concurrent calls, the fake upstream): a proxy in the test's event loop passes nothing on while
 * that loop is held, so on a loaded machine a gateway's Redis command could time out on the
 * harness, not on Redis, and its limits fall back to per-instance counts. Its controls resolve once
 * the proxy's process has applied them.
 */
export async function startTcpProxyProcess(targetPort: number): Promise<{
  port: number;
  cut(): Promise<void>;
  stall(options?: { newConnections?: boolean }): Promise<void>;
  restore(): Promise<void>;
  close(): Promise<void>;
}> {
  const child = fork(fileURLToPath(import.meta.url), [String(targetPort)], {
    execArgv: ["--import", "tsx"],
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const port = await new Promise<number>((resolve, reject) => {
    child.once("message", (message) => resolve((message as { port: number }).port));
    child.once("exit", (code) => reject(new Error(`the TCP proxy's process exited with ${code}`)));
  });
  let sent = 0;
  const send = (control: Control, options?: unknown) =>
    new Promise<void>((resolve) => {
      const id = ++sent;
      const done = (message: unknown) => {
        if ((message as { done?: number }).done !== id) return;
        child.off("message", done);
        resolve();
      };
      child.on("message", done);
      child.send({ id, control, options });
    });
  return {
    port,
    cut: () => send("cut"),
    stall: (options) => send("stall", options),
    restore: () => send("restore"),
    async close() {
      if (child.exitCode === null && child.signalCode === null) child.kill();
      await exited;
    },
  };
}

/** In the proxy's process: the proxy, and a `done` for each control once applied. */
async function serve(reply: (message: unknown) => void): Promise<void> {
  const proxy: Proxy = await startTcpProxy(Number(process.argv[2]));
  process.on(
    "message",
    (message: { id: number; control: Control; options?: { newConnections?: boolean } }) => {
      if (message.control === "stall") proxy.stall(message.options);
      else proxy[message.control]();
      reply({ done: message.id });
    },
  );
  // The test process went away without closing it (a crash): no proxy outlives it.
  process.on("disconnect", () => process.exit(0));
  reply({ port: proxy.port });
}

const reply = process.send?.bind(process);
if (process.argv[1] === fileURLToPath(import.meta.url) && reply) await serve(reply);
