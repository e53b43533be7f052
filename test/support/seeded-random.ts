/**
 * mulberry32: a small, well-mixed 32-bit generator whose sequence depends on the seed alone, the
 * same on every run and platform, so a property test's failure names the seed that replays it.
 * Numbers in [0, 1).
 */
export function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Whole numbers from 0 to `below` − 1, drawn from mulberry32(seed). */
export function seededBelow(seed: number): (below: number) => number {
  const next = mulberry32(seed);
  return (below) => Math.floor(next() * below);
}

/** Draws from mulberry32(seed): numbers, whole numbers in a range, chances and picks. */
export function seededDraws(seed: number) {
  const next = mulberry32(seed);
  return {
    next,
    int: (low: number, high: number) => low + Math.floor(next() * (high - low + 1)),
    chance: (p: number) => next() < p,
    pick: <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)] as T,
  };
}
