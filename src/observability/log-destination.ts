import { write as fsWrite, writeSync as fsWriteSync } from "node:fs";

/** The largest write: what Docker's log copier reads at once (as pino's sonic-boom writes). */
const maxChunkBytes = 16 * 1024;
/** How long a destination that is busy (EAGAIN: a pipe its reader has not emptied) is left alone. */
const busyRetryMs = 100;
/** How long the write at exit may wait for a busy destination, in all. */
const exitWaitMs = 100;
const newline = 0x0a;

type WriteCallback = (error: NodeJS.ErrnoException | null, written: number) => void;

export interface LogDestinationOptions {
  /** The file descriptor written to (1: stdout). */
  fd: number;
  /** Bytes of log lines held while a write is under way or the destination is busy; lines past it are dropped. */
  maxHeldBytes?: number;
  /** Lines dropped: refused by the destination (ENOSPC, EPIPE, EIO, …) or past `maxHeldBytes`. */
  onDropped?: (lines: number) => void;
  /**
   * The first write that succeeds after lines were dropped: how many were, and why (the error code
   * of the last refusal, or "backlog" for lines past `maxHeldBytes`).
   */
  onRecovered?: (dropped: number, reason: string) => void;
  /** `fs.write` and `fs.writeSync` (tests make them fail). */
  write?: (fd: number, data: Uint8Array, callback: WriteCallback) => void;
  writeSync?: (fd: number, data: Uint8Array) => number;
}

/** pino's destination; `flushSync` is what pino's `fatal` calls, and what runs at exit. */
export interface LogDestination {
  write(line: string): void;
  /**
   * Writes what is held, synchronously; a write under way in the background is left to finish. A
   * busy destination is waited for 100 ms at most, one that refuses is not retried: what cannot be
   * written is dropped and counted. Never throws.
   */
  flushSync(): void;
  /** Lines dropped and not yet reported through `onRecovered` (writes have not worked since). */
  unreported(): { dropped: number; reason: string };
}

/**
 * An asynchronous destination for log lines that never fails the process: pino's default
 * (sonic-boom) emits a write error with nobody listening, an uncaught exception, and its flush at
 * exit retries a full disk forever, blocking the event loop. Here a line that cannot be written is
 * dropped and counted, never retried, except on EAGAIN (a busy pipe), which is waited out while
 * at most `maxHeldBytes` of lines are held. Lines are written in the background one chunk at a
 * time, those logged meanwhile joined into the next, so logging never blocks the event loop on a
 * slow reader.
 */
export function createLogDestination(options: LogDestinationOptions): LogDestination {
  const { fd, onDropped, onRecovered } = options;
  const maxHeldBytes = options.maxHeldBytes ?? 1024 * 1024;
  const write = options.write ?? ((target, data, callback) => fsWrite(target, data, callback));
  const writeSync = options.writeSync ?? ((target, data) => fsWriteSync(target, data));
  let held: string[] = [];
  let heldBytes = 0;
  /** What is left to write of the chunk under way: in the background, or waiting out EAGAIN. */
  let chunk: Buffer | undefined;
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

  function writeNext(): void {
    if (state !== "idle" || held.length === 0) return;
    chunk = takeChunk();
    start();
  }

  function start(): void {
    state = "writing";
    write(fd, chunk as Buffer, written);
  }

  function written(error: NodeJS.ErrnoException | null, bytes: number): void {
    const current = chunk as Buffer;
    if (error && error.code !== "EAGAIN" && error.code !== "EBUSY") {
      chunk = undefined;
      state = "idle";
      drop(linesIn(current, newlineFirst), error.code ?? "EIO");
      writeNext();
      return;
    }
    if (error || bytes <= 0) {
      state = "waiting";
      retry = setTimeout(start, busyRetryMs);
      retry.unref();
      return;
    }
    atLineStart = current[bytes - 1] === newline;
    newlineFirst = false;
    const report = dropped > 0 ? { dropped, reason } : undefined;
    dropped = 0;
    chunk = current.subarray(bytes);
    if (chunk.length > 0) start();
    else {
      chunk = undefined;
      state = "idle";
      writeNext();
    }
    if (report) onRecovered?.(report.dropped, report.reason);
  }

  return {
    write(line) {
      const bytes = Buffer.byteLength(line);
      if (heldBytes + bytes > maxHeldBytes) {
        drop(1, dropped > 0 ? reason : "backlog");
        return;
      }
      held.push(line);
      heldBytes += bytes;
      writeNext();
    },
    flushSync() {
      // A chunk under way in the background is left to it; one waiting out EAGAIN is written here.
      let rest: Buffer = Buffer.alloc(0);
      let prefixed = false;
      if (state === "waiting" && chunk) {
        clearTimeout(retry);
        rest = chunk;
        prefixed = newlineFirst;
        chunk = undefined;
        state = "idle";
      }
      if (held.length > 0) {
        const text = held.join("");
        // After a line cut short (not while its end may still be under way in the background).
        const cut = !atLineStart && rest.length === 0 && state === "idle";
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
