/**
 * Preloaded into a spawned gateway (`--import`): a bug outside any request, on demand. SIGUSR2
 * throws from a timer (an uncaught exception), SIGHUP rejects a promise nobody handles.
 */
process.on("SIGUSR2", () => {
  setImmediate(() => {
    throw new Error("a bug outside any request");
  });
});
process.on("SIGHUP", () => {
  void Promise.reject(new Error("a rejection nobody handles"));
});
