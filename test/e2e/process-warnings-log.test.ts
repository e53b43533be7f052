import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect, it } from "vitest";
import { spawnGateway } from "../support/spawned-gateway.js";

// A Node warning (node-postgres's multi-line SECURITY WARNING for sslmode=require, a deprecation)
// was printed by Node as plain text lines on stderr, outside the JSON log: a log collector took
// each of its lines for an entry of its own. It is one JSON log line at `warn` instead.
it("logs a Node warning as one JSON line at warn, not as text on stderr", async () => {
  const dir = mkdtempSync(join(tmpdir(), "sluice-warning-"));
  const printed = join(dir, "printed");
  const gateway = await spawnGateway({
    imports: ["./test/support/print-on-signal.ts"],
    env: { SLUICE_TEST_PRINTED: printed },
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
    // What the package printed itself stays where it printed it; Node's warning is not there.
    expect(stderr).toContain("a dependency's warning");
    expect(stderr).not.toContain("a dependency's deprecation");
    const line = gateway
      .output()
      .split("\n")
      .find((text) => text.startsWith("{") && text.includes("a dependency's deprecation"));
    expect(line && JSON.parse(line)).toMatchObject({
      level: "warn",
      warning: "DeprecationWarning",
      msg: "a dependency's deprecation",
    });
  } finally {
    await gateway.remove();
    rmSync(dir, { recursive: true, force: true });
  }
}, 40_000);
