import { fstatSync } from "node:fs";

/** The libuv stream under Node's stdout or stderr when it is a pipe or a socket. */
type StreamHandle = { setBlocking?(blocking: boolean): number };

/**
 * Puts stdout and stderr in non-blocking mode when they are pipes or sockets (a shell pipeline,
 * Docker's log pipes, journald's socket), so that no write to them waits for their reader: a full
 * pipe answers EAGAIN, which the log's destination, writing on the main thread, waits out with a
 * timer or drops (decision 0011). In blocking mode, a write to a pipe nobody empties never
 * returns: on the main thread it blocks the event loop, timers included; in libuv's thread pool
 * (`fs.write`, a dependency's) it holds its thread, and with it the process's exit, which joins
 * the pool's threads. Node's own stream for such a
 * descriptor (`process.stdout`, `process.stderr`) is opened non-blocking by libuv (and Node puts
 * the mode back at exit), but only once something creates it, and whatever ran before may have
 * made it blocking: the mode is set here. Files and terminals are left as they are.
 */
export function makeStdioNonBlocking(): void {
  if (isPipeOrSocket(1)) setNonBlocking(process.stdout);
  if (isPipeOrSocket(2)) setNonBlocking(process.stderr);
}

function isPipeOrSocket(fd: number): boolean {
  try {
    const stats = fstatSync(fd);
    return stats.isFIFO() || stats.isSocket();
  } catch {
    // Closed: nothing to write to.
    return false;
  }
}

function setNonBlocking(stream: NodeJS.WriteStream): void {
  (stream as unknown as { _handle?: StreamHandle })._handle?.setBlocking?.(false);
}
