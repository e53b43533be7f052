import { type LoadResult, median } from "./load.js";

/** The benchmark's findings, and their markdown rendering against DESIGN.md's budget. */
export interface Run extends LoadResult {
  round: number;
  target: string;
  load: "json" | "sse";
  connections: number;
  cpuMicrosPerRequest: number;
  /** --scale-out, its targets: the redis-server process's CPU over the run per request (every client's). */
  redisCpuMicrosPerRequest?: number;
  /** --scale-out, its targets: the CPU of the PostgreSQL backends connected to the bench's database. */
  postgresCpuMicrosPerRequest?: number;
  /** --scale-out, its targets: scripts (EVALSHA, EVAL: round trips) Redis ran over the run per request (every client's). */
  redisScriptsPerRequest?: number;
}

export interface Report {
  mode: string;
  date: string;
  rounds: number;
  seconds: number;
  runs: Run[];
  failures: string[];
  /** Median of `startupSamples`. */
  startupMs?: number;
  startupSamples?: number[];
  rssIdle?: Record<string, number>;
  rssAfter?: Record<string, number>;
  p50AtOne?: Record<string, number>;
  firstEvent?: Record<string, number>;
  sseEvents?: number | undefined;
  /** Calls the fake Apple received over the whole run (the cached DeviceCheck path asks once). */
  appleCalls?: number;
  /** --scale-out: where the scale-out Sluice kept its state, and the machine's load around the run. */
  scaleOut?: {
    database: string;
    redis: string;
    loadAverageBefore: number[];
    loadAverageAfter?: number[];
  };
}

const fixed = (value: number | undefined, digits = 0) =>
  value === undefined || Number.isNaN(value) ? "n/a" : value.toFixed(digits);
const mark = (pass: boolean) => (pass ? "pass" : "**miss**");

/** Median CPU µs per request of `target` and of the floor for one case, their ratio and its spread over rounds. */
export function cpuAgainstFloor(report: Report, target: string, load: "json" | "sse", connections: number) {
  const runsOf = (name: string) =>
    report.runs.filter((run) => run.target === name && run.load === load && run.connections === connections);
  const floorRuns = runsOf("floor");
  const targetRuns = runsOf(target);
  const ratios = targetRuns.map(
    (run) =>
      run.cpuMicrosPerRequest /
      (floorRuns.find((floorRun) => floorRun.round === run.round)?.cpuMicrosPerRequest ?? Number.NaN),
  );
  const floor = median(floorRuns.map((run) => run.cpuMicrosPerRequest));
  const sluice = median(targetRuns.map((run) => run.cpuMicrosPerRequest));
  return {
    floor,
    sluice,
    ratio: sluice / floor,
    spread: `${fixed(Math.min(...ratios), 2)}–${fixed(Math.max(...ratios), 2)}`,
  };
}

