import { constants } from "node:fs";
import { type FileHandle, mkdir, open, realpath, unlink } from "node:fs/promises";
import { dirname, join, resolve, sep } from "node:path";
import { pipeline, type Readable, Transform } from "node:stream";
import type { UrlSigner } from "./signed-url.js";
import { isSafeVaultPath, type VaultStore } from "./vault-store.js";

/** A vault file opened to be served: its size and time, and its bytes when asked for. */
export interface VaultFile {
  size: number;
  modified: Date;
  /**
   * The file's `size` bytes (not one more, should it grow), or its bytes `first` through `last`
   * (inclusive, within `size`), read as they are taken, a chunk at a time: a client that reads
   * slowly, or not at all, holds a chunk of memory, never the whole file. The file closes when the
   * stream ends or is destroyed. Only for a file of at least one byte.
   */
  stream(range?: { first: number; last: number }): Readable;
  /** Closes the file unread (an answer without a body: HEAD, 304). */
  close(): Promise<void>;
}

/**
 * How a vault file is opened to be served. `O_NOFOLLOW`: a symbolic link in the file's place (Sluice
 * never makes one) is refused (ELOOP), never followed: a link to the data dir's database or master
 * key, made by whoever can write to the vault directory alone, would otherwise be served at the
 * file's signed URL. `O_NONBLOCK`: a FIFO there opens at once, to be refused as no file, rather than
 * hold a thread of libuv's pool (4, shared with every file and DNS call) until a writer comes; it
 * changes nothing for a regular file. Neither exists on Windows (0: not asked for).
 */
const readFlags = constants.O_RDONLY | (constants.O_NOFOLLOW ?? 0) | (constants.O_NONBLOCK ?? 0);

/** The vault in a local directory, served by the gateway itself through signed URLs. */
export function createLocalVault(options: {
  directory: string;
  /** The base of signed URLs, asked each time: the listening address is known only after start. */
  publicUrl: () => string;
  signer: UrlSigner;
}): VaultStore & {
  open(path: string): Promise<VaultFile | null>;
} {
  const root = resolve(options.directory);
  const fileOf = (path: string): string => {
    if (!isSafeVaultPath(path)) throw new Error("unsafe vault path");
    const file = resolve(join(root, path));
    if (!file.startsWith(root + sep)) throw new Error("unsafe vault path");
    return file;
  };
  /**
   * Rejects (ELOOP) when `absolute` (the vault's `path` under its directory) is reached through a
   * symbolic link (a team, project or day directory): its real path is not `path` inside the vault
   * directory's real one, which may be a link itself (a data dir on another disk). A directory swapped
   * for a link between this check and the open (a race won against one request) is not seen; a link
   * in the file's own place always is (O_NOFOLLOW, `wx`).
   */
  const refuseLinks = async (absolute: string, path: string): Promise<void> => {
    const [realRoot, real] = await Promise.all([realpath(root), realpath(absolute)]);
    if (real !== join(realRoot, path))
      throw Object.assign(new Error(`ELOOP: a symbolic link on the vault path '${path}'`), { code: "ELOOP" });
  };
  return {
    async put(path, bytes, _mediaType, signal) {
      const file = fileOf(path);
      // Owner-only, as the rest of the data dir: the images are served through signed URLs only.
      await mkdir(dirname(file), { recursive: true, mode: 0o700 });
      // A link on the way (a team or day directory made one by another): no file is written
      // through it, outside the vault. The file itself is no link: `wx` creates it or fails.
      await refuseLinks(dirname(file), dirname(path));
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
     * The file, opened, or null when there is no such file (ENOENT; ENOTDIR: a part of its path is a
     * file). Any other error (EACCES, EISDIR, EIO, EMFILE…) rejects: the vault cannot be read, which
     * is no answer that the file does not exist. So does a symbolic link in the file's place or on
     * the way to it (ELOOP), and anything that is not a file (a directory, a FIFO): never followed,
     * never waited on.
     */
    async open(path) {
      if (!isSafeVaultPath(path)) return null;
      const file = fileOf(path);
      let handle: FileHandle;
      try {
        handle = await open(file, readFlags);
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code;
        if (code === "ENOENT" || code === "ENOTDIR") return null;
        throw error;
      }
      try {
        await refuseLinks(file, path);
        const stat = await handle.stat();
        // A directory opens, but reads as EISDIR: refused as such before any answer begins.
        if (!stat.isFile()) {
          const code = stat.isDirectory() ? "EISDIR" : "EINVAL";
          throw Object.assign(new Error(`${code}: not a file, open`), { code });
        }
        return {
          size: stat.size,
          modified: stat.mtime,
          stream: (range) => {
            const first = range?.first ?? 0;
            const last = range?.last ?? stat.size - 1;
            return failingIfShort(handle.createReadStream({ start: first, end: last }), last - first + 1);
          },
          close: () => handle.close(),
        };
      } catch (error) {
        await handle.close().catch(() => {});
        throw error;
      }
    },
  };
}

/**
 * `source`'s bytes, failing (code `ERR_VAULT_FILE_TRUNCATED`) if it ends before `expected` of them:
 * a file cut short while it is served (truncated after it was opened) ends its read early without
 * an error, and its answer, whose Content-Length promised `expected` bytes, would end short on a
 * connection kept alive, the client waiting on it for bytes that never come. Destroying this stream
 * destroys `source`, which closes the file.
 */
function failingIfShort(source: Readable, expected: number): Readable {
  let read = 0;
  const counted = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      read += chunk.length;
      done(null, chunk);
    },
    flush(done) {
      done(
        read < expected
          ? Object.assign(new Error(`the vault file ended after ${read} of the ${expected} bytes to serve`), {
              code: "ERR_VAULT_FILE_TRUNCATED",
            })
          : null,
      );
    },
  });
  pipeline(source, counted, () => {});
  return counted;
}
