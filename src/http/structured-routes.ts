import { GatewayError, problemsError } from "../errors.js";
import type { OutputMismatchLog } from "../observability/output-mismatch-log.js";
import type { SchemaRefusalLog } from "../observability/schema-refusal-log.js";
import type { AiSdkModels } from "../providers/ai-sdk-provider.js";
import type { ProviderId } from "../providers/provider-id.js";
import { schemaRefusalOf } from "../providers/provider-refusal.js";
import type { Project } from "../storage/project-repository.js";
import { type AnalysisInput, analyze } from "../structured/analyze.js";
import { parseImageInput, requireReadableImage } from "../structured/image-input.js";
import { requireImageWithinLimits, requirePdfWithinLimits } from "../structured/input-limits.js";
import { type AnalysisKind, chooseModel, structuredRoutes } from "../structured/model-choice.js";
import { checkOutputSchema } from "../structured/output-schema.js";
import { parsePdfInput } from "../structured/pdf-input.js";
import type { FetchedBytesHold, FetchPdf } from "../structured/safe-pdf-fetch.js";
import { costOfTokens } from "../usage/token-cost.js";
import type { Admit, AdmittedCall } from "./admission.js";
import { type BodyBudget, type BodyShare, bodyBudgetFull, holdInShare } from "./body-budget.js";
import { answerWithJson } from "./json-answer-call.js";
import { jsonBodyLimits } from "./json-shape.js";
import { parseJsonObject } from "./read-body.js";
import type { RequestContext, Router } from "./router.js";

export interface StructuredRouteDeps {
  admit: Admit;
  /** The request-body bytes held in memory by these routes and /v1/image together. */
  bodyBudget: BodyBudget;
  models: AiSdkModels;
  fetchPdf: FetchPdf;
  maxBodyBytes: number;
  maxImageBytes: number;
  maxPdfBytes: number;
  timeoutMs: number;
  /** Tells the operator of a provider's refusal of a project's output schema (none: not logged). */
  logSchemaRefusal?: SchemaRefusalLog;
  /** Tells the operator of output that failed the schema also after the repair (none: not logged). */
  logOutputMismatch?: OutputMismatchLog;
}

const fieldOf: Record<AnalysisKind, string> = { text: "text", vision: "image", pdf: "pdf" };

/** POST /v1/text, /v1/vision, /v1/pdf and their /{projectId} forms. */
export function registerStructuredRoutes(router: Router, deps: StructuredRouteDeps): void {
  for (const kind of ["text", "vision", "pdf"] as const) {
    const handler = (context: RequestContext) => handle(deps, kind, context);
    router.on("POST", structuredRoutes[kind], handler);
    router.on("POST", `${structuredRoutes[kind]}/:projectId`, handler);
  }
}

function handle(deps: StructuredRouteDeps, kind: AnalysisKind, context: RequestContext): Promise<void> {
  return answerWithJson(
    deps.admit,
    deps.bodyBudget,
    context,
    kind,
    async (call, signal, soFar, readBody, share) => {
      const body = parseJsonObject(await readBody(bodyCap(deps, kind)), {
        limits: jsonBodyLimits,
        takes: `${structuredRoutes[kind]} takes one JSON object such as {"${fieldOf[kind]}": "…"}`,
      });
      const value = body[fieldOf[kind]];
      // Only whitespace is nothing to analyse either (as a `prompt` on /v1/image): refused before any
      // provider call, which would be billed.
      if (typeof value !== "string" || value.trim() === "") {
        throw new GatewayError(
          "BAD_REQUEST",
          `\`${fieldOf[kind]}\` is required and must be a non-empty string (not only whitespace)`,
        );
      }
      const model = chooseModel(call.project, call.provider, kind);
      const schema = usableSchema(call.project, call.provider, model, kind);
      const input = await parseInput(deps, kind, value, call, signal, context.requestId, share);
      soFar.model = model;
      // Only the project's admin can change a schema the provider refuses: the operator hears of it.
      const noteSchemaRefusal = (error: unknown): void => {
        const reason = schemaRefusalOf(error, call.provider);
        if (reason === null || !deps.logSchemaRefusal) return;
        deps.logSchemaRefusal(
          { projectId: call.project.id, provider: call.provider, reason, model: soFar.model ?? model },
          context.requestId,
          structuredRoutes[kind],
        );
      };
      const result = await analyze(deps.models, {
        provider: call.provider,
        model: soFar.model,
        providerKey: call.providerKey,
        schema,
        input,
        timeoutMs: deps.timeoutMs,
        signal,
      }).catch((error: unknown) => {
        noteSchemaRefusal(error);
        throw error;
      });
      soFar.model = result.model;
      // A result (not a throw): the provider answered an attempt with a success (2xx), one it could
      // not read included (its usage as reported, else none and no cost: counted at an estimate;
      // a repair's, beside the first attempt's known usage and cost: `partlyUnknown`).
      const spend = {
        usage: result.usage,
        costUsd: costOfTokens(call.provider, result.model, result.usage),
        providerAnswered: true,
        ...(result.partlyUnknown ? { partlyUnknown: true } : {}),
      };
      soFar.spend = spend;
      if (!result.ok) {
        noteSchemaRefusal(result.error);
        // A 502 whose error names no provider (the provider answered): the provider failure log
        // passes over it, and only the metrics and the row would record it.
        if (result.mismatch && deps.logOutputMismatch) {
          deps.logOutputMismatch(
            { projectId: call.project.id, provider: call.provider, model: result.model, ...result.mismatch },
            context.requestId,
            structuredRoutes[kind],
          );
        }
        throw result.error;
      }
      return { body: result.object, model: result.model, ...spend };
    },
  );
}

