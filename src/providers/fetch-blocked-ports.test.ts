import { describe, expect, it } from "vitest";
import { fetchBlockedPortWarnings } from "./fetch-blocked-ports.js";

describe("fetch-blocked port warnings", () => {
  it("names each provider base URL on a port fetch refuses, and no other", () => {
    const warnings = fetchBlockedPortWarnings({
      providerABaseUrl: "http://127.0.0.1:6000/v1",
      providerBBaseUrl: "https://api.anthropic.com/v1",
      providerCBaseUrl: "http://localhost:8080/v1beta",
    });
    expect(warnings).toEqual([
      {
        fields: { setting: "SLUICE_PROVIDER_A_BASE_URL", port: 6000 },
        message: expect.stringContaining("SLUICE_PROVIDER_A_BASE_URL uses port 6000, which fetch refuses"),
      },
    ]);
  });

  it("is what undici's fetch refuses", async () => {
    const { fetch } = await import("undici");
    const failure = await fetch("http://127.0.0.1:6000/").catch((error: Error) => error);
    expect(String((failure as Error).cause)).toContain("bad port");
  });
});
