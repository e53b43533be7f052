import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { closeSync, existsSync, mkdtempSync, openSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "../../src/cli/main.js";

const repository = join(import.meta.dirname, "../..");
const entry = join(repository, "src/cli/main.ts");

/**
 * src/cli/main.ts run directly (`npx tsx src/cli/main.ts …`), not through bin/sluice.js: it must
 * write its output as bin/sluice.js does, all of it before it exits, and fail on one it cannot write.
 */
describe("src/cli/main.ts run directly", () => {
  const dataDir = mkdtempSync(join(tmpdir(), "sluice-cli-entry-"));
  const env = {
    ...process.env,
    SLUICE_DATA_DIR: dataDir,
    SLUICE_MASTER_KEY: randomBytes(32).toString("base64"),
    DATABASE_URL: "",
  };
  const saved = { ...process.env };

  beforeAll(async () => {
    Object.assign(process.env, env);
    // Three projects whose output schema holds 900 fields: a list of about 150 KB, past a pipe's 64 KiB.
    const properties = Object.fromEntries(
      Array.from({ length: 900 }, (_, i) => [`f${i}`, { type: "string" }]),
    );
    const schema = JSON.stringify({ type: "object", properties });
    const quiet = { write: () => true };
    for (const name of ["one", "two", "three"]) {
      const code = await runCli(
        ["projects", "create", "--name", name, "--provider", "provider-a", "--output-schema", schema],
        { out: quiet, err: quiet, stdin: 0 },
      );
      expect(code).toBe(0);
    }
  });
  afterAll(() => {
    process.env = saved;
    rmSync(dataDir, { recursive: true, force: true });
  });

  it("writes all of a long output through a pipe before it exits (a projects list past 64 KiB)", async () => {
    // An OS pipe (as a shell makes: Node's own child pipes are socket pairs, which do not show it) to
    // a reader that takes its time, as jq may: the pipe fills, and the rest waits in the process.
    const child = spawn(
      "sh",
      ["-c", '"$0" --import tsx "$1" projects list | (sleep 1; cat)', process.execPath, entry],
      {
        env,
        cwd: repository,
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk) => {
      stdout += String(chunk);
    });
    child.stderr.on("data", (chunk) => {
      stderr += String(chunk);
    });
    const code = await new Promise((resolve) => child.on("close", resolve));
    expect({ code, stderr }).toEqual({ code: 0, stderr: "" });
    expect(stdout.length).toBeGreaterThan(1 << 17);
    expect((JSON.parse(stdout) as unknown[]).length).toBe(3);
  });

  it("exits 0, saying nothing, when its reader stops reading early (a projects list piped to head)", async () => {
    // The reader goes after 10 bytes: the rest of the output meets a closed pipe (EPIPE), which is the
    // reader's choice, not a failure of the command. The shell reports the command's own exit status.
    const child = spawn(
      "sh",
      [
        "-c",
        '{ "$0" --import tsx "$1" projects list; echo "exit $?" >&2; } | head -c 10',
        process.execPath,
        entry,
      ],
      { env, cwd: repository, stdio: ["ignore", "pipe", "pipe"] },
    );
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk) => {
      stdout += String(chunk);
    });
    child.stderr.on("data", (chunk) => {
      stderr += String(chunk);
    });
    await new Promise((resolve) => child.on("close", resolve));
    expect({ stdout: stdout.length, stderr }).toEqual({ stdout: 10, stderr: "exit 0\n" });
  });

  it.skipIf(!existsSync("/dev/full"))(
    "fails, saying in one line that the command ran but its output is lost, when that cannot be written (a full disk)",
    async () => {
      const full = openSync("/dev/full", "w");
      try {
        const child = spawn(process.execPath, ["--import", "tsx", entry, "projects", "list"], {
          env,
          cwd: repository,
          stdio: ["ignore", full, "pipe"],
        });
        let stderr = "";
        child.stderr?.on("data", (chunk) => {
          stderr += String(chunk);
        });
        const code = await new Promise((resolve) => child.on("close", resolve));
        expect({ code, stderr }).toEqual({
          code: 1,
          stderr:
            "error: cannot write the output to standard output (ENOSPC): " +
            "the command ran, but what it printed is lost\n",
        });
      } finally {
        closeSync(full);
      }
    },
  );

  it("fails with one line naming the error, no stack, when runCli throws (a module it loads that fails)", async () => {
    // A module hook, run before tsx's, that fails `serve`'s import of the server (a broken install,
    // say): the one step of runCli outside its own error handling.
    const hook = join(dataDir, "fail-server-import.mjs");
    const resolve = `export async function resolve(specifier, context, next) {
      if (specifier === "../server.js") throw new Error("the server could not be loaded", { cause: new Error("ENOENT") });
      return next(specifier, context);
    }`;
    writeFileSync(
      hook,
      `import { register } from "node:module";\nregister(${JSON.stringify(`data:text/javascript,${encodeURIComponent(resolve)}`)});\n`,
    );
    const child = spawn(process.execPath, ["--import", "tsx", "--import", hook, entry, "serve"], {
      env,
      cwd: repository,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk) => {
      stdout += String(chunk);
    });
    child.stderr.on("data", (chunk) => {
      stderr += String(chunk);
    });
    const code = await new Promise((resolve) => child.on("close", resolve));
    expect({ code, stdout, stderr }).toEqual({
      code: 1,
      stdout: "",
      stderr: "error: the server could not be loaded (ENOENT)\n",
    });
  });
});
