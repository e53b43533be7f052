import { execFileSync, execSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type LoadCase, runLoad } from "./load.js";
import { startProcess, stopAll, type Target } from "./processes.js";
import { type Apple, createProject, loadCases, root, startApple, startSluice } from "./targets.js";

/**
 * `npm run bench:instructions`: instructions executed per proxied request, Sluice against the
 * floor, counted by valgrind's callgrind. CPU time on this shared 2-core machine moves by up to
 * half between two runs of one build; an instruction count does not depend on what else the
 * machine runs, so a change of a few percent to the hot path shows. It counts user-space
 * instructions of every thread (the kernel's share, and a cache miss's cost, are not in it):
 * read it beside `npm run bench`, not instead of it.
 *
 * Each target runs under callgrind with counting off while it starts and warms up (the JIT
 * compiles the hot path); counting is then switched on for windows of a fixed number of requests
 * until two in a row agree, and the report gives their mean and spread (bench/README.md).
 */
const quick = process.argv.includes("--quick");
// The optimizing compiler settles after ~5,000 requests of one case (`--trace-opt`), and the
// counts of later windows agree within a few percent only after ~20,000.
const warmUpRequests = quick ? 5_000 : 20_000;
const measuredRequests = quick ? 1_000 : 2_000;
const maxWindows = 10;
/**
 * Windows counted before two in a row may end the count: Sluice's second and third windows still
 * fall with the compiler's last work and can agree within `agreement` on the way down (an SSE run
 * stopped at 465,726 and 454,083 where a run of the same build settled at ~415,000; a DeviceCheck
 * run at 414,175 and 423,844 where another settled at ~375,500). The floor settles by its third.
 */
const minWindows = 4;
/** A request through a target under valgrind, on a machine busy with the other, may take seconds. */
const slowTimeoutSeconds = 120;
const agreement = 0.03;
/** `--connections N`: the load's connections (16 unless given), as the full benchmark's 1, 16 or 64. */
const connectionsArgument = process.argv.includes("--connections")
  ? Number(process.argv[process.argv.indexOf("--connections") + 1])
  : 16;
if (!Number.isInteger(connectionsArgument) || connectionsArgument < 1)
  throw new Error("--connections takes a whole number, 1 or more");
const connectionCounts = [connectionsArgument];
const tsx = ["--import", "tsx"];
// No background compiler or GC threads: what callgrind counts then depends on the requests, not
// on when a helper thread happened to run. (`--predictable-gc-schedule` was tried too: with it,
// garbage collection, mostly full marking and sweeping, was ~36% of Sluice's count per SSE request,
// while natively (`--trace-gc`) Sluice and the floor each ran one mark-compact in 50,000.)
// `--profile` also has V8 write a map of its compiled code, so the dumps can name JavaScript.
const profile = process.argv.includes("--profile");
/**
 * `--device`: Sluice's project authenticates with DeviceCheck (a token the fake Apple verified
 * once, then served from the token ledger), the production path, instead of a test key; its report
 * is `instructions-devicecheck-latest.md`. `--case json` or `--case sse`: that case only.
 */
const device = process.argv.includes("--device");
const caseArgument = process.argv[process.argv.indexOf("--case") + 1];
const caseNames = (["json", "sse"] as const).filter(
  (name) => !process.argv.includes("--case") || name === caseArgument,
);
const nodeFlags = ["--single-threaded", ...(profile ? ["--perf-basic-prof"] : [])];

/**
 * The usage writer commits a batch when 200 rows are queued, and on every tick of its timer
 * whatever is queued. Under load natively (~3,000 requests a second) the 200th row always comes
 * first, so every transaction holds 200 rows; under callgrind (~60 a second) the 250 ms tick would
 * commit every ~15 rows. A commit counts ~85,000 instructions (its WAL frames): ~400 a row at 200,
 * ~5,700 at 15. The tick is stretched so that, here too, the 200th row commits. (The credential
 * records' TTL was stretched too, once: their reloads then came every ~6,000 requests, as natively,
 * but the windows that held one counted up to 40% more than the others, and never agreed.)
 */
