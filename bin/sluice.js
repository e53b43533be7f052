#!/usr/bin/env node
// The `sluice` command; `npx sluice` and `npm run sluice --` run this file too. It runs the compiled
// CLI (dist/, from `npm run build` or `npm start`) while that is current, and otherwise the
// TypeScript source through tsx: in a checkout with no build, or one whose src/ changed since the
// build (a `git pull`), so it never runs an older CLI than the source beside it. Without tsx (an
// install without dev dependencies) a stale build still runs, after a warning naming the newer file.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { constants as osConstants } from "node:os";
import { dirname, join, relative } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

/**
 * `sluice serve` is a start from the first moment: a stop signal while the CLI loads (seconds
 * through tsx on a cold start) ends it as one while the start waits does, word for word and with
 * the same exit code (src/stop-while-starting.ts, which the CLI, once loaded, installs in its place).
 */
const stopSignals = ["SIGTERM", "SIGINT", "SIGHUP"];
/** @param {NodeJS.Signals} signal */
function stoppedWhileLoading(signal) {
  process.stderr.write(
    `sluice stopped by ${signal} while starting, before it listened: nothing was served\n`,
  );
  process.exit(128 + osConstants.signals[signal]);
}
const serving = process.argv[2] === "serve";
if (serving) for (const signal of stopSignals) process.on(signal, stoppedWhileLoading);
const loaded = () => {
  for (const signal of stopSignals) process.off(signal, stoppedWhileLoading);
};

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const source = join(root, "src");
const compiled = join(root, "dist", "src");

/**
 * The first source file the build does not hold as it is now (changed or added since), if any: the
 * build (scripts/build.js, one bundle) lists the source files it was made from in sources.json,
 * written last, so a file changed after that file's time, or missing from its list, is newer.
 */
function newerSource() {
  const list = join(compiled, "sources.json");
  const built = statSync(list, { throwIfNoEntry: false });
  const held = new Set(built ? JSON.parse(readFileSync(list, "utf8")) : []);
  const newer = (directory) => {
    for (const entry of readdirSync(directory, { withFileTypes: true })) {
      const path = join(directory, entry.name);
      if (entry.isDirectory()) {
        const found = newer(path);
        if (found) return found;
      } else if (/(?<!\.test|\.d)\.ts$/.test(entry.name)) {
        const file = relative(root, path);
        if (!held.has(file) || built.mtimeMs < statSync(path).mtimeMs) return file;
      }
    }
    return undefined;
  };
  return newer(source);
}

async function loadCli() {
  const built = join(compiled, "cli", "main.js");
  const newer = !existsSync(built) ? "(no build)" : existsSync(source) ? newerSource() : undefined;
  if (newer === undefined) return import(pathToFileURL(built).href);
  let register;
  try {
    ({ register } = await import("tsx/esm/api"));
  } catch (error) {
    if (newer === "(no build)") throw error;
    process.stderr.write(
      `warning: dist/ is older than ${newer} and tsx (a dev dependency) is not installed to run src/: ` +
        "running the build; `npm run build` brings it up to date\n",
    );
    return import(pathToFileURL(built).href);
  }
  register();
  return import(pathToFileURL(join(source, "cli", "main.ts")).href);
}

/**
 * The first error writing to standard output, if any. Listened for from the start: an output that
 * cannot be written is then an exit code and a line on stderr, not an uncaught exception.
 */
let outputError;
process.stdout.on("error", (error) => {
  outputError ??= error;
});
process.stderr.on("error", () => {});

/**
 * Exits with `code` once what the CLI wrote has been written: on Linux a write to a pipe that is
 * full is queued, and an exit right after it cut the output at the pipe's size (a `projects list`
 * of 64 KiB or more piped to jq). Output that could not be written (a full disk) fails the command
 * with a line on stderr that says the command ran (a key it created and printed is lost, not
 * missing); a reader that stopped reading early (`| head`) does not fail it.
 */
async function exitWhenWritten(code) {
  const flushed = (stream) => new Promise((resolve) => stream.write("", () => resolve()));
  await flushed(process.stdout);
  if (outputError && outputError.code !== "EPIPE") {
    // Only a command that succeeded writes to stdout: its change is made, and a key it printed lost.
    const ran = code === 0 ? ": the command ran, but what it printed is lost" : "";
    process.stderr.write(
      `error: cannot write the output to standard output (${outputError.code ?? outputError.message})${ran}\n`,
    );
    code = 1;
  }
  await flushed(process.stderr);
  process.exit(code);
}

/**
 * The one line an error that escapes the CLI (a bug, a CLI that cannot be loaded) is reported by, as
 * the CLI reports its own failures: the message and the innermost cause's, no stack.
 */
function failureLine(error) {
  let cause = error instanceof Error ? error.cause : undefined;
  while (cause instanceof Error && cause.cause instanceof Error) cause = cause.cause;
  const inner = cause instanceof Error ? ` (${cause.message || cause.code || cause.name})` : "";
  return `error: ${error?.message ?? String(error)}${inner}\n`;
}

let code;
try {
  const cli = await loadCli().finally(loaded);
  code = await cli.runCli(process.argv.slice(2));
} catch (error) {
  process.stderr.write(failureLine(error));
  code = 1;
}
if (code >= 0) await exitWhenWritten(code);
