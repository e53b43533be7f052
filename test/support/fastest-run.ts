/**
 * The fastest of `runs` runs of `run`, in milliseconds. A loaded machine stretches some runs (the
 * process waits for a core, a garbage collection comes): the fastest is the one it stretched least,
 * where a run that does too much work (quadratic in its input) is as slow each time.
 */
export function fastestMs(run: () => unknown, runs = 3): number {
  let fastest = Number.POSITIVE_INFINITY;
  for (let each = 0; each < runs; each++) {
    const started = performance.now();
    run();
    fastest = Math.min(fastest, performance.now() - started);
  }
  return fastest;
}
