/**
 * The schema, each object and array in it wrapped so that every read of a `$ref` is counted: the
 * work of following references, which a check that tries each path (or follows each chain to its
 * end) multiplies. Past `budget` reads, a read throws, so such a check fails at once, not after
 * minutes. Each object is wrapped once, so the checker's Maps and Sets of nodes see one per node.
 */
export function countingRefReads(
  root: object,
  budget: number,
): { schema: Record<string, unknown>; reads: () => number } {
  let reads = 0;
  const wrapped = new WeakMap<object, object>();
  const wrap = (value: unknown): unknown => {
    if (typeof value !== "object" || value === null) return value;
    let proxy = wrapped.get(value);
    if (proxy === undefined) {
      proxy = new Proxy(value, {
        get(target, key, receiver) {
          if (key === "$ref" && ++reads > budget) throw new Error(`more than ${budget} reads of a $ref`);
          return wrap(Reflect.get(target, key, receiver));
        },
      });
      wrapped.set(value, proxy);
    }
    return proxy;
  };
  return { schema: wrap(root) as Record<string, unknown>, reads: () => reads };
}