const usageFlushIntervalMs = "60000";

process.once("SIGINT", () => {
  stopAll();
  process.exit(130);
});

interface Count {
  target: string;
  load: string;
  connections: number;
  perRequest: number[];
}

function callgrind(outFile: string): string[] {
  return [
    "valgrind",
    "--tool=callgrind",
    "--instr-atstart=no",
    // V8 writes and rewrites machine code in memory: valgrind must look for it.
    "--smc-check=all-non-file",
    `--callgrind-out-file=${outFile}`,
  ];
}

/**
 * Sends a command to a target under callgrind. valgrind names its control pipes after the
 * process's `HOST` variable, which Sluice's settings use too: callgrind_control must see the same.
 */
function control(counted: Counted, ...args: string[]): void {
  const output = execFileSync("callgrind_control", [...args, String(counted.target.child.pid)], {
    encoding: "utf8",
    env: { ...process.env, HOST: counted.host },
  });
  // It exits 0 when it found no such process too.
  if (!output.includes("OK."))
    throw new Error(`callgrind_control ${args.join(" ")} ${counted.target.name}: ${output}`);
}

/** The instruction total of the newest dump written next to `outFile`, and that dump's path. */
function lastDump(outFile: string, before: ReadonlySet<string>): { total: number; path: string } {
  const directory = join(outFile, "..");
  const stem = outFile.slice(directory.length + 1);
  const fresh = readdirSync(directory).filter((name) => name.startsWith(stem) && !before.has(name));
  const newest = fresh.sort().at(-1);
  if (!newest) throw new Error(`callgrind wrote no dump for ${outFile}`);
  const match = /^summary: (\d+)/m.exec(readFileSync(join(directory, newest), "utf8"));
  if (!match?.[1]) throw new Error(`no summary line in ${newest}`);
  return { total: Number(match[1]), path: join(directory, newest) };
}

/** A target process under callgrind. */
interface Counted {
  target: Target;
  outFile: string;
  host: string | undefined;
  at: (load: LoadCase) => LoadCase;
  /** The dump of the last window counted. */
  lastDump?: string;
}

