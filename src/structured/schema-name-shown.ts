import { mayBeKey } from "../admin/project-id.js";
import { redactKeyLike } from "../observability/key-like.js";
import { quotedStart } from "../quoted-start.js";

/**
 * A name the output schema holds (a keyword, a property's or a definition's name) as a problem's
 * path shows it (`#/properties/a`): as written, or by its start and length when it may be a key (a
 * provider key pasted into the schema, `#/properties/"sk-p…" (56 characters)`), as an admin answer
 * names a body member that may be one (`shownMemberName`).
 */
export function shownSchemaName(name: string): string {
  return mayBeKey(name) ? quotedStart(name) : name;
}

/**
 * A problem with the output schema as an answer says it: each run of a key's form in it (a `$ref`
 * or a message of the schema compiler that quotes a name, say) shown by its start and length only.
 */
export function shownSchemaProblem(problem: string): string {
  return redactKeyLike(problem, quotedStart);
}
