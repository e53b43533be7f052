import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { loadMasterKey, loadPreviousMasterKey, masterKeyOrigin } from "./master-key.js";

describe("loadMasterKey", () => {
  const dirs: string[] = [];
  const dataDir = () => {
    const dir = mkdtempSync(join(tmpdir(), "sluice-master-key-"));
    dirs.push(dir);
    return dir;
  };
  afterEach(() => {
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });
  const development = { environment: "development" };

  it("generates a key into the data dir on the embedded default, once", () => {
    const dir = dataDir();
    const generated: string[] = [];
    const first = loadMasterKey({ ...development, dataDir: dir }, (file) => generated.push(file));
    const again = loadMasterKey({ ...development, dataDir: dir }, (file) => generated.push(file));
    expect(first.length).toBe(32);
    expect(again).toEqual(first);
    expect(generated).toEqual([join(dir, "master.key")]);
  });

  it("gives processes starting together on a fresh data dir one key, and none an error", {
    timeout: 20_000,
  }, async () => {
    const dir = dataDir();
    const module = new URL("./master-key.ts", import.meta.url).pathname;
    // Every process waits for the same instant, so all of them find no key and make one at once.
    const startAt = Date.now() + 4000;
    const script = `import { loadMasterKey } from ${JSON.stringify(module)};
      while (Date.now() < ${startAt}) {}
      process.stdout.write(loadMasterKey({ environment: "development", dataDir: ${JSON.stringify(dir)} }, () => {}).toString("base64"));`;
    const run = () =>
      new Promise<string>((resolve, reject) =>
        execFile(
          process.execPath,
          ["--import", "tsx", "--input-type=module", "-e", script],
          (error, stdout, stderr) => (error ? reject(new Error(stderr)) : resolve(stdout)),
        ),
      );
    const keys = await Promise.all(Array.from({ length: 6 }, run));
    expect(new Set(keys).size).toBe(1);
    expect(readFileSync(join(dir, "master.key"), "utf8").trim()).toBe(keys[0]);
    expect(readdirSync(dir)).toEqual(["master.key"]);
  });

  it("never generates a key for a shared PostgreSQL database, whose other users hold another", () => {
    const dir = dataDir();
    const source = { ...development, dataDir: dir, databaseUrl: "postgres://postgres@127.0.0.1:5432/test" };
    expect(() => loadMasterKey(source, () => {})).toThrow(
      `SLUICE_MASTER_KEY is required with DATABASE_URL (there is no ${join(dir, "master.key")}): set the key ` +
        "every instance and the CLI share (a new deployment makes one with `openssl rand -base64 32`)",
    );
    expect(existsSync(join(dir, "master.key"))).toBe(false);
  });

  it("still uses a key already in the data dir with PostgreSQL, or the configured one", () => {
    const dir = dataDir();
    const key = randomBytes(32);
    writeFileSync(join(dir, "master.key"), `${key.toString("base64")}\n`);
    const databaseUrl = "postgres://postgres@127.0.0.1:5432/test";
    expect(loadMasterKey({ ...development, dataDir: dir, databaseUrl }, () => {})).toEqual(key);
    const configured = randomBytes(32);
    expect(
      loadMasterKey(
        { ...development, dataDir: dataDir(), databaseUrl, masterKey: configured.toString("base64") },
        () => {},
      ),
    ).toEqual(configured);
  });

  // Buffer.from copies anything under 4 KiB into a shared 8 KiB pool: the key, held for the life of
  // the process, would sit in a slab beside whatever else was cut from it (and reach anything handed
  // that slab's ArrayBuffer). Each key is its own allocation.
  it("holds every key in memory of its own, not in Buffer's shared pool", () => {
    const dir = dataDir();
    const given = randomBytes(32).toString("base64");
    const previous = randomBytes(32).toString("base64");
    const keys = [
      loadMasterKey({ ...development, dataDir: dir, masterKey: given }, () => {}),
      loadPreviousMasterKey({ ...development, dataDir: dir, masterKey: given, masterKeyPrevious: previous }),
      loadMasterKey({ ...development, dataDir: dir }, () => {}),
      loadMasterKey({ ...development, dataDir: dir }, () => {}),
    ];
    expect(keys.map((key) => key?.toString("base64"))).toEqual([
      given,
      previous,
      expect.any(String),
      keys[2]?.toString("base64"),
    ]);
    for (const key of keys) expect(key?.buffer.byteLength).toBe(32);
  });

  it("generates no key beside a database that holds secrets, and writes nothing", () => {
    const dir = dataDir();
    const stored = { secret: "provider key k1 of project p1", file: join(dir, "sluice.sqlite") };
    const generated: string[] = [];
    expect(() =>
      loadMasterKey({ ...development, dataDir: dir }, (file) => generated.push(file), stored),
    ).toThrow(
      `SLUICE_MASTER_KEY is unset and SLUICE_DATA_DIR (${dir}) holds no master.key, but the database there ` +
        "holds secrets sealed under a master key (provider key k1 of project p1 among them), which a new key " +
        "would not open, so none was generated: set SLUICE_MASTER_KEY to the key they were stored under, or " +
        `put that key back in ${join(dir, "master.key")} (if it is lost, so are they: move ${stored.file} ` +
        "aside to start a new database)",
    );
    expect(generated).toEqual([]);
    expect(readdirSync(dir)).toEqual([]);
    // A key there (another process on this data dir generated it, and sealed them under it) is used.
    const key = randomBytes(32);
    writeFileSync(join(dir, "master.key"), `${key.toString("base64")}\n`);
    expect(loadMasterKey({ ...development, dataDir: dir }, () => {}, stored)).toEqual(key);
    const given = randomBytes(32);
    expect(
      loadMasterKey(
        { ...development, dataDir: dataDir(), masterKey: given.toString("base64") },
        () => {},
        stored,
      ),
    ).toEqual(given);
  });

  it("names the file, not SLUICE_MASTER_KEY, when the generated key file is damaged", () => {
    const dir = dataDir();
    const file = join(dir, "master.key");
    writeFileSync(file, "garbage\n");
    expect(() => loadMasterKey({ ...development, dataDir: dir }, () => {})).toThrow(
      `The master key file ${file} must be 32 bytes, base64-encoded`,
    );
    expect(readFileSync(file, "utf8")).toBe("garbage\n");
    expect(() => loadMasterKey({ ...development, dataDir: dir, masterKey: "short" }, () => {})).toThrow(
      "SLUICE_MASTER_KEY must be 32 bytes, base64-encoded",
    );
  });
});

