import { vi } from "vitest";

/** Thrown when `run` scanned more characters than its budget: the work is not linear. */
export class ScanBudgetExceeded extends Error {}

/**
 * The characters `run` scanned with `String.prototype.indexOf` and `lastIndexOf` and with
 * `RegExp.prototype.exec` (which `matchAll` and `test` call): a count, no clock, of the work of code
 * that reads text by these searches. A search counts the characters between where it started and
 * where it stopped (a match's end, or the end of the text). Past `budget` characters the next
 * search throws ScanBudgetExceeded, so a quadratic reading fails at once rather than running on.
 */
export function charactersScanned(run: () => unknown, budget = Number.POSITIVE_INFINITY): number {
  let scanned = 0;
  const add = (characters: number) => {
    scanned += Math.max(0, characters);
    if (scanned > budget) throw new ScanBudgetExceeded(`scanned over ${budget} characters`);
  };
  const { indexOf, lastIndexOf } = String.prototype;
  const { exec } = RegExp.prototype;
  const spies = [
    vi.spyOn(String.prototype, "indexOf").mockImplementation(function (this: string, search, from) {
      const text = String(this);
      const start = Math.max(0, Math.trunc(Number(from ?? 0)) || 0);
      const found = indexOf.call(text, search, from);
      add((found === -1 ? text.length : found + String(search).length) - start);
      return found;
    }),
    vi.spyOn(String.prototype, "lastIndexOf").mockImplementation(function (this: string, search, from) {
      const text = String(this);
      const start = from === undefined ? text.length : Math.min(text.length, Math.trunc(Number(from)) || 0);
      const found = lastIndexOf.call(text, search, from);
      add(start - (found === -1 ? 0 : found));
      return found;
    }),
    vi.spyOn(RegExp.prototype, "exec").mockImplementation(function (this: RegExp, input) {
      const text = String(input);
      const start = this.global || this.sticky ? this.lastIndex : 0;
      const found = exec.call(this, text);
      add((found === null ? text.length : found.index + found[0].length) - start);
      return found;
    }),
  ];
  try {
    run();
  } finally {
    for (const spy of spies) spy.mockRestore();
  }
  return scanned;
}
