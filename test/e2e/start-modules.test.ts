import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { spawnGateway } from "../support/spawned-gateway.js";

const repository = join(import.meta.dirname, "../..");

/**
 * Loading a package costs start-up time (docs/decisions/0005): the embedded default (SQLite, no
 * Redis) answers /health without the packages only some calls need. Each is loaded on first use.
 */
const loadedOnFirstUse = [
  "ai",
  "@ai-sdk/openai",
  "@ai-sdk/anthropic",
  "@ai-sdk/google",
  "pg",
  "ioredis",
  // Output schemas of structured calls.
  "ajv",
];

/** A start of `entry` with the preload that records what it loads: package names and own files. */
async function loadedBy(entry?: string): Promise<{ packages: string[]; files: string[] }> {
  const gateway = await spawnGateway({
    imports: ["./test/support/loaded-packages.ts"],
    ...(entry && { entry }),
  });
  gateway.child.kill("SIGTERM");
  await gateway.exit;
  await gateway.remove();
  const line = (name: string) =>
    JSON.parse(new RegExp(`loaded ${name}: (\\[.*\\])`).exec(gateway.output())?.[1] ?? "null") as string[];
  return { packages: line("packages"), files: line("files") };
}

describe("start-up", () => {
  it("answers /health on the embedded default without loading what only some calls need", {
    timeout: 30_000,
  }, async () => {
    const { packages } = await loadedBy();
    // Both kinds of module are seen: better-sqlite3 is loaded as CommonJS, zod as an ES module.
    expect(packages).toEqual(expect.arrayContaining(["better-sqlite3", "zod"]));
    expect(packages.filter((name) => loadedOnFirstUse.includes(name))).toEqual([]);
  });

  describe("of the production build (one bundle, decision 0017)", () => {
    const build = mkdtempSync(join(tmpdir(), "sluice-start-modules-"));
    // The bundle finds its external packages (better-sqlite3) from where it lies.
    symlinkSync(join(repository, "node_modules"), join(build, "node_modules"));
    afterAll(() => rmSync(build, { recursive: true, force: true }));

    it("answers /health without loading a chunk that holds what only some calls need", {
      timeout: 60_000,
    }, async () => {
      execFileSync(process.execPath, ["--import", "tsx", "scripts/build.ts", build], { cwd: repository });
      const { packages, files } = await loadedBy(join(build, "src/main.js"));
      // The packages bundled into each output file, from esbuild's metafile (paths from the checkout).
      const { outputs } = JSON.parse(readFileSync(join(build, "meta.json"), "utf8")) as {
        outputs: Record<string, { inputs: Record<string, unknown> }>;
      };
      const bundled = new Map(
        Object.entries(outputs).map(([output, { inputs }]) => [
          resolve(repository, output),
          new Set(
            Object.keys(inputs).map((input) => /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(input)?.[1]),
          ),
        ]),
      );
      const chunks = files.filter((file) => file.startsWith(build));
      const loaded = new Set([...packages, ...chunks.flatMap((chunk) => [...(bundled.get(chunk) ?? [])])]);
      // The chunks are seen, and what they hold: zod is bundled into one that a start loads.
      expect(chunks).toContain(join(build, "src/main.js"));
      expect(loaded).toContain("zod");
      // What only some calls need is in the build, in chunks of its own (Ajv is required at run time).
      const inBuild = new Set([...bundled.values()].flatMap((names) => [...names]));
      expect(loadedOnFirstUse.filter((name) => !inBuild.has(name))).toEqual(["ajv"]);
      expect(loadedOnFirstUse.filter((name) => loaded.has(name))).toEqual([]);
    });
  });
});
