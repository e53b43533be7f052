import { mkdir, open, readFile, unlink } from "node:fs/promises";
import { dirname, join, resolve, sep } from "node:path";
import type { UrlSigner } from "./signed-url.js";
import { isSafeVaultPath, type VaultStore } from "./vault-store.js";

/** The vault in a local directory, served by the gateway itself through signed URLs. */
export function createLocalVault(options: {
  directory: string;
  /** The base of signed URLs, asked each time: the listening address is known only after start. */
  publicUrl: () => string;
  signer: UrlSigner;
}): VaultStore & {
  read(path: string): Promise<Buffer | null>;
} {
  const root = resolve(options.directory);
  const fileOf = (path: string): string => {
    if (!isSafeVaultPath(path)) throw new Error("unsafe vault path");
    const file = resolve(join(root, path));
    if (!file.startsWith(root + sep)) throw new Error("unsafe vault path");
    return file;
  };
  return {
    async put(path, bytes, _mediaType, signal) {
      const file = fileOf(path);
      // Owner-only, as the rest of the data dir: the images are served through signed URLs only.
      await mkdir(dirname(file), { recursive: true, mode: 0o700 });
      // `wx`: a file already there (EEXIST) is another's and stays. Once this one is created, any
      // failure (a full disk, the deadline's signal) removes it: a partial image would keep the
      // disk full and could never be served, as its URL was never answered.
      const handle = await open(file, "wx", 0o600);
      try {
        await handle.writeFile(bytes, signal ? { signal } : {});
        await handle.close();
      } catch (error) {
        await handle.close().catch(() => {});
        await unlink(file).catch(() => {});
        throw error;
      }
    },
    async remove(path) {
      await unlink(fileOf(path)).catch((error: NodeJS.ErrnoException) => {
        if (error.code !== "ENOENT") throw error;
      });
    },
    signedUrl: (path, ttlSeconds) => options.signer.sign(options.publicUrl(), path, ttlSeconds),
    /**
     * The file's bytes, or null when there is no such file (ENOENT; ENOTDIR: a part of its path is a
     * file). Any other error (EACCES, EISDIR, EIO, EMFILE…) rejects: the vault cannot be read, which
     * is no answer that the file does not exist.
     */
    async read(path) {
      if (!isSafeVaultPath(path)) return null;
      try {
        return await readFile(fileOf(path));
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code;
        if (code === "ENOENT" || code === "ENOTDIR") return null;
        throw error;
      }
    },
  };
}
