import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { openAdminContext } from "../../src/admin/admin-context.js";
import { loadConfig } from "../../src/config.js";
import { runGatewayUntilExit } from "../support/spawned-gateway.js";

const dataDir = mkdtempSync(join(tmpdir(), "sluice-start-names-"));

/** `npm start` on this test's data dir unless `env` names another, until it exits. */
const start = (env: Record<string, string>) => runGatewayUntilExit({ SLUICE_DATA_DIR: dataDir, ...env });

describe("a start that fails on a setting names it", () => {
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

  it("names SLUICE_TLS_CERT and its file when the file is not PEM", async () => {
    const cert = join(dataDir, "cert.pem");
    const key = join(dataDir, "key.pem");
    writeFileSync(cert, "not a certificate\n");
    writeFileSync(key, "not a key\n");
    const exited = await start({ SLUICE_TLS_CERT: cert, SLUICE_TLS_KEY: key });
    expect(exited.code).toBe(1);
    expect(exited.stderr).toMatch(
      new RegExp(`^sluice failed to start: SLUICE_TLS_CERT \\(${cert}\\) is not a PEM certificate: .+\\n$`),
    );
  }, 20_000);

  it("names HOST when it cannot be resolved", async () => {
    const exited = await start({ HOST: "no-such-host.invalid" });
    expect(exited.code).toBe(1);
    expect(exited.stderr).toMatch(
      /^sluice failed to start: cannot listen on HOST no-such-host\.invalid PORT 0: getaddrinfo \w+ no-such-host\.invalid\n$/,
    );
  }, 20_000);

  it("names DATABASE_URL, never its password, when PostgreSQL refuses the connection", async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const { port } = closed.address() as { port: number };
    await new Promise((resolve) => closed.close(resolve));
    const exited = await start({
      DATABASE_URL: `postgres://u:not-the-password@127.0.0.1:${port}/db`,
      SLUICE_MASTER_KEY: randomBytes(32).toString("base64"),
    });
    expect(exited.code).toBe(1);
    expect(exited.stderr).toBe(
      `sluice failed to start: DATABASE_URL (postgres://u@127.0.0.1:${port}/db): PostgreSQL could not be reached or refused the connection: connect ECONNREFUSED 127.0.0.1:${port}\n`,
    );
  }, 20_000);

  it("names the master key file and SLUICE_MASTER_KEY when the key does not open the stored provider keys", async () => {
    const sealedDir = join(dataDir, "sealed");
    const file = join(sealedDir, "master.key");
    // Keys added under the data dir's generated key, which is then replaced by another valid key.
    const context = await openAdminContext(loadConfig({}, { dataDir: sealedDir }), () => {});
    try {
      await context.admin.createProject({ id: "sealed", name: "Sealed", provider: "provider-a" });
      await context.admin.addProviderKey("sealed", { provider: "provider-a", apiKey: "sk-upstream-123456" });
    } finally {
      await context.close();
    }
    writeFileSync(file, `${randomBytes(32).toString("base64")}\n`);
    const exited = await start({ SLUICE_DATA_DIR: sealedDir, SLUICE_MASTER_KEY: "" });
    expect(exited.code).toBe(1);
    expect(exited.stderr).toMatch(
      new RegExp(
        `^sluice failed to start: The master key file ${file} \\(SLUICE_MASTER_KEY is unset\\) does not open ` +
          "the secrets stored in the database \\(provider key \\w+ of project sealed was sealed under another " +
          "master key\\): set SLUICE_MASTER_KEY to the key the database's secrets were stored under, or put " +
          `that key back in ${file}\\n$`,
      ),
    );
  }, 20_000);
});
