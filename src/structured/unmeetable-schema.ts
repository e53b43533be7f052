/**
 * Why no value can match one schema object on its own keywords, or null: bounds that contradict
 * each other (`minimum` above `maximum`, no whole number between an integer's bounds, `minLength`
 * above `maxLength`, `minItems` above `maxItems`) where its types leave no value the bounds do not
 * apply to, or a `const` or `enum` none of whose values has one of its types and lies within its
 * bounds. Such a schema is an admin's mistake (swapped bounds, numbers listed for a string) that no
 * model's answer can meet: every call would be answered, refused by the validator, repaired at a
 * second billed call and answered 502. Only these local keywords are read; what `pattern`, `$ref`
 * or `anyOf` add is left to the answers' validation.
 */
export function unmeetableReason(record: Record<string, unknown>, types: readonly unknown[]): string | null {
  const allowed = new Set(types.filter((type): type is string => typeof type === "string"));
  if (record.nullable === true && allowed.size > 0) allowed.add("null");
  const only = (...kinds: string[]) => allowed.size > 0 && [...allowed].every((type) => kinds.includes(type));
  const numbers = numberBounds(record);
  if (only("number", "integer") && numbers.empty(only("integer")))
    return `${numbers.text} leaves no ${only("integer") ? "whole number" : "number"}, so no value can match it`;
  const lengths = countBounds(record, "minLength", "maxLength");
  if (only("string") && lengths.empty) return `${lengths.text}, so no value can match it`;
  const items = countBounds(record, "minItems", "maxItems");
  if (only("array") && items.empty) return `${items.text}, so no value can match it`;
  const listed = "const" in record ? { keyword: "const", values: [record.const] } : listedEnum(record);
  if (!listed) return null;
  const fits = (value: unknown) =>
    (allowed.size === 0 || [...allowed].some((type) => hasType(value, type))) &&
    (typeof value !== "number" || numbers.holds(value)) &&
    (typeof value !== "string" || lengths.holds([...value].length)) &&
    (!Array.isArray(value) || items.holds(value.length));
  if (listed.values.some(fits)) return null;
  return listed.keyword === "const"
    ? "its const does not have its type or lies outside its bounds, so no value can match it"
    : "none of its enum values has its type and lies within its bounds, so no value can match it";
}

function listedEnum(record: Record<string, unknown>): { keyword: string; values: unknown[] } | null {
  return Array.isArray(record.enum) && record.enum.length > 0
    ? { keyword: "enum", values: record.enum }
    : null;
}

function hasType(value: unknown, type: string): boolean {
  switch (type) {
    case "null":
      return value === null;
    case "integer":
      return Number.isInteger(value);
    case "array":
      return Array.isArray(value);
    case "object":
      return typeof value === "object" && value !== null && !Array.isArray(value);
    default:
      return typeof value === type;
  }
}

const finite = (value: unknown): value is number => typeof value === "number" && Number.isFinite(value);

/** The numeric bounds of `minimum`, `maximum` and their exclusive forms (numbers, as Ajv takes them). */
function numberBounds(record: Record<string, unknown>) {
  const lows: Array<[number, boolean, string]> = [];
  const highs: Array<[number, boolean, string]> = [];
  if (finite(record.minimum)) lows.push([record.minimum, false, `minimum ${record.minimum}`]);
  if (finite(record.exclusiveMinimum))
    lows.push([record.exclusiveMinimum, true, `exclusiveMinimum ${record.exclusiveMinimum}`]);
  if (finite(record.maximum)) highs.push([record.maximum, false, `maximum ${record.maximum}`]);
  if (finite(record.exclusiveMaximum))
    highs.push([record.exclusiveMaximum, true, `exclusiveMaximum ${record.exclusiveMaximum}`]);
  const holds = (value: number) =>
    lows.every(([bound, exclusive]) => (exclusive ? value > bound : value >= bound)) &&
    highs.every(([bound, exclusive]) => (exclusive ? value < bound : value <= bound));
  // The tightest of each side: the greater lower bound (exclusive on a tie), the smaller upper one.
  const low = lows.reduce<[number, boolean, string] | undefined>(
    (best, bound) => (!best || bound[0] > best[0] || (bound[0] === best[0] && bound[1]) ? bound : best),
    undefined,
  );
  const high = highs.reduce<[number, boolean, string] | undefined>(
    (best, bound) => (!best || bound[0] < best[0] || (bound[0] === best[0] && bound[1]) ? bound : best),
    undefined,
  );
  const empty = (integer: boolean): boolean => {
    if (!low || !high) return false;
    if (integer) {
      const least = low[1] ? Math.floor(low[0]) + 1 : Math.ceil(low[0]);
      const most = high[1] ? Math.ceil(high[0]) - 1 : Math.floor(high[0]);
      return least > most;
    }
    return low[0] > high[0] || (low[0] === high[0] && (low[1] || high[1]));
  };
  return { holds, empty, text: low && high ? `${low[2]} with ${high[2]}` : "" };
}

/** A pair of count bounds (`minLength`/`maxLength`, `minItems`/`maxItems`). */
function countBounds(record: Record<string, unknown>, min: string, max: string) {
  const least = finite(record[min]) ? (record[min] as number) : 0;
  const most = finite(record[max]) ? (record[max] as number) : Number.POSITIVE_INFINITY;
  return {
    empty: least > most,
    holds: (count: number) => count >= least && count <= most,
    text: `${min} ${least} is above ${max} ${most}`,
  };
}
