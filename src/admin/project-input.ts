import { z } from "zod";
import { teamIdPattern } from "../images/vault-store.js";
import { looksLikeKey } from "../observability/key-like.js";
import { providerIds } from "../providers/provider-id.js";
import { misleadingCharacter } from "./misleading-character.js";
import { projectIdPattern, projectIdRule } from "./project-id.js";
import { decodeProjectListCursor, projectListLimit } from "./project-list-cursor.js";
import { decodeUsageReportCursor, usageGroupings, usageReportLimit } from "./usage-report-cursor.js";

/**
 * Admin input shapes, shared by the admin API and the CLI. Unknown fields are refused. The
 * use cases load this module (and zod with it) on the first input they parse (project-admin.ts).
 */

/**
 * NUL, which PostgreSQL text cannot hold (SQLite can), and unpaired UTF-16 surrogates, which
 * both engines store as replacement characters (one on PostgreSQL, three on SQLite): text with
 * either would be refused by one engine or come back changed, so it is refused here on both.
 */
const unpairedSurrogate = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
const storableText = (schema: z.ZodString) =>
  schema.refine((value) => !value.includes("\u0000") && !unpairedSurrogate.test(value), {
    message: "must not contain NUL or unpaired surrogates",
    // A check after it (a name's characters) would name a NUL again.
    abort: true,
  });

/**
 * A project's name and a provider key's label are shown to operators (answers, the CLI's output,
 * logs): they hold no character that makes them show as another or acts on a terminal
 * (misleading-character.ts), each refused naming its code point and place, never quoted. One stored
 * before this rule is served and updated as it is; `sluice projects check` names it
 * (docs/decisions/0058).
 */
export const nameCharactersRule = "must not hold control, bidirectional or zero-width characters";
/** `nameCharactersRule`'s problem for `text`, or null when it holds no such character. */
export function shownTextProblem(text: string): string | null {
  const found = misleadingCharacter(text);
  return found === null ? null : `${nameCharactersRule} (${found})`;
}
const shownText = () =>
  storableText(z.string())
    // Before the trim: the place is counted in the text as sent (its ends' whitespace passed over).
    .superRefine((text, context) => {
      const problem = shownTextProblem(text);
      if (problem !== null) context.addIssue({ code: "custom", message: problem });
    })
    .trim()
    .min(1)
    .max(200);
const projectName = shownText();

const deviceCheckInput = z
  .object({
    enabled: z.boolean().optional(),
    teamId: z
      .string()
      .regex(/^[A-Z0-9]{10}$/, "must be a 10-character Apple team id")
      .nullable()
      .optional(),
    keyId: z
      .string()
      .regex(/^[A-Z0-9]{10}$/, "must be a 10-character Apple key id")
      .nullable()
      .optional(),
    privateKey: z.string().min(1).max(8192).nullable().optional(),
    environment: z.enum(["production", "development"]).optional(),
    tokenMode: z.enum(["cached", "single-use"]).optional(),
  })
  .strict();

/** The bounds of a per-minute rate limit and of a monthly spend cap (the CLI checks its flags by them). */
export const rateLimitBounds = { min: 1, max: 10_000_000 } as const;
export const maxMonthlySpendCapUsd = 1e9;

/**
 * The monthly spend cap `amount` stands for, by the one rule the admin API, the projects file and
 * the CLI apply, or null when it stands for none: above 0, at most maxMonthlySpendCapUsd, and a
 * whole number of billionths of a dollar. A call's cost is recorded to the billionth
 * (token-cost.ts, image-cost.ts) and the month's spend is compared with the cap in billionths
 * (admission.ts): a cap finer than that is one no spend can be told from, and one under half a
 * billionth (1e-16) was a cap of 0, which refused every call from the first. A number within
 * floating-point rounding of a whole number of billionths (0.1 + 0.2, which a JavaScript client
 * sends as 0.30000000000000004) stands for that amount (0.3); one with a tenth decimal place
 * (12.1234567891) stands for none.
 */
