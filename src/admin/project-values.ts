import { createPrivateKey } from "node:crypto";
import { GatewayError } from "../errors.js";
import { isModelName, modelNameRule } from "../providers/model-name.js";
import type { ProviderId } from "../providers/provider-id.js";
import { proxyAllowListProblems } from "../proxy/proxy-allow-list.js";
import { checkOutputSchema } from "../structured/output-schema.js";
import type { UpdateProjectInput, UsageQueryInput } from "./project-input.js";

/**
 * How a caller spells a field, from its dotted path (`deviceCheck.teamId`): the API as is, the CLI
 * as the flag that sets it (`--device-check-team-id`).
 */
export type FieldName = (path: string) => string;
export const sameName: FieldName = (path) => path;

/**
 * The checks on a project's values that need nothing stored: the model's form, the output schema,
 * the DeviceCheck key, the proxy allow-list's rules. The use cases run them on every create and
 * update; the CLI runs them too, before it opens the database, so such a value is a usage error
 * there (exit 2), not a failure after a master key may have been generated.
 */
export function checkProjectValues(fields: UpdateProjectInput, fieldName: FieldName): void {
  requireModelName(fields.model, fieldName("model"));
  if (fields.outputSchema) assertOutputSchema(fields.outputSchema);
  const privateKey = fields.deviceCheck?.privateKey;
  if (typeof privateKey === "string") assertP256PrivateKey(privateKey, fieldName);
  if (fields.proxyAllowList) assertProxyAllowList(fields.proxyAllowList, fieldName);
}

/**
 * A project's model becomes part of provider C's URL, so it follows the one model-name rule
 * (src/providers/model-name.ts) that /v1/image applies, and is refused the same way: a well-typed
 * but malformed value is 422 VALIDATION_ERROR, naming the field as the caller spells it.
 */
function requireModelName(model: string | null | undefined, field: string): void {
  if (model === null || model === undefined || isModelName(model)) return;
  const problems = [`${field}: ${modelNameRule}`];
  throw new GatewayError("VALIDATION_ERROR", `Invalid project: ${problems.join("; ")}`, {
    details: { problems },
  });
}

/** 422 naming every rule that cannot be saved, and why (`proxyAllowList.provider-a.0: "…" …`). */
function assertProxyAllowList(
  rules: NonNullable<UpdateProjectInput["proxyAllowList"]>,
  fieldName: FieldName,
): void {
  const problems = proxyAllowListProblems(rules, (path) => fieldName(`proxyAllowList.${path}`));
  if (problems.length === 0) return;
  throw new GatewayError("VALIDATION_ERROR", `Invalid project: ${problems.join("; ")}`, {
    details: { problems },
  });
}

/**
 * 422 with every reason the output schema cannot be used; with a provider, by that provider's
 * structured-output rules too (provider C refuses some schemas on every call), for the model its
 * text calls use when given.
 */
export function assertOutputSchema(
  schema: Record<string, unknown>,
  provider?: ProviderId,
  model?: string,
): void {
  const problems = checkOutputSchema(schema, provider, model);
  if (problems.length === 0) return;
  const forProvider = provider ? ` for ${provider}` : "";
  throw new GatewayError(
    "VALIDATION_ERROR",
    `The output schema is invalid${forProvider}: ${problems.join("; ")}`,
    {
      details: provider ? { problems, provider } : { problems },
    },
  );
}

function assertP256PrivateKey(pem: string, fieldName: FieldName): void {
  try {
    const key = createPrivateKey({ key: pem, format: "pem" });
    if (key.asymmetricKeyType === "ec" && key.asymmetricKeyDetails?.namedCurve === "prime256v1") return;
  } catch {
    // fall through to the one error below; the key text is never echoed
  }
  throw new GatewayError(
    "BAD_REQUEST",
    `${fieldName("deviceCheck.privateKey")} must be the PEM contents of an Apple .p8 (EC P-256) key`,
  );
}

/**
 * The usage report's window: `to` (exclusive; a date alone includes that whole day, UTC) defaults
 * to now, `from` to 30 days before it, and `from` must come first. The CLI checks a window whose
 * two ends it was given before it opens the database.
 */
export function usageReportWindow(
  query: UsageQueryInput,
  now: Date,
  parameterName: (field: string) => string,
): { from: Date; to: Date } {
  const to = query.to ? usageReportEnd(query.to) : now;
  const from = query.from ? instantOf(query.from) : new Date(to.getTime() - 30 * 86_400_000);
  if (!(from < to)) {
    // A `to` left out is now, which the caller did not write: the refusal says what it was.
    const defaulted = query.to ? "" : `, which is now (${now.toISOString()}) when not given`;
    throw new GatewayError(
      "BAD_REQUEST",
      `\`${parameterName("from")}\` must be before \`${parameterName("to")}\`${defaulted}`,
    );
  }
  return { from, to };
}

/**
 * The instant or date `text` names, to the millisecond a row's time has, rounded up: `Date` cuts
 * what is finer (microseconds, as Python's `isoformat` writes them), so a `from` of 00:00:00.0005
 * would take in the row of 00:00:00.000, before it, and a `to` (exclusive) would leave that row
 * out. Rounded up, each end holds exactly the rows that the instant as written does.
 */
function instantOf(text: string): Date {
  const date = new Date(text);
  const finer = /\.\d{3}(\d+)/.exec(text)?.[1];
  return finer && /[1-9]/.test(finer) ? new Date(date.getTime() + 1) : date;
}

/**
 * Rows are compared as ISO text, so the end stays within four-digit years: the day after 9999-12-31
 * would be `+010000-01-01…`, which sorts before every row and would empty the report.
 */
const lastInstant = new Date("9999-12-31T23:59:59.999Z");
function usageReportEnd(to: string): Date {
  const end = instantOf(to);
  if (/^\d{4}-\d{2}-\d{2}$/.test(to)) end.setUTCDate(end.getUTCDate() + 1);
  return end > lastInstant ? lastInstant : end;
}
