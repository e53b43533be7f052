import { constants as osConstants } from "node:os";

/** The signals that stop the gateway: the shutdown once it serves, the exit while it starts. */
const stopSignals = ["SIGTERM", "SIGINT", "SIGHUP"] as const;

/**
 * Until the gateway listens, a stop signal ends the process at once, as Node's default would, with
 * the exit code a shell gives a process killed by it (128 + its number), but first says so on
 * stderr: a start stopped while it waited (on a PostgreSQL that does not answer, a migration's lock)
 * otherwise left no line at all. Nothing was served and no usage row exists; a migration under way
 * is rolled back by the database (PostgreSQL when the connection drops, SQLite by its journal).
 * Returns the function that takes the handlers away again.
 *
 * A module of its own, loaded before the rest of Sluice: the entry points that load through tsx
 * (src/dev-main.ts for `npm run dev`, `sluice serve`) install it before they import the server,
 * whose modules take seconds to load on a cold start, and take it away once `serve()` has installed
 * its own. The production build's `npm start` imports the server statically (src/main.ts).
 */
export function stopOnSignalWhileStarting(): () => void {
  const onSignal = (signal: NodeJS.Signals) => {
    process.stderr.write(
      `sluice stopped by ${signal} while starting, before it listened: nothing was served\n`,
    );
    process.exit(128 + osConstants.signals[signal]);
  };
  for (const signal of stopSignals) process.on(signal, onSignal);
  return () => {
    for (const signal of stopSignals) process.off(signal, onSignal);
  };
}
