import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it, vi } from "vitest";

/** Whether this machine lets the tests make a PID namespace (root, or user namespaces allowed). */
const pidNamespaces = (() => {
  try {
    execFileSync("unshare", ["--pid", "--fork", "true"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
})();

/**
 * The README's `npm start`, as a supervisor runs it (`docker stop`, systemd with one main PID): the
 * SIGTERM goes to npm alone, which passes it to its child. That child must be the gateway itself,
 * or the signal ends the shell between them and the gateway never drains: it is left running
 * without a parent, or killed outright with its queued usage rows when npm was PID 1.
 */
describe("npm start", () => {
  const dataDir = mkdtempSync(join(tmpdir(), "sluice-npm-start-"));
  // Passed on to the gateway's command line, to find it should it outlive npm.
  const marker = `--sluice-test-${randomBytes(6).toString("hex")}`;

  afterAll(() => {
    try {
      execFileSync("pkill", ["-f", "--", marker]);
    } catch {
      // None left: the expected case.
    }
    rmSync(dataDir, { recursive: true, force: true });
  });

  /**
   * Runs `npm start` (in a process group of its own with `detached`, as a terminal's foreground job
   * is), under the command `under` when given, until the gateway listens; `output` is what npm and
   * the gateway wrote so far.
   */
  async function npmStart(
    env: Record<string, string> = {},
    under: string[] = [],
    script: string[] = ["start", "--", marker],
  ) {
    const [command = "npm", ...args] = [...under, ...(under.length > 0 ? ["npm"] : [])];
    const npm = spawn(command, [...args, ...script], {
      cwd: join(import.meta.dirname, "../.."),
      env: {
        ...process.env,
        PORT: "0",
        HOST: "127.0.0.1",
        LOG_LEVEL: "info",
        SLUICE_DATA_DIR: dataDir,
        ...env,
      },
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    const started = {
      npm,
      output: "",
      exit: new Promise<void>((resolve) => npm.once("exit", () => resolve())),
    };
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`npm start did not serve:\n${started.output}`)),
        100_000,
      );
      const onData = (chunk: Buffer) => {
        started.output += String(chunk);
        const listening = /sluice listening on (http:\/\/[^"\s]+)/.exec(started.output);
        if (listening) {
          clearTimeout(timer);
          resolve(listening[1] as string);
        }
      };
      npm.stdout.on("data", onData);
      npm.stderr.on("data", onData);
    });
    return { ...started, url, output: () => started.output };
  }

  /**
   * Sends SIGTERM to npm alone and waits for it to exit; the gateway must have drained and said so,
   * and stopped serving. What the gateway wrote before it exited reached npm's pipe, but read from
   * the pipe it may come after npm's exit: waited for, not for a fixed time.
   */
  async function drainsOnSigtermToNpm(
    npm: ReturnType<typeof spawn>,
    npmExit: Promise<void>,
    read: () => string,
    url: string,
  ): Promise<void> {
    npm.kill("SIGTERM");
    await npmExit;
    await vi.waitFor(
      () => {
        expect(read()).toContain('"signal":"SIGTERM"');
        expect(read()).toContain('"msg":"stopped"');
      },
      { timeout: 10_000, interval: 20 },
    );
    await expect(fetch(`${url}/health`)).rejects.toThrow();
  }

  it("drains and stops the gateway when npm alone gets SIGTERM", { timeout: 120_000 }, async () => {
    const { npm, url, exit: npmExit, output: read } = await npmStart();
    expect((await fetch(`${url}/health`)).status).toBe(200);

    await drainsOnSigtermToNpm(npm, npmExit, read, url);
  });

  // The README's other way to start it, `npm run sluice -- serve`: npm runs the script through a
  // shell, which must give way to the gateway (exec), or the SIGTERM npm passes on ends the shell
  // and the gateway, left without a parent, never hears it.
  it("drains and stops the gateway of npm run sluice -- serve when npm alone gets SIGTERM", {
    timeout: 120_000,
  }, async () => {
    const {
      npm,
      url,
      exit: npmExit,
      output: read,
    } = await npmStart({}, [], ["run", "sluice", "--", "serve"]);
    const [gateway, ...others] = childrenOf(npm.pid as number);
    try {
      expect((await fetch(`${url}/health`)).status).toBe(200);
      expect(others).toEqual([]);
      expect(processState(gateway as number)?.name).toBe("node");

      await drainsOnSigtermToNpm(npm, npmExit, read, url);
    } finally {
      // Left running by a failure: not left behind the test.
      const below = processState(gateway as number) === null ? [] : childrenOf(gateway as number);
      for (const pid of [gateway, ...others, ...below])
        if (pid !== undefined && processState(pid) !== null) process.kill(pid, "SIGKILL");
    }
  });

  // A terminal's Ctrl-C sends SIGINT to its whole foreground job, npm and the gateway alike, and npm
  // passes the one it gets on to the gateway: one key press, two signals. Taken as two, the second
  // "hurried" the shutdown, skipping SLUICE_SHUTDOWN_DELAY_MS and cutting the calls in flight.
  it("takes a terminal's Ctrl-C (SIGINT to npm's process group) as one signal: the delay runs whole, nothing is hurried", {
    timeout: 120_000,
  }, async () => {
    const { npm, url, exit: npmExit, output: read } = await npmStart({ SLUICE_SHUTDOWN_DELAY_MS: "1000" });
    expect((await fetch(`${url}/health`)).status).toBe(200);

    process.kill(-(npm.pid as number), "SIGINT");
    await npmExit;
    await vi.waitFor(() => expect(read()).toContain('"msg":"stopped"'), { timeout: 10_000, interval: 20 });
    expect(read()).toContain('"signal":"SIGINT","delayedMs":1000,"msg":"shutting down');
    expect(read()).not.toContain("signal repeated");
    expect(read()).not.toContain("delayCutShort");
  });

  // `npm run dev` (watch mode) as a supervisor runs it: npm's SIGTERM went to the shell between npm
  // and the watcher, which it ended, and the watcher and the gateway ran on without a parent,
  // holding the port.
  it("drains and stops the gateway of npm run dev when npm alone gets SIGTERM, leaving nothing behind", {
    timeout: 120_000,
  }, async () => {
    const { npm, url, exit: npmExit, output: read } = await npmStart({}, [], ["run", "dev", "--", marker]);
    expect((await fetch(`${url}/health`)).status).toBe(200);

    await drainsOnSigtermToNpm(npm, npmExit, read, url);
    await vi.waitFor(() => expect(groupAlive(npm.pid as number)).toBe(false), {
      timeout: 10_000,
      interval: 20,
    });
  });

  /** The gateway logged `stopped`, and nothing of npm's process group is left running. */
  async function stoppedWithNothingLeft(npm: ChildProcess, read: () => string) {
    await vi.waitFor(() => expect(read()).toContain('"msg":"stopped"'), { timeout: 10_000, interval: 20 });
    await vi.waitFor(() => expect(groupAlive(npm.pid as number)).toBe(false), {
      timeout: 10_000,
      interval: 20,
    });
  }

  // Under `npm run dev` a Ctrl-C reaches the watcher twice too (from the terminal and from npm): a
  // watcher that takes the second as a reason to SIGKILL the gateway, or one that SIGKILLs it a few
  // seconds into its drain, loses the drain and the usage rows.
  it("takes a Ctrl-C under npm run dev as one signal: a delay longer than five seconds runs whole and the gateway stops", {
    timeout: 120_000,
  }, async () => {
    const {
      npm,
      exit: npmExit,
      output: read,
    } = await npmStart({ SLUICE_SHUTDOWN_DELAY_MS: "6000" }, [], ["run", "dev", "--", marker]);

    process.kill(-(npm.pid as number), "SIGINT");
    await npmExit;
    await stoppedWithNothingLeft(npm, read);
    expect(read()).toContain('"signal":"SIGINT","delayedMs":6000,"msg":"shutting down');
    expect(read()).not.toContain("signal repeated");
    expect(read()).not.toContain("delayCutShort");
  });

  it("hurries the shutdown under npm run dev on a second Ctrl-C pressed a second after the first", {
    timeout: 120_000,
  }, async () => {
    const {
      npm,
      exit: npmExit,
      output: read,
    } = await npmStart({ SLUICE_SHUTDOWN_DELAY_MS: "60000" }, [], ["run", "dev", "--", marker]);

    process.kill(-(npm.pid as number), "SIGINT");
    await vi.waitFor(() => expect(read()).toContain('"msg":"shutdown delayed'), {
      timeout: 10_000,
      interval: 20,
    });
    // A person's second press, past the window in which the same signal is npm's copy of the first.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    expect(read()).not.toContain("signal repeated");
    process.kill(-(npm.pid as number), "SIGINT");
    await npmExit;
    await stoppedWithNothingLeft(npm, read);
    expect(read()).toContain('"signal":"SIGINT","delayCutShort":true,"msg":"shutting down');
    expect(read()).toContain(
      '"msg":"signal repeated: cutting what is still open, writing the usage rows, exiting"',
    );
  });

  // A container whose command is `npm start` (README, "Shutdown") runs npm as PID 1, which
  // every orphan of its process tree goes to, and which waits for its own child alone: a process
  // of the build left behind (esbuild's service, the build's or tsx's) stayed a zombie beside the
  // gateway for as long as it ran. A PID namespace of its own (unshare) puts npm there.
  it.skipIf(!pidNamespaces)(
    "leaves no zombie beside the gateway when npm is PID 1, as a container's command",
    { timeout: 120_000 },
    async () => {
      const { npm: unshare, url, exit } = await npmStart({}, ["unshare", "--pid", "--fork", "--kill-child"]);
      expect((await fetch(`${url}/health`)).status).toBe(200);
      const [npm] = childrenOf(unshare.pid as number);
      expect(npm).toBeDefined();
      const [gateway, ...others] = childrenOf(npm as number);
      const zombies = (pids: number[]) => pids.map(processState).filter((child) => child?.state === "Z");
      expect(zombies([gateway as number, ...others])).toEqual([]);
      expect(zombies(childrenOf(gateway as number))).toEqual([]);
      expect(others.map(processState)).toEqual([]);

      // npm (PID 1 there) takes SIGTERM, as `docker stop` sends it, and passes it on.
      process.kill(npm as number, "SIGTERM");
      await exit;
    },
  );
});

/** A process's children, from every thread's list in /proc (Linux). */
function childrenOf(pid: number): number[] {
  return readdirSync(`/proc/${pid}/task`).flatMap((task) =>
    readFileSync(`/proc/${pid}/task/${task}/children`, "utf8").split(" ").filter(Boolean).map(Number),
  );
}

/** Whether any process is left in the process group `pgid` (npm's, as `detached` made it). */
function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch {
    return false;
  }
}

/** A process's name and state (`Z`: exited, not yet waited for), from /proc; null once it is gone. */
function processState(pid: number): { name: string; state: string } | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const name = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
    return { name, state: stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0] ?? "" };
  } catch {
    return null;
  }
}
