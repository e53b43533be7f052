/**
 * Preloaded into a spawned gateway (`--import`, after tsx): records every npm package the process
 * loads, CommonJS (Node's require cache) and ES modules (a resolve hook), and writes their names to
 * stderr as it exits, on one line: `loaded packages: {"required":["better-sqlite3",…],"imported":[…]}`
 * (a package imported from an ES module is in both when it is CommonJS).
 */
import { writeSync } from "node:fs";
import { createRequire, register } from "node:module";
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
  const required = packagesOf(Object.keys(createRequire(import.meta.url).cache));
  writeSync(2, `\nloaded packages: ${JSON.stringify({ required, imported: packagesOf(resolved) })}\n`);
});
