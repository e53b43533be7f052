import { spawn } from "node:child_process";
import { once } from "node:events";
import { createRequire } from "node:module";

const betterSqlite3 = createRequire(import.meta.url).resolve("better-sqlite3");

/**
 * Takes the write lock of the SQLite file given as the first argument (`BEGIN IMMEDIATE`, as a
 * `sqlite3` shell or a script would), says `locked`, and commits after the second argument's
 * milliseconds: its own process, so its timer runs whatever the test's event loop is doing.
 */
const holder = `
const Database = require(${JSON.stringify(betterSqlite3)});
const database = new Database(process.argv[1]);
database.exec("begin immediate");
process.stdout.write("locked\\n");
setTimeout(() => {
  database.exec("commit");
  database.close();
}, Number(process.argv[2]));
`;

/** Another process holding `file`'s write lock for `ms`: settled once it holds it; `released` once it let go. */
export async function holdWriteLock(file: string, ms: number): Promise<{ released: Promise<unknown> }> {
  const child = spawn(process.execPath, ["-e", holder, file, String(ms)], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const released = once(child, "close");
  const stdout = child.stdout;
  await Promise.race([
    once(stdout, "data"),
    released.then(() => Promise.reject(new Error("the lock holder exited"))),
  ]);
  return { released };
}

/**
 * Measures the event loop while it runs: the longest stretch between two turns of a 1 ms timer
 * (how long every request waited at worst), and how many turns there were.
 */
export function eventLoopMeter(): { stop(): { longestGapMs: number; turns: number } } {
  let last = performance.now();
  let longestGapMs = 0;
  let turns = 0;
  const timer = setInterval(() => {
    const now = performance.now();
    longestGapMs = Math.max(longestGapMs, now - last);
    last = now;
    turns++;
  }, 1);
  return {
    stop() {
      clearInterval(timer);
      return { longestGapMs: Math.max(longestGapMs, performance.now() - last), turns };
    },
  };
}
