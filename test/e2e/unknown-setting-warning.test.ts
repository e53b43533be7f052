import { afterEach, describe, expect, it } from "vitest";
import { type SpawnedGateway, spawnGateway } from "../support/spawned-gateway.js";

let gateway: SpawnedGateway | undefined;
afterEach(async () => {
  await gateway?.remove();
  gateway = undefined;
});

describe("a misspelt setting", () => {
  it("is named at start, before the listening line, with the setting meant and never its value", async () => {
    gateway = await spawnGateway({ env: { SLUICE_ADMN_TOKEN: "misspelt-token-0123456789abcdef" } });
    const lines = gateway
      .output()
      .split("\n")
      .filter((line) => line.startsWith("{"))
      .map((line) => JSON.parse(line) as { msg: string; setting?: string; nearest?: string });
    const warning = lines.findIndex((line) => line.setting === "SLUICE_ADMN_TOKEN");
    expect(lines[warning]).toMatchObject({ nearest: "SLUICE_ADMIN_TOKEN" });
    expect(warning).toBeLessThan(lines.findIndex((line) => line.msg.startsWith("sluice listening on")));
    expect(gateway.output()).not.toContain("misspelt-token-0123456789abcdef");
  });
});
