import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { exitOfScript } from "../support/script-exit.js";

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
    try {
      const { code, output } = await exitOfScript(script, {
        ...process.env,
        LOG_LEVEL: "error",
        SLUICE_DATA_DIR: dataDir,
        SLUICE_MASTER_KEY: randomBytes(32).toString("base64"),
        SLUICE_ADMIN_TOKEN: `admin-${randomBytes(12).toString("hex")}`,
      });
      expect(output).toContain("built");
      expect(code).toBe(0);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 30_000);
});
