import { createReadStream, readFileSync, statSync } from "node:fs";
import { createInterface } from "node:readline";
import { isatty } from "node:tty";
import { type AdminContext, openAdminContext } from "../admin/admin-context.js";
import { ownCursor } from "../admin/list-cursor.js";
import type { ProjectAdmin } from "../admin/project-admin.js";
import { projectIdPattern, projectIdQuoted, projectIdRule } from "../admin/project-id.js";
import {
  addProviderKeyInput,
  createProjectInput,
  projectListInput,
  updateProjectInput,
  usagePruneInput,
  usageQueryInput,
} from "../admin/project-input.js";
import { projectListLimit } from "../admin/project-list-cursor.js";
import { assertTestModeAllowed, blankProject, checkNewProject } from "../admin/project-rules.js";
import { checkProjectValues, usageReportWindow } from "../admin/project-values.js";
import { usageReportReadOn } from "../admin/usage-report-cursor.js";
import { resealedUnderCurrentKey } from "../auth/master-key-reseal.js";
import { allowsTestMode, type Config, ConfigError, loadConfig } from "../config.js";
import { isGatewayError } from "../errors.js";
import { fileNameShown, unreadableReason } from "../file-name-shown.js";
import { startFailureMessage } from "../start-failure.js";
import { stopOnSignalWhileStarting } from "../stop-while-starting.js";
import { hasSqliteFile } from "../storage/database.js";
import { prunedMonthsProblem } from "../usage/usage-retention.js";
import { checkInput } from "./check-input.js";
import { exitWhenWritten } from "./exit-when-written.js";
import { type CommandLine, type Flags, flagsOf, parseCommandLine, usage } from "./parse-command-line.js";
import { projectFields } from "./project-fields.js";
import { UsageError } from "./usage-error.js";
import { pruneVault } from "./vault-prune.js";

export interface CliIo {
  /**
   * Standard output. A stream (with `once`) whose `write` answers false, full, is written to again
   * once it drains (or closes): a long output (`projects list`) is written a page at a time.
   */
  out: {
    write(text: string): unknown;
    once?(event: "drain" | "close", listener: () => void): unknown;
    removeListener?(event: "drain" | "close", listener: () => void): unknown;
    readonly destroyed?: boolean;
    /**
     * False once the output can take no more: process.stdout on a pipe whose reader left (EPIPE)
     * says so here and emits "close", but is never `destroyed`.
     */
    readonly writable?: boolean;
  };
  err: { write(text: string): unknown };
  /** File descriptor read by --api-key-stdin. */
  stdin: number;
}

/** The `sluice` command: argument parsing only; the work is done by the admin use cases. */
export async function runCli(
  argv: string[],
  io: CliIo = { out: process.stdout, err: process.stderr, stdin: 0 },
): Promise<number> {
  let line: CommandLine;
  try {
    line = parseCommandLine(argv);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    io.err.write(`error: ${error.message}\n\n${usage}\n`);
    return 2;
  }
  if (line.kind === "help") {
    io.out.write(`${usage}\n`);
    return 0;
  }
  if (line.kind === "none") {
    io.err.write(`${usage}\n`);
    return 2;
  }
  const { command, flags } = line;
  if (command === "serve") {
    // Loaded only here, so admin commands start fast and never build the server. A stop signal
    // while it loads ends the start as one while it waits does, until serve() takes over.
    const stopLoading = stopOnSignalWhileStarting();
    let serve: typeof import("../server.js").serve;
    try {
      ({ serve } = await import("../server.js"));
    } finally {
      stopLoading();
    }
    try {
      await serve();
    } catch (error) {
      // Word for word what `npm start` (src/main.ts) prints for a failed start.
      io.err.write(startFailureMessage(error));
      return 1;
    }
    return -1;
  }
  let context: AdminContext | undefined;
  try {
    let loaded: Config | undefined;
    const settings = () => {
      loaded ??= loadConfig();
      return loaded;
    };
    const warn = (message: string) => io.err.write(`warning: ${message}\n`);
    if (command === "vault prune") {
      // The vault directory alone: no database is opened, no master key read or generated.
      const result = await pruneVault(flags, settings, warn);
      io.out.write(`${JSON.stringify(result, null, 2)}\n`);
      return 0;
    }
    const run = commandOf(command, line.arguments, flags, io.stdin, settings);
    const config = settings();
    // Only a new project may start a new embedded database: any other command run away from the
    // gateway's data dir would otherwise write a second one (and a master key) the gateway never reads.
    if (!config.databaseUrl && command !== "projects create" && !hasSqliteFile(config.dataDir)) {
      io.err.write(
        `error: no Sluice database in ${config.dataDir} (SLUICE_DATA_DIR): run the CLI where the gateway runs, or set SLUICE_DATA_DIR or DATABASE_URL to the gateway's; \`projects create\` starts a new one\n`,
      );
      return 1;
    }
    context = await openAdminContext(config, warn);
    const afterward: string[] = [];
    const outcome: Outcome = { exitCode: 0 };
    const result = await run(
      context.admin,
      context,
      (message) => afterward.push(message),
      (text) => written(io.out, text),
      outcome,
    );
    if (result !== undefined) io.out.write(`${JSON.stringify(result, null, 2)}\n`);
    for (const message of afterward) warn(message);
    if (outcome.summary !== undefined) io.err.write(`${outcome.summary}\n`);
    return outcome.exitCode;
  } catch (error) {
    if (error instanceof UsageError) {
      io.err.write(`error: ${error.message}\n\n${usage}\n`);
      return 2;
    }
    if (isGatewayError(error) || error instanceof ConfigError) {
      io.err.write(`error: ${error.message}${causeOf(error)}\n`);
      return 1;
    }
    io.err.write(failureLine(error));
    return 1;
  } finally {
    await context?.close();
  }
}

