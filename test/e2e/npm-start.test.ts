import { execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it, vi } from "vitest";

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

  it("drains and stops the gateway when npm alone gets SIGTERM", { timeout: 120_000 }, async () => {
    const npm = spawn("npm", ["start", "--", marker], {
      cwd: join(import.meta.dirname, "../.."),
      env: { ...process.env, PORT: "0", HOST: "127.0.0.1", LOG_LEVEL: "info", SLUICE_DATA_DIR: dataDir },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let output = "";
    const npmExit = new Promise<void>((resolve) => npm.once("exit", () => resolve()));
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`npm start did not serve:\n${output}`)), 100_000);
      const onData = (chunk: Buffer) => {
        output += String(chunk);
        const listening = /sluice listening on (http:\/\/[^"\s]+)/.exec(output);
        if (listening) {
          clearTimeout(timer);
          resolve(listening[1] as string);
        }
      };
      npm.stdout.on("data", onData);
      npm.stderr.on("data", onData);
    });
    expect((await fetch(`${url}/health`)).status).toBe(200);

    npm.kill("SIGTERM");
    await npmExit;
    // What the gateway wrote before it exited reached npm's pipe: it drained and said so. Read from
    // the pipe, that may come after npm's exit: waited for, not for a fixed time.
    await vi.waitFor(
      () => {
        expect(output).toContain('"signal":"SIGTERM"');
        expect(output).toContain('"msg":"stopped"');
      },
      { timeout: 10_000, interval: 20 },
    );
    await expect(fetch(`${url}/health`)).rejects.toThrow();
  });
});
