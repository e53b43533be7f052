import { execFile } from "node:child_process";
import { createHmac, randomBytes } from "node:crypto";
import {
  closeSync,
  constants,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";
import { createSecretBox, type SecretBox } from "../auth/secret-box.js";
import { loadConfig, vaultUrlTtlMaxSeconds } from "../config.js";
import { createLocalVault } from "./local-vault.js";
import { createS3Vault, presignS3Url } from "./s3-vault.js";
import { createUrlSigner, type UrlSigner } from "./signed-url.js";
import { chooseVault } from "./vault-choice.js";
import { isSafeVaultPath, vaultMaxAgeSeconds, vaultPath } from "./vault-store.js";

describe("vault paths", () => {
  it("follow <team>/generated-images/<project>/<yyyy>/<mm>/<dd>/<uuid>.<ext> in UTC", () => {
    expect(vaultPath("team1", "proj1", new Date("2026-03-04T23:30:00-05:00"), "0b0c", "image/png")).toBe(
      "team1/generated-images/proj1/2026/03/05/0b0c.png",
    );
  });

  it.each(["a/../b", "../etc/passwd", "a//b", "/abs/path", "a/%2e%2e/b", "a/.hidden", "single", "a/b\\c"])(
    "refuse %j",
    (path) => {
      expect(isSafeVaultPath(path)).toBe(false);
    },
  );

  it.each(["./p/x.png", "../p/x.png", ".hidden/p/x.png", "team.one/p/x.png", `${"t".repeat(65)}/p/x.png`])(
    "refuse %j, whose first segment is not a team id",
    (path) => {
      expect(isSafeVaultPath(path)).toBe(false);
    },
  );

  it.each(["_team", "-team", "team_-", "t".repeat(64)])(
    "accept team id %j as the first segment",
    (teamId) => {
      expect(isSafeVaultPath(vaultPath(teamId, "prj_1", new Date(), "0b0c", "image/png"))).toBe(true);
    },
  );
});

describe("vault cache lifetime", () => {
  it("is at most five minutes and never outlives the URL's expiry", () => {
    const now = 1_000_000_000_000;
    expect(vaultMaxAgeSeconds(now / 1000 + 3600, now)).toBe(300);
    expect(vaultMaxAgeSeconds(now / 1000 + 300, now)).toBe(300);
    expect(vaultMaxAgeSeconds(now / 1000 + 42, now)).toBe(42);
    expect(vaultMaxAgeSeconds(now / 1000 + 42, now + 500)).toBe(41);
    expect(vaultMaxAgeSeconds(now / 1000, now)).toBe(0);
    expect(vaultMaxAgeSeconds(now / 1000 - 10, now)).toBe(0);
  });
});

/**
 * What `signer` answers for `path` at `url`'s parameters, with `changes` made to them (null: the
 * parameter taken out).
 */
function verdictOf(
  signer: UrlSigner,
  path: string,
  url: URL,
  changes: Record<string, string | null> = {},
): "ok" | "expired" | "invalid" {
  const query = new URLSearchParams(url.searchParams);
  for (const [name, value] of Object.entries(changes)) {
    if (value === null) query.delete(name);
    else query.set(name, value);
  }
  return signer.verify(path, query).verdict;
}

/** A URL as signed before `issued` was added: the HMAC of `path \n expires` under the key itself. */
function urlWithoutIssued(key: Buffer, path: string, expires: number): URL {
  const signature = createHmac("sha256", key).update(`${path}\n${expires}`).digest("base64url");
  return new URL(`http://sluice.test/v1/vault/${path}?expires=${expires}&signature=${signature}`);
}

describe("signed URLs", () => {
  it("verify their own signature until they expire, and nothing else", () => {
    let clock = 1_000_000_000_000;
    const signer = createUrlSigner(randomBytes(32), () => clock);
    const path = "t/generated-images/p/2026/01/01/x.png";
    const url = new URL(signer.sign("http://sluice.test", path, 60));
    const expires = url.searchParams.get("expires") as string;
    const issued = url.searchParams.get("issued") as string;
    const signature = url.searchParams.get("signature") as string;
    expect([expires, issued]).toEqual(["1000000060", "1000000000"]);
    expect(verdictOf(signer, path, url)).toBe("ok");
    expect(verdictOf(signer, "t/generated-images/p/2026/01/01/y.png", url)).toBe("invalid");
    expect(verdictOf(signer, path, url, { expires: String(Number(expires) + 1) })).toBe("invalid");
    expect(verdictOf(signer, path, url, { issued: String(Number(issued) + 1) })).toBe("invalid");
    expect(verdictOf(signer, path, url, { signature: `${signature}x` })).toBe("invalid");
    expect(verdictOf(signer, path, url, { expires: null })).toBe("invalid");
    expect(verdictOf(signer, path, url, { signature: null })).toBe("invalid");
    // Without `issued`, its signature is none of a URL signed before `issued` was added.
    expect(verdictOf(signer, path, url, { issued: null })).toBe("invalid");
    clock += 61_000;
    expect(verdictOf(signer, path, url)).toBe("expired");
  });

  it("are named in the README's endpoint table with every query parameter they carry", () => {
    const signer = createUrlSigner(randomBytes(32), () => 1_000_000_000_000);
    const url = new URL(signer.sign("http://sluice.test", "t/generated-images/p/2026/01/01/x.png", 60));
    const readme = readFileSync(new URL("../../README.md", import.meta.url), "utf8");
    const row = readme.split("\n").find((line) => line.startsWith("| GET | `/v1/vault/"));
    expect(row).toContain(`\`/v1/vault/{path}?${[...url.searchParams.keys()].join("&")}\``);
  });

  it("verify URLs signed before `issued` was added, until they expire, and refuse them while their expiry lies past the TTL in force", () => {
    const key = randomBytes(32);
    let clock = 1_000_000_000_000;
    const path = "t/generated-images/p/2026/01/01/x.png";
    const signer = createUrlSigner(key, () => clock, undefined, 60);
    const url = urlWithoutIssued(key, path, 1_000_000_060);
    expect(verdictOf(signer, path, url)).toBe("ok");
    expect(verdictOf(signer, path, url, { issued: "1000000000" })).toBe("invalid");
    expect(verdictOf(signer, path, urlWithoutIssued(randomBytes(32), path, 1_000_000_060))).toBe("invalid");
    // Signed for a day: more than the TTL in force, until its expiry is within it.
    const long = urlWithoutIssued(key, path, 1_000_086_400);
    expect(verdictOf(signer, path, long)).toBe("expired");
    clock = (1_000_086_400 - 60) * 1000;
    expect(verdictOf(signer, path, long)).toBe("ok");
    clock += 61_000;
    expect(verdictOf(signer, path, long)).toBe("expired");
    expect(verdictOf(signer, path, url)).toBe("expired");
  });

  it("signed before a master key rotation still verify during it (SLUICE_MASTER_KEY_PREVIOUS), and those of a third key do not", () => {
    const [oldKey, newKey] = [randomBytes(32), randomBytes(32)];
    const config = loadConfig({}, { dataDir: "/unused" });
    const signerOf = (box: SecretBox) =>
      chooseVault(
        config,
        box,
        () => "http://sluice.test",
        () => new Date(),
      ).signer;
    const path = "t/generated-images/p/2026/01/01/x.png";
    const rotating = signerOf(createSecretBox(newKey, oldKey));
    for (const [signedBy, verdict] of [
      [createSecretBox(oldKey), "ok"],
      [createSecretBox(newKey), "ok"],
      [createSecretBox(randomBytes(32)), "invalid"],
    ] as const) {
      const url = new URL(signerOf(signedBy).sign("http://sluice.test", path, 60));
      expect(verdictOf(rotating, path, url)).toBe(verdict);
    }
    // Signed during the rotation: under the new key, which instances on it alone verify.
    const url = new URL(rotating.sign("http://sluice.test", path, 60));
    const after = signerOf(createSecretBox(newKey));
    expect(verdictOf(after, path, url)).toBe("ok");
  });

  // After SLUICE_VAULT_URL_TTL_SECONDS was lowered (a URL shared too widely), a URL of the longer
  // TTL was refused only while its expiry lay further ahead than the new TTL: refused at once, then
  // good again in the last of its old lifetime (its last hour, with a new TTL of an hour).
  it("live the TTL in force at most from when they were signed, whatever TTL they were signed with", () => {
    const key = randomBytes(32);
    const signedAt = 1_000_000_000_500;
    const path = "t/generated-images/p/2026/01/01/x.png";
    const url = new URL(createUrlSigner(key, () => signedAt).sign("http://sluice.test", path, 86_400));
    for (const secondsLater of [0, 59, 60, 61, 3600, 86_340, 86_399]) {
      const verifier = createUrlSigner(key, () => signedAt + secondsLater * 1000, undefined, 60);
      expect(verdictOf(verifier, path, url), `${secondsLater} s on`).toBe(
        secondsLater <= 60 ? "ok" : "expired",
      );
    }
    // No cached copy outlives that either: the last second it is good through is the TTL's.
    const verifier = createUrlSigner(key, () => signedAt, undefined, 60);
    expect(verifier.verify(path, url.searchParams)).toEqual({ verdict: "ok", lastSecond: 1_000_000_061 });
    // A URL of a shorter TTL than the one in force keeps its own.
    const short = new URL(createUrlSigner(key, () => signedAt).sign("http://sluice.test", path, 30));
    expect(verifier.verify(path, short.searchParams)).toEqual({ verdict: "ok", lastSecond: 1_000_000_031 });
  });

  // The expiry is whole seconds: rounded down, a URL signed late in a second lived up to a second
  // less than SLUICE_VAULT_URL_TTL_SECONDS, and with the shortest (1) could expire a millisecond on.
  it("live at least their TTL, however late in a second they are signed, and expire a millisecond after their expiry", () => {
    for (const signedAt of [1_000_000_000_000, 1_000_000_000_001, 1_000_000_000_999]) {
      for (const ttlSeconds of [1, 60]) {
        let clock = signedAt;
        const signer = createUrlSigner(randomBytes(32), () => clock);
        const url = new URL(signer.sign("http://sluice.test", "t/x.png", ttlSeconds));
        const expires = url.searchParams.get("expires");
        const verify = () => verdictOf(signer, "t/x.png", url);
        clock = signedAt + ttlSeconds * 1000;
        expect(verify(), `${signedAt} + ${ttlSeconds} s`).toBe("ok");
        // Good through the second its expiry names, refused from the millisecond after.
        clock = Number(expires) * 1000;
        expect(verify()).toBe("ok");
        clock += 1;
        expect(verify()).toBe("expired");
        // Never more than a second beyond the TTL.
        expect(Number(expires) * 1000 - signedAt).toBeLessThan((ttlSeconds + 1) * 1000);
      }
    }
  });

  it("verify when signed for the longest SLUICE_VAULT_URL_TTL_SECONDS, far in the future", () => {
    const signer = createUrlSigner(randomBytes(32), () => Date.UTC(2099, 0, 1));
    const url = new URL(signer.sign("http://sluice.test", "t/x.png", vaultUrlTtlMaxSeconds));
    expect(verdictOf(signer, "t/x.png", url)).toBe("ok");
  });

  it("refuse an expiry or a signing second rewritten in another notation of the same number", () => {
    const signer = createUrlSigner(randomBytes(32), () => 1_000_000_000_000);
    const path = "t/generated-images/p/2026/01/01/x.png";
    const url = new URL(signer.sign("http://sluice.test", path, 60));
    expect(url.searchParams.get("expires")).toBe("1000000060");
    for (const expires of [
      "0x3b9aca3c",
      "+1000000060",
      " 1000000060",
      "1000000060.0",
      "100000006e1",
      "01000000060",
    ])
      expect(verdictOf(signer, path, url, { expires }), expires).toBe("invalid");
    expect(url.searchParams.get("issued")).toBe("1000000000");
    for (const issued of ["0x3b9aca00", "+1000000000", "1000000000.0", "1e9", "01000000000", ""])
      expect(verdictOf(signer, path, url, { issued }), issued).toBe("invalid");
  });

  it("keep the path of a SLUICE_PUBLIC_URL that has one, with or without its trailing slash", () => {
    const signer = createUrlSigner(randomBytes(32), () => 1_000_000_000_000);
    for (const base of ["https://example.com/sluice", "https://example.com/sluice/"]) {
      const url = new URL(signer.sign(base, "t/generated-images/p/x.png", 60));
      expect(url.pathname).toBe("/sluice/v1/vault/t/generated-images/p/x.png");
      expect([...url.searchParams.keys()]).toEqual(["expires", "issued", "signature"]);
    }
  });
});

/** What the local vault serves at `path`: the file's bytes, or null when there is none. */
async function readBack(vault: ReturnType<typeof createLocalVault>, path: string): Promise<Buffer | null> {
  const file = await vault.open(path);
  if (!file) return null;
  const chunks: Buffer[] = [];
  for await (const chunk of file.stream()) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

describe("local vault", () => {
  const directory = mkdtempSync(join(tmpdir(), "sluice-vault-"));
  afterAll(() => rmSync(directory, { recursive: true, force: true }));

  it("writes under its directory only and reads back the same bytes", async () => {
    const vault = createLocalVault({
      directory,
      publicUrl: () => "http://x",
      signer: createUrlSigner(randomBytes(32)),
    });
    const bytes = randomBytes(64);
    await vault.put("t/generated-images/p/2026/01/01/a.png", bytes, "image/png");
    expect(readFileSync(join(directory, "t/generated-images/p/2026/01/01/a.png")).equals(bytes)).toBe(true);
    expect((await readBack(vault, "t/generated-images/p/2026/01/01/a.png"))?.equals(bytes)).toBe(true);
    await expect(vault.put("../escape/x.png", bytes, "image/png")).rejects.toThrow();
    expect(await readBack(vault, "t/../../etc/passwd")).toBeNull();
  });

  it("opens a missing file as none, and fails on any other file system error", async () => {
    const vault = createLocalVault({
      directory,
      publicUrl: () => "http://x",
      signer: createUrlSigner(randomBytes(32)),
    });
    expect(await readBack(vault, "t/generated-images/p/2026/01/01/missing.png")).toBeNull();
    // A path through a file is as missing as any other.
    await vault.put("t/generated-images/p/2026/01/01/file.png", randomBytes(8), "image/png");
    expect(await readBack(vault, "t/generated-images/p/2026/01/01/file.png/x.png")).toBeNull();
    // As root, chmod 000 stops no read: a directory where the file should be does.
    mkdirSync(join(directory, "t/generated-images/p/2026/01/01/dir.png"), { recursive: true });
    await expect(vault.open("t/generated-images/p/2026/01/01/dir.png")).rejects.toMatchObject({
      code: "EISDIR",
    });
  });

  // Sluice never makes a link in the vault: one there (a shared volume, a restore, another process
  // with write access to the vault alone) must not make a signed URL serve the data dir's database
  // or master key, the vault directory itself a link (a data dir on another disk) excepted.
  it("refuses a symbolic link in place of a file or of a directory on its path, never serving its target", async () => {
    const outside = mkdtempSync(join(tmpdir(), "sluice-outside-"));
    try {
      writeFileSync(join(outside, "master.key"), "the master key");
      mkdirSync(join(outside, "01"));
      writeFileSync(join(outside, "01", "a.png"), "the master key");
      const linkedRoot = join(outside, "vault-link");
      symlinkSync(directory, linkedRoot);
      const vault = createLocalVault({
        directory: linkedRoot,
        publicUrl: () => "http://x",
        signer: createUrlSigner(randomBytes(32)),
      });
      const bytes = randomBytes(8);
      await vault.put("t/generated-images/p/2026/02/01/a.png", bytes, "image/png");
      // Reached through the vault directory's own link: served.
      expect((await readBack(vault, "t/generated-images/p/2026/02/01/a.png"))?.equals(bytes)).toBe(true);
      // A link in the file's place, dangling or not, and a day directory that is a link.
      const day = join(directory, "t/generated-images/p/2026/02");
      symlinkSync(join(outside, "master.key"), join(day, "01", "key.png"));
      symlinkSync(join(outside, "gone"), join(day, "01", "dangling.png"));
      symlinkSync(join(outside, "01"), join(day, "02"));
      for (const path of [
        "t/generated-images/p/2026/02/01/key.png",
        "t/generated-images/p/2026/02/01/dangling.png",
        "t/generated-images/p/2026/02/02/a.png",
      ])
        await expect(vault.open(path), path).rejects.toMatchObject({ code: "ELOOP" });
    } finally {
      rmSync(outside, { recursive: true, force: true });
    }
  });

  it("writes no file through a symbolic link on its path: not outside the vault directory", async () => {
    const outside = mkdtempSync(join(tmpdir(), "sluice-outside-"));
    try {
      const vault = createLocalVault({
        directory,
        publicUrl: () => "http://x",
        signer: createUrlSigner(randomBytes(32)),
      });
      mkdirSync(join(directory, "t/generated-images/p/2026/04"), { recursive: true });
      symlinkSync(outside, join(directory, "t/generated-images/p/2026/04/01"));
      symlinkSync(outside, join(directory, "linked-team"));
      for (const path of ["t/generated-images/p/2026/04/01/a.png", "linked-team/generated-images/p/a.png"])
        await expect(vault.put(path, randomBytes(8), "image/png"), path).rejects.toMatchObject({
          code: "ELOOP",
        });
      // The directories of the path may be made there (mkdir follows the link), never the image.
      expect(
        readdirSync(outside, { recursive: true }).filter((name) => String(name).endsWith(".png")),
      ).toEqual([]);
    } finally {
      rmSync(outside, { recursive: true, force: true });
    }
  });

  it("refuses a FIFO in place of a file at once, rather than wait for a writer", async () => {
    const vault = createLocalVault({
      directory,
      publicUrl: () => "http://x",
      signer: createUrlSigner(randomBytes(32)),
    });
    const path = "t/generated-images/p/2026/03/01/fifo.png";
    mkdirSync(join(directory, "t/generated-images/p/2026/03/01"), { recursive: true });
    await promisify(execFile)("mkfifo", [join(directory, path)]);
    const opened = vault.open(path).then(
      () => "opened",
      (error: NodeJS.ErrnoException) => error.code,
    );
    const outcome = await Promise.race([opened, sleep(2000).then(() => "waiting")]);
    if (outcome === "waiting") {
      // Frees the pool thread the open holds: a writer comes, and goes.
      closeSync(openSync(join(directory, path), constants.O_WRONLY | constants.O_NONBLOCK));
      await opened;
    }
    expect(outcome).toBe("EINVAL");
  });

  it("leaves no partial file when the disk fills during a write", {
    timeout: 20_000,
  }, async () => {
    // A full disk, portably: a child whose file size limit (`ulimit -f`, 8 blocks of 512 bytes in
    // sh) stops the write after its first bytes, as ENOSPC does (Node ignores SIGXFSZ: EFBIG).
    const script = `
      const { createLocalVault } = await import(process.argv[1]);
      const vault = createLocalVault({ directory: process.argv[2], publicUrl: () => "http://x", signer: {} });
      await vault.put("t/generated-images/p/2026/01/01/big.png", new Uint8Array(65536), "image/png").then(
        () => console.log("stored"),
        (error) => console.log(error.code),
      );`;
    const module = fileURLToPath(new URL("./local-vault.ts", import.meta.url));
    const { stdout } = await promisify(execFile)("sh", [
      "-c",
      'ulimit -f 8 && exec "$0" --import tsx --input-type=module -e "$1" "$2" "$3"',
      process.execPath,
      script,
      module,
      directory,
    ]);
    expect(stdout.trim()).toBe("EFBIG");
    expect(existsSync(join(directory, "t/generated-images/p/2026/01/01/big.png"))).toBe(false);
  });

  it("removes a stored file, and takes one already gone as removed", async () => {
    const vault = createLocalVault({
      directory,
      publicUrl: () => "http://x",
      signer: createUrlSigner(randomBytes(32)),
    });
    const path = "t/generated-images/p/2026/01/01/discarded.png";
    await vault.put(path, randomBytes(8), "image/png");
    await vault.remove(path);
    expect(existsSync(join(directory, path))).toBe(false);
    await expect(vault.remove(path)).resolves.toBeUndefined();
    await expect(vault.remove("../escape/x.png")).rejects.toThrow("unsafe vault path");
  });

  it("never removes a file it did not write", async () => {
    const vault = createLocalVault({
      directory,
      publicUrl: () => "http://x",
      signer: createUrlSigner(randomBytes(32)),
    });
    const path = "t/generated-images/p/2026/01/01/taken.png";
    mkdirSync(join(directory, "t/generated-images/p/2026/01/01"), { recursive: true });
    writeFileSync(join(directory, path), "someone else's");
    await expect(vault.put(path, randomBytes(8), "image/png")).rejects.toMatchObject({ code: "EEXIST" });
    expect(readFileSync(join(directory, path), "utf8")).toBe("someone else's");
  });

  it("stores a file for a team id with a leading _ or -", async () => {
    const vault = createLocalVault({
      directory,
      publicUrl: () => "http://x",
      signer: createUrlSigner(randomBytes(32)),
    });
    const bytes = randomBytes(16);
    for (const path of [
      "_team/generated-images/p/2026/01/01/a.png",
      "-team/generated-images/p/2026/01/01/a.png",
    ]) {
      await vault.put(path, bytes, "image/png");
      expect((await readBack(vault, path))?.equals(bytes)).toBe(true);
    }
  });
});

describe("S3 vault", () => {
  it("refuses an unsafe path before calling the object store, as the local vault does", async () => {
    const vault = createS3Vault({
      endpoint: "http://127.0.0.1:9",
      bucket: "b",
      region: "us-east-1",
      accessKeyId: "AKID",
      secretAccessKey: "secret",
    });
    await expect(vault.put("../escape/x.png", randomBytes(4), "image/png")).rejects.toThrow(
      "unsafe vault path",
    );
  });
});

/** When a presigned URL stops being valid: its X-Amz-Date (a whole second) plus X-Amz-Expires. */
function presignedExpiry(url: string): { stamp: number; expires: number; expiresAt: number } {
  const query = new URL(url).searchParams;
  const stamp = Date.parse(
    (query.get("X-Amz-Date") ?? "").replace(
      /^(\d{4})(\d\d)(\d\d)T(\d\d)(\d\d)(\d\d)Z$/,
      "$1-$2-$3T$4:$5:$6Z",
    ),
  );
  const expires = Number(query.get("X-Amz-Expires"));
  return { stamp, expires, expiresAt: stamp + expires * 1000 };
}

describe("S3 presigned URLs", () => {
  const s3 = {
    endpoint: "http://127.0.0.1:9",
    bucket: "b",
    region: "us-east-1",
    accessKeyId: "AKID",
    secretAccessKey: "secret",
  };

  it.each([0, 1, 400, 999])(
    "live their TTL at least, a second more at most, signed %i ms into a second, never stamped after it",
    (ms) => {
      const signedAt = Date.parse("2026-11-30T04:00:00.000Z") + ms;
      const vault = createS3Vault({ ...s3, now: () => new Date(signedAt) });
      for (const ttl of [1, 3600]) {
        const { stamp, expiresAt } = presignedExpiry(vault.signedUrl("t/generated-images/p/a.png", ttl));
        // A store refuses a URL stamped after the moment it is used ("Request is not yet valid").
        expect(stamp).toBeLessThanOrEqual(signedAt);
        expect(expiresAt).toBeGreaterThanOrEqual(signedAt + ttl * 1000);
        expect(expiresAt).toBeLessThan(signedAt + ttl * 1000 + 1000);
      }
    },
  );

  // The store, not Sluice, answers these URLs: the headers the local vault sends are asked of it
  // with S3's response-* overrides, which the signature covers.
  it("ask the store for the image's type and a private cache lifetime no longer than 5 minutes or the URL", () => {
    const signedAt = Date.parse("2026-11-30T04:00:00.400Z");
    const vault = createS3Vault({ ...s3, now: () => new Date(signedAt) });
    for (const [path, ttl, type, fresh] of <Array<[string, number, string, string]>>[
      ["t/generated-images/p/a.png", 3600, "image/png", "Mon, 30 Nov 2026 04:05:00 GMT"],
      ["t/generated-images/p/a.webp", 42, "image/webp", "Mon, 30 Nov 2026 04:00:42 GMT"],
      ["t/generated-images/p/a.jpg", 300, "image/jpeg", "Mon, 30 Nov 2026 04:05:00 GMT"],
    ]) {
      const url = vault.signedUrl(path, ttl);
      const query = new URL(url).searchParams;
      expect(query.get("response-content-type"), path).toBe(type);
      expect(query.get("response-cache-control"), path).toBe("private");
      expect(query.get("response-expires"), path).toBe(fresh);
      // Fresh no longer than the URL answers.
      expect(Date.parse(fresh)).toBeLessThanOrEqual(presignedExpiry(url).expiresAt);
      // Signed with them: the same URL without them has another signature.
      const bare = presignS3Url(s3, "GET", path, ttl, new Date(signedAt));
      expect(query.get("X-Amz-Signature")).not.toBe(new URL(bare).searchParams.get("X-Amz-Signature"));
      // Spaces, commas and colons percent-encoded (%20, %2C, %3A), as the canonical query signs them.
      expect(url).toContain(`response-expires=${encodeURIComponent(fresh)}&`);
    }
  });

  it("never ask for more than S3's 7 days, the longest TTL config accepts with an S3 vault", () => {
    const signedAt = new Date("2026-11-30T04:00:00.400Z");
    const url = presignS3Url(s3, "GET", "t/generated-images/p/a.png", 604_800, signedAt);
    expect(presignedExpiry(url).expires).toBe(604_800);
  });

  it("match AWS's documented SigV4 query-string example", () => {
    const url = presignS3Url(
      {
        endpoint: "https://examplebucket.s3.amazonaws.com",
        bucket: "examplebucket",
        region: "us-east-1",
        accessKeyId: "AKIAIOSFODNN7EXAMPLE",
        secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        pathStyle: false,
      },
      "GET",
      "test.txt",
      86400,
      new Date("2013-05-24T00:00:00Z"),
    );
    expect(url).toBe(
      "https://examplebucket.s3.amazonaws.com/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
    );
  });
});
