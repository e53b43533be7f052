/**
 * A data dir (SLUICE_DATA_DIR) the gateway or the CLI cannot use: the message names the setting,
 * the dir, what could not be done and why in words; the system's error is its cause (`ENOTDIR: not a
 * directory, open '…/master.key'`), which the failed-start line and the CLI's error line print after it.
 */
class DataDirError extends Error {
  override name = "DataDirError";
}

/** The reasons a data dir cannot be used, in words, by the system's (or SQLite's) error code. */
const reasons: Record<string, string> = {
  ENOTDIR: "a part of its path is a file, not a directory",
  EACCES: "permission denied to the process's user",
  EPERM: "operation not permitted",
  EROFS: "a read-only file system",
  ENOSPC: "no space left on the device",
  EDQUOT: "disk quota exceeded",
  EISDIR: "a directory stands where a file should be",
  SQLITE_CANTOPEN: "SQLite cannot open or create its files there",
  SQLITE_READONLY: "SQLite may not write there",
  SQLITE_PERM: "permission denied",
  SQLITE_FULL: "no space left on the device",
  SQLITE_NOTADB: "the file is not an SQLite database",
  SQLITE_CORRUPT: "the database file is corrupt",
};

/** Runs `work` on the data dir; a file system error it throws becomes a `DataDirError`. */
export function inDataDir<T>(dataDir: string, doing: string, work: () => T): T {
  try {
    return work();
  } catch (error) {
    throw dataDirError(dataDir, doing, error);
  }
}

/**
 * `error` as a `DataDirError` when it is a file system error (a Node `E…` code, or a SQLite one
 * about its files: SQLITE_CANTOPEN, _READONLY, _PERM, _FULL, _IOERR…, and _NOTADB or _CORRUPT for
 * a file there that is not a database SQLite can read); anything else unchanged.
 */
export function dataDirError(dataDir: string, doing: string, error: unknown): unknown {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code !== "string" || !isFileSystemCode(code)) return error;
  const reason =
    // mkdir's ENOENT once its parent exists: a file system that makes no directory there (/proc).
    code === "ENOENT" && (error as NodeJS.ErrnoException).syscall === "mkdir"
      ? "no such directory, and the file system makes none there"
      : (reasons[code] ?? reasons[code.replace(/^(SQLITE_[A-Z]+)_.*$/, "$1")]);
  return new DataDirError(
    `SLUICE_DATA_DIR (${dataDir}) cannot be used: cannot ${doing}${reason ? ` (${reason})` : ""}`,
    { cause: error },
  );
}

function isFileSystemCode(code: string): boolean {
  return /^E[A-Z]+$/.test(code) || /^SQLITE_(CANTOPEN|READONLY|PERM|FULL|IOERR|NOTADB|CORRUPT)/.test(code);
}
