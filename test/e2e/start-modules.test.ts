import { describe, expect, it } from "vitest";
import { loadedOnFirstUse } from "../support/first-use-packages.js";
import { spawnGateway } from "../support/spawned-gateway.js";

/**
 * Loading a package costs start-up time (docs/decisions/0005): the embedded default (SQLite, no
 * Redis) answers /health without the packages only some calls need. Each is loaded on first use.
 */
describe("start-up", () => {
  it("answers /health on the embedded default without loading what only some calls need", {
    timeout: 30_000,
  }, async () => {
    const gateway = await spawnGateway({ imports: ["./test/support/loaded-packages.ts"] });
    gateway.child.kill("SIGTERM");
    await gateway.exit;
    await gateway.remove();
    const line = /loaded packages: (\{.*\})/.exec(gateway.output());
    const { required, imported } = JSON.parse(line?.[1] ?? "null") as Record<string, string[]>;
    // Both records see what they should: sonic-boom is required by pino alone, which Sluice's ES
    // modules import (as they would the AI SDK or zod).
    expect(required).toContain("sonic-boom");
    expect(imported).not.toContain("sonic-boom");
    expect(imported).toContain("pino");
    const loaded = [...new Set([...(required ?? []), ...(imported ?? [])])];
    expect(loaded.filter((name) => loadedOnFirstUse.includes(name))).toEqual([]);
  });
});