export function monthlySpendCapOf(amount: number): number | null {
  if (!(amount > 0 && amount <= maxMonthlySpendCapUsd)) return null;
  if (decimalPlaces(amount) <= 9) return amount;
  const billionths = Number(amount.toFixed(9));
  const rounding = 4 * Number.EPSILON * Math.max(1, amount);
  return billionths > 0 && Math.abs(amount - billionths) <= rounding ? billionths : null;
}
export const monthlySpendCapRule = `an amount in USD above 0 and at most ${maxMonthlySpendCapUsd}, to the billionth at the finest (at most 9 decimal places: costs are recorded to the billionth of a dollar)`;

/**
 * The decimal places of the shortest decimal that reads back as `amount` (JavaScript's own
 * `String`): 2 for 12.5 written 12.50, 16 for 1e-16 and 17 for 0.1 + 0.2. Read from that decimal,
 * not from `amount * 1e9`, whose rounding a whole number of billionths near the maximum need not survive.
 */
function decimalPlaces(amount: number): number {
  const [digits = "", exponent = "0"] = String(amount).split("e");
  return Math.max(0, (digits.split(".")[1]?.length ?? 0) - Number(exponent));
}

const perMinute = z.number().int().min(rateLimitBounds.min).max(rateLimitBounds.max);
const rateLimitsInput = z
  .object({
    perMinute: perMinute.nullable().optional(),
    devicePerMinute: perMinute.nullable().optional(),
  })
  .strict();

/**
 * A project's proxy allow-list: its shape here (400 otherwise, as any ill-typed field); its rules
 * (their grammar and bounds) by checkProjectValues, 422 with every reason.
 */
const proxyRules = z.array(z.string());
const proxyAllowListInput = z
  .object({ "provider-a": proxyRules, "provider-b": proxyRules, "provider-c": proxyRules })
  .partial()
  .strict();

/**
 * A JSON object, kept as sent: a zod record builds a copy, which leaves out a `__proto__` member
 * (setting it would set the copy's prototype), so `{"type":"object","__proto__":{…}}` was checked
 * and stored without it, where the same keyword deeper in the schema is refused (422).
 */
const jsonObject = z.custom<Record<string, unknown>>(
  (value) => typeof value === "object" && value !== null && !Array.isArray(value),
  {
    error: (issue) =>
      `Invalid input: expected object, received ${Array.isArray(issue.input) ? "array" : typeof issue.input}`,
  },
);

const projectFields = {
  name: projectName,
  teamId: z
    .string()
    .regex(teamIdPattern, "1 to 64 letters, digits, _ and - only (it is the first segment of vault paths)")
    .nullable(),
  provider: z.enum(providerIds),
  // Its form (project-values.ts) is 422, as /v1/image answers it; only its type and text are 400.
  model: storableText(z.string()).nullable(),
  testMode: z.boolean(),
  deviceCheck: deviceCheckInput,
  outputSchema: jsonObject.nullable(),
  saveImagesToVault: z.boolean(),
  rateLimits: rateLimitsInput,
  monthlySpendCapUsd: z
    .number()
    .transform((amount, context) => {
      const cap = monthlySpendCapOf(amount);
      if (cap === null) context.addIssue({ code: "custom", message: `must be ${monthlySpendCapRule}` });
      return cap ?? z.NEVER;
    })
    .nullable(),
  proxyAllowList: proxyAllowListInput.nullable(),
  disabled: z.boolean(),
};

/** A change to a project: every field optional, unknown fields refused. */
export const updateProjectInput = z.object(projectFields).partial().strict();

/** A new project: the same fields, with `name` and `provider` required and an optional `id`. */
export const createProjectInput = updateProjectInput
  .extend({
    // An id of a key's form would be redacted in every log line that names it, and may be a key
    // pasted in the wrong field: it is refused (see project-id.ts).
    id: z
      .string()
      .regex(projectIdPattern, projectIdRule)
      .refine(
        (id) => !looksLikeKey(id),
        "must not have the form of an API key (AIza, sk-, sk_ or tk_ and 28 more characters)",
      )
      .optional(),
    name: projectFields.name,
    provider: projectFields.provider,
  })
  .strict();

