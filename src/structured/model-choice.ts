import type { ProviderId } from "../providers/provider-id.js";
import type { Project } from "../storage/project-repository.js";
import { bareModelId, defaultModel, findModel } from "../usage/model-catalogue.js";

export type AnalysisKind = "text" | "vision" | "pdf";

/**
 * The model for an analysis: the project's custom model, or its provider's default. Vision and
 * PDF need a model that can read images or PDFs, text one with structured output: when the
 * configured model is catalogued without that capability (an image model the project's /v1/image
 * calls use, say), the provider's default for it is used instead. A custom model the
 * catalogue does not know is trusted as configured. Either is sent without a `models/` prefix
 * (provider C's list names models so, and the admin API accepts it for every provider), as
 * /v1/image sends it (imageModelFor): providers A and B would refuse `models/gpt-4.1`, and provider
 * C's URL gets the prefix from the AI SDK. Kept on a model the catalogue does not list, the same
 * name worked on /v1/image and failed on /v1/text.
 */
export function chooseModel(
  project: Pick<Project, "model">,
  provider: ProviderId,
  kind: AnalysisKind,
): string {
  const purpose = kind === "text" ? "structured" : kind;
  const fallback = defaultModel(provider, purpose) as string;
  if (!project.model) return fallback;
  const model = bareModelId(project.model);
  const known = findModel(provider, project.model);
  if (!known) return model;
  if (kind === "text") return known.capabilities.structured ? model : fallback;
  return known.capabilities[kind] ? model : fallback;
}

/** Each structured route, by the analysis it runs. */
export const structuredRoutes: Readonly<Record<AnalysisKind, string>> = {
  text: "/v1/text",
  vision: "/v1/vision",
  pdf: "/v1/pdf",
};

/**
 * The model each structured route sends a project's calls to (`chooseModel`), route by route: they
 * may differ (a model that reads no PDFs leaves /v1/pdf to the provider's default), and a provider's
 * rules on an output schema may depend on the model (provider B's). Every route is listed: the three
 * call the same provider with the same keys and credentials, so a project that can call one can
 * call each, and the catalogue names a default model for every route of every provider.
 */
export function routeModels(
  project: Pick<Project, "model">,
  provider: ProviderId,
): Array<{ kind: AnalysisKind; route: string; model: string }> {
  return (["text", "vision", "pdf"] as const).map((kind) => ({
    kind,
    route: structuredRoutes[kind],
    model: chooseModel(project, provider, kind),
  }));
}
