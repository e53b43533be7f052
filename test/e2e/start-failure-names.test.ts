import { generateKeyPairSync, randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { TLSSocket } from "node:tls";
import { afterAll, describe, expect, it } from "vitest";
import { openAdminContext } from "../../src/admin/admin-context.js";
import { loadConfig } from "../../src/config.js";
import { selfSigned } from "../support/self-signed.js";
import { postgresAvailable, postgresBaseUrl, redisAvailable, redisUrl } from "../support/services.js";
import { runGatewayUntilExit } from "../support/spawned-gateway.js";

const dataDir = mkdtempSync(join(tmpdir(), "sluice-start-names-"));

/** `npm start` on this test's data dir unless `env` names another, until it exits. */
const start = (env: Record<string, string>, options?: { withoutFileOverride?: boolean }) =>
  runGatewayUntilExit({ SLUICE_DATA_DIR: dataDir, ...env }, options);

describe("a start that fails on a setting names it", () => {
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

  it.each([
    ["is not JSON", "{not json"],
    ["lists an entry with a field no project has", '{"projects":[{"id":"a","bogus":1}]}'],
    ["does not exist", undefined],
  ])(
    "checks SLUICE_CONFIG_FILE before it writes anything: a file that %s leaves a fresh data dir unmade",
    async (_, content) => {
      const fresh = join(dataDir, `fresh-${randomBytes(4).toString("hex")}`);
      const file = join(dataDir, `projects-${randomBytes(4).toString("hex")}.json`);
      if (content !== undefined) writeFileSync(file, content);
      const exited = await start({ SLUICE_DATA_DIR: fresh, SLUICE_MASTER_KEY: "", SLUICE_CONFIG_FILE: file });
      expect(exited.code).toBe(1);
      expect(exited.stderr).toMatch(new RegExp(`^sluice failed to start: SLUICE_CONFIG_FILE ${file}[ :]`));
      // No master key generated, no database created: the data dir was never made.
      expect(existsSync(fresh)).toBe(false);
    },
    20_000,
  );

  it.each([
    ["SLUICE_MASTER_KEY unset: the master key file", "", "read the master key file", "master.key", "open"],
    [
      "SLUICE_MASTER_KEY set: the database",
      randomBytes(32).toString("base64"),
      "open the database",
      "sluice.sqlite",
      "mkdir",
    ],
  ])(
    "names SLUICE_DATA_DIR and why when its path runs through a file (%s)",
    async (_, masterKey, doing, name, syscall) => {
      const notADirectory = join(dataDir, "a-file");
      writeFileSync(notADirectory, "");
      const under = join(notADirectory, "data");
      const exited = await start({ SLUICE_DATA_DIR: under, SLUICE_MASTER_KEY: masterKey });
      expect(exited.code).toBe(1);
      const path = syscall === "mkdir" ? under : join(under, name);
      expect(exited.stderr).toBe(
        `sluice failed to start: SLUICE_DATA_DIR (${under}) cannot be used: cannot ${doing} ${join(under, name)} ` +
          `(a part of its path is a file, not a directory): ENOTDIR: not a directory, ${syscall} '${path}'\n`,
      );
    },
    20_000,
  );

  it.skipIf(!existsSync("/proc/self"))(
    "names SLUICE_DATA_DIR under /proc, where no directory can be made, instead of hanging",
    async () => {
      // Node's recursive mkdirSync loops forever there: mkdir answers ENOENT though the parent exists.
      const underProc = `/proc/sluice-${randomBytes(4).toString("hex")}/data`;
      const exited = await start({ SLUICE_DATA_DIR: underProc, SLUICE_MASTER_KEY: "" });
      expect(exited.code).toBe(1);
      expect(exited.stderr).toBe(
        `sluice failed to start: SLUICE_DATA_DIR (${underProc}) cannot be used: cannot write the master key file ` +
          `${underProc}/master.key (no such directory, and the file system makes none there): ` +
          `ENOENT: no such file or directory, mkdir '${underProc.slice(0, underProc.lastIndexOf("/"))}'\n`,
      );
    },
    20_000,
  );

  it("names SLUICE_DATA_DIR and why when the gateway's user may not write there", async () => {
    // Root writes anywhere: as root, the gateway runs without the capabilities that let it.
    const readOnly = mkdtempSync(join(tmpdir(), "sluice-read-only-"));
    try {
      chmodSync(readOnly, 0o555);
      const exited = await start(
        { SLUICE_DATA_DIR: readOnly, SLUICE_MASTER_KEY: "" },
        { withoutFileOverride: true },
      );
      expect(exited.code).toBe(1);
      expect(exited.stderr).toMatch(
        new RegExp(
          `^sluice failed to start: SLUICE_DATA_DIR \\(${readOnly}\\) cannot be used: cannot write the master key ` +
            `file ${readOnly}/master.key \\(permission denied to the process's user\\): EACCES: permission denied, open '${readOnly}/master\\.key\\.\\d+\\.\\w+'\n$`,
        ),
      );
    } finally {
      chmodSync(readOnly, 0o700);
      rmSync(readOnly, { recursive: true, force: true });
    }
  }, 20_000);

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

  it("names SLUICE_TLS_KEY without printing the private key set in place of its file name", async () => {
    const { privateKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
    const pem = privateKey.export({ type: "pkcs8", format: "pem" }).toString();
    const cert = join(dataDir, "cert-for-inline-key.pem");
    writeFileSync(cert, "not read: the key is refused first\n");
    const exited = await start({ SLUICE_TLS_CERT: cert, SLUICE_TLS_KEY: pem });
    expect(exited.code).toBe(1);
    expect(exited.stderr).toBe(
      `sluice failed to start: SLUICE_TLS_KEY ("----…" (${pem.length} characters), which looks like a ` +
        "file's contents, not its name) cannot be read (no such file)\n",
    );
    for (const line of pem.split("\n").slice(1, -2)) expect(exited.stderr).not.toContain(line);
  }, 20_000);

  it("names SLUICE_CONFIG_FILE without printing the projects (and .p8 keys) set in place of its file name", async () => {
    const projects = JSON.stringify({
      projects: [
        {
          id: "inline",
          name: "Inline",
          provider: "provider-a",
          deviceCheck: {
            privateKey:
              "-----BEGIN PRIVATE KEY-----\nInlineP8KeyMaterial0123456789\n-----END PRIVATE KEY-----",
          },
        },
      ],
    });
    const fresh = join(dataDir, `fresh-${randomBytes(4).toString("hex")}`);
    const exited = await start({
      SLUICE_DATA_DIR: fresh,
      SLUICE_MASTER_KEY: "",
      SLUICE_CONFIG_FILE: projects,
    });
    expect(exited.code).toBe(1);
    expect(exited.stderr).toBe(
      `sluice failed to start: SLUICE_CONFIG_FILE ("{\\"pr…" (${projects.length} characters), which looks like a ` +
        "file's contents, not its name) cannot be read (no such file)\n",
    );
    expect(exited.stderr).not.toContain("InlineP8KeyMaterial");
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

  it.each([
    ["sslcert", "a missing file", "no such file", "missing.pem"],
    ["sslkey", "a missing file", "no such file", "missing.key"],
    ["sslrootcert", "a directory", "a directory", "."],
  ])(
    "names DATABASE_URL and its %s parameter, never the password, when it names %s",
    async (parameter, _, reason, name) => {
      const file = join(dataDir, name);
      const exited = await start({
        DATABASE_URL: `postgres://u:not-the-password@127.0.0.1:9/db?sslmode=require&${parameter}=${file}`,
        SLUICE_MASTER_KEY: randomBytes(32).toString("base64"),
      });
      expect(exited.code).toBe(1);
      expect(exited.stderr).toMatch(
        new RegExp(
          `^sluice failed to start: DATABASE_URL \\(postgres://u@127\\.0\\.0\\.1:9/db\\): its ${parameter} file ` +
            `${file.replaceAll(".", "\\.")} cannot be read \\(${reason}\\): E[A-Z]+: .+\\n$`,
        ),
      );
      expect(exited.stderr).not.toContain("not-the-password");
    },
    20_000,
  );

  it.skipIf(!postgresAvailable)(
    "names DATABASE_URL and its sslmode when PostgreSQL does not offer TLS",
    async () => {
      const url = new URL(postgresBaseUrl);
      url.password = "not-the-password";
      url.searchParams.set("sslmode", "verify-full");
      const exited = await start({
        DATABASE_URL: url.href,
        SLUICE_MASTER_KEY: randomBytes(32).toString("base64"),
      });
      expect(exited.code).toBe(1);
      expect(exited.stderr).toBe(
        `sluice failed to start: DATABASE_URL (postgres://postgres@127.0.0.1:5432/test): its sslmode (verify-full) asks for TLS, which this PostgreSQL server does not offer: set sslmode=disable, or enable TLS on the server: The server does not support SSL connections\n`,
      );
    },
    20_000,
  );

  it.skipIf(!redisAvailable)(
    "names REDIS_URL and says a rediss:// URL reaches a Redis without TLS",
    async () => {
      const exited = await start({ REDIS_URL: `rediss://:not-the-password@${new URL(redisUrl).host}/0` });
      expect(exited.code).toBe(1);
      expect(exited.stderr).toBe(
        `sluice failed to start: Invalid configuration:\n  REDIS_URL: the URL is rediss:// (TLS), but the Redis at ${new URL(redisUrl).host} answers without TLS: write redis://, or turn TLS on in Redis\n`,
      );
    },
    20_000,
  );

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

  it("names the data dir's generated key file when another SLUICE_MASTER_KEY does not open the stored provider keys", async () => {
    const generatedDir = join(dataDir, "generated");
    const file = join(generatedDir, "master.key");
    // Keys added under the key a start outside production generated; SLUICE_MASTER_KEY is then set to another.
    const context = await openAdminContext(loadConfig({}, { dataDir: generatedDir }), () => {});
    try {
      await context.admin.createProject({ id: "generated", name: "Generated", provider: "provider-a" });
      await context.admin.addProviderKey("generated", {
        provider: "provider-a",
        apiKey: "sk-upstream-654321",
      });
    } finally {
      await context.close();
    }
    const other = randomBytes(32).toString("base64");
    const exited = await start({ SLUICE_DATA_DIR: generatedDir, SLUICE_MASTER_KEY: other });
    expect(exited.code).toBe(1);
    expect(exited.stderr).toMatch(
      new RegExp(
        "^sluice failed to start: SLUICE_MASTER_KEY does not open the secrets stored in the database " +
          "\\(provider key \\w+ of project generated was sealed under another master key\\): set " +
          "SLUICE_MASTER_KEY to the key the database's secrets were stored under " +
          `\\(${file}, generated by an earlier start outside production, holds another key, likely that one: ` +
          `export SLUICE_MASTER_KEY=\\$\\(cat ${file}\\)\\)\\n$`,
      ),
    );
    const stored = readFileSync(file, "utf8").trim();
    for (const key of [stored, other]) expect(exited.stderr).not.toContain(key);
  }, 20_000);

  it("names DATABASE_URL and says node-postgres verifies the certificate when sslmode=require meets a private CA", async () => {
    // A PostgreSQL that speaks TLS with a certificate no public CA signed (a managed database's own
    // CA, which libpq's sslmode=require would not check): SSLRequest is answered `S`, then TLS.
    const { cert, key } = selfSigned();
    const server = createServer((socket) => {
      socket.once("data", () => {
        socket.write("S");
        const secure = new TLSSocket(socket, { isServer: true, cert, key });
        secure.on("error", () => {});
      });
      socket.on("error", () => {});
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as { port: number };
    try {
      const exited = await start({
        DATABASE_URL: `postgres://u:not-the-password@localhost:${port}/db?sslmode=require`,
        SLUICE_MASTER_KEY: randomBytes(32).toString("base64"),
      });
      expect(exited.code).toBe(1);
      // One line: node-postgres's SECURITY WARNING for sslmode=require is in the log, not here.
      expect(exited.stderr).toBe(
        `sluice failed to start: DATABASE_URL (postgres://u@localhost:${port}/db): PostgreSQL's TLS certificate was not accepted: ` +
          "node-postgres verifies the certificate and its host name with sslmode require, prefer and verify-ca too, as with verify-full " +
          "(not as libpq does): give the CA that signed it with sslrootcert=/path/to/ca.pem, or add uselibpqcompat=true for " +
          "libpq's meaning of sslmode (require: encrypted, not verified): self-signed certificate\n",
      );
      expect(exited.stderr).not.toContain("not-the-password");
    } finally {
      server.close();
    }
  }, 20_000);

  it("names DATABASE_URL when node-postgres refuses its parameters", async () => {
    const exited = await start({
      DATABASE_URL: "postgres://u:not-the-password@127.0.0.1:9/db?sslmode=verify-ca&uselibpqcompat=true",
      SLUICE_MASTER_KEY: randomBytes(32).toString("base64"),
    });
    expect(exited.code).toBe(1);
    expect(exited.stderr).toMatch(
      /^sluice failed to start: DATABASE_URL \(postgres:\/\/u@127\.0\.0\.1:9\/db\): node-postgres cannot use its parameters: SECURITY WARNING: Using sslmode=verify-ca requires specifying a CA with sslrootcert\. .+\n$/,
    );
    expect(exited.stderr).not.toContain("not-the-password");
  }, 20_000);
});