export function renderReport(report: Report): string {
  const lines = [
    `# Sluice benchmark (${report.mode}), ${report.date}`,
    "",
    `${report.rounds} round(s) of ${report.seconds} s per target and case, rounds interleaved; load from autocannon on the same`,
    "2-core machine, loopback only. Absolute numbers vary from machine to machine: read the ratios. Targets: `upstream`",
    "(the fake provider called directly), `floor` (node:http + undici pass-through), `sluice` (production build,",
    "test-key auth, key rebuild, rate limits and usage recording on), `sluice-devicecheck` (the same process, DeviceCheck auth).",
    "",
    "## Against the budget (DESIGN.md)",
    "",
    "| budget line | floor | sluice | sluice / floor (round spread) | budget | verdict |",
    "|---|---|---|---|---|---|",
  ];
  for (const load of ["json", "sse"] as const)
    for (const connections of [1, 16, 64]) {
      const { floor, sluice, ratio, spread } = cpuAgainstFloor(report, "sluice", load, connections);
      lines.push(
        `| CPU µs per ${load.toUpperCase()} request, ${connections} conn | ${fixed(floor)} | ${fixed(sluice)} | ${fixed(ratio, 2)}x (${spread}) | <= 1.2x | ${mark(ratio <= 1.2)} |`,
      );
    }
  const p50 = report.p50AtOne ?? {};
  const addedFloor = (p50.floor ?? Number.NaN) - (p50.upstream ?? Number.NaN);
  const addedSluice = (p50.sluice ?? Number.NaN) - (p50.upstream ?? Number.NaN);
  lines.push(
    `| added p50 latency at 1 conn, ms (vs upstream ${fixed(p50.upstream, 3)}) | ${fixed(addedFloor, 3)} | ${fixed(addedSluice, 3)} | | <= 0.5 ms | ${mark(addedSluice <= 0.5)} |`,
  );
  const first = report.firstEvent ?? {};
  const firstFloor = (first.floor ?? Number.NaN) - (first.upstream ?? Number.NaN);
  const firstSluice = (first.sluice ?? Number.NaN) - (first.upstream ?? Number.NaN);
  lines.push(
    `| first SSE event later than direct, ms (direct ${fixed(first.upstream, 3)}) | ${fixed(firstFloor, 3)} | ${fixed(firstSluice, 3)} | | <= 1 ms | ${mark(firstSluice <= 1)} |`,
  );
  const rss = report.rssAfter ?? {};
  lines.push(
    `| RSS after load, MiB (idle: floor ${fixed(report.rssIdle?.floor, 1)}, sluice ${fixed(report.rssIdle?.sluice, 1)}) | ${fixed(rss.floor, 1)} | ${fixed(rss.sluice, 1)} | | <= 150 MiB | ${mark((rss.sluice ?? Number.POSITIVE_INFINITY) <= 150)} |`,
  );
  lines.push(
    `| start to first 200 on /health, ms (fresh data dir; median of ${report.startupSamples?.length ?? 1} start${report.startupSamples?.length === 1 ? "" : "s"}: ${(report.startupSamples ?? []).map((ms) => fixed(ms, 0)).join(", ")}) | | ${fixed(report.startupMs, 0)} | | <= 1000 ms | ${mark((report.startupMs ?? Number.POSITIVE_INFINITY) <= 1000)} |`,
  );
  lines.push(
    "",
    "## Throughput and tail latency",
    "",
    "| case | conn | upstream req/s | floor req/s | sluice req/s | floor p99 ms | sluice p99 ms |",
    "|---|---|---|---|---|---|---|",
  );
  for (const load of ["json", "sse"] as const) {
    for (const connections of [1, 16, 64]) {
      const pick = (target: string, field: "rps" | "p99") =>
        median(
          report.runs
            .filter((run) => run.target === target && run.load === load && run.connections === connections)
            .map((run) => run[field]),
        );
      lines.push(
        `| ${load} | ${connections} | ${fixed(pick("upstream", "rps"))} | ${fixed(pick("floor", "rps"))} | ${fixed(pick("sluice", "rps"))} | ${fixed(pick("floor", "p99"))} | ${fixed(pick("sluice", "p99"))} |`,
      );
    }
  }
  lines.push(
    "",
    "## DeviceCheck, cached token",
    "",
    "`sluice-devicecheck` is the same Sluice process called with `Bearer <partial>.<device token>` on a project",
    `with DeviceCheck on: the fake Apple verified the token once (calls over the whole run: ${report.appleCalls ?? "n/a"}),`,
    "every later request is served from the verified-token cache.",
    "",
    "| case | conn | floor CPU µs | sluice-devicecheck CPU µs | / floor (round spread) | / sluice with test key |",
    "|---|---|---|---|---|---|",
  );
  for (const load of ["json", "sse"] as const)
    for (const connections of [1, 16, 64]) {
      const device = cpuAgainstFloor(report, "sluice-devicecheck", load, connections);
      const testKey = cpuAgainstFloor(report, "sluice", load, connections);
      lines.push(
        `| ${load} | ${connections} | ${fixed(device.floor)} | ${fixed(device.sluice)} | ${fixed(device.ratio, 2)}x (${device.spread}) | ${fixed(device.sluice / testKey.sluice, 2)}x |`,
      );
    }
  const deviceP50 = (p50["sluice-devicecheck"] ?? Number.NaN) - (p50.upstream ?? Number.NaN);
  const deviceFirst = (first["sluice-devicecheck"] ?? Number.NaN) - (first.upstream ?? Number.NaN);
  lines.push(
    "",
    `Added p50 at 1 conn: ${fixed(deviceP50, 3)} ms; first SSE event later than direct: ${fixed(deviceFirst, 3)} ms.`,
  );
  lines.push("", `SSE events per stream, identical through every target: ${report.sseEvents ?? "n/a"}.`);
  lines.push(
    report.failures.length === 0
      ? "No errors or non-2xx answers in any run."
      : `**Failures:**\n${report.failures.map((failure) => `- ${failure}`).join("\n")}`,
  );
  return `${lines.join("\n")}\n`;
}

