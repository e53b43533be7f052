import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect, it } from "vitest";
import { spawnGateway } from "../support/spawned-gateway.js";

/**
 * A gateway started with `nodeFlags` and `env`, told (SIGUSR2, `print-on-signal.ts`) to print as a
 * package does and to emit a deprecation warning (code DEP_SLUICE_TEST), then stopped: what it
 * printed on stderr, and its log line for the warning, if any.
 */
async function warningPrinted(nodeFlags: string[] = [], env: Record<string, string> = {}) {
  const dir = mkdtempSync(join(tmpdir(), "sluice-warning-"));
  const printed = join(dir, "printed");
  const gateway = await spawnGateway({
    nodeFlags,
    imports: ["./test/support/print-on-signal.ts"],
    env: { SLUICE_TEST_PRINTED: printed, ...env },
  });
  try {
    let stderr = "";
    gateway.child.stderr?.on("data", (chunk: Buffer) => {
      stderr += String(chunk);
    });
    gateway.child.kill("SIGUSR2");
    while (!existsSync(printed)) await new Promise((resolve) => setTimeout(resolve, 20));
    gateway.child.kill("SIGTERM");
    expect(await gateway.exit).toEqual({ code: 0, signal: null });
    // What the package printed itself stays where it printed it.
    expect(stderr).toContain("a dependency's warning");
    const line = gateway
      .output()
      .split("\n")
      .find((text) => text.startsWith("{") && text.includes("a dependency's deprecation"));
    return { stderr, logged: line === undefined ? undefined : (JSON.parse(line) as unknown) };
  } finally {
    await gateway.remove();
    rmSync(dir, { recursive: true, force: true });
  }
}

// A Node warning (node-postgres's multi-line SECURITY WARNING for sslmode=require, a deprecation)
// was printed by Node as plain text lines on stderr, outside the JSON log: a log collector took
// each of its lines for an entry of its own. It is one JSON log line at `warn` instead.
it.each([
  ["without --disable-warning", []],
  ["with --disable-warning naming other warnings", ["--disable-warning=ExperimentalWarning"]],
])(
  "logs a Node warning as one JSON line at warn, not as text on stderr, %s",
  async (_how, nodeFlags) => {
    const { stderr, logged } = await warningPrinted(nodeFlags);
    expect(stderr).not.toContain("a dependency's deprecation");
    expect(logged).toMatchObject({
      level: "warn",
      warning: "DeprecationWarning",
      code: "DEP_SLUICE_TEST",
      msg: "a dependency's deprecation",
    });
  },
  40_000,
);

// Node's printer leaves out the warnings `--disable-warning` names, by code or by type, given on
// the command line or in NODE_OPTIONS; the log, which took its place, printed them all.
it.each([
  ["--disable-warning=DEP_SLUICE_TEST on the command line", ["--disable-warning=DEP_SLUICE_TEST"], {}],
  ["--disable-warning DEP_SLUICE_TEST on the command line", ["--disable-warning", "DEP_SLUICE_TEST"], {}],
  [
    "--disable-warning=DeprecationWarning in NODE_OPTIONS",
    [],
    { NODE_OPTIONS: "--disable-warning=DeprecationWarning" },
  ],
  [
    "--disable_warning DEP_SLUICE_TEST in NODE_OPTIONS",
    [],
    { NODE_OPTIONS: '--disable_warning "DEP_SLUICE_TEST"' },
  ],
])(
  "leaves out a warning disabled with %s",
  async (_how, nodeFlags, env: Record<string, string>) => {
    const { stderr, logged } = await warningPrinted(nodeFlags, env);
    expect(logged).toBeUndefined();
    expect(stderr).not.toContain("a dependency's deprecation");
  },
  40_000,
);
