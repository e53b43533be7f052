import { spawn } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { describe, expect, it } from "vitest";

/**
 * Runs `node --import tsx <entry> <args>` with the import of the first module matching `held` held
 * (test/support/held-import.ts): the process is then still loading its modules, as a cold start
 * under `npm run dev` is for seconds. `signal` is sent once the import is held; what the process
 * printed and how it ended are returned.
 */
async function stoppedWhileLoading(entry: string[], held: RegExp, signal: NodeJS.Signals) {
  const dataDir = mkdtempSync(join(tmpdir(), "sluice-loading-"));
  const child = spawn(
    process.execPath,
    ["--import", "tsx", "--import", "./test/support/held-import.ts", ...entry],
    {
      cwd: join(import.meta.dirname, "../.."),
      env: {
        ...process.env,
        PORT: "0",
        HOST: "127.0.0.1",
        SLUICE_DATA_DIR: dataDir,
        SLUICE_TEST_HELD_IMPORT: held.source,
      },
      stdio: ["ignore", "pipe", "pipe", "pipe"],
    },
  );
  let stdout = "";
  let stderr = "";
  let holds = "";
  child.stdout?.on("data", (chunk: Buffer) => {
    stdout += String(chunk);
  });
  child.stderr?.on("data", (chunk: Buffer) => {
    stderr += String(chunk);
  });
  (child.stdio[3] as Readable).on("data", (chunk: Buffer) => {
    const first = holds === "";
    holds += String(chunk);
    if (first) child.kill(signal);
  });
  const killer = setTimeout(() => child.kill("SIGKILL"), 15_000);
  const ended = await new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("exit", (code, signal) => resolve({ code, signal })),
  );
  clearTimeout(killer);
  rmSync(dataDir, { recursive: true, force: true });
  return { ...ended, stdout, stderr, holds };
}

const stopped = (signal: NodeJS.Signals) =>
  `sluice stopped by ${signal} while starting, before it listened: nothing was served\n`;

describe("a stop signal while the modules still load", () => {
  it.each([
    ["SIGTERM", 143],
    ["SIGINT", 130],
    ["SIGHUP", 129],
  ] as const)(
    "%s to src/dev-main.ts (npm run dev) ends it with the line and the exit code of a start stopped later",
    async (signal, code) => {
      const ended = await stoppedWhileLoading(["src/dev-main.ts"], /\/src\/server\.ts$/, signal);
      expect(ended.holds).toMatch(/^held file:\/\/.*\/src\/server\.ts\n$/);
      expect(ended).toMatchObject({ code, signal: null, stdout: "", stderr: stopped(signal) });
    },
    20_000,
  );

  /**
   * bin/sluice.js runs the build when it is current, where the modules are chunks that cannot be
   * told apart: here it runs from a checkout of its own without a build (the file copied, so that
   * it finds no dist/ beside it; src/ and node_modules/ linked), so it loads src/ through tsx, as in
   * a fresh clone or after a `git pull`, whether or not this checkout has been built.
   */
  function unbuiltBin(): { bin: string; remove: () => void } {
    const root = join(import.meta.dirname, "../..");
    const checkout = mkdtempSync(join(tmpdir(), "sluice-unbuilt-"));
    mkdirSync(join(checkout, "bin"));
    copyFileSync(join(root, "bin/sluice.js"), join(checkout, "bin/sluice.js"));
    symlinkSync(join(root, "src"), join(checkout, "src"));
    symlinkSync(join(root, "node_modules"), join(checkout, "node_modules"));
    copyFileSync(join(root, "package.json"), join(checkout, "package.json"));
    return {
      bin: join(checkout, "bin/sluice.js"),
      remove: () => rmSync(checkout, { recursive: true, force: true }),
    };
  }

  it.each([
    ["the CLI", /\/src\/cli\/main\.ts$/],
    ["the server", /\/src\/server\.ts$/],
  ])(
    "SIGTERM to bin/sluice.js serve while it loads %s ends it with the same line and exit code",
    async (_, held) => {
      const { bin, remove } = unbuiltBin();
      try {
        const ended = await stoppedWhileLoading([bin, "serve"], held, "SIGTERM");
        expect(ended.holds.trimEnd()).toMatch(held);
        expect(ended).toMatchObject({ code: 143, signal: null, stdout: "", stderr: stopped("SIGTERM") });
      } finally {
        remove();
      }
    },
    20_000,
  );
});
