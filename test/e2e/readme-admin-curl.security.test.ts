import { execFile } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { adminToken, startTestGateway, type TestGateway } from "../support/test-gateway.js";

const run = promisify(execFile);

/**
 * The README's admin API example (Quick start, "The same through the admin API"), run by bash as
 * written, against a gateway: every secret it sends stays off curl's command line, which `ps` and
 * /proc/<pid>/cmdline show to every local user while curl runs. The README says so of the provider
 * key; the admin token, which can add keys and change every project, was sent in `-H` there.
 */
describe("the README's admin API curl example", () => {
  const dir = mkdtempSync(join(tmpdir(), "sluice-readme-curl-"));
  const argvLog = join(dir, "argv");
  let sluice: TestGateway;

  beforeAll(async () => {
    sluice = await startTestGateway();
    // A `curl` first on the PATH that writes down its arguments (what `ps` shows), then runs curl.
    const shim = join(dir, "curl");
    const realCurl = (await run("bash", ["-c", "command -v curl"])).stdout.trim();
    writeFileSync(shim, `#!/bin/bash\nprintf '%s\\n' "$*" >> '${argvLog}'\nexec '${realCurl}' "$@"\n`);
    chmodSync(shim, 0o755);
  });
  afterAll(async () => {
    await sluice?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("creates a project and adds a key with neither the admin token nor the key in curl's arguments", async () => {
    const readme = readFileSync(new URL("../../README.md", import.meta.url), "utf8");
    const block = /The same through the admin API[\s\S]*?```sh\n([\s\S]*?)```/.exec(readme)?.[1];
    expect(block).toBeDefined();
    const created = await fetch(`${sluice.url}/admin/v1/projects`, {
      method: "POST",
      headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
      body: JSON.stringify({ id: "readme", name: "README", provider: "provider-a", testMode: true }),
    });
    expect(created.status).toBe(201);
    const script = (block as string)
      // The token is the test gateway's, exported before the block as the README says to.
      .replace(/^export SLUICE_ADMIN_TOKEN=.*\n/m, "")
      .replaceAll("http://127.0.0.1:8787", sluice.url)
      .replaceAll("prj_…", "readme");
    const providerKey = `sk-proj-${"k".repeat(48)}`;
    const { stdout } = await run("bash", ["-c", `${script}\n`], {
      env: {
        ...process.env,
        PATH: `${dir}:${process.env.PATH}`,
        SLUICE_ADMIN_TOKEN: adminToken,
        OPENAI_API_KEY: providerKey,
      },
    });
    // Both calls went through: the project made, then the key added to `readme`.
    expect(stdout).toContain('"project":{');
    expect(stdout).toMatch(/"partialKey":"sk_sluice_/);
    const argv = readFileSync(argvLog, "utf8");
    expect(argv.trim().split("\n")).toHaveLength(2);
    expect(argv).not.toContain(adminToken);
    expect(argv).not.toContain(providerKey);
  });
});
