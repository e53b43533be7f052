import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadedOnFirstUse } from "../support/first-use-packages.js";
import { redisAvailable, redisUrl } from "../support/services.js";
import { spawnGateway } from "../support/spawned-gateway.js";

const repository = join(import.meta.dirname, "../..");

/** The package a file in node_modules belongs to. */
function packageOf(file: string): string | undefined {
  return /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(file)?.[1];
}

/**
 * The production build, `npm run build` (scripts/build.ts): one bundle whose chunks a start loads
 * or not (docs/decisions/0017). Built here into a directory of its own, beside a link to
 * node_modules where it finds its external packages (better-sqlite3).
 */
describe("the production build", () => {
  const build = mkdtempSync(join(tmpdir(), "sluice-build-"));
  const main = join(build, "src/main.js");
  /** Output file → the packages esbuild bundled into it (from its metafile). */
  let bundled: Map<string, Set<string | undefined>>;

  beforeAll(() => {
    symlinkSync(join(repository, "node_modules"), join(build, "node_modules"));
    execFileSync(process.execPath, ["--import", "tsx", "scripts/build.ts", build], { cwd: repository });
    const { outputs } = JSON.parse(readFileSync(join(build, "meta.json"), "utf8")) as {
      outputs: Record<string, { inputs: Record<string, unknown> }>;
    };
    bundled = new Map(
      Object.entries(outputs).map(([output, { inputs }]) => [
        resolve(repository, output),
        new Set(Object.keys(inputs).map(packageOf)),
      ]),
    );
  }, 60_000);
  afterAll(() => rmSync(build, { recursive: true, force: true }));

  /** A start of the build with `imports` preloaded: its output once it answered /health and stopped. */
  async function outputOfStart(options: {
    imports: string[];
    tsx?: boolean;
    env?: Record<string, string>;
  }): Promise<string> {
    const gateway = await spawnGateway({ ...options, entry: main });
    gateway.child.kill("SIGTERM");
    await gateway.exit;
    await gateway.remove();
    return gateway.output();
  }

  it("answers /health without loading a chunk that holds what only some calls need", {
    timeout: 30_000,
  }, async () => {
    const output = await outputOfStart({ imports: ["./test/support/loaded-packages.ts"] });
    const files = JSON.parse(/loaded files: (\[.*\])/.exec(output)?.[1] ?? "null") as string[];
    const packages = JSON.parse(/loaded packages: (\{.*\})/.exec(output)?.[1] ?? "null") as Record<
      string,
      string[]
    >;
    const chunks = files.filter((file) => file.startsWith(build));
    const loaded = new Set([
      ...(packages.required ?? []),
      ...(packages.imported ?? []),
      ...chunks.flatMap((chunk) => [...(bundled.get(chunk) ?? [])]),
    ]);
    // The chunks are seen, and what they hold: find-my-way is bundled into one that a start loads.
    expect(chunks).toContain(main);
    expect(loaded).toContain("find-my-way");
    // What only some calls need is in the build, in chunks of their own (Ajv is required at run time).
    const inBuild = new Set([...bundled.values()].flatMap((names) => [...names]));
    expect(loadedOnFirstUse.filter((name) => !inBuild.has(name))).toEqual(["ajv"]);
    expect(loadedOnFirstUse.filter((name) => loaded.has(name))).toEqual([]);
  });

  it.skipIf(!redisAvailable)(
    "starts on Redis: ioredis, imported on first use from a chunk of its own, is whole there",
    {
      timeout: 30_000,
    },
    async () => {
      // As `npm start` runs it (no tsx). A package of CommonJS imported with import() comes out of
      // its chunk as a default export alone: a named export read from it is undefined there.
      const gateway = await spawnGateway({
        entry: main,
        tsx: false,
        env: {
          REDIS_URL: redisUrl,
          SLUICE_REDIS_KEY_PREFIX: `sluice-test:build:${randomBytes(6).toString("hex")}:`,
        },
      });
      try {
        const health = (await (await fetch(`${gateway.url}/health`)).json()) as {
          checks: { redis?: { status: string } };
        };
        expect(health.checks.redis?.status).toBe("ok");
      } finally {
        gateway.child.kill("SIGTERM");
        await gateway.exit;
        await gateway.remove();
      }
    },
  );

  it("maps stack traces to the TypeScript sources under --enable-source-maps, and reads no map without", {
    timeout: 30_000,
  }, async () => {
    // Without tsx, which turns source maps on itself: what Node holds for the chunk with forward().
    const chunk = [...bundled.keys()].find(
      (output) =>
        output.endsWith(".js") && readFileSync(output, "utf8").includes("\n// src/proxy/forward.ts\n"),
    );
    expect(chunk).toBeDefined();
    const preload = `import { findSourceMap } from "node:module"; import { writeSync } from "node:fs";
      import { pathToFileURL } from "node:url";
      process.on("exit", () => writeSync(2, "\\nsources: " + JSON.stringify(
        findSourceMap(pathToFileURL(${JSON.stringify(chunk)}).href)?.payload.sources ?? null) + "\\n"));`;
    const sourcesOfStart = async (nodeOptions: string) => {
      const output = await outputOfStart({
        imports: [`data:text/javascript,${encodeURIComponent(preload)}`],
        tsx: false,
        env: { NODE_OPTIONS: nodeOptions },
      });
      const sources = JSON.parse(/sources: (.*)/.exec(output)?.[1] ?? "null") as string[] | null;
      // As the map names them, or as Node resolved them (file: URLs).
      return sources?.map((source) =>
        source.startsWith("file:") ? fileURLToPath(source) : resolve(dirname(chunk as string), source),
      );
    };
    expect(await sourcesOfStart("--enable-source-maps")).toContain(join(repository, "src/proxy/forward.ts"));
    // The default start pays for no map: reading them costs ~60 ms, and ~25 MiB once a stack is
    // formatted (decision 0017).
    expect(await sourcesOfStart("")).toBeUndefined();
  });
});
