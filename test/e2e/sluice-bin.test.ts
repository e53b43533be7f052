import { execFile, spawn } from "node:child_process";
import {
  closeSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { afterEach, describe, expect, it } from "vitest";

const repository = join(import.meta.dirname, "../..");
const run = promisify(execFile);

/**
 * A checkout holding the real bin/sluice.js, a CLI source and its build, each of which answers
 * which one ran: what bin/sluice.js picks is then read from its output.
 */
function checkout(options: { source?: boolean; build?: boolean; sourceList?: boolean; tsx?: boolean } = {}) {
  const root = mkdtempSync(join(tmpdir(), "sluice-bin-"));
  const file = (path: string, text: string, seconds: number) => {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), text);
    utimesSync(join(root, path), seconds, seconds);
  };
  mkdirSync(join(root, "bin"));
  copyFileSync(join(repository, "bin/sluice.js"), join(root, "bin/sluice.js"));
  writeFileSync(join(root, "package.json"), JSON.stringify({ type: "module" }));
  if (options.tsx !== false) symlinkSync(join(repository, "node_modules"), join(root, "node_modules"));
  const cli = (which: string) =>
    `export async function runCli(argv) { process.stdout.write(${JSON.stringify(which)} + " " + argv.join(" ")); return 0; }\n`;
  // The build is newer than its source: the usual state after `npm run build`.
  if (options.source !== false) {
    file("src/cli/main.ts", cli("source"), 1_000);
    file("src/admin/project-admin.ts", "export {};\n", 1_000);
    file("src/admin/project-admin.test.ts", "export {};\n", 3_000);
  }
  // A bundle (scripts/build.js): the CLI's entry, and the list of the sources it was made from.
  if (options.build !== false) {
    file("dist/src/cli/main.js", cli("build"), 2_000);
    if (options.sourceList !== false)
      file("dist/src/sources.json", JSON.stringify(["src/admin/project-admin.ts", "src/cli/main.ts"]), 2_000);
  }
  return {
    root,
    touch: (path: string, seconds: number) => utimesSync(join(root, path), seconds, seconds),
    add: (path: string, seconds: number) => file(path, "export {};\n", seconds),
    sluice: async (...argv: string[]) => {
      const { stdout, stderr } = await run(process.execPath, [join(root, "bin/sluice.js"), ...argv]);
      return { stdout, stderr };
    },
  };
}

