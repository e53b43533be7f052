import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { startSilentPostgres } from "../support/silent-postgres.js";

/**
 * Runs `node --import tsx src/main.ts` (npm start) until it exits, or kills it after `killAfterMs`;
 * `whileRunning` is handed the process at once.
 */
async function start(
  env: Record<string, string>,
  killAfterMs: number,
  whileRunning?: (child: ChildProcess) => void,
) {
  const dataDir = mkdtempSync(join(tmpdir(), "sluice-start-"));
  const child = spawn(process.execPath, ["--import", "tsx", "src/main.ts"], {
    cwd: join(import.meta.dirname, "../.."),
    env: {
      ...process.env,
      ...env,
      PORT: "0",
      HOST: "127.0.0.1",
      LOG_LEVEL: "info",
      SLUICE_DATA_DIR: dataDir,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk: Buffer) => {
    stdout += String(chunk);
  });
  child.stderr.on("data", (chunk: Buffer) => {
    stderr += String(chunk);
  });
  whileRunning?.(child);
  const killer = setTimeout(() => child.kill("SIGKILL"), killAfterMs);
  const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
  clearTimeout(killer);
  rmSync(dataDir, { recursive: true, force: true });
  return { code, stdout, stderr };
}

describe("a start on a PostgreSQL that does not answer", () => {
  it("exits 1 within SLUICE_DATABASE_START_TIMEOUT_MS, naming DATABASE_URL and never its password", async () => {
    const silent = await startSilentPostgres();
    try {
      const url = `postgres://sluice:not-the-password@127.0.0.1:${silent.port}/test`;
      const exited = await start(
        {
          DATABASE_URL: url,
          SLUICE_MASTER_KEY: randomBytes(32).toString("base64"),
          SLUICE_DATABASE_START_TIMEOUT_MS: "1000",
        },
        15_000,
      );
      expect(exited.code).toBe(1);
      expect(exited.stderr).toBe(
        `sluice failed to start: DATABASE_URL (postgres://sluice@127.0.0.1:${silent.port}/test): PostgreSQL did not answer within 1000 ms (SLUICE_DATABASE_START_TIMEOUT_MS)\n`,
      );
      expect(exited.stdout + exited.stderr).not.toContain("not-the-password");
    } finally {
      await silent.close();
    }
  }, 20_000);
});

describe("a stop signal while the start waits", () => {
  it.each([
    ["SIGTERM", 143],
    ["SIGINT", 130],
    ["SIGHUP", 129],
  ] as const)(
    "%s ends it at once with a line on stderr and the shell's exit code",
    async (signal, code) => {
      const silent = await startSilentPostgres();
      try {
        const exited = start(
          {
            DATABASE_URL: `postgres://sluice@127.0.0.1:${silent.port}/test`,
            SLUICE_MASTER_KEY: randomBytes(32).toString("base64"),
            SLUICE_DATABASE_START_TIMEOUT_MS: "60000",
          },
          15_000,
          (child) => {
            // The start is under way once its first query reached the silent server.
            const waiting = setInterval(() => {
              if (silent.received() === "") return;
              clearInterval(waiting);
              child.kill(signal);
            }, 20);
            child.once("exit", () => clearInterval(waiting));
          },
        );
        const { code: exitCode, stdout, stderr } = await exited;
        expect(stdout).toBe("");
        expect(stderr).toBe(
          `sluice stopped by ${signal} while starting, before it listened: nothing was served\n`,
        );
        expect(exitCode).toBe(code);
      } finally {
        await silent.close();
      }
    },
    20_000,
  );
});
