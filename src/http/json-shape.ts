import { jsonStart, stringEnd } from "../providers/json-bytes.js";

/**
 * Bounds on the structure of a JSON body, checked before `JSON.parse` builds it: at the body cap,
 * 10M nested arrays or 2M members held the event loop for seconds and took gigabytes, where the
 * bodies these endpoints take are one object of a few members and one large string.
 */
export interface JsonShapeLimits {
  /** Objects and arrays open at once, the outermost one included. */
  maxDepth: number;
  /** Object members (each `:`) and array elements (each `,` in an array; an array's first is free). */
  maxValues: number;
}

/** What the JSON endpoints Sluice parses itself take (/v1/text, /v1/vision, /v1/pdf, /v1/image). */
export const jsonBodyLimits: JsonShapeLimits = { maxDepth: 64, maxValues: 10_000 };

/**
 * Which bound `body` exceeds, or null: one pass over its bytes from where its JSON starts (past a
 * byte order mark), strings skipped. It does not validate: text that is no JSON within the bounds
 * is left for `JSON.parse` to refuse.
 */
export function exceededJsonShape(body: Buffer, limits: JsonShapeLimits): "depth" | "values" | null {
  // Whether each open level is an array (a `,` there is one more element), by depth.
  const arrays = new Uint8Array(limits.maxDepth + 1);
  let depth = 0;
  let values = 0;
  for (let index = jsonStart(body); index < body.length; index++) {
    const kind = kinds[body[index] as number];
    if (kind === other) continue;
    if (kind === quote) {
      const end = stringEnd(body, index);
      if (end < 0) return null;
      index = end - 1;
    } else if (kind === open) {
      if (++depth > limits.maxDepth) return "depth";
      arrays[depth] = body[index] === 0x5b /* [ */ ? 1 : 0;
    } else if (kind === close) {
      if (depth > 0) depth--;
    } else if (kind === colon || arrays[depth] === 1) {
      if (++values > limits.maxValues) return "values";
    }
  }
  return null;
}

/** The bytes the scan looks at, by what they are; every other byte is `other`. */
const [other, quote, open, close, colon, comma] = [0, 1, 2, 3, 4, 5];
const kinds = new Uint8Array(256);
kinds[0x22 /* " */] = quote;
kinds[0x7b /* { */] = open;
kinds[0x5b /* [ */] = open;
kinds[0x7d /* } */] = close;
kinds[0x5d /* ] */] = close;
kinds[0x3a /* : */] = colon;
kinds[0x2c /* , */] = comma;