describe("bin/sluice.js", () => {
  const roots: string[] = [];
  const make = (options?: Parameters<typeof checkout>[0]) => {
    const made = checkout(options);
    roots.push(made.root);
    return made;
  };
  afterEach(() => {
    for (const root of roots.splice(0)) rmSync(root, { recursive: true, force: true });
  });

  it("runs the build while it is current, passing the arguments on", async () => {
    expect(await make().sluice("projects", "list")).toEqual({ stdout: "build projects list", stderr: "" });
  });

  it("runs the source through tsx once a source file changed since the build (a git pull without a build)", async () => {
    const pulled = make();
    pulled.touch("src/admin/project-admin.ts", 2_500);
    expect(await pulled.sluice("projects", "list")).toEqual({ stdout: "source projects list", stderr: "" });
  });

  it("runs the source through tsx when a source file is not in the build (added since)", async () => {
    const added = make();
    added.add("src/admin/new-rule.ts", 1_000);
    expect((await added.sluice("usage")).stdout).toBe("source usage");
  });

  it("runs the source through tsx when a source file is not in the build, older as it may be", async () => {
    const copied = make();
    copied.add("src/admin/new-rule.ts", 500);
    expect((await copied.sluice("usage")).stdout).toBe("source usage");
  });

  it("runs the source through tsx when the build does not list its sources (an older build)", async () => {
    expect((await make({ sourceList: false }).sluice("serve")).stdout).toBe("source serve");
  });

  it("runs the source through tsx in a checkout with no build", async () => {
    expect((await make({ build: false }).sluice("serve")).stdout).toBe("source serve");
  });

  it("runs the build where there is no source (an installed package)", async () => {
    expect((await make({ source: false }).sluice("serve")).stdout).toBe("build serve");
  });

  it("runs a stale build with a warning naming the newer file when tsx is not installed", async () => {
    const pruned = make({ tsx: false });
    pruned.touch("src/admin/project-admin.ts", 2_500);
    expect(await pruned.sluice("projects", "list")).toEqual({
      stdout: "build projects list",
      stderr:
        "warning: dist/ is older than src/admin/project-admin.ts and tsx (a dev dependency) is not installed " +
        "to run src/: running the build; `npm run build` brings it up to date\n",
    });
  });

  it("is what `npm run sluice --` runs, so the two run the same CLI", () => {
    const manifest = JSON.parse(readFileSync(join(repository, "package.json"), "utf8")) as {
      bin: Record<string, string>;
      scripts: Record<string, string>;
    };
    expect(manifest.bin.sluice).toBe("./bin/sluice.js");
    // exec: the shell npm runs the script in gives way to it (npm-start.test.ts, its signals).
    expect(manifest.scripts.sluice).toBe("exec node bin/sluice.js");
  });

  /** A checkout whose CLI (its build) is `body`, the text of an async runCli(argv). */
  const writing = (body: string) => {
    const made = make({ source: false });
    writeFileSync(
      join(made.root, "dist/src/cli/main.js"),
      `export async function runCli(argv) {\n${body}\n}\n`,
    );
    return join(made.root, "bin/sluice.js");
  };

  it("writes all of a long output through a pipe before it exits (a projects list past 64 KiB piped to jq)", async () => {
    const bin = writing('process.stdout.write("x".repeat(4_000_000) + "\\n"); return 0;');
    const { stdout, stderr } = await run(process.execPath, [bin], { maxBuffer: 1 << 23 });
    expect(stderr).toBe("");
    expect(stdout.length).toBe(4_000_001);
  });

  /** Runs `bin` with its standard output going to `stdout`; its exit code and what it wrote on stderr. */
  async function exited(bin: string, stdout: "pipe" | number, onSpawn = (_stdout: unknown) => {}) {
    const child = spawn(process.execPath, [bin], { stdio: ["ignore", stdout, "pipe"] });
    onSpawn(child.stdout);
    let stderr = "";
    child.stderr?.on("data", (chunk) => {
      stderr += String(chunk);
    });
    const code = await new Promise((resolve) => child.on("close", resolve));
    return { code, stderr };
  }

  it.skipIf(!existsSync("/dev/full"))(
    "fails, saying in one line that the command ran but its output is lost, when that cannot be written (a full disk)",
    async () => {
      const bin = writing('process.stdout.write("{}\\n"); return 0;');
      const full = openSync("/dev/full", "w");
      try {
        expect(await exited(bin, full)).toEqual({
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

  it("fails with one line naming the error, no stack, when the CLI throws (a bug)", async () => {
    const bin = writing(
      'throw new Error("something unexpected", { cause: new Error("connect ECONNRESET") });',
    );
    expect(await exited(bin, "pipe")).toEqual({
      code: 1,
      stderr: "error: something unexpected (connect ECONNRESET)\n",
    });
  });

  it("fails with one line when the CLI throws something that is not an Error", async () => {
    expect(await exited(writing('throw "a string";'), "pipe")).toEqual({
      code: 1,
      stderr: "error: a string\n",
    });
  });

  it("fails with one line when there is no build and tsx is not installed to run the source", async () => {
    const bare = make({ build: false, tsx: false });
    const { code, stderr } = await exited(join(bare.root, "bin/sluice.js"), "pipe");
    expect(code).toBe(1);
    expect(stderr).toMatch(/^error: Cannot find package 'tsx'[^\n]*\n$/);
  });

  it("stops quietly, with its own exit code, when the reader of its output leaves early (| head)", async () => {
    const bin = writing('process.stdout.write("x".repeat(4_000_000)); return 0;');
    const left = await exited(bin, "pipe", (stdout) => (stdout as { destroy(): void }).destroy());
    expect(left).toEqual({ code: 0, stderr: "" });
  });
});
