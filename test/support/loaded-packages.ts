/**
 * Preloaded into a spawned gateway (`--import`, after tsx): records every npm package the process
 * loads, CommonJS (Node's require cache) and ES modules (a resolve hook), and writes their names to
 * stderr as it exits, on one line: `loaded packages: {"required":["better-sqlite3",…],"imported":[…]}`
 * (a package imported from an ES module is in both when it is CommonJS), and every file it loaded
 * outside node_modules on the next: `loaded files: ["/…/dist/src/main.js",…]` (a bundle's chunks,
 * whose packages its metafile names).
 */
import { writeSync } from "node:fs";
import { createRequire, register } from "node:module";
import { fileURLToPath } from "node:url";
import { MessageChannel } from "node:worker_threads";

const hooks = `let port;
export function initialize(data) { port = data.port; }
export async function resolve(specifier, context, next) {
  const resolved = await next(specifier, context);
  port.postMessage(resolved.url);
  return resolved;
}`;
const { port1, port2 } = new MessageChannel();
const resolved: string[] = [];
port1.on("message", (url: string) => resolved.push(url));
port1.unref();
register(`data:text/javascript,${encodeURIComponent(hooks)}`, {
  data: { port: port2 },
  transferList: [port2],
});

/** The package a file belongs to: what follows its last `node_modules/`. */
function packageOf(file: string): string | undefined {
  return /.*\/node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(file)?.[1];
}

/** The packages `files` belong to, each once, sorted. */
function packagesOf(files: string[]): string[] {
  return [...new Set(files.map(packageOf).filter((name) => name !== undefined))].sort();
}

process.on("exit", () => {
  const requiredFiles = Object.keys(createRequire(import.meta.url).cache);
  const importedFiles = resolved.filter((url) => url.startsWith("file:")).map((url) => fileURLToPath(url));
  const required = packagesOf(requiredFiles);
  writeSync(2, `\nloaded packages: ${JSON.stringify({ required, imported: packagesOf(importedFiles) })}\n`);
  const own = new Set([...requiredFiles, ...importedFiles].filter((file) => packageOf(file) === undefined));
  writeSync(2, `loaded files: ${JSON.stringify([...own].sort())}\n`);
});