/**
 * The problems `checkOutputSchema` finds in a project's schema for a provider and model, checked once
 * per schema object: the project cache hands every call of a project the same object until the
 * project changes or is read again, and the check walks the whole schema (a 64 KiB schema of 1,180
 * properties: ~5 ms of the event loop on every call). A schema is never changed in place; a changed
 * project is a new object, checked anew, and the old one's entry goes with it (a WeakMap).
 */
function schemaProblemsFor(schema: Record<string, unknown>, provider: ProviderId, model: string): string[] {
  // A stored schema that is no JSON object (text written by hand, a JSON string) is refused every time.
  if (typeof schema !== "object" || schema === null) return checkOutputSchema(schema, provider, model);
  let checked = checkedSchemas.get(schema);
  if (checked === undefined) {
    checked = new Map();
    checkedSchemas.set(schema, checked);
  }
  const key = `${provider}\u0000${model}`;
  let problems = checked.get(key);
  if (problems === undefined) {
    problems = checkOutputSchema(schema, provider, model);
    checked.set(key, problems);
  }
  return problems;
}

const checkedSchemas = new WeakMap<object, Map<string, string[]>>();

/**
 * The project's output schema, checked again before use with the provider's rules for the model this
 * route sends (422 when missing or invalid, also for a schema saved before a rule or the catalogue
 * changed this route's model: never the provider's 502 on every call).
 */
function usableSchema(
  project: Project,
  provider: ProviderId,
  model: string,
  kind: AnalysisKind,
): Record<string, unknown> {
  if (!project.outputSchema) {
    throw new GatewayError(
      "VALIDATION_ERROR",
      "This project has no output schema; an admin must set one before structured analysis can run",
    );
  }
  const problems = schemaProblemsFor(project.outputSchema, provider, model);
  if (problems.length > 0) {
    throw problemsError(
      "VALIDATION_ERROR",
      `The project's output schema is invalid for ${provider} on ${structuredRoutes[kind]} (model ${model})`,
      problems,
      { provider },
    );
  }
  return project.outputSchema;
}

/**
 * The body cap: `SLUICE_MAX_BODY_BYTES`, raised for /v1/vision and /v1/pdf to what an image or PDF
 * at its own cap takes in base64 inside the JSON, wrapped in lines of 64 characters or more (PEM;
 * MIME takes 76) with each line break written `\r\n` in JSON (4 bytes), so the more specific cap
 * is the one that applies.
 */
function bodyCap(deps: StructuredRouteDeps, kind: AnalysisKind): number {
  if (kind === "text") return deps.maxBodyBytes;
  const decoded = kind === "vision" ? deps.maxImageBytes : deps.maxPdfBytes;
  const base64 = Math.ceil(decoded / 3) * 4;
  return Math.max(deps.maxBodyBytes, base64 + Math.ceil(base64 / 64) * 4 + 4096);
}

async function parseInput(
  deps: StructuredRouteDeps,
  kind: AnalysisKind,
  value: string,
  /**
   * The call's project and provider (a PDF fetched by URL takes a place of the project's share), and
   * its recheck, run again once such a PDF is in.
   */
  call: Pick<AdmittedCall, "project" | "provider" | "recheck">,
  /** Stops a PDF fetch by URL: the client left. */
  signal: AbortSignal,
  requestId: string,
  /** The call's share of the body budget, where a fetched PDF is counted (503 past it). */
  share: BodyShare,
): Promise<AnalysisInput> {
  const { provider } = call;
  if (kind === "text") return { kind, text: value };
  if (kind === "vision") {
    const image = parseImageInput(value, { maxBytes: deps.maxImageBytes, provider });
    requireReadableImage(provider, image.mediaType);
    requireImageWithinLimits(provider, image);
    return { kind, ...image };
  }
  const pdf = parsePdfInput(value, { maxBytes: deps.maxPdfBytes });
  if (pdf.kind === "data") {
    requirePdfWithinLimits(provider, pdf.bytes);
    return { kind, bytes: pdf.bytes };
  }
  const hold = fetchedPdfHold(share);
  const bytes = await deps.fetchPdf(pdf.url, signal, requestId, hold, call.project.id);
  // All of it, once fetched (nothing more from a fetcher that counted it as it arrived).
  hold.received(bytes.length);
  // The fetch may take SLUICE_PDF_FETCH_TIMEOUT_MS from a host the caller chose, a body arriving as
  // slowly as an upload: a key revoked (or the project disabled or deleted) meanwhile sends nothing.
  const recheck = call.recheck();
  if (recheck) await recheck;
  requirePdfWithinLimits(provider, bytes);
  return { kind, bytes };
}

/**
 * A PDF fetched by URL is held until the call ends as one sent inline is: counted as its body would
 * have been (its base64), as it arrives. One whose Content-Length does not fit is refused before its
 * body is read, else at the first chunk that does not fit: the rest is not downloaded (before, the
 * whole PDF was, up to SLUICE_MAX_PDF_BYTES, and refused once fetched). SLUICE_MAX_PDF_FETCHES bounds
 * only the fetches under way.
 */
function fetchedPdfHold(share: BodyShare): FetchedBytesHold {
  const inBase64 = (bytes: number) => Math.ceil(bytes / 3) * 4;
  let held = 0;
  return {
    announced(bytes) {
      if (!share.fits(inBase64(bytes))) throw bodyBudgetFull();
    },
    received(total) {
      const more = inBase64(total) - held;
      if (more <= 0) return;
      holdInShare(share, more);
      held += more;
    },
  };
}
