import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync } from "node:fs";

/** A child process the benchmark started, with the CPU and memory readings it needs. */
export interface Target {
  name: string;
  url: string;
  child: ChildProcess;
}

const running = new Set<ChildProcess>();
const ticksPerSecond = 100; // getconf CLK_TCK on Linux

/** How a process is started: `wrapper` runs Node under another program (valgrind). */
export interface StartOptions {
  wrapper?: string[];
  timeoutMs?: number;
}

/** Spawns a process that prints `{"url":…}` (or a "listening on" log line) and waits for it. */
export async function startProcess(
  name: string,
  args: string[],
  env: Record<string, string> = {},
  { wrapper = [], timeoutMs = 30_000 }: StartOptions = {},
): Promise<Target> {
  const [command, ...rest] = [...wrapper, process.execPath, ...args] as [string, ...string[]];
  const child = spawn(command, rest, {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  running.add(child);
  child.once("exit", () => running.delete(child));
  let output = "";
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${name} did not start: ${output}`)), timeoutMs);
    const onData = (chunk: Buffer) => {
      output += String(chunk);
      const match =
        /"url":"(http:\/\/[^"]+)"/.exec(output) ?? /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(output);
      if (match?.[1]) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    };
    child.stdout?.on("data", onData);
    child.stderr?.on("data", (chunk: Buffer) => {
      output += String(chunk);
    });
    child.once("exit", (code) => reject(new Error(`${name} exited with ${code}: ${output}`)));
  });
  return { name, url, child };
}

/** User + system CPU time of a process so far, in microseconds (from /proc/<pid>/stat). */
export function cpuMicros(child: ChildProcess): number {
  return pidCpuMicros(child.pid as number);
}

/** `cpuMicros` of any process by its pid (a server's, say); throws when it cannot be read. */
export function pidCpuMicros(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return ((Number(fields[11]) + Number(fields[12])) / ticksPerSecond) * 1e6;
}

/** Resident set size in MiB (from /proc/<pid>/status). */
export function rssMiB(child: ChildProcess): number {
  const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${child.pid}/status`, "utf8"));
  return match ? Number(match[1]) / 1024 : Number.NaN;
}

export function stopAll(): void {
  for (const child of running) child.kill("SIGKILL");
  running.clear();
}
