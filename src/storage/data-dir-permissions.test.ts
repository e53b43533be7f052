import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { loadMasterKey } from "../auth/master-key.js";
import { createLocalVault } from "../images/local-vault.js";
import { createUrlSigner } from "../images/signed-url.js";
import { openDatabase } from "./database.js";

const parent = mkdtempSync(join(tmpdir(), "sluice-permissions-"));
afterAll(() => rmSync(parent, { recursive: true, force: true }));

const mode = (path: string) => (statSync(path).mode & 0o777).toString(8);

describe("the embedded default's files", () => {
  it("are the gateway user's alone: data dir 700, database, WAL, key and vault images 600", async () => {
    const saved = process.umask(0o022); // the usual umask, under which files are world-readable
    try {
      const dataDir = join(parent, "data");
      loadMasterKey({ dataDir, environment: "development" }, () => {});
      const database = await openDatabase({
        dataDir,
        queryTimeoutMs: 1000,
        reportTimeoutMs: 1000,
        startTimeoutMs: 1000,
      } as Parameters<typeof openDatabase>[0]);
      const vault = createLocalVault({
        directory: join(dataDir, "vault"),
        publicUrl: () => "http://127.0.0.1",
        signer: createUrlSigner(randomBytes(32)),
      });
      const path = "team/generated-images/prj_x/2026/01/01/00000000-0000-4000-8000-000000000000.png";
      await vault.put(path, Buffer.from("png"), "image/png");
      const wal = join(dataDir, "sluice.sqlite-wal");
      // Before, the dir was 755 and the database and images 644: readable by every local user.
      expect({
        dataDir: mode(dataDir),
        masterKey: mode(join(dataDir, "master.key")),
        sqlite: mode(join(dataDir, "sluice.sqlite")),
        wal: existsSync(wal) ? mode(wal) : "600",
        vaultDir: mode(join(dataDir, "vault")),
        vaultImage: mode(join(dataDir, "vault", path)),
      }).toEqual({
        dataDir: "700",
        masterKey: "600",
        sqlite: "600",
        wal: "600",
        vaultDir: "700",
        vaultImage: "600",
      });
      await database.close();
    } finally {
      process.umask(saved);
    }
  });
});
