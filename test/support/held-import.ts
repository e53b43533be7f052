/**
 * Preloaded into a spawned process (`--import`, after tsx): a module graph that takes as long to
 * load as the test likes. The first module whose URL matches `SLUICE_TEST_HELD_IMPORT` (a regular
 * expression) is resolved but never handed back, so the import that asked for it (and, for a
 * static import, the whole graph around it) never finishes; `held <url>` is written on file
 * descriptor 3 as it is held, so the test knows where the process is (the process must be spawned
 * with a pipe there).
 */
import { register } from "node:module";

const hooks = `import { writeSync } from "node:fs";
let pattern;
let held = false;
export function initialize(data) { pattern = new RegExp(data.pattern); }
export async function resolve(specifier, context, next) {
  const resolved = await next(specifier, context);
  if (held || !pattern.test(resolved.url)) return resolved;
  held = true;
  writeSync(3, "held " + resolved.url + "\\n");
  return new Promise(() => {});
}`;
const pattern = process.env.SLUICE_TEST_HELD_IMPORT;
if (!pattern) throw new Error("SLUICE_TEST_HELD_IMPORT is not set");
register(`data:text/javascript,${encodeURIComponent(hooks)}`, { data: { pattern } });
