#!/usr/bin/env node
// The `sluice` command: runs the compiled CLI (npm run build) or, in a checkout, the TypeScript source through tsx.
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const compiled = join(root, "dist", "src", "cli", "main.js");
let cli;
if (existsSync(compiled)) {
  cli = await import(pathToFileURL(compiled).href);
} else {
  const { register } = await import("tsx/esm/api");
  register();
  cli = await import(pathToFileURL(join(root, "src", "cli", "main.ts")).href);
}
const code = await cli.runCli(process.argv.slice(2));
if (code >= 0) process.exit(code);
