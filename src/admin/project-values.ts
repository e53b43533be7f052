import { createPrivateKey } from "node:crypto";
import { GatewayError, listedProblems, problemsError } from "../errors.js";
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
  throw problemsError("VALIDATION_ERROR", "Invalid project", [`${field}: ${modelNameRule}`]);
}

/** 422 naming every rule that cannot be saved, and why (`proxyAllowList.provider-a.0: "…" …`). */
function assertProxyAllowList(
  rules: NonNullable<UpdateProjectInput["proxyAllowList"]>,
  fieldName: FieldName,
): void {
  const problems = proxyAllowListProblems(rules, (path) => fieldName(`proxyAllowList.${path}`));
  if (problems.length === 0) return;
  throw problemsError("VALIDATION_ERROR", "Invalid project", problems);
}

/** 422 with every reason the output schema cannot be used, whatever the provider. */
function assertOutputSchema(schema: Record<string, unknown>): void {
  const problems = checkOutputSchema(schema);
  if (problems.length === 0) return;
  throw problemsError("VALIDATION_ERROR", "The output schema is invalid", problems);
}

/**
 * 422 when the provider's structured-output rules refuse the output schema for the model any of
 * `routes` sends (provider B's depend on the model, and /v1/pdf may send another model than
 * /v1/text: model-choice.ts). The message names each route refused, with its model and why
 * (`… for provider-b on /v1/pdf (model claude-sonnet-5-5): #: …`); `details` gives the problems
 * (each once), the provider, and each refused route with its model and problems.
 */
export function assertOutputSchemaOnRoutes(
  schema: Record<string, unknown>,
  provider: ProviderId,
  routes: ReadonlyArray<{ route: string; model: string }>,
): void {
  const problemsOf = new Map<string, string[]>();
  const refused: Array<{ route: string; model: string; problems: string[] }> = [];
  for (const { route, model } of routes) {
    let problems = problemsOf.get(model);
    if (!problems) {
      problems = checkOutputSchema(schema, provider, model);
      problemsOf.set(model, problems);
    }
    if (problems.length > 0) refused.push({ route, model, problems });
  }
  if (refused.length === 0) return;
  // One clause per model: the routes that send it share its problems.
  const clauses = [...new Set(refused.map(({ model }) => model))].map((model) => {
    const named = refused.filter((entry) => entry.model === model).map(({ route }) => route);
    return `on ${listed(named)} (model ${model}): ${listedProblems(problemsOf.get(model) ?? []).text}`;
  });
  throw new GatewayError(
    "VALIDATION_ERROR",
    `The output schema is invalid for ${provider} ${clauses.join("; ")}`,
    {
      details: {
        ...listedProblems([...new Set(refused.flatMap(({ problems }) => problems))]).details,
        provider,
        routes: refused.map(({ route, model, problems }) => ({
          route,
          model,
          ...listedProblems(problems).details,
        })),
      },
    },
  );
}

/** `a`, `a and b`, `a, b and c`. */
function listed(names: string[]): string {
  return names.length < 2 ? names.join("") : `${names.slice(0, -1).join(", ")} and ${names.at(-1)}`;
}

function assertP256PrivateKey(pem: string, fieldName: FieldName): void {
  try {
    const key = createPrivateKey({ key: pem, format: "pem" });
    if (key.asymmetricKeyType === "ec" && key.asymmetricKeyDetails?.namedCurve === "prime256v1") return;
  } catch {
    // fall through to the one error below; the key text is never echoed
  }
  // Well typed but not a key: 422, as a malformed model name or proxy rule (400 is a body that does
  // not parse, or a field missing or of the wrong type).
  throw problemsError("VALIDATION_ERROR", "Invalid project", [
    `${fieldName("deviceCheck.privateKey")}: must be the PEM contents of an Apple .p8 (EC P-256) key`,
  ]);
}

/**
 * The usage report's window: `to` (exclusive; a date alone includes that whole day, UTC) defaults
 * to now, `from` to 30 days before it, and `from` must come first. The CLI checks the window
 * against its clock before it opens the database, and the use case again when it runs.
 */
export function usageReportWindow(
  query: UsageQueryInput,
  now: Date,
  parameterName: (field: string) => string,
): { from: Date; to: Date } {
  // A page after the first (`cursor`) is of the first's window unless `from` or `to` says otherwise.
  // A cursor of another list has none: the use case refuses it (422).
  const cursor = query.cursor && !("otherList" in query.cursor) ? query.cursor : undefined;
  // A `to` left out ends after now's millisecond (the end is exclusive): a row written in the
  // millisecond the report runs, already in the table, is counted.
  const to = query.to ? usageReportEnd(query.to) : cursor ? new Date(cursor.to) : new Date(now.getTime() + 1);
  const from = query.from
    ? instantOf(query.from)
    : cursor
      ? new Date(cursor.from)
      : new Date(to.getTime() - 30 * 86_400_000);
  // Ends inside one millisecond round up to the same one: no row's time lies between them, so the
  // window is empty (counted as such), not refused, when the ends as written are in order.
  const emptyInOrder =
    from.getTime() === to.getTime() &&
    query.from !== undefined &&
    query.to !== undefined &&
    writtenBefore(query.from, query.to);
  if (!(from < to) && !emptyInOrder) {
    // A `to` left out is now (or the cursor's), which the caller did not write: the refusal says what it was.
    const defaulted = query.to
      ? ""
      : cursor
        ? `, which is the cursor's (${cursor.to}) when not given`
        : `, which is now (${now.toISOString()}) when not given`;
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
 * Whether instant `from` is before `to` (an instant or a date alone, whose end is the next day's
 * midnight) as written, finer than the millisecond `Date` keeps: the millisecond first, then the
 * digits after it.
 */
function writtenBefore(from: string, to: string): boolean {
  const toDay = /^\d{4}-\d{2}-\d{2}$/.test(to);
  const fromMs = new Date(from).getTime();
  const toMs = toDay ? usageReportEnd(to).getTime() : new Date(to).getTime();
  if (fromMs !== toMs) return fromMs < toMs;
  return finerDigits(from) < (toDay ? "" : finerDigits(to));
}

/**
 * The digits of `text`'s seconds after the millisecond, trailing zeros dropped ("" for none). Not
 * with `/0+$/`: V8 tries it from each zero to the end, quadratic in a run of zeros with another
 * digit after it (an instant may have any number of digits, up to a query string's 16 KiB).
 */
function finerDigits(text: string): string {
  const digits = /\.\d{3}(\d+)/.exec(text)?.[1] ?? "";
  let end = digits.length;
  while (end > 0 && digits.charCodeAt(end - 1) === 0x30 /* 0 */) end--;
  return digits.slice(0, end);
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
