/**
 * A query parameter's name as a problem names it: as sent, or, for one sent without a name (`?=1`),
 * words that say so, since `: unknown parameter` would name nothing.
 */
export function shownParameterName(name: string): string {
  return name === "" ? "(a parameter without a name)" : name;
}
