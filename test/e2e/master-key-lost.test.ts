import { spawn } from "node:child_process";
import { generateKeyPairSync, randomBytes } from "node:crypto";
import {
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  unlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { openAdminContext } from "../../src/admin/admin-context.js";
import { loadConfig } from "../../src/config.js";
import { runGatewayUntilExit } from "../support/spawned-gateway.js";

const repository = join(import.meta.dirname, "../..");

/** `sluice …` (src/cli/main.ts as a process) on `dataDir`, SLUICE_MASTER_KEY unset unless given. */
function sluice(dataDir: string, argv: string[], masterKey = "") {
  const child = spawn(process.execPath, ["--import", "tsx", "src/cli/main.ts", ...argv], {
    cwd: repository,
    env: { ...process.env, SLUICE_DATA_DIR: dataDir, SLUICE_MASTER_KEY: masterKey, DATABASE_URL: "" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk: Buffer) => {
    stdout += String(chunk);
  });
  child.stderr.on("data", (chunk: Buffer) => {
    stderr += String(chunk);
  });
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) =>
    child.once("close", (code) => resolve({ code, stdout, stderr })),
  );
}

/**
 * A data dir whose database holds secrets sealed under the key a start outside production generated
 * there, and whose master.key is then gone (deleted, lost, or the database copied alone): the key
 * the secrets were sealed under is returned.
 */
async function dataDirWithoutItsKey(secret: "provider key" | "DeviceCheck key"): Promise<{
  dir: string;
  key: string;
}> {
  const dir = mkdtempSync(join(tmpdir(), "sluice-key-lost-"));
  const context = await openAdminContext(loadConfig({}, { dataDir: dir }), () => {});
  try {
    await context.admin.createProject({ id: "kept", name: "Kept", provider: "provider-a" });
    if (secret === "provider key")
      await context.admin.addProviderKey("kept", { provider: "provider-a", apiKey: "sk-upstream-123456" });
    else {
      const { privateKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
      await context.admin.updateProject("kept", {
        deviceCheck: {
          teamId: "TEAM123456",
          keyId: "KEY1234567",
          privateKey: privateKey.export({ type: "pkcs8", format: "pem" }).toString(),
        },
      });
    }
  } finally {
    await context.close();
  }
  const file = join(dir, "master.key");
  const key = readFileSync(file, "utf8").trim();
  unlinkSync(file);
  return { dir, key };
}

/** The refusal of a start that finds no key beside a database holding sealed secrets. */
const refusal = (dir: string, secret: string) =>
  new RegExp(
    `SLUICE_MASTER_KEY is unset and SLUICE_DATA_DIR \\(${dir}\\) holds no master\\.key, but the database ` +
      `there holds secrets sealed under a master key \\(${secret} among them\\), which a new key would ` +
      "not open, so none was generated: set SLUICE_MASTER_KEY to the key they were stored under, or put " +
      `that key back in ${dir}/master\\.key \\(if it is lost, so are they: move ${dir}/sluice\\.sqlite ` +
      "aside to start a new database\\)\\n$",
  );

describe("a data dir whose database holds sealed secrets but no master.key", () => {
  const dirs: string[] = [];
  afterAll(() => {
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  it("is refused by the CLI and the gateway, run after run, with no key generated beside it", {
    timeout: 60_000,
  }, async () => {
    const { dir, key } = await dataDirWithoutItsKey("provider key");
    dirs.push(dir);
    const files = readdirSync(dir);
    const said = refusal(dir, "provider key \\w+ of project kept");
    for (let run = 0; run < 2; run++) {
      const listed = await sluice(dir, ["projects", "list"]);
      expect(listed).toMatchObject({ code: 1, stdout: "" });
      expect(listed.stderr).toMatch(new RegExp(`^error: ${said.source}`));
      const started = await runGatewayUntilExit({ SLUICE_DATA_DIR: dir, SLUICE_MASTER_KEY: "" });
      expect(started.code).toBe(1);
      expect(started.stderr).toMatch(new RegExp(`^sluice failed to start: ${said.source}`));
      // Nothing written: no master.key that the next run would take for the secrets' key.
      expect(existsSync(join(dir, "master.key"))).toBe(false);
      expect(readdirSync(dir)).toEqual(files);
    }
    // `projects create` (which may start a new database) and the reseal are refused alike.
    for (const argv of [
      ["projects", "create", "--name", "x", "--provider", "provider-a"],
      ["master-key", "reseal"],
    ])
      expect((await sluice(dir, argv)).stderr).toMatch(new RegExp(`^error: ${said.source}`));
    expect(existsSync(join(dir, "master.key"))).toBe(false);

    // Another SLUICE_MASTER_KEY is refused without a hint at a key file that is not there.
    const other = await sluice(dir, ["projects", "list"], randomBytes(32).toString("base64"));
    expect(other.code).toBe(1);
    expect(other.stderr).toMatch(
      /^error: SLUICE_MASTER_KEY does not open the secrets stored in the database \(provider key \w+ of project kept was sealed under another master key\): set SLUICE_MASTER_KEY to the key the database's secrets were stored under\n$/,
    );

    // The key given back (set, or put back in the file) opens them again.
    const given = await sluice(dir, ["projects", "list"], key);
    expect(given).toMatchObject({ code: 0, stderr: "" });
    expect(JSON.parse(given.stdout)).toMatchObject([{ id: "kept" }]);
    writeFileSync(join(dir, "master.key"), `${key}\n`);
    expect(await sluice(dir, ["projects", "list"])).toMatchObject({ code: 0, stderr: "" });
  });

  it("is refused when the secret it holds is a DeviceCheck key", { timeout: 30_000 }, async () => {
    const { dir } = await dataDirWithoutItsKey("DeviceCheck key");
    dirs.push(dir);
    const listed = await sluice(dir, ["projects", "show", "kept"]);
    expect(listed.code).toBe(1);
    expect(listed.stderr).toMatch(
      new RegExp(`^error: ${refusal(dir, "the DeviceCheck key of project kept").source}`),
    );
    expect(existsSync(join(dir, "master.key"))).toBe(false);
  });

  it("still gets a key generated when its database holds no secret (projects without keys)", {
    timeout: 30_000,
  }, async () => {
    const dir = mkdtempSync(join(tmpdir(), "sluice-key-lost-"));
    dirs.push(dir);
    const context = await openAdminContext(loadConfig({}, { dataDir: dir }), () => {});
    try {
      await context.admin.createProject({ id: "bare", name: "Bare", provider: "provider-a" });
    } finally {
      await context.close();
    }
    const first = readFileSync(join(dir, "master.key"), "utf8");
    unlinkSync(join(dir, "master.key"));
    const listed = await sluice(dir, ["projects", "list"]);
    expect(listed.code).toBe(0);
    expect(listed.stderr).toMatch(/^warning: GENERATED A NEW MASTER KEY for secrets at rest at /);
    const generated = readFileSync(join(dir, "master.key"), "utf8");
    expect(generated).toMatch(/^[\w+/]{43}=\n$/);
    expect(generated).not.toBe(first);
    // A key sealed under it opens on the next run, which generates nothing.
    const added = await sluice(dir, [
      "keys",
      "add",
      "bare",
      "--provider",
      "provider-a",
      "--api-key",
      "sk-x-123456",
    ]);
    expect(added).toMatchObject({ code: 0, stderr: "" });
    expect(await sluice(dir, ["projects", "list"])).toMatchObject({ code: 0, stderr: "" });
  });
});
