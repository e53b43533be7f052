/**
 * Preloaded into a spawned gateway (`--import`): a bug outside any request, on demand. SIGUSR2
 * throws from a timer (an uncaught exception), SIGWINCH rejects a promise nobody handles (neither
 * signal is one the gateway handles itself).
 */
process.on("SIGUSR2", () => {
  setImmediate(() => {
    throw new Error("a bug outside any request");
  });
});
process.on("SIGWINCH", () => {
  void Promise.reject(new Error("a rejection nobody handles"));
});
