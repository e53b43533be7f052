import { describe, expect, it } from "vitest";
import { spawnGateway } from "../support/spawned-gateway.js";

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

describe("start-up", () => {
  it("answers /health on the embedded default without loading what only some calls need", {
    timeout: 30_000,
  }, async () => {
    const gateway = await spawnGateway({ imports: ["./test/support/loaded-packages.ts"] });
    gateway.child.kill("SIGTERM");
    await gateway.exit;
    await gateway.remove();
    const line = /loaded packages: (\[.*\])/.exec(gateway.output());
    const loaded = JSON.parse(line?.[1] ?? "null") as string[];
    // Both kinds of module are seen: better-sqlite3 is loaded as CommonJS, zod as an ES module.
    expect(loaded).toEqual(expect.arrayContaining(["better-sqlite3", "zod"]));
    expect(loaded.filter((name) => loadedOnFirstUse.includes(name))).toEqual([]);
  });
});
