/**
 * The value a local JSON Pointer `$ref` (`#` or `#/…`, RFC 6901 in a URI fragment) names in the
 * document, else undefined. Each token is percent-decoded, then `~1` and `~0` are unescaped (RFC
 * 6901 §4, §6). A token steps into an object by own key, and into an array by index: `0` or a
 * number without a leading zero, below its length (§4); `-`, the element after the last, names no
 * value. Ajv, which validates against the schema, and the AI SDK's converters both step into arrays.
 */
export function resolveJsonPointer(root: unknown, ref: string): unknown {
  if (ref === "#") return root;
  if (!ref.startsWith("#/")) return undefined;
  let target: unknown = root;
  for (const token of ref.slice(2).split("/")) {
    let key: string;
    try {
      key = decodeURIComponent(token).replace(/~1/g, "/").replace(/~0/g, "~");
    } catch {
      return undefined;
    }
    if (Array.isArray(target)) {
      if (!/^(?:0|[1-9][0-9]*)$/.test(key) || Number(key) >= target.length) return undefined;
      target = target[Number(key)];
    } else if (typeof target === "object" && target !== null && Object.hasOwn(target, key)) {
      target = (target as Record<string, unknown>)[key];
    } else return undefined;
  }
  return target;
}
