import { quotedStart } from "../quoted-start.js";
import { mayBeKey } from "./project-id.js";

/**
 * A query parameter's name as a problem names it: as sent, or, for one sent without a name (`?=1`),
 * words that say so, since `: unknown parameter` would name nothing. A name that may be a key (a
 * provider key sent as a bare query string, `?sk-proj-…`) is named by its start and length only,
 * as a project id that may be one is (`projectIdQuoted`).
 */
export function shownParameterName(name: string): string {
  if (name === "") return "(a parameter without a name)";
  return mayBeKey(name) ? quotedStart(name) : name;
}

/**
 * A JSON member's name as a problem quotes it (`Unrecognized key: "foo"`): whole, or by its start
 * and length when it may be a key (a provider key pasted as a member's name: `{"sk-proj-…": 1}`),
 * as a query parameter's name is (`shownParameterName`).
 */
export function shownMemberName(name: string): string {
  return mayBeKey(name) ? quotedStart(name) : JSON.stringify(name);
}