describe("masterKeyOrigin", () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });
  /** A data dir holding `key` as master.key, as a start without SLUICE_MASTER_KEY leaves it. */
  const dataDirWith = (key: Buffer) => {
    const dir = mkdtempSync(join(tmpdir(), "sluice-master-key-origin-"));
    dirs.push(dir);
    writeFileSync(join(dir, "master.key"), `${key.toString("base64")}\n`);
    return dir;
  };
  const restore = "set SLUICE_MASTER_KEY to the key the database's secrets were stored under";

  it("names the data dir's generated key file beside another SLUICE_MASTER_KEY, never the key", () => {
    const [generated, given] = [randomBytes(32), randomBytes(32)];
    const dir = dataDirWith(generated);
    const file = join(dir, "master.key");
    const origin = masterKeyOrigin({
      environment: "development",
      dataDir: dir,
      masterKey: given.toString("base64"),
    });
    expect(origin).toEqual({
      doesNotOpen: "SLUICE_MASTER_KEY does not open",
      restore:
        `${restore} (${file}, generated by an earlier start outside production, holds another key, ` +
        `likely that one: export SLUICE_MASTER_KEY=$(cat ${file}))`,
    });
    for (const key of [generated, given])
      expect(JSON.stringify(origin)).not.toContain(key.toString("base64"));
  });

  it("names the file during a rotation too, when it holds neither key", () => {
    const dir = dataDirWith(randomBytes(32));
    const file = join(dir, "master.key");
    const origin = masterKeyOrigin({
      environment: "development",
      dataDir: dir,
      masterKey: randomBytes(32).toString("base64"),
      masterKeyPrevious: randomBytes(32).toString("base64"),
    });
    expect(origin.restore).toBe(
      `${restore}, or SLUICE_MASTER_KEY_PREVIOUS to it during a rotation (${file}, generated by an earlier ` +
        `start outside production, holds another key, likely that one: export SLUICE_MASTER_KEY=$(cat ${file}))`,
    );
  });

  it("leaves the file out when it holds the given key, or no key, or is not there", () => {
    const given = randomBytes(32);
    const masterKey = given.toString("base64");
    const same = dataDirWith(given);
    expect(masterKeyOrigin({ environment: "development", dataDir: same, masterKey }).restore).toBe(restore);
    const previous = dataDirWith(given);
    expect(
      masterKeyOrigin({
        environment: "development",
        dataDir: previous,
        masterKey: randomBytes(32).toString("base64"),
        masterKeyPrevious: masterKey,
      }).restore,
    ).toBe(`${restore}, or SLUICE_MASTER_KEY_PREVIOUS to it during a rotation`);
    const damaged = dataDirWith(given);
    writeFileSync(join(damaged, "master.key"), "garbage\n");
    expect(masterKeyOrigin({ environment: "development", dataDir: damaged, masterKey }).restore).toBe(
      restore,
    );
    const none = join(damaged, "nothing-here");
    expect(masterKeyOrigin({ environment: "development", dataDir: none, masterKey }).restore).toBe(restore);
  });
});
