import type { Config } from "./config.js";
import type { StartWarning } from "./production-warnings.js";
import { shutdownNotice } from "./usage/model-catalogue.js";

/**
 * A warning for each default image model (SLUICE_PROVIDER_A_IMAGE_MODEL, SLUICE_PROVIDER_C_IMAGE_MODEL)
 * that its provider has shut down by `today`: /v1/image calls that name no model, on projects whose
 * model is not an image model, would fail at the provider. SPEC.md's defaults (gpt-image-1, Imagen
 * 4 standard) are both shut down, so a gateway left on them says so at every start, with the
 * setting to change and the model the provider names instead (docs/decisions/0013).
 */
export function imageModelWarnings(
  config: Pick<Config, "providerAImageModel" | "providerCImageModel">,
  today: Date,
): StartWarning[] {
  const warnings: StartWarning[] = [];
  for (const [provider, model, setting] of [
    ["provider-a", config.providerAImageModel, "SLUICE_PROVIDER_A_IMAGE_MODEL"],
    ["provider-c", config.providerCImageModel, "SLUICE_PROVIDER_C_IMAGE_MODEL"],
  ] as const) {
    const deprecated = shutdownNotice(provider, model, today);
    if (!deprecated) continue;
    const instead = deprecated.replacement ? `, such as ${deprecated.replacement}` : "";
    warnings.push({
      fields: { provider, model, shutdown: deprecated.shutdown, setting },
      message: `${provider}'s default image model ${model} was shut down by its provider on ${deprecated.shutdown}: /v1/image calls that name no model (on projects whose model is not an image model) will fail there. Set ${setting} to a current image model${instead}`,
    });
  }
  return warnings;
}