/**
 * How a command that ran to its end ends, when not with 0 and nothing more: `projects check` exits 1
 * when a project has a problem, and says what it found in a line on stderr after its output.
 */
interface Outcome {
  exitCode: number;
  summary?: string;
}

/**
 * Writes `text` to `out`, and when `out` is full waits until it drains, so what a command writes a
 * piece at a time is never held whole. False when `out` can take no more (closed: a reader that
 * stopped, `| head`): the command writes nothing more.
 */
async function written(out: CliIo["out"], text: string): Promise<boolean> {
  // Read again after each step: a write may close it (EPIPE).
  const open = () => out.destroyed !== true && out.writable !== false;
  // A closed output emits no "drain" nor "close" again: not waited for.
  if (!open()) return false;
  if (out.write(text) !== false || !out.once || !out.removeListener || !open()) return open();
  const { once, removeListener } = { once: out.once.bind(out), removeListener: out.removeListener.bind(out) };
  await new Promise<void>((resolve) => {
    const done = () => {
      removeListener("drain", done);
      removeListener("close", done);
      resolve();
    };
    once("drain", done);
    once("close", done);
  });
  return open();
}

/**
 * The one line an unexpected error is reported by: its message and its innermost cause's, no stack
 * (bin/sluice.js words one that escapes runCli the same way).
 */
function failureLine(error: unknown): string {
  return `error: ${(error as Error | undefined)?.message ?? String(error)}${causeOf(error)}\n`;
}

/** " (innermost cause)" for an error that wraps one, e.g. the driver's "connect ECONNREFUSED …". */
function causeOf(error: unknown): string {
  // Not errorChain: it names the innermost cause under a GatewayError too (the driver's error under a 503).
  let cause = error instanceof Error ? error.cause : undefined;
  while (cause instanceof Error && cause.cause instanceof Error) cause = cause.cause;
  if (!(cause instanceof Error)) return "";
  return ` (${cause.message || (cause as { code?: string }).code || cause.name})`;
}

/**
 * The command line as the work it asks for. Every usage error (an unknown command or flag, a missing
 * id or required flag, a bad flag value, any value the use case's input schema refuses, a rule that
 * reads the settings but nothing stored) is thrown by parseCommandLine or here, before the database
 * is opened or a master key generated. `settings` reads the configuration (once), for such a rule.
 */
