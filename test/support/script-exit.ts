import { spawn } from "node:child_process";
import { join } from "node:path";

/**
 * Runs `script` (an ES module; TypeScript through tsx, imports from the project's root) in a child
 * Node process and waits for it to end on its own: its exit code and all it printed. A process
 * still running after 20 s (far longer than any such script takes, far shorter than a periodic
 * sweep's minute) is killed and reported as such, so a timer that holds the event loop fails the
 * test instead of hanging it.
 */
export async function exitOfScript(
  script: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<{ code: number | null | "still running after 20 s"; output: string }> {
  const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
    cwd: join(import.meta.dirname, "../.."),
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout.on("data", (chunk) => {
    output += String(chunk);
  });
  child.stderr.on("data", (chunk) => {
    output += String(chunk);
  });
  const exit = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  let held = false;
  const bound = setTimeout(() => {
    held = true;
    child.kill("SIGKILL");
  }, 20_000);
  try {
    const code = await exit;
    return { code: held ? "still running after 20 s" : code, output };
  } finally {
    clearTimeout(bound);
    child.kill("SIGKILL");
  }
}
