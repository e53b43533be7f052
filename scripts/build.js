/**
 * `npm run build`: the production build, bundled by esbuild (docs/decisions/0017). Two entries,
 * `dist/src/main.js` (npm start) and `dist/src/cli/main.js` (bin/sluice.js), over shared chunks in
 * `dist/src/chunks/`; what Sluice imports on first use (`import()`: the AI SDK, pg, ioredis, the
 * server in the CLI) lands in chunks of its own, loaded when imported. Type checking stays with
 * `npm run typecheck` (`tsc --noEmit`): esbuild only strips the types.
 *
 * Also written: `dist/package.json` (its files are ES modules), `dist/src/sources.json` (the
 * source files the build was made from: bin/sluice.js runs the source instead while one changed
 * or was added since) and `dist/meta.json`, esbuild's metafile (which input went into which output
 * file; `test/e2e/production-build.test.ts` reads it).
 *
 * `node scripts/build.js [outdir]` builds into `outdir` (default `dist`). The bundle finds its
 * external packages in a node_modules beside or above it: inside the checkout, or beside a link.
 *
 * JavaScript, type-checked from its JSDoc (tsconfig's `checkJs`), run by Node without tsx, as
 * bin/sluice.js is: tsx's loader transforms a TypeScript script through an esbuild service of its
 * own, in a thread of its own, which it neither stops nor waits for, so it outlived the script
 * whenever tsx's cache (in the temporary directory, empty in a new container) missed; see
 * `spawned` below for what that leaves behind.
 */
import { subscribe } from "node:diagnostics_channel";
import { once } from "node:events";
import { mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { join, relative, resolve } from "node:path";
import { build, stop, transform } from "esbuild";

/**
 * The child processes this script spawns: esbuild's service, which its JS API starts on first use
 * and leaves running, unreferenced, for later calls. Node heard nothing of its end as the script
 * exited (it may not have ended yet), so it went to init still unreaped: under `npm start` as a
 * container's command, npm is PID 1, waits only for its own child, and kept an `[esbuild]
 * <defunct>` beside the gateway for as long as it ran. `stopEsbuild` stops it and waits for it.
 */
/** @type {import("node:child_process").ChildProcess[]} */
const spawned = [];
subscribe("child_process", (message) => {
  spawned.push(/** @type {{ process: import("node:child_process").ChildProcess }} */ (message).process);
});

/**
 * Stops esbuild's service and waits until Node has reaped it (its `exit`).
 * @returns {Promise<void>}
 */
async function stopEsbuild() {
  await stop();
  const running = spawned.filter((child) => child.exitCode === null && child.signalCode === null);
  await Promise.all(
    running.map((child) => {
      // Unreferenced by esbuild: referenced again, so the script waits for its exit.
      child.ref();
      return once(child, "exit");
    }),
  );
}

const root = join(import.meta.dirname, "..");
const outdir = resolve(root, process.argv[2] ?? "dist");

/**
 * Left to Node's own loaders: better-sqlite3 loads its native addon from a path its `bindings`
 * package finds beside its own files; pg-native is pg's optional native driver, not installed.
 */
const external = ["better-sqlite3", "pg-native"];

/**
 * Bundled CommonJS packages call `require`, and some read `__dirname` and `__filename`, which an ES
 * module does not have: each output file defines them for itself, from its own URL.
 */
const banner = [
  'import { createRequire as __sluiceCreateRequire } from "node:module";',
  'import { dirname as __sluiceDirname } from "node:path";',
  'import { fileURLToPath as __sluiceFileURLToPath } from "node:url";',
  "const require = __sluiceCreateRequire(import.meta.url);",
  "const __filename = __sluiceFileURLToPath(import.meta.url);",
  "const __dirname = __sluiceDirname(__filename);",
].join(" ");

/**
 * `src/storage/kysely.ts` takes Kysely from its CommonJS build through `createRequire`, which Node
 * 20 loads faster than its 265 ES modules (decision 0005) but which a bundler cannot follow: the
 * bundle takes the same values from Kysely's ES module build instead, bundled and tree-shaken.
 * The file's exports are checked against this list, so an export added there fails the build
 * rather than coming out undefined.
 */
const kyselyValues = ["Kysely", "Migrator", "PostgresAdapter", "PostgresDialect", "SqliteDialect", "sql"];
/** @type {import("esbuild").Plugin} */
const kyselyFromEsm = {
  name: "kysely-from-esm",
  setup(build) {
    build.onLoad({ filter: /[\\/]src[\\/]storage[\\/]kysely\.ts$/ }, async ({ path }) => {
      const source = await readFile(path, "utf8");
      const exported = [...source.matchAll(/^export const (?:\{ ([^}]*) \}|(\w+)) =/gm)].flatMap((match) =>
        (match[1] ?? match[2] ?? "").split(",").map((name) => name.trim()),
      );
      if (exported.sort().join() !== [...kyselyValues].sort().join())
        return {
          errors: [{ text: `exports ${exported.join(", ")}; the build expects ${kyselyValues.join(", ")}` }],
        };
      return { contents: `export { ${kyselyValues.join(", ")} } from "kysely";`, loader: "js" };
    });
  },
};