function commandOf(
  command: string,
  args: string[],
  flags: Flags,
  stdin: number,
  settings: () => Config,
): (
  admin: ProjectAdmin,
  context: AdminContext,
  /** A warning to print once the command's output is written, at its end. */
  warnAfterward: (message: string) => void,
  /**
   * Writes a piece of the output itself, for a command whose output may be too long to hold whole
   * (it then answers undefined); false once the output can take no more.
   */
  write: (text: string) => Promise<boolean>,
  /** The exit code and stderr summary of a command that sets them (`projects check`). */
  outcome: Outcome,
) => Promise<unknown> {
  const need = (value: string | undefined, what: string): string => {
    if (!value) throw new UsageError(`${what} is required`);
    return value;
  };
  // A project id no project can have is refused here, before the database is opened.
  const project = () => {
    const id = need(args[0], "the project id");
    if (!projectIdPattern.test(id))
      throw new UsageError(
        // A longer value than any id, or one of a key's form, may be a key typed in its place.
        `the project id ${projectIdQuoted(id)} is malformed: ${projectIdRule}`,
      );
    return id;
  };
  switch (command) {
    case "projects create": {
      const fields = { ...projectFields(flags), ...(flags.id !== undefined ? { id: flags.id } : {}) };
      checkInput(createProjectInput, fields, "project", flagOfField);
      const planned = asUsageError(() => checkNewProject(createProjectInput.parse(fields), flagOfField));
      // Production's Test Mode rule reads the settings, not the store: a new project was never in
      // Test Mode, so it is known here (read once the flags passed, so a usage error comes first).
      const testModeAllowed = allowsTestMode(settings());
      asUsageError(() =>
        assertTestModeAllowed(
          blankProject(planned.id, planned.createdAt),
          planned,
          testModeAllowed,
          flagOfField,
        ),
      );
      return (admin) => admin.createProject(fields, flagOfField);
    }
    case "projects list": {
      const query = {
        ...(flags.limit !== undefined ? { limit: flags.limit } : {}),
        ...(flags.cursor !== undefined ? { cursor: flags.cursor } : {}),
      };
      checkInput(projectListInput, query, "project list query", flagOfField);
      // A cursor of the usage report is refused whatever is stored: a usage error too.
      asUsageError(() =>
        ownCursor(
          projectListInput.parse(query).cursor,
          "the project list",
          "Invalid project list query",
          flagOfField,
        ),
      );
      // A page, as the admin API answers it (`{data, next?}`), when one is asked for.
      if (Object.keys(query).length > 0) return (admin) => admin.listProjects(query, flagOfField);
      // Otherwise every project, as the bare array it printed before the list had pages, word for
      // word: read and written a page at a time, so neither a statement nor the output holds them
      // all at once (thousands of projects of 64 KiB schemas are more than one string can hold).
      return async (admin, _context, _warnAfterward, write) => {
        let next: string | undefined;
        let opened = false;
        do {
          const page = await admin.listProjects({
            limit: String(projectListLimit.max),
            ...(next !== undefined ? { cursor: next } : {}),
          });
          if (page.data.length > 0) {
            // The page's projects as JSON.stringify lays out an array's items: indented, `,\n` between.
            const items = JSON.stringify(page.data, null, 2).slice(2, -2);
            if (!(await write(`${opened ? ",\n" : "[\n"}${items}`))) return undefined;
            opened = true;
          }
          next = page.next;
        } while (next !== undefined);
        await write(opened ? "\n]\n" : "[]\n");
        return undefined;
      };
    }
    case "projects check":
      // Every project, a page at a time: one JSON line for each with a problem, as it is found.
      return async (admin, _context, _warnAfterward, write, outcome) => {
        const started = performance.now();
        const { checked, withProblems, stopped } = await admin.checkStoredProjects(
          (found) => write(`${JSON.stringify(found)}\n`),
          flagOfField,
        );
        const took = `${((performance.now() - started) / 1000).toFixed(1)} s`;
        const projectsChecked = `${checked} ${checked === 1 ? "project" : "projects"}`;
        outcome.exitCode = withProblems > 0 ? 1 : 0;
        outcome.summary = stopped
          ? `projects check: stopped after ${projectsChecked} (${withProblems} with a problem): the output was closed`
          : withProblems === 0
            ? `projects check: ${projectsChecked} checked in ${took}: none has a problem`
            : `projects check: ${projectsChecked} checked in ${took}: ${withProblems} ${withProblems === 1 ? "has a problem" : "have a problem"} (a line each on stdout), which this build refuses where the value is used: change each with sluice projects update (or PATCH /admin/v1/projects/{id})`;
        return undefined;
      };
    case "projects show": {
      const id = project();
      return (admin) => admin.getProject(id);
    }
    case "projects update": {
      const [id, fields] = [project(), projectFields(flags)];
      // A command that changes nothing is refused, as a missing argument is, not run as a no-op.
      if (Object.keys(fields).length === 0)
        throw new UsageError(
          `projects update needs a change: give one or more of ${flagsOf("projects update").join(", ")}`,
        );
      // Whether Test Mode may be turned on depends on the project stored (one already in it keeps
      // it in production): the use case refuses it when it runs, exit 1, as it does a missing project.
      checkInput(updateProjectInput, fields, "project update", flagOfField);
      asUsageError(() => checkProjectValues(updateProjectInput.parse(fields), flagOfField));
      return (admin) => admin.updateProject(id, fields, flagOfField);
    }
    case "projects delete": {
      const id = project();
      return async (admin) => {
        await admin.deleteProject(id);
        return { deleted: id };
      };
    }
    case "keys add": {
      const id = project();
      if (flags["api-key-stdin"] && flags["api-key"] !== undefined)
        throw new UsageError("--api-key and --api-key-stdin contradict each other");
      // The other flags first, every problem at once: the key piped in is read only for a command
      // that can run, and left unread otherwise (`--provider` forgotten is not the key lost).
      if (flags["api-key-stdin"])
        checkInput(
          addProviderKeyInput.omit({ apiKey: true }),
          { provider: flags.provider, ...(flags.label !== undefined ? { label: flags.label } : {}) },
          "provider key",
          flagOfField,
        );
      const apiKey = flags["api-key-stdin"] ? readStandardInput(stdin) : flags["api-key"];
      if (flags["api-key-stdin"] && !apiKey)
        throw new UsageError("standard input is empty: --api-key-stdin reads the provider key from it");
      const fields = {
        provider: flags.provider,
        apiKey,
        ...(flags.label !== undefined ? { label: flags.label } : {}),
      };
      // Every missing flag at once: a key that is missing is named by both flags that can give it.
      checkInput(addProviderKeyInput, fields, "provider key", (path) =>
        path === "apiKey" && apiKey === undefined ? "--api-key or --api-key-stdin" : flagOfField(path),
      );
      return (admin) => admin.addProviderKey(id, fields, flagOfField);
    }
    case "keys list": {
      const id = project();
      return (admin) => admin.listProviderKeys(id);
    }
    case "keys revoke": {
      const [id, keyId] = [project(), need(args[1], "the key id")];
      return async (admin) => {
        await admin.revokeProviderKey(id, keyId);
        return { revoked: keyId };
      };
    }
    case "test-keys rotate": {
      const id = project();
      return (admin) => admin.rotateTestKey(id);
    }
    case "test-keys list": {
      const id = project();
      return (admin) => admin.listTestKeys(id);
    }
    case "test-keys revoke": {
      const [id, testKeyId] = [project(), need(args[1], "the test key id")];
      return async (admin) => {
        await admin.revokeTestKey(id, testKeyId);
        return { revoked: testKeyId };
      };
    }
    case "usage": {
      const id = project();
      const query = {
        ...(flags.from !== undefined ? { from: flags.from } : {}),
        ...(flags.to !== undefined ? { to: flags.to } : {}),
        ...(flags["group-by"] !== undefined ? { groupBy: flags["group-by"] } : {}),
        ...(flags.limit !== undefined ? { limit: flags.limit } : {}),
        ...(flags.cursor !== undefined ? { cursor: flags.cursor } : {}),
      };
      checkInput(usageQueryInput, query, "usage query", flagOfField);
      const parsed = usageQueryInput.parse(query);
      // A `--to` left out is now: checked against the clock here, and again by the use case when it runs.
      const window = asUsageError(() => usageReportWindow(parsed, new Date(), flagOfField));
      // A `--cursor` of another list or report, or one `--from`, `--to` or `--group-by` contradict,
      // is refused whatever is stored: a usage error, as the use case would refuse it (422).
      const report = { projectId: id, from: window.from.toISOString(), to: window.to.toISOString() };
      asUsageError(() => usageReportReadOn(parsed, report, flagOfField));
      // Messages name the flags (`--group-by`), not the fields they set (`groupBy`).
      return (admin) => admin.usageReport(id, query, flagOfField);
    }
    case "usage prune": {
      checkInput(usagePruneInput, { before: flags.before }, "usage prune", flagOfField);
      const before = new Date(usagePruneInput.parse({ before: flags.before }).before);
      // Checked again when it runs: the month may turn meanwhile.
      const problem = prunedMonthsProblem(before, new Date());
      if (problem) throw new UsageError(`--before: ${problem}`);
      return (_admin, context) => context.pruneUsage(before);
    }
    case "usage import": {
      const file = args[0] === "-" ? undefined : args[0];
      if (file === undefined && isatty(stdin))
        throw new UsageError(
          "usage import: standard input is a terminal: give the log's file, or pipe the log in (… | sluice usage import)",
        );
      if (file !== undefined) readableFile(file);
      return async (_admin, context, _warnAfterward, _write, outcome) => {
        const input =
          file === undefined ? createReadStream("", { fd: stdin, autoClose: false }) : createReadStream(file);
        const lines = createInterface({ input, crlfDelay: Number.POSITIVE_INFINITY });
        try {
          const summary = await context.importUsage(lines);
          const { read, inserted, alreadyPresent, refused } = summary;
          outcome.exitCode = refused.length > 0 ? 1 : 0;
          outcome.summary = `usage import: ${read} ${read === 1 ? "row" : "rows"} read: ${inserted} inserted, ${alreadyPresent} already present, ${refused.length} refused${refused.length > 0 ? " (listed on stdout, with their lines and reasons)" : ""}`;
          return summary;
        } finally {
          lines.close();
          // Standard input's descriptor is the caller's: destroying its stream would close it.
          if (file !== undefined) input.destroy();
        }
      };
    }
    case "master-key reseal":
      // The start check has already refused a store neither key opens; this moves the rest.
      return async (_admin, context, warnAfterward) => {
        const { counts, previousKeySet } = await context.resealSecrets();
        // A run that moved nothing found every secret current already: the start check said so.
        const moved = counts.providerKeys.resealed + counts.deviceCheckKeys.resealed > 0;
        if (previousKeySet && moved) warnAfterward(resealedUnderCurrentKey);
        return counts;
      };
    default:
      throw new UsageError(`unknown command: ${command}`);
  }
}

