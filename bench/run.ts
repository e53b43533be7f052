import { execSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { request } from "undici";
import {
  countSseEvents,
  type LoadCase,
  type LoadResult,
  median,
  runLoad,
  sequentialMedians,
} from "./load.js";
import { cpuMicros, rssMiB, startProcess, stopAll, type Target } from "./processes.js";
import { type Report, renderReport, renderScaleOut } from "./report.js";
import { type ScaleOut, serviceCpuSpent, startScaleOut } from "./scale-out.js";
import { type Apple, createProject, loadCases, root, sluiceEnv, startApple, startSluice } from "./targets.js";

/**
 * `npm run bench [-- --quick] [-- --scale-out]`: Sluice against the floor (node:http + undici
 * pass-through) and the upstream called directly, in one run, rounds interleaved, on loopback only.
 * Writes a markdown report to bench/results/ and exits non-zero when any run saw errors or lost SSE
 * events. `--scale-out` adds a second Sluice process on PostgreSQL and Redis (a scratch database and
 * a key prefix of the run's own, both removed after), measured beside the embedded default and
 * reported apart, for information (bench/README.md).
 */
const quick = process.argv.includes("--quick");
const scaleOutMode = process.argv.includes("--scale-out");
const rounds = quick ? 1 : 3;
const seconds = quick ? 2 : 5;
const connectionCounts = [1, 16, 64];
const startupSamples = 5;
const tsx = ["--import", "tsx"];

process.once("SIGINT", () => {
  stopAll();
  void (scaleOut?.cleanUp() ?? Promise.resolve())
    .catch((error: unknown) => console.error(error))
    .finally(() => process.exit(130));
});

let apple: Apple | undefined;
let scaleOut: ScaleOut | undefined;

async function main(): Promise<void> {
  console.log(`sluice bench (${quick ? "quick" : "full"}${scaleOutMode ? ", scale-out" : ""}): building…`);
  execSync("npm run --silent build", { cwd: root, stdio: "inherit" });
  const dataDir = mkdtempSync(join(tmpdir(), "sluice-bench-"));
  try {
    const upstream = await startProcess("upstream", [
      ...tsx,
      join(root, "test/fakes/fake-upstream-main.ts"),
      "0",
    ]);
    const floor = await startProcess("floor", [...tsx, join(root, "bench/floor-proxy.ts"), upstream.url]);
    apple = await startApple();
    // One start is one sample of a noisy machine: the median of several, each on a fresh data dir.
    const starts: number[] = [];
    for (let index = 0; index < (quick ? 1 : startupSamples); index++)
      starts.push(await measureStartup(upstream.url, apple.fake.url, join(dataDir, `startup-${index}`)));
    const startupMs = median(starts);
    const sluice = await startSluice(upstream.url, apple.fake.url, join(dataDir, "sluice"));
    const testKeyProject = await createProject(sluice.target.url, sluice.adminToken);
    const deviceProject = await createProject(sluice.target.url, sluice.adminToken, apple);
    const cases = loadCases(testKeyProject);
    const deviceCases = loadCases(deviceProject);
    // --scale-out: the same build and the same two projects on PostgreSQL and Redis, in a process of
    // its own beside the embedded one, so that both are measured under the same machine state.
    const scaled = new Map<string, { json: LoadCase; sse: LoadCase }>();
    const scaledTargets: Target[] = [];
    if (scaleOutMode) {
      scaleOut = await startScaleOut();
      const scaledSluice = await startSluice(
        upstream.url,
        apple.fake.url,
        join(dataDir, "sluice-scale-out"),
        {
          env: scaleOut.env,
        },
      );
      const scaledTestKey = await createProject(scaledSluice.target.url, scaledSluice.adminToken);
      const scaledDevice = await createProject(scaledSluice.target.url, scaledSluice.adminToken, apple);
      scaledTargets.push(
        { ...scaledSluice.target, name: "sluice-scaleout" },
        { ...scaledSluice.target, name: "sluice-scaleout-devicecheck" },
      );
      scaled.set("sluice-scaleout", loadCases(scaledTestKey));
      scaled.set("sluice-scaleout-devicecheck", loadCases(scaledDevice));
    }
    // The same Sluice process, called with `<partial>.<device token>`: Apple is asked once, then
    // the verified token is served from the cache (the path every request after an app's first takes).
    const sluiceDevice: Target = { ...sluice.target, name: "sluice-devicecheck" };
    const upstreamPath = (load: LoadCase) => load.path.replace(/^\/v1\/provider-a\/[^/]+/, "/a/v1");
    const at = (target: Target, load: LoadCase): LoadCase => {
      if (target.name === "sluice") return load;
      if (target.name === "sluice-devicecheck") return deviceCases[load.name];
      const scaledCases = scaled.get(target.name);
      if (scaledCases) return scaledCases[load.name];
      return { ...load, path: upstreamPath(load) };
    };
    const targets: Target[] = [upstream, floor, sluice.target, sluiceDevice, ...scaledTargets];

    const report: Report = {
      mode: `${quick ? "quick" : "full"}${scaleOutMode ? "-scale-out" : ""}`,
      date: new Date().toISOString(),
      rounds,
      seconds,
      runs: [],
      failures: [],
    };
    if (scaleOut)
      report.scaleOut = {
        database: `PostgreSQL ${scaleOut.databaseName} at 127.0.0.1:5432`,
        redis: `${scaleOut.redisUrl}, key prefix ${scaleOut.redisPrefix}`,
        loadAverageBefore: loadavg(),
      };
    report.startupMs = startupMs;
    report.startupSamples = starts;
    report.rssIdle = { floor: rssMiB(floor.child), sluice: rssMiB(sluice.target.child) };
    const sseEvents = await Promise.all(
      targets.map((target) => countSseEvents(target.url, at(target, cases.sse))),
    );
    if (new Set(sseEvents).size !== 1)
      report.failures.push(`SSE event counts differ between targets: ${sseEvents.join(", ")}`);
    report.sseEvents = sseEvents[0];

    console.log("warming up…");
    for (const target of targets)
      for (const load of [cases.json, cases.sse])
        await runLoad(target.url, at(target, load), 16, { seconds: quick ? 1 : 2 });

    for (let round = 0; round < rounds; round++) {
      for (const load of [cases.json, cases.sse]) {
        for (const connections of connectionCounts) {
          const order = round % 2 === 0 ? targets : [...targets].reverse();
          for (const target of order) {
            const scaledTarget = scaled.has(target.name) ? scaleOut : undefined;
            const servicesBefore = scaledTarget?.serviceCpu();
            const scriptsBefore = await scaledTarget?.redisScripts();
            const cpuBefore = cpuMicros(target.child);
            const result: LoadResult = await runLoad(target.url, at(target, load), connections, { seconds });
            const perRequest = (value: number) => value / Math.max(1, result.requests);
            const cpu = perRequest(cpuMicros(target.child) - cpuBefore);
            const services =
              scaledTarget && servicesBefore
                ? {
                    ...serviceCpuSpent(servicesBefore, scaledTarget.serviceCpu()),
                    redisScripts: (await scaledTarget.redisScripts()) - (scriptsBefore ?? 0),
                  }
                : undefined;
            report.runs.push({
              round,
              target: target.name,
              load: load.name,
              connections,
              cpuMicrosPerRequest: cpu,
              ...result,
              ...(services
                ? {
                    redisCpuMicrosPerRequest: perRequest(services.redis),
                    postgresCpuMicrosPerRequest: perRequest(services.postgres),
                    redisScriptsPerRequest: perRequest(services.redisScripts),
                  }
                : {}),
            });
            console.log(
              `round ${round + 1} ${load.name} c=${connections} ${target.name}: ${Math.round(result.rps)} req/s, ${cpu.toFixed(0)} µs CPU/req`,
            );
            if (result.errors > 0 || result.non2xx > 0)
              report.failures.push(
                `${target.name} ${load.name} c=${connections}: ${result.errors} errors, ${result.non2xx} non-2xx`,
              );
          }
        }
      }
    }

    report.p50AtOne = await sequentialMedians(
      targets.map((target) => ({ name: target.name, url: target.url, load: at(target, cases.json) })),
      quick ? 200 : 600,
      "end",
    );
    report.firstEvent = await sequentialMedians(
      targets.map((target) => {
        const sse = at(target, cases.sse);
        return { name: target.name, url: target.url, load: { ...sse, path: `${sse.path}?sse_delay_ms=5` } };
      }),
      quick ? 30 : 100,
      "first-byte",
    );
    report.appleCalls = apple.fake.calls.length;
    // Once per Sluice process: the scale-out one keeps its own ledger (in Redis).
    const appleCallsExpected = scaleOutMode ? 2 : 1;
    if (report.appleCalls !== appleCallsExpected)
      report.failures.push(
        `the device token was sent to Apple ${report.appleCalls} times, not ${appleCallsExpected === 1 ? "once" : `${appleCallsExpected} times (once per Sluice process)`}`,
      );
    report.rssAfter = { floor: rssMiB(floor.child), sluice: rssMiB(sluice.target.child) };

    if (report.scaleOut) report.scaleOut.loadAverageAfter = loadavg();
    const markdown = report.scaleOut
      ? `${renderReport(report)}\n${renderScaleOut(report)}`
      : renderReport(report);
    mkdirSync(join(root, "bench/results"), { recursive: true });
    const stem = `${report.date.slice(0, 10)}-${report.mode}`;
    writeFileSync(join(root, "bench/results", `${stem}.md`), markdown);
    writeFileSync(join(root, "bench/results", `${stem}.json`), `${JSON.stringify(report, null, 2)}\n`);
    // latest.md stays the embedded default's: the budget is measured there.
    writeFileSync(join(root, "bench/results", scaleOutMode ? "latest-scale-out.md" : "latest.md"), markdown);
    console.log(`\n${markdown}`);
    if (report.failures.length > 0) process.exitCode = 1;
  } finally {
    stopAll();
    await apple?.fake.close();
    rmSync(dataDir, { recursive: true, force: true });
    await scaleOut?.cleanUp();
  }
}

/** From spawning the production build on a fresh data dir to its first 200 on /health. */
async function measureStartup(upstreamUrl: string, appleUrl: string, dataDir: string): Promise<number> {
  const started = performance.now();
  const target = await startProcess(
    "startup",
    [join(root, "dist/src/main.js")],
    sluiceEnv(upstreamUrl, appleUrl, dataDir, "startup-admin-token"),
  );
  for (;;) {
    const response = await request(`${target.url}/health`).catch(() => null);
    if (response?.statusCode === 200) {
      await response.body.dump();
      break;
    }
    await response?.body.dump();
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
  const elapsed = performance.now() - started;
  target.child.kill("SIGTERM");
  return elapsed;
}

main().catch(async (error: unknown) => {
  stopAll();
  console.error(error);
  await scaleOut?.cleanUp().catch((cleanUpError: unknown) => console.error(cleanUpError));
  process.exit(1);
});
