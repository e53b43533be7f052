import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

const repository = join(import.meta.dirname, "../..");
const entry = join(repository, "src/cli/main.ts");

// util-linux's `script` gives the CLI a terminal as its standard input (Debian: bsdutils, always
// installed); the BSD `script` of macOS takes other arguments. In CI it must be there.
const scriptFound = /util-linux/.test(spawnSync("script", ["--version"], { encoding: "utf8" }).stdout ?? "");
if (!scriptFound && process.env.CI === "true")
  throw new Error("util-linux's script command is not installed, and CI=true requires it");

/**
 * `keys add --api-key-stdin` run in a terminal, as an operator types it: the terminal would show the
 * key as it is typed or pasted (and keep it in its scrollback), and the CLI would wait, saying
 * nothing, for a Ctrl-D. It is refused at once instead, as a usage error saying how to pipe it in.
 */
describe.skipIf(!scriptFound)("keys add --api-key-stdin with a terminal as standard input", () => {
  const dataDir = mkdtempSync(join(tmpdir(), "sluice-cli-terminal-"));
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

  it("is refused at once (exit 2), naming the terminal and how to pipe the key in, before reading it", async () => {
    const command = `'${process.execPath}' --import tsx '${entry}' keys add p --provider provider-a --api-key-stdin`;
    const child = spawn("script", ["-qec", command, "/dev/null"], {
      cwd: repository,
      env: { ...process.env, SLUICE_DATA_DIR: dataDir, DATABASE_URL: "" },
      stdio: ["pipe", "pipe", "pipe"],
    });
    let shown = "";
    child.stdout.on("data", (chunk) => {
      shown += String(chunk);
    });
    child.stdin.on("error", () => {});
    // What an operator would type if the CLI waited for it: a key, Enter, then Ctrl-D.
    const typed = "sk-typedintoaterminal0123456789abcdefghij";
    const typing = setTimeout(() => child.stdin.write(`${typed}\n\u0004`), 3000);
    const code = await new Promise((resolve) => child.on("close", resolve));
    clearTimeout(typing);
    expect(code).toBe(2);
    expect(shown).toContain("error: --api-key-stdin: standard input is a terminal");
    expect(shown).not.toContain(typed);
  }, 20_000);
});