/**
 * The provider key `--api-key-stdin` reads; standard input that cannot be read is a usage error, and
 * so is a terminal: it would show the key as it is typed or pasted, while the CLI waited in silence
 * for a Ctrl-D (docs/decisions/0036).
 */
function readStandardInput(stdin: number): string {
  if (isatty(stdin))
    throw new UsageError(
      '--api-key-stdin: standard input is a terminal, which would show the key as it is typed or pasted: pipe the key in (printf %s "$KEY" | sluice keys add …), after `read -rs KEY` to type it unseen',
    );
  try {
    return readFileSync(stdin, "utf8").trim();
  } catch (error) {
    throw new UsageError(`--api-key-stdin: cannot read standard input (${unreadableReason(error)})`);
  }
}

/** Refuses, as a usage error, a file that cannot be read (before the database is opened). */
function readableFile(file: string): void {
  try {
    if (statSync(file).isDirectory()) throw Object.assign(new Error(), { code: "EISDIR" });
  } catch (error) {
    throw new UsageError(`usage import: cannot read ${fileNameShown(file)} (${unreadableReason(error)})`);
  }
}

/** A value the use case would refuse without reading anything stored, refused as a usage error. */
function asUsageError<T>(check: () => T): T {
  try {
    return check();
  } catch (error) {
    if (isGatewayError(error)) throw new UsageError(error.message);
    throw error;
  }
}

