import { describe, expect, it } from "vitest";
import { loadConfig } from "./config.js";
import { imageModelWarnings } from "./image-model-warnings.js";

const day = (iso: string) => new Date(`${iso}T12:00:00Z`);

describe("the default image models", () => {
  it("are SPEC's first models unless configured; a model name of another kind or provider is refused at start", () => {
    const defaults = loadConfig({});
    expect(defaults.providerAImageModel).toBe("gpt-image-1");
    expect(defaults.providerCImageModel).toBe("imagen-4.0-generate-001");
    const configured = loadConfig({
      SLUICE_PROVIDER_A_IMAGE_MODEL: "gpt-image-2.6-sunburst",
      SLUICE_PROVIDER_C_IMAGE_MODEL: "gemini-image-9-unlisted",
    });
    expect(configured.providerAImageModel).toBe("gpt-image-2.6-sunburst");
    // A model no catalogue lists is trusted, as the request's and the project's are.
    expect(configured.providerCImageModel).toBe("gemini-image-9-unlisted");
    for (const [name, value] of [
      ["SLUICE_PROVIDER_A_IMAGE_MODEL", "gpt-5.4-mini"],
      ["SLUICE_PROVIDER_A_IMAGE_MODEL", "gemini-nano-banana-2.1"],
      ["SLUICE_PROVIDER_C_IMAGE_MODEL", "gpt-image-2"],
      ["SLUICE_PROVIDER_C_IMAGE_MODEL", "a/../b"],
    ] as const)
      expect(() => loadConfig({ [name]: value }), `${name}=${value}`).toThrow(name);
  });

  it("warn at start about a default its provider has shut down, naming the setting and the replacement", () => {
    const warnings = imageModelWarnings(loadConfig({}), day("2026-11-27"));
    expect(warnings.map((warning) => warning.fields)).toEqual([
      {
        provider: "provider-a",
        model: "gpt-image-1",
        shutdown: "2026-10-23",
        setting: "SLUICE_PROVIDER_A_IMAGE_MODEL",
      },
      {
        provider: "provider-c",
        model: "imagen-4.0-generate-001",
        shutdown: "2026-08-17",
        setting: "SLUICE_PROVIDER_C_IMAGE_MODEL",
      },
    ]);
    expect(warnings[0]?.message).toBe(
      "provider-a's default image model gpt-image-1 was shut down by its provider on 2026-10-23: /v1/image calls that name no model (on projects whose model is not an image model) will fail there. Set SLUICE_PROVIDER_A_IMAGE_MODEL to a current image model, such as gpt-image-2.6-sunburst",
    );
    // From the shutdown day on, not the day before.
    expect(
      imageModelWarnings(loadConfig({}), day("2026-10-23")).map((warning) => warning.fields.model),
    ).toEqual(["gpt-image-1", "imagen-4.0-generate-001"]);
    expect(
      imageModelWarnings(loadConfig({}), day("2026-10-22")).map((warning) => warning.fields.model),
    ).toEqual(["imagen-4.0-generate-001"]);
    // Before a shutdown, and for models still served, nothing.
    expect(imageModelWarnings(loadConfig({}), day("2026-08-16"))).toEqual([]);
    const current = loadConfig({
      SLUICE_PROVIDER_A_IMAGE_MODEL: "gpt-image-2.6-sunburst",
      SLUICE_PROVIDER_C_IMAGE_MODEL: "gemini-nano-banana-2.1",
    });
    expect(imageModelWarnings(current, day("2026-11-27"))).toEqual([]);
  });
});
