/**
 * The CPU time of one call of `run`, in milliseconds: the process's user and system time, not the
 * wall clock. A loaded machine (the suite runs two files at once on two cores, beside whatever else
 * runs) takes the core away mid-run; the wall clock runs on then, the process's CPU time does not.
 */
function cpuMs(run: () => unknown): number {
  const started = process.cpuUsage();
  run();
  const { user, system } = process.cpuUsage(started);
  return (user + system) / 1000;
}

/**
 * How many times more CPU time `run(16 * size)` takes than `run(size)`: about 16 for work linear in
 * its input, about 256 for quadratic, so a test compares it with 64, a factor of 4 from each. For
 * what only a clock can see (a regular expression's backtracking inside V8): it compares two runs
 * of the same code, never a number of milliseconds, whose speed is the benchmark's to watch.
 *
 * Each size is the least of `runs` runs, taken in turn, so a stretch of the machine (a garbage
 * collection, a core shared with a busy neighbour) that slows one run is left out of both. Each run
 * repeats `run` as often as `run(size)` needs to take 2 ms, so the timer's grain is left out; a
 * quadratic `run` then takes about half a second at `16 * size`, so a broken one fails in seconds.
 */
export function slowdownAtSixteenTimes(run: (size: number) => unknown, size: number, runs = 5): number {
  let repeats = 1;
  const repeated = (at: number) => () => {
    for (let each = 0; each < repeats; each++) run(at);
  };
  // The least of 3 runs, as the runs below are: a first run compiles the code as it goes, and may
  // take 2 ms where the compiled code takes a tenth of that.
  const least = () => Math.min(cpuMs(repeated(size)), cpuMs(repeated(size)), cpuMs(repeated(size)));
  while (least() < 2 && repeats < 1_000_000) repeats *= 2;
  let small = Number.POSITIVE_INFINITY;
  let large = Number.POSITIVE_INFINITY;
  for (let each = 0; each < runs; each++) {
    small = Math.min(small, cpuMs(repeated(size)));
    large = Math.min(large, cpuMs(repeated(16 * size)));
  }
  return large / small;
}