/**
 * `--scale-out`: the Sluice process on PostgreSQL and Redis beside the embedded one, on the lines the
 * budget measures, for information: the budget is the embedded default's (DESIGN.md).
 */
export function renderScaleOut(report: Report): string {
  const scale = report.scaleOut;
  const p50 = report.p50AtOne ?? {};
  const first = report.firstEvent ?? {};
  const added = (values: Record<string, number>, name: string) =>
    (values[name] ?? Number.NaN) - (values.upstream ?? Number.NaN);
  const load = (values: number[] | undefined) => (values ?? []).map((value) => value.toFixed(2)).join(" ");
  const lines = [
    "## Scale-out: PostgreSQL + Redis (informational, not budget lines)",
    "",
    "`sluice-scaleout` is a second Sluice process (the same build) with `DATABASE_URL` and `REDIS_URL` set,",
    `measured in the same rounds as the others: ${scale?.database ?? "n/a"}; Redis ${scale?.redis ?? "n/a"}.`,
    "`sluice-scaleout-devicecheck` is that process called on its DeviceCheck project (the token ledger in Redis).",
    `Load average (1, 5, 15 min) before the run: ${load(scale?.loadAverageBefore)}; after: ${load(scale?.loadAverageAfter)}.`,
    "",
    "| target | added p50 at 1 conn, ms | first SSE event later than direct, ms | CPU µs / JSON req, 1 / 16 / 64 conn (x floor) | CPU µs / SSE req, 1 / 16 / 64 conn (x floor) |",
    "|---|---|---|---|---|",
  ];
  for (const name of [
    "floor",
    "sluice",
    "sluice-scaleout",
    "sluice-devicecheck",
    "sluice-scaleout-devicecheck",
  ]) {
    const cpu = (kind: "json" | "sse") =>
      [1, 16, 64]
        .map((connections) => {
          if (name === "floor") return fixed(cpuAgainstFloor(report, "sluice", kind, connections).floor);
          const { sluice, ratio } = cpuAgainstFloor(report, name, kind, connections);
          return `${fixed(sluice)} (${fixed(ratio, 2)}x)`;
        })
        .join(" / ");
    lines.push(
      `| ${name} | ${fixed(added(p50, name), 3)} | ${fixed(added(first, name), 3)} | ${cpu("json")} | ${cpu("sse")} |`,
    );
  }
  lines.push(
    "",
    "What the servers spent per request of the scale-out targets, medians over rounds: the redis-server",
    "process's CPU and the scripts it ran (EVALSHA, EVAL: one round trip each; every client's, so other programs using this Redis meanwhile",
    "count too), and the CPU of the PostgreSQL backends connected to the bench's database (the usage writes).",
    "",
    "| target | case | conn | req/s | Sluice CPU µs | redis-server CPU µs | Redis scripts | PostgreSQL CPU µs |",
    "|---|---|---|---|---|---|---|---|",
  );
  for (const name of ["sluice-scaleout", "sluice-scaleout-devicecheck"])
    for (const kind of ["json", "sse"] as const)
      for (const connections of [1, 16, 64]) {
        const runs = report.runs.filter(
          (run) => run.target === name && run.load === kind && run.connections === connections,
        );
        const pick = (field: (run: Run) => number | undefined) =>
          median(runs.map(field).filter((value): value is number => value !== undefined));
        lines.push(
          `| ${name} | ${kind} | ${connections} | ${fixed(pick((run) => run.rps))} | ${fixed(pick((run) => run.cpuMicrosPerRequest))} | ${fixed(pick((run) => run.redisCpuMicrosPerRequest))} | ${fixed(
            pick((run) => run.redisScriptsPerRequest),
            2,
          )} | ${fixed(
            pick((run) => run.postgresCpuMicrosPerRequest),
            1,
          )} |`,
        );
      }
  return `${lines.join("\n")}\n`;
}
