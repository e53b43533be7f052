import { mkdirSync, statSync } from "node:fs";
import { dirname } from "node:path";

/**
 * `mkdirSync(path, { recursive: true, mode })`, one level at a time: Node's recursive mkdir loops
 * forever where mkdir answers ENOENT though the parent exists (under /proc, which makes no
 * directory), so a data dir there hung the start. Here that ENOENT is thrown as it is. A directory
 * already there is kept; a file there is EEXIST, as with Node's.
 */
export function makeDirectorySync(path: string, mode: number): void {
  try {
    mkdirSync(path, { mode });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "EEXIST") {
      if (statSync(path).isDirectory()) return;
      throw error;
    }
    const parent = dirname(path);
    if (code !== "ENOENT" || parent === path) throw error;
    makeDirectorySync(parent, mode);
    // Once more, now that the parent exists: an ENOENT now is the file system's refusal.
    try {
      mkdirSync(path, { mode });
    } catch (again) {
      if ((again as NodeJS.ErrnoException).code !== "EEXIST" || !statSync(path).isDirectory()) throw again;
    }
  }
}
