import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

/**
 * A process that builds the gateway and never closes it (a script, a test that forgot to) ends on
 * its own once it has nothing else to do: the gateway's periodic sweeps (the authentication
 * throttles', the rate limiter's, the usage recorder's) run beside the process's work, never in
 * its place. One timer that held the event loop kept such a process running for good.
 */
describe("a gateway built and left open", () => {
  it("does not keep its process alive", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "sluice-left-open-"));
    const script = [
      'import { loadConfig } from "./src/config.ts";',
      'import { createGateway } from "./src/deps.ts";',
      "await createGateway(loadConfig());",
      'process.stderr.write("built\\n");',
    ].join("\n");
    const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
      cwd: join(import.meta.dirname, "../.."),
      env: {
        ...process.env,
        LOG_LEVEL: "error",
        SLUICE_DATA_DIR: dataDir,
        SLUICE_MASTER_KEY: randomBytes(32).toString("base64"),
        SLUICE_ADMIN_TOKEN: `admin-${randomBytes(12).toString("hex")}`,
      },
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
    // Far longer than building the gateway takes, far shorter than a sweep's minute.
    let held = false;
    const bound = setTimeout(() => {
      held = true;
      child.kill("SIGKILL");
    }, 20_000);
    try {
      const code = await exit;
      expect(output).toContain("built");
      expect(held ? "still running after 20 s" : code).toBe(0);
    } finally {
      clearTimeout(bound);
      child.kill("SIGKILL");
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 30_000);
});
