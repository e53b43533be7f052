import type { z } from "zod";
import { listedProblems } from "../errors.js";
import { UsageError } from "./usage-error.js";

/**
 * Checks the input a command builds from its flags against the schema its admin use case parses
 * it with, so a value that schema refuses (a missing `--name` or `--provider`, a provider, group-by
 * or environment not allowed, a date that does not parse) is a usage error, found before the
 * database is opened or a master key generated. Problems name the flags, as the use case would.
 */
export function checkInput(
  schema: z.ZodType,
  input: unknown,
  what: string,
  flagOf: (path: string) => string,
): void {
  const result = schema.safeParse(input);
  if (result.success) return;
  const problems = result.error.issues.map((issue) => {
    const path = issue.path.join(".");
    const missing = path !== "" && valueAt(input, issue.path) === undefined;
    return `${path ? flagOf(path) : "(flags)"}: ${missing ? "is required" : issue.message}`;
  });
  throw new UsageError(`Invalid ${what}: ${listedProblems(problems).text}`);
}

function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let value = input;
  for (const key of path) value = (value as Record<PropertyKey, unknown> | undefined)?.[key];
  return value;
}