/** The flag that sets a field (messages name the flags, not the fields), as projectFields maps them. */
const fieldFlags: Record<string, string> = {
  apiKey: "--api-key",
  teamId: "--team-id",
  monthlySpendCapUsd: "--monthly-spend-cap",
  "rateLimits.perMinute": "--rate-limit",
  "rateLimits.devicePerMinute": "--device-rate-limit",
  "deviceCheck.enabled": "--device-check",
  "deviceCheck.teamId": "--device-check-team-id",
  "deviceCheck.keyId": "--device-check-key-id",
  "deviceCheck.environment": "--device-check-environment",
  "deviceCheck.tokenMode": "--device-token-mode",
  "deviceCheck.privateKey": "--device-check-private-key-file",
};

function flagOfField(path: string): string {
  // A rule of the list the flag sets: `--proxy-allow-list provider-a.0`.
  if (path.startsWith("proxyAllowList.")) return `--proxy-allow-list ${path.slice("proxyAllowList.".length)}`;
  return fieldFlags[path] ?? `--${path.replace(/[A-Z]/g, (letter) => `-${letter.toLowerCase()}`)}`;
}

// Run directly (`npx tsx src/cli/main.ts …`), it exits as bin/sluice.js does: once its output is
// written, and with 1 and one line on stderr if runCli throws (a bug, a module that fails to load),
// not an unhandled rejection's stack.
const isEntry = process.argv[1]?.endsWith("cli/main.ts") || process.argv[1]?.endsWith("cli/main.js");
if (isEntry) {
  const exit = exitWhenWritten();
  runCli(process.argv.slice(2)).then(
    (code) => {
      if (code >= 0) void exit(code);
    },
    (error: unknown) => {
      process.stderr.write(failureLine(error));
      void exit(1);
    },
  );
}
