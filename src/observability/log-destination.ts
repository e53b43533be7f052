import { writeSync as fsWriteSync } from "node:fs";

/** The largest write: what Docker's log copier reads at once (as pino's sonic-boom writes). */
const maxChunkBytes = 16 * 1024;
/** How long a destination that is busy (EAGAIN: a pipe its reader has not emptied) is left alone. */
const busyRetryMs = 100;
/** How long the write at exit may wait for a busy destination, in all. */
const exitWaitMs = 100;
const newline = 0x0a;

export interface LogDestinationOptions {
  /** The file descriptor written to (1: stdout). */
  fd: number;
  /** Bytes of log lines held while the destination is busy; lines past it are dropped. */
  maxHeldBytes?: number;
  /** Lines dropped: refused by the destination (ENOSPC, EPIPE, EIO, …) or past `maxHeldBytes`. */
  onDropped?: (lines: number) => void;
  /**
   * The first write that succeeds after lines were dropped: how many were, and why (the error code
   * of the last refusal, or "backlog" for lines past `maxHeldBytes`).
   */
  onRecovered?: (dropped: number, reason: string) => void;
  /** `fs.writeSync` (tests make it fail, or write part of what it is given). */
  writeSync?: (fd: number, data: Uint8Array) => number;
}

/** pino's destination; `flushSync` is what pino's `fatal` calls, and what runs at exit. */
export interface LogDestination {
  write(line: string): void;
  /**
   * Writes what is held, synchronously. A busy destination is waited for 100 ms at most, one that
   * refuses is not retried: what cannot be written is dropped and counted. Never throws.
   */
  flushSync(): void;
  /** Lines dropped and not yet reported through `onRecovered` (writes have not worked since). */
  unreported(): { dropped: number; reason: string };
}

/**
 * A destination for log lines that never fails the process: pino's default (sonic-boom) emits a
 * write error with nobody listening, an uncaught exception, and its flush at exit retries a full
 * disk forever, blocking the event loop. Here a line that cannot be written is dropped and
 * counted, never retried, except on EAGAIN (a busy pipe), which is waited out while at most
 * `maxHeldBytes` of lines are held, those logged meanwhile joined into chunks.
 *
 * A line is written when it is logged, synchronously, on the main thread: the gateway's stdout,
 * when it is a pipe or a socket, is non-blocking (`makeStdioNonBlocking`), so a slow reader
 * answers EAGAIN at once instead of holding the event loop, and a file or a terminal is written
 * as Node's own `process.stdout` writes them, synchronously. Nothing is ever under way elsewhere:
 * a write left to libuv's thread pool (`fs.write`) could neither be waited for nor known to be
 * done by the write at exit, and landed after the lines that write put out (decision 0011).
 */
export function createLogDestination(options: LogDestinationOptions): LogDestination {
  const { fd, onDropped, onRecovered } = options;
  const maxHeldBytes = options.maxHeldBytes ?? 1024 * 1024;
  const writeSync = options.writeSync ?? ((target, data) => fsWriteSync(target, data));
  let held: string[] = [];
  let heldBytes = 0;
  /** What is left to write of the chunk begun, after a partial write or while waiting out EAGAIN. */
  let chunk: Buffer | undefined;
  /** `writing`: in `writeHeld` (a line logged by `onRecovered` is only held); `waiting`: on EAGAIN. */
  let state: "idle" | "writing" | "waiting" = "idle";
  let retry: NodeJS.Timeout | undefined;
  let dropped = 0;
  let reason = "";
  /** The last byte written ended a line; otherwise, after a drop, the next write starts a new one. */
  let atLineStart = true;
  /** `chunk` begins with the newline that ends a line cut short (none of it is written yet). */
  let newlineFirst = false;

  function drop(lines: number, why: string): void {
    dropped += lines;
    reason = why;
    onDropped?.(lines);
  }

  /** The held lines, up to `maxChunkBytes` (at least one), taken off `held`. */
  function takeChunk(): Buffer {
    let count = 0;
    let bytes = 0;
    for (const line of held) {
      const size = Buffer.byteLength(line);
      if (count > 0 && bytes + size > maxChunkBytes) break;
      bytes += size;
      count++;
    }
    const text = held.slice(0, count).join("");
    held = held.slice(count);
    heldBytes -= bytes;
    newlineFirst = !atLineStart;
    return Buffer.from(newlineFirst ? `\n${text}` : text);
  }

  /** Writes the chunk begun and the held lines, until they are all out or the destination is busy. */
  function writeHeld(): void {
    state = "writing";
    while (chunk !== undefined || held.length > 0) {
      const current = chunk ?? takeChunk();
      chunk = current;
      let bytes: number;
      try {
        bytes = writeSync(fd, current);
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code ?? "EIO";
        if (code === "EAGAIN" || code === "EBUSY") break;
        chunk = undefined;
        drop(linesIn(current, newlineFirst), code);
        continue;
      }
      if (bytes <= 0) break;
      atLineStart = current[bytes - 1] === newline;
      newlineFirst = false;
      chunk = bytes < current.length ? current.subarray(bytes) : undefined;
      if (dropped > 0) {
        const report = { dropped, reason };
        dropped = 0;
        onRecovered?.(report.dropped, report.reason);
      }
    }
    if (chunk === undefined && held.length === 0) {
      state = "idle";
      return;
    }
    state = "waiting";
    retry = setTimeout(writeHeld, busyRetryMs);
    retry.unref();
  }

  return {
    write(line) {
      const bytes = Buffer.byteLength(line);
      if (bytes === 0) return;
      if (heldBytes + bytes > maxHeldBytes) {
        drop(1, dropped > 0 ? reason : "backlog");
        return;
      }
      held.push(line);
      heldBytes += bytes;
      if (state === "idle") writeHeld();
    },
    flushSync() {
      // Within `writeHeld` (a line `onRecovered` logged at `fatal`): the loop there writes it.
      if (state === "writing") return;
      clearTimeout(retry);
      state = "idle";
      let rest: Buffer = chunk ?? Buffer.alloc(0);
      let prefixed = chunk !== undefined && newlineFirst;
      chunk = undefined;
      if (held.length > 0) {
        const text = held.join("");
        // After a line cut short (the rest of a chunk begun ends it otherwise).
        const cut = !atLineStart && rest.length === 0;
        rest = Buffer.concat([rest, Buffer.from(cut ? `\n${text}` : text)]);
        prefixed ||= cut;
      }
      held = [];
      heldBytes = 0;
      const waitUntil = Date.now() + exitWaitMs;
      while (rest.length > 0) {
        let code: string;
        try {
          const bytes = writeSync(fd, rest);
          if (bytes > 0) {
            atLineStart = rest[bytes - 1] === newline;
            rest = rest.subarray(bytes);
            prefixed = false;
            continue;
          }
          code = "EAGAIN";
        } catch (error) {
          code = (error as NodeJS.ErrnoException).code ?? "EIO";
        }
        if ((code === "EAGAIN" || code === "EBUSY") && Date.now() < waitUntil) sleep(10);
        else {
          drop(linesIn(rest, prefixed), code);
          return;
        }
      }
    },
    unreported: () => ({ dropped, reason }),
  };
}

/**
 * The lines whose end `rest` holds (pino ends each with a newline), not counting a leading newline
 * added to end a line cut short.
 */
function linesIn(rest: Buffer, newlineFirst: boolean): number {
  let count = newlineFirst ? -1 : 0;
  for (let index = rest.indexOf(newline); index !== -1; index = rest.indexOf(newline, index + 1)) count++;
  return Math.max(1, count);
}

function sleep(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}