/**
 * ASCII stand-ins for the characters the bundled comments hold (’ in undici's, … and — in
 * Sluice's and the packages'), each one character for one, so no column moves under the maps.
 * @type {Record<string, string>}
 */
const asciiFor = {
  "\u2018": "'",
  "\u2019": "'",
  "\u201c": '"',
  "\u201d": '"',
  "\u2013": "-",
  "\u2014": "-",
  "\u2026": ".",
  "\u00a0": " ",
};

/**
 * Rewrites a non-ASCII character in an output file to ASCII. V8 holds a script's source for the
 * script's life, one byte a character while every character is Latin-1 and two bytes otherwise:
 * the ’ of a comment in undici made the 2 MB chunk every start loads 4 MiB of the gateway's heap
 * (docs/decisions/0005, "RSS after load"). esbuild escapes every non-ASCII character of strings,
 * templates, regular expressions and names (its default `charset`), so what is left is in
 * comments, which it keeps; that is checked, not assumed: the file without its comments must read
 * the same before and after. A character outside the BMP takes two stand-ins, as it takes two
 * UTF-16 units.
 * @param {string} file
 */
async function asciiOnly(file) {
  const text = await readFile(file, "utf8");
  if (!/[\u{80}-\u{10ffff}]/u.test(text)) return;
  const ascii = text.replace(/[\u{80}-\u{10ffff}]/gu, (character) =>
    (asciiFor[character] ?? "?").padEnd(character.length, "?"),
  );
  /** @param {string} code */
  const withoutComments = async (code) =>
    (await transform(code, { minifyWhitespace: true, legalComments: "none", charset: "utf8" })).code;
  if ((await withoutComments(text)) !== (await withoutComments(ascii)))
    throw new Error(`${file}: a character outside ASCII is not in a comment`);
  writeFileSync(file, ascii);
}

/**
 * Every source file of the build (not tests, not declarations), relative to the checkout.
 * @param {string} directory
 * @returns {string[]}
 */
function sourceFiles(directory) {
  return readdirSync(directory, { withFileTypes: true }).flatMap((entry) => {
    const path = join(directory, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return /(?<!\.test|\.d)\.ts$/.test(entry.name) ? [relative(root, path)] : [];
  });
}

// What an earlier build left (a tsc build's file per module, older chunks) goes first.
if (!relative(outdir, root).startsWith(".."))
  throw new Error(`${outdir} holds the checkout: build into a directory of its own`);
rmSync(join(outdir, "src"), { recursive: true, force: true });
const sources = sourceFiles(join(root, "src")).sort();
/** @type {import("esbuild").BuildResult<{ metafile: true }>} */
let result;
try {
  result = await build({
    absWorkingDir: root,
    entryPoints: ["src/main.ts", "src/cli/main.ts"],
    outbase: "src",
    outdir: join(outdir, "src"),
    chunkNames: "chunks/[name]-[hash]",
    bundle: true,
    splitting: true,
    format: "esm",
    platform: "node",
    target: "node20.19",
    external,
    banner: { js: banner },
    plugins: [kyselyFromEsm],
    // `node --enable-source-maps` (NODE_OPTIONS) has stack traces name src/*.ts lines; npm start
    // runs without (decision 0017). The maps point at the sources in the checkout, not carry them.
    sourcemap: "linked",
    sourcesContent: false,
    metafile: true,
    logLevel: "warning",
  });
  await Promise.all(
    Object.keys(result.metafile.outputs)
      .filter((output) => output.endsWith(".js"))
      .map((output) => asciiOnly(resolve(root, output))),
  );
} finally {
  await stopEsbuild();
}
mkdirSync(outdir, { recursive: true });
writeFileSync(join(outdir, "meta.json"), JSON.stringify(result.metafile));
// The build's files are ES modules wherever it lies, as in a directory without Sluice's package.json.
writeFileSync(join(outdir, "package.json"), '{ "type": "module" }\n');
// Written last: bin/sluice.js takes its time as the build's.
writeFileSync(join(outdir, "src", "sources.json"), `${JSON.stringify(sources, null, 2)}\n`);
