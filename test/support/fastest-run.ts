/**
 * The fastest of `runs` runs of `run`, in milliseconds. A loaded machine stretches some runs (the
 * process waits for a core, a garbage collection comes): the fastest is the one it stretched least,
 * where a run that does too much work (quadratic in its input) is as slow each time.
 */
function fastestMs(run: () => unknown, runs = 3): number {
  let fastest = Number.POSITIVE_INFINITY;
  for (let each = 0; each < runs; each++) {
    const started = performance.now();
    run();
    fastest = Math.min(fastest, performance.now() - started);
  }
  return fastest;
}

/**
 * How many times longer `run(4 * size)` takes than `run(size)`, each the fastest of `runs` runs
 * (taken in turn, so a loaded stretch of the machine stretches both): about 4 for work linear in
 * its input, about 16 for quadratic. For what only a clock can see (a regular expression's
 * backtracking inside V8): it compares two runs of the same code, never a number of milliseconds.
 * Each run repeats `run` as often as `run(size)` needs to take 2 ms, so the timer's grain is left
 * out, and a quadratic `run` takes tens of milliseconds at `4 * size`, not seconds.
 */
export function slowdownAtFourTimes(run: (size: number) => unknown, size: number, runs = 5): number {
  let repeats = 1;
  const repeated = (at: number) => () => {
    for (let each = 0; each < repeats; each++) run(at);
  };
  while (fastestMs(repeated(size), 1) < 2 && repeats < 1_000_000) repeats *= 2;
  let small = Number.POSITIVE_INFINITY;
  let large = Number.POSITIVE_INFINITY;
  for (let each = 0; each < runs; each++) {
    small = Math.min(small, fastestMs(repeated(size), 1));
    large = Math.min(large, fastestMs(repeated(4 * size), 1));
  }
  return large / small;
}
