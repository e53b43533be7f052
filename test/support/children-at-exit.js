/**
 * Preloaded into a process (`--import`): as it exits, writes to stdout, on one line, the
 * child processes it still has, `children at exit: [{"pid":…,"name":"esbuild","state":"Z"}]`, from
 * /proc (Linux). A child still running or not yet waited for (a zombie, state Z) when its parent
 * exits goes to init, or to a PID 1 that may never reap it (`npm start` as a container's command).
 * JavaScript, so that no tsx loader (and its own esbuild service) is loaded with it.
 */
import { readdirSync, readFileSync, writeSync } from "node:fs";

/**
 * The pids of this process's children, from every thread's list (each lists those it forked).
 * @returns {string[]}
 */
function children() {
  return readdirSync("/proc/self/task").flatMap((task) =>
    readFileSync(`/proc/self/task/${task}/children`, "utf8").split(" ").filter(Boolean),
  );
}

/**
 * A process's name and state, from /proc/<pid>/stat (`pid (name) state …`); null once it is gone.
 * @param {string} pid
 * @returns {{ pid: number; name: string; state: string } | null}
 */
function describe(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const name = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
    return { pid: Number(pid), name, state: stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0] ?? "" };
  } catch {
    return null;
  }
}

process.on("exit", () => {
  writeSync(1, `children at exit: ${JSON.stringify(children().map(describe).filter(Boolean))}\n`);
});
