import { describe, expect, it } from "vitest";
import type { Config } from "./config.js";
import { productionWarnings } from "./production-warnings.js";

const projects = (...inTestMode: boolean[]) => ({
  idsInTestMode: async () => inTestMode.flatMap((testMode, index) => (testMode ? [`p${index}`] : [])),
});
const production: Pick<Config, "environment" | "tlsCert" | "trustProxy"> = {
  environment: "production",
  tlsCert: undefined,
  trustProxy: undefined,
};
const messages = async (config: typeof production, list = projects()) =>
  (await productionWarnings(config, list)).map((warning) => warning.message);

describe("the warnings of a production start", () => {
  it("says once that calls must use HTTPS, and how, when neither TLS nor a trusted proxy is set", async () => {
    const said = await messages(production);
    expect(said).toHaveLength(1);
    expect(said[0]).toMatch(/^Calls must use HTTPS .* serves plain HTTP and trusts no proxy: /);
    expect(said[0]).toContain("SLUICE_TLS_CERT and SLUICE_TLS_KEY");
    expect(said[0]).toContain("SLUICE_TRUST_PROXY");
  });

  it("says nothing of HTTPS when TLS or a trusted proxy is set", async () => {
    expect(await messages({ ...production, tlsCert: "/etc/sluice/cert.pem" })).toEqual([]);
    expect(await messages({ ...production, trustProxy: ["10.0.0.0/8"] })).toEqual([]);
  });

  it("names the projects still in Test Mode, in one warning", async () => {
    const warnings = await productionWarnings(
      { ...production, trustProxy: ["10.0.0.1"] },
      projects(true, false, true),
    );
    expect(warnings).toHaveLength(1);
    expect(warnings[0]?.fields).toEqual({ projectIds: ["p0", "p2"] });
    expect(warnings[0]?.message).toMatch(
      /^Projects still in Test Mode, whose test keys production refuses: p0, p2\./,
    );
  });

  it.each(["development", "test"] as const)("warns of nothing in %s", async (environment) => {
    expect(await messages({ ...production, environment }, projects(true))).toEqual([]);
  });
});