async function measure(counted: Counted, load: LoadCase, connections: number): Promise<number> {
  const { target, outFile } = counted;
  const before = new Set(readdirSync(join(outFile, "..")));
  control(counted, "--zero");
  const result = await runLoad(
    target.url,
    load,
    connections,
    { requests: measuredRequests },
    slowTimeoutSeconds,
  );
  // One answer in a thousand that is not 2xx changes the count by less than the windows differ
  // (under valgrind a request may outlast a timeout the gateway keeps); more fails the run.
  if (result.errors + result.non2xx > 0) {
    const message = `${target.name}: ${result.errors} errors, answers by status ${JSON.stringify(result.statuses)}`;
    if (result.errors + result.non2xx > measuredRequests / 1000) throw new Error(message);
    console.warn(`warning: ${message}`);
  }
  control(counted, "--dump");
  // The dump is written by the target asynchronously to callgrind_control's return.
  for (let attempt = 0; ; attempt++) {
    try {
      const dump = lastDump(outFile, before);
      counted.lastDump = dump.path;
      return dump.total / measuredRequests;
    } catch (error) {
      if (attempt >= 1200) throw error;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

/**
 * Names the JavaScript in a target's last dump (callgrind knows compiled code only by its
 * address) from V8's `/tmp/perf-<pid>.map`, writes it beside the dump as `<dump>.named`, and
 * prints the functions of Sluice's own code (`src/`) and the process's largest items by
 * instructions per request, each with what it calls (inclusive). The build is one bundle, packages
 * and all: a function of it is named by the module it came from (`bundledModuleOf`).
 */
function printProfile(counted: Counted, label: string): void {
  if (!counted.lastDump) return;
  const named = `${counted.lastDump}.named`;
  writeFileSync(named, nameJit(readFileSync(counted.lastDump, "utf8"), counted.target.child.pid as number));
  const annotated = execFileSync("callgrind_annotate", ["--inclusive=yes", "--threshold=100", named], {
    encoding: "utf8",
    maxBuffer: 256 * 1024 * 1024,
  });
  const rows = annotated
    .split("\n")
    .map((line) => /^\s*([\d,]+) \([\s\d.]+%\)\s+(.*)$/.exec(line))
    .filter((match): match is RegExpExecArray => match !== null && !match[2]?.includes("PROGRAM TOTALS"))
    .map((match) => ({
      perRequest: Number(match[1]?.replaceAll(",", "")) / measuredRequests,
      name: match[2] ?? "",
    }));
  const own = rows.filter((row) => row.name.includes(`${ownMarker}src/`)).slice(0, 40);
  console.log(`\n${label} ${counted.target.name}: instructions per request, inclusive (${named})`);
  for (const row of own.length > 0 ? own : rows.slice(0, 40))
    console.log(`${String(Math.round(row.perRequest)).padStart(8)}  ${row.name.slice(0, 160)}`);
}

/** Begins the module path in the names `bundledModuleOf` writes, so Sluice's own are found. */
const ownMarker = "module:";
const moduleStarts = new Map<string, { line: number; module: string }[]>();

/**
 * A perf map name with its place in the bundle (`…/dist/src/chunks/chunk-X.js:1234:5`) given the
 * module esbuild put there: `JS:*forward_module:src/proxy/forward.ts|chunks/chunk-X.js:1234:5`.
 * esbuild begins each module of an unminified bundle with a comment line naming its path
 * (`// src/proxy/forward.ts`, `// ../main/node_modules/undici/…` from a linked node_modules).
 */
function bundledModuleOf(name: string): string {
  const place = /(?:file:\/\/)?(\/[^\s:]*\/dist\/src\/)([^\s:]+\.js):(\d+):(\d+)$/.exec(name);
  if (!place) return name;
  const [, dir = "", file = "", line = "", column = ""] = place;
  if (!moduleStarts.has(dir + file)) {
    const starts: { line: number; module: string }[] = [];
    readFileSync(dir + file, "utf8")
      .split("\n")
      .forEach((text, index) => {
        const path = /^\/\/ (\S+\.(?:[cm]?[jt]s|json))$/.exec(text)?.[1] ?? "";
        const module = path.startsWith("src/") ? path : path.slice(path.indexOf("node_modules/"));
        if (path.includes("node_modules/") || path.startsWith("src/"))
          starts.push({ line: index + 1, module });
      });
    moduleStarts.set(dir + file, starts);
  }
  const module = moduleStarts.get(dir + file)?.findLast((start) => start.line <= Number(line))?.module;
  if (module === undefined) return name;
  return `${name.slice(0, place.index)}${ownMarker}${module}|${file}:${line}:${column}`;
}

/** A callgrind dump with each `0x…` function that V8's perf map knows given its JavaScript name. */
function nameJit(dump: string, pid: number): string {
  const entries = readFileSync(`/tmp/perf-${pid}.map`, "utf8")
    .split("\n")
    .map((line) => /^([0-9a-f]+) ([0-9a-f]+) (.*)$/.exec(line))
    .filter((match): match is RegExpExecArray => match !== null)
    .map((match) => ({
      start: Number.parseInt(match[1] ?? "", 16),
      size: Number.parseInt(match[2] ?? "", 16),
      name: bundledModuleOf((match[3] ?? "").replaceAll(" ", "_")),
    }));
  const names = new Map<string, string | undefined>();
  const nameOf = (address: string): string | undefined => {
    if (!names.has(address)) {
      const at = Number.parseInt(address, 16);
      // Code space is reused once a function is collected: the map's last entry for an address wins.
      const entry = entries.findLast(
        (candidate) => candidate.start <= at && at < candidate.start + candidate.size,
      );
      names.set(address, entry?.name);
    }
    return names.get(address);
  };
  return dump.replace(/^(c?fn=\(\d+\)) 0x([0-9a-f]+)$/gm, (line, head: string, address: string) => {
    const name = nameOf(address);
    return name === undefined ? line : `${head} ${name}`;
  });
}

/** The floor and Sluice, each under callgrind with counting off, and the load cases for both. */
async function startCounted(
  upstreamUrl: string,
  apple: Apple,
  directory: string,
): Promise<Counted[] & { cases: ReturnType<typeof loadCases> }> {
  mkdirSync(directory, { recursive: true });
  const slow = { timeoutMs: 300_000 };
  const floorOut = join(directory, "floor.out");
  const floor = await startProcess(
    "floor",
    [...nodeFlags, ...tsx, join(root, "bench/floor-proxy.ts"), upstreamUrl],
    {},
    {
      ...slow,
      wrapper: callgrind(floorOut),
    },
  );
  const sluiceOut = join(directory, "sluice.out");
  const sluice = await startSluice(upstreamUrl, apple.fake.url, join(directory, "data"), {
    ...slow,
    nodeFlags,
    env: { SLUICE_USAGE_FLUSH_INTERVAL_MS: usageFlushIntervalMs },
    wrapper: callgrind(sluiceOut),
  });
  const cases = loadCases(
    await createProject(sluice.target.url, sluice.adminToken, device ? apple : undefined),
  );
  const floorCase = (load: LoadCase): LoadCase => ({
    ...load,
    path: load.path.replace(/^\/v1\/provider-a\/[^/]+/, "/a/v1"),
  });
  const started: Counted[] = [
    { target: floor, outFile: floorOut, host: process.env.HOST, at: floorCase },
    { target: sluice.target, outFile: sluiceOut, host: "127.0.0.1", at: (load: LoadCase) => load },
  ];
  return Object.assign(started, { cases });
}

async function main(): Promise<void> {
  try {
    execFileSync("valgrind", ["--version"], { stdio: "ignore" });
  } catch {
    throw new Error("valgrind is not installed (Debian: apt-get install valgrind)");
  }
  console.log("sluice instruction counts: building…");
  execSync("npm run --silent build", { cwd: root, stdio: "inherit" });
  const workDir = mkdtempSync(join(tmpdir(), "sluice-instructions-"));
  const apple = await startApple();
  const counts: Count[] = [];
  try {
    // Under callgrind a proxy's timers fire late: a connection the upstream closes after its 5 s of
    // idleness could be taken for a request just then, and the request would fail (502). The
    // upstream keeps idle connections longer than either proxy (undici: 30 s) does.
    const upstream = await startProcess(
      "upstream",
      [...tsx, join(root, "test/fakes/fake-upstream-main.ts"), "0"],
      { FAKE_KEEP_ALIVE_TIMEOUT_MS: "120000" },
    );
    // Each case on fresh processes warmed up on that case alone: code optimized for one case and
    // then given another is deoptimized and compiled again, and the compiler's work, which a long
    // run spreads over millions of requests, would be counted as the request's.
    for (const name of caseNames)
      for (const connections of connectionCounts) {
        const started = await startCounted(upstream.url, apple, join(workDir, `${name}-${connections}`));
        try {
          // Both targets at once: what callgrind counts does not depend on the other's load.
          const measured = await Promise.all(
            started.map(async (counted) => {
              const load = counted.at(started.cases[name]);
              await runLoad(
                counted.target.url,
                load,
                connections,
                { requests: warmUpRequests },
                slowTimeoutSeconds,
              );
              control(counted, "--instr=on");
              const count: Count = { target: counted.target.name, load: name, connections, perRequest: [] };
              // Until two windows in a row agree, from the `minWindows`th on: the first ones after the
              // warm-up still carry the optimizing compiler (its work falls to zero a few windows later).
              for (let window = 0; window < maxWindows; window++) {
                count.perRequest.push(await measure(counted, load, connections));
                const [previous, last] = count.perRequest.slice(-2);
                if (
                  count.perRequest.length >= minWindows &&
                  previous !== undefined &&
                  last !== undefined &&
                  Math.abs(last - previous) / previous < agreement
                )
                  break;
              }
              return count;
            }),
          );
          if (profile) for (const counted of started) printProfile(counted, `${name} c=${connections}`);
          for (const count of measured) {
            counts.push(count);
            console.log(
              `${name} c=${connections} ${count.target}: ${count.perRequest.map((n) => Math.round(n)).join(", ")} instructions/request`,
            );
          }
        } finally {
          for (const counted of started) counted.target.child.kill("SIGKILL");
        }
      }
  } finally {
    stopAll();
    await apple.fake.close();
    if (profile) console.log(`callgrind dumps (JavaScript named in *.named): ${workDir}`);
    else rmSync(workDir, { recursive: true, force: true });
  }
  const markdown = render(counts);
  mkdirSync(join(root, "bench/results"), { recursive: true });
  const report = device ? "instructions-devicecheck-latest.md" : "instructions-latest.md";
  writeFileSync(join(root, "bench/results", report), markdown);
  console.log(`\n${markdown}`);
}

/** The two last windows of a target: the ones that agreed (or the last two of `maxWindows`). */
function settled(count: Count): { mean: number; spread: number; windows: number } {
  const last = count.perRequest.slice(-2);
  const mean = last.reduce((sum, value) => sum + value, 0) / last.length;
  const spread = Math.max(...last.map((value) => Math.abs(value - mean) / mean));
  return { mean, spread, windows: count.perRequest.length };
}

function render(counts: readonly Count[]): string {
  const find = (target: string, load: string, connections: number) =>
    counts.find(
      (count) => count.target === target && count.load === load && count.connections === connections,
    );
  const lines = [
    `# Sluice instruction counts, ${new Date().toISOString()}`,
    "",
    "valgrind callgrind: user-space instructions of every thread of the target process per request",
    `(kernel time and cache misses are not in them). After ${warmUpRequests} uncounted requests per case,`,
    `windows of ${measuredRequests} requests are counted until two in a row agree within ${agreement * 100}%, from the ${minWindows}th window on`,
    `(at most ${maxWindows}); a line gives the mean of those two and their spread. Node flags: \`${nodeFlags.join(" ")}\`; Sluice's usage tick ${Number(usageFlushIntervalMs) / 1000} s (transactions of 200 rows).`,
    `Sluice authenticates with ${device ? "DeviceCheck (a token the fake Apple verified once, then served from the token ledger)" : "a test key"}.`,
    "",
    "| case | conn | floor instructions/request | sluice instructions/request | sluice / floor | spread (floor, sluice) | windows (floor, sluice) |",
    "|---|---|---|---|---|---|---|",
  ];
  for (const load of ["json", "sse"])
    for (const connections of connectionCounts) {
      const floorCount = find("floor", load, connections);
      const sluiceCount = find("sluice", load, connections);
      if (!floorCount || !sluiceCount) continue;
      const floor = settled(floorCount);
      const sluice = settled(sluiceCount);
      const percent = (value: number) => `±${(value * 100).toFixed(1)}%`;
      lines.push(
        `| ${load} | ${connections} | ${Math.round(floor.mean)} | ${Math.round(sluice.mean)} | ${(sluice.mean / floor.mean).toFixed(2)}x | ${percent(floor.spread)}, ${percent(sluice.spread)} | ${floor.windows}, ${sluice.windows} |`,
      );
    }
  return `${lines.join("\n")}\n`;
}

main().catch((error: unknown) => {
  stopAll();
  console.error(error);
  process.exit(1);
});
