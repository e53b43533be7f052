/**
 * Preloaded into a spawned gateway (`--import`, after tsx): stdout in blocking mode, as
 * `node dist/src/main.js` finds a shell's or Docker's pipe. tsx has already made it non-blocking
 * (libuv opens a pipe that way when `process.stdout` is first created), which would hide what a
 * full pipe does to the built gateway.
 */
const stdout = process.stdout as unknown as { _handle?: { setBlocking?(blocking: boolean): number } };
stdout._handle?.setBlocking?.(true);