export const addProviderKeyInput = z
  .object({
    provider: z.enum(providerIds),
    apiKey: z
      .string()
      // An empty key (an unset variable, a field left blank) is said to be that alone: its length
      // and characters are not checked (abort), each of which it fails too.
      .min(1, { error: "is empty", abort: true })
      .min(8, "is too short to be a provider key")
      .max(1024)
      .regex(/^[\x21-\x7e]+$/, "must be printable ASCII without spaces"),
    label: shownText().optional(),
  })
  .strict();

/** The body of a route that takes none (a rotation, a deletion): empty, `{}`, or refused. */
export const noFieldsInput = z.object({}).strict();

/** A query parameter given more than once arrives as a list: refused, rather than one picked. */
export const givenOnce = (issue: { input?: unknown }) =>
  Array.isArray(issue.input) ? "is given more than once" : undefined;

/**
 * An ISO instant or date. A `+` offset written unencoded in a query string (`…T10:00:00+02:00`)
 * arrives as a space, which no instant contains: it is read back as the `+` it was.
 */
const instantOrDate = z.preprocess(
  (value) => (typeof value === "string" ? value.replace(/ (\d{2}:\d{2})$/, "+$1") : value),
  z.union([z.string().datetime({ offset: true }), z.string().date()], {
    error: (issue) =>
      givenOnce(issue) ?? "must be an ISO instant (2026-11-01T10:00:00Z) or date (2026-11-01)",
  }),
);

/** The bounds of a page's `limit`, as its problem states them. */
const limitRule = (max: number) => `must be a whole number from 1 to ${max}`;

/**
 * A page's `limit`: 1 to `max`. Text, as a query string and a flag give it, in one spelling, digits
 * without a leading zero: `1e3`, `10.0`, ` 10`, `+10` or `0200` are refused, not read as 1000, 10
 * or 200 (`0200` is 128 to a reader of octal).
 */
const pageLimit = (max: number) =>
  z
    .string({ error: givenOnce })
    .refine((text) => /^[1-9]\d{0,9}$/.test(text) && Number(text) <= max, {
      // `0200` is told what it lacks: it is a whole number from 1 to 200 to whoever wrote it.
      error: (issue) =>
        /^0\d/.test(String(issue.input)) ? `${limitRule(max)}, without a leading zero` : limitRule(max),
    })
    .transform(Number)
    .optional();

/**
 * A cursor of another paged admin list than the one it was given to: one Sluice wrote, so not
 * malformed (400), but it reads on in another list; the use case refuses it with 422.
 */
export interface OtherListCursor {
  otherList: string;
}

/** A page's `cursor`: one `decode` reads, else one of the `other` list (422 later), else 400. */
const pageCursor = <T>(
  decode: (text: string) => T | null,
  list: string,
  other: { list: string; decode: (text: string) => unknown },
) =>
  z
    .string({ error: givenOnce })
    .transform((text, context): T | OtherListCursor => {
      const cursor = decode(text);
      if (cursor) return cursor;
      if (other.decode(text) !== null) return { otherList: other.list };
      context.addIssue({ code: "custom", message: `is not a cursor ${list} answered (its \`next\`)` });
      return z.NEVER;
    })
    .optional();

/** The usage report's parameters: the admin API's query string, the CLI's flags. */
export const usageQueryInput = z
  .object({
    from: instantOrDate.optional(),
    to: instantOrDate.optional(),
    groupBy: z.enum(usageGroupings, { error: givenOnce }).optional(),
    limit: pageLimit(usageReportLimit.max),
    cursor: pageCursor(decodeUsageReportCursor, "a usage report", {
      list: "the project list",
      decode: decodeProjectListCursor,
    }),
  })
  .strict();

/** The project list's parameters: the admin API's query string, the CLI's flags. */
export const projectListInput = z
  .object({
    limit: pageLimit(projectListLimit.max),
    cursor: pageCursor(decodeProjectListCursor, "the project list", {
      list: "a usage report",
      decode: decodeUsageReportCursor,
    }),
  })
  .strict();

export type CreateProjectInput = z.infer<typeof createProjectInput>;
export type UpdateProjectInput = z.infer<typeof updateProjectInput>;
export type UsageQueryInput = z.infer<typeof usageQueryInput>;

/** `sluice usage prune`'s flag: the rows created before this instant or date (UTC midnight) go. */
export const usagePruneInput = z.object({ before: instantOrDate }).strict();
