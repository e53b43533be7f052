import { readFileSync } from "node:fs";
import type { StartWarning } from "../production-warnings.js";

/**
 * The default of SLUICE_MAX_CONNECTIONS, from the process's open-file limit (docs/decisions/0018).
 * Every connection is a file descriptor, and so is every socket to a provider, PostgreSQL or Redis
 * and every file open: at the limit all of them fail (EMFILE), the clients already connected too.
 */

/** The cap where the limit cannot be read (not Linux) or is unlimited: half of macOS's usual 10,240 less its reserve, rounded down. */
export const fallbackMaxConnections = 4096;

/**
 * The soft "Max open files" limit in `/proc/self/limits` text; null when it is unlimited or the
 * line is not there. Linux writes the soft limit first, then the hard one.
 */
export function parseOpenFileLimit(text: string): number | null {
  const match = /^Max open files +(\S+) +\S+/m.exec(text);
  if (!match?.[1] || !/^[0-9]+$/.test(match[1])) return null;
  const limit = Number(match[1]);
  return Number.isSafeInteger(limit) && limit > 0 ? limit : null;
}

/**
 * The process's soft open-file limit, read from `/proc/self/limits`; null off Linux, or when it
 * cannot be read. Node raises the soft limit to the hard one as it starts: read after that, it is
 * the one the process runs with.
 */
export function readOpenFileLimit(): number | null {
  try {
    return parseOpenFileLimit(readFileSync("/proc/self/limits", "utf8"));
  } catch {
    return null;
  }
}

/**
 * The connections a process with `limit` open files may take: a reserve of a tenth of the limit
 * (at least 256, at most half of it) for what the process itself holds (its database and Redis
 * pools, the SQLite files, the log, Node's own descriptors), then half of the rest, since each
 * connection may be waiting for a provider's answer on a socket of its own (the upstream pools are
 * not capped). `fallbackMaxConnections` when `limit` is null. Never 0, which would mean no cap.
 */
export function defaultMaxConnections(limit: number | null): number {
  if (limit === null) return fallbackMaxConnections;
  return Math.max(1, Math.floor((limit - reserveOf(limit)) / 2));
}

/** The descriptors kept for what the process itself holds, whatever its clients do (see `defaultMaxConnections`). */
function reserveOf(limit: number): number {
  return Math.min(Math.max(256, Math.ceil(limit / 10)), Math.floor(limit / 2));
}

/**
 * A start warning when SLUICE_MAX_CONNECTIONS is set above what the open-file limit leaves once its
 * reserve is kept: connections alone could then take the descriptors the process needs for its own
 * sockets and files, which is what the cap is for. None when the setting is unset or 0 (no cap,
 * chosen), or the limit is unknown.
 */
export function connectionCapWarnings(
  maxConnections: number | undefined,
  limit: number | null,
): StartWarning[] {
  if (!maxConnections || limit === null) return [];
  const reserve = reserveOf(limit);
  const room = limit - reserve;
  if (maxConnections <= room) return [];
  return [
    {
      fields: { maxConnections, openFileLimit: limit },
      message: `SLUICE_MAX_CONNECTIONS is ${maxConnections}, but this process may open ${limit} files in all, of which ${reserve} are kept for its own sockets and files: before the cap is reached, its calls to providers, the database and Redis could fail for want of descriptors. Raise the open-file limit (ulimit -n, or LimitNOFILE in systemd, --ulimit nofile in Docker) or set SLUICE_MAX_CONNECTIONS to ${room} or less (unset, it is ${defaultMaxConnections(limit)})`,
    },
  ];
}
