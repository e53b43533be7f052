import { parseArgs } from "node:util";
import { mayBeKey } from "../admin/project-id.js";
import { maxMonthlySpendCapUsd, rateLimitBounds } from "../admin/project-input.js";
import { projectListLimit } from "../admin/project-list-cursor.js";
import { usageReportLimit } from "../admin/usage-report-cursor.js";
import { holdsKeyForm } from "../observability/key-like.js";
import { quotedStart } from "../quoted-start.js";
import { clearable } from "./project-fields.js";
import { UsageError } from "./usage-error.js";

export const usage = `Usage: sluice <command>

  serve                                   start the gateway (same as npm start)
  projects create --name NAME --provider P [--id ID] [project flags]
  projects list [--limit N] [--cursor C]  every project; with --limit or --cursor, one page of N
                                          (default ${projectListLimit.default}, up to ${projectListLimit.max}) as {"data", "next"}
  projects show ID | delete ID
  projects check                          check every stored project by this build's rules: one JSON
                                          line per project with a problem, a summary on stderr, exit 1
                                          when any has one (after an upgrade, before the apps find them)
  projects update ID [--name NAME] [--provider P] [project flags] [--clear F]
  keys add PROJECT --provider P (--api-key K | --api-key-stdin) [--label L]
  keys list PROJECT | revoke PROJECT KEY_ID
  test-keys rotate PROJECT | list PROJECT | revoke PROJECT TEST_KEY_ID
  usage PROJECT [--from ISO] [--to ISO] [--group-by day|model|endpoint] [--limit N] [--cursor C]
                                          N groups at most (default ${usageReportLimit.default}, up to ${usageReportLimit.max}); with
                                          more, the answer's "next" is the --cursor that reads on
  usage prune --before DATE               delete usage rows created before DATE (ISO date or instant,
                                          UTC; never within the current or previous month)
  usage import [FILE]                     insert again the usage rows a gateway's log says it dropped
                                          (its lines "usage rows dropped: their contents"; FILE, or
                                          standard input when none or -), skipping those stored already
  vault prune --before DATE               delete the local vault's images of the days before DATE
                                          (YYYY-MM-DD, UTC; never one whose URLs may still be valid)
  master-key reseal                       re-seal every stored secret under SLUICE_MASTER_KEY
                                          (with SLUICE_MASTER_KEY_PREVIOUS set: see README, Rotating the master key)

Project flags: --model M --team-id T --test-mode true|false --output-schema FILE_OR_JSON
  --save-images-to-vault true|false --rate-limit RPM --device-rate-limit RPM --monthly-spend-cap USD
  --disabled true|false --device-check true|false --device-check-team-id T --device-check-key-id K
  --device-check-private-key-file FILE.p8 --device-check-environment production|development
  --device-token-mode cached|single-use --proxy-allow-list FILE_OR_JSON
  --clear F (projects update only; repeatable) removes a value: F is one of ${[...clearable.keys()].join(", ")}
  RPM: requests per minute, a whole number from ${rateLimitBounds.min} to ${rateLimitBounds.max}
  USD: an amount above 0 and up to ${maxMonthlySpendCapUsd}, in plain digits with at most 9 decimal places (25 or 12.50)
  --proxy-allow-list: the proxied calls allowed, by provider, replacing any list set before, e.g.
    '{"provider-a":["POST chat/completions"]}' (docs/proxy.md); --clear proxy-allow-list allows all
A command refuses any flag it does not take. --help (-h) prints this text.
Configuration comes from the environment (see README), e.g. SLUICE_DATA_DIR or DATABASE_URL.`;

const options = {
  id: { type: "string" },
  name: { type: "string" },
  provider: { type: "string" },
  model: { type: "string" },
  "team-id": { type: "string" },
  "test-mode": { type: "string" },
  "output-schema": { type: "string" },
  "save-images-to-vault": { type: "string" },
  "rate-limit": { type: "string" },
  "device-rate-limit": { type: "string" },
  "monthly-spend-cap": { type: "string" },
  disabled: { type: "string" },
  "device-check": { type: "string" },
  "device-check-team-id": { type: "string" },
  "device-check-key-id": { type: "string" },
  "device-check-private-key-file": { type: "string" },
  "device-check-environment": { type: "string" },
  "device-token-mode": { type: "string" },
  "proxy-allow-list": { type: "string" },
  clear: { type: "string", multiple: true },
  "api-key": { type: "string" },
  "api-key-stdin": { type: "boolean" },
  label: { type: "string" },
  from: { type: "string" },
  to: { type: "string" },
  "group-by": { type: "string" },
  limit: { type: "string" },
  cursor: { type: "string" },
  before: { type: "string" },
  help: { type: "boolean", short: "h" },
} as const;

export type Flags = ReturnType<
  typeof parseArgs<{ options: typeof options; allowPositionals: true }>
>["values"];
type FlagName = Exclude<keyof typeof options, "help">;

const projectFlags: FlagName[] = [
  "model",
  "team-id",
  "test-mode",
  "output-schema",
  "save-images-to-vault",
  "rate-limit",
  "device-rate-limit",
  "monthly-spend-cap",
  "disabled",
  "device-check",
  "device-check-team-id",
  "device-check-key-id",
  "device-check-private-key-file",
  "device-check-environment",
  "device-token-mode",
  "proxy-allow-list",
];

interface CommandSpec {
  flags: readonly FlagName[];
  arguments: readonly string[];
}

/** Each command with the flags it takes and the arguments (ids) that follow its name. */
const commands: Record<string, CommandSpec> = {
  serve: { flags: [], arguments: [] },
  "projects create": { flags: ["id", "name", "provider", ...projectFlags], arguments: [] },
  "projects list": { flags: ["limit", "cursor"], arguments: [] },
  "projects show": { flags: [], arguments: ["ID"] },
  // A new project has no value to remove: `--clear` is refused there, not ignored.
  "projects update": { flags: ["name", "provider", ...projectFlags, "clear"], arguments: ["ID"] },
  "projects delete": { flags: [], arguments: ["ID"] },
  "projects check": { flags: [], arguments: [] },
  "keys add": { flags: ["provider", "api-key", "api-key-stdin", "label"], arguments: ["PROJECT"] },
  "keys list": { flags: [], arguments: ["PROJECT"] },
  "keys revoke": { flags: [], arguments: ["PROJECT", "KEY_ID"] },
  "test-keys rotate": { flags: [], arguments: ["PROJECT"] },
  "test-keys list": { flags: [], arguments: ["PROJECT"] },
  "test-keys revoke": { flags: [], arguments: ["PROJECT", "TEST_KEY_ID"] },
  usage: { flags: ["from", "to", "group-by", "limit", "cursor"], arguments: ["PROJECT"] },
  // `usage prune` and `usage import` are commands of their own beside `usage PROJECT`: a project
  // named `prune` or `import` is reported on only with one of the report's flags (`--from`, …).
  "usage prune": { flags: ["before"], arguments: [] },
  // The log to read; standard input without it (or with `-`).
  "usage import": { flags: [], arguments: ["[FILE]"] },
  "vault prune": { flags: ["before"], arguments: [] },
  "master-key reseal": { flags: [], arguments: [] },
};

/** The flags `command` takes, as written (`--name`), in the order its usage errors list them. */
export function flagsOf(command: string): string[] {
  return (commands[command]?.flags ?? []).map((flag) => `--${flag}`);
}

export type CommandLine =
  | { kind: "help" }
  | { kind: "none" }
  | { kind: "command"; command: string; arguments: string[]; flags: Flags };

/** The commands in groups (`projects create`, …): each group's name and its subcommands. */
const subcommands = new Map<string, string[]>();
for (const name of Object.keys(commands)) {
  const [group, subcommand] = name.split(" ");
  if (group !== undefined && subcommand !== undefined)
    subcommands.set(group, [...(subcommands.get(group) ?? []), subcommand]);
}

/**
 * The command, its arguments and its flags, or a UsageError: an unknown command, a group without
 * its subcommand, a flag before any command or one the command does not take (even one another
 * command takes), a flag given twice, a flag without its value, an argument too many. Nothing is
 * opened or read here.
 */
export function parseCommandLine(argv: string[]): CommandLine {
  // Lenient first, to learn the command: the flags it may take decide what is wrong.
  const { positionals, tokens } = parseArgs({
    args: argv,
    options,
    allowPositionals: true,
    strict: false,
    tokens: true,
  });
  if (tokens.some((token) => token.kind === "option" && token.name === "help")) return { kind: "help" };
  const named = commandNamed(positionals, tokens);
  if (named === undefined) return { kind: "none" };
  const { command, spec } = named;
  const taken = new Set<string>(spec.flags);
  const seen = new Set<string>();
  for (const token of tokens) {
    if (token.kind !== "option") continue;
    if (!taken.has(token.name)) {
      const takes = spec.flags.length > 0 ? flagsOf(command).join(", ") : "no flags";
      throw new UsageError(`${command} does not take ${wordShown(token.rawName)}; it takes ${takes}`);
    }
    if (seen.has(token.name) && token.name !== "clear")
      throw new UsageError(`${token.rawName} is given more than once`);
    seen.add(token.name);
  }
  // Strict now, for each value's form: a missing value, or a value given to a switch.
  let flags: Flags;
  try {
    flags = parseArgs({ args: argv, options, allowPositionals: true, strict: true }).values;
  } catch (error) {
    // Node's three lines for `--name --provider …` or `--api-key -k…`, in one (without the argument).
    const ambiguous = /^Option '(-[^']*)' argument is ambiguous\./.exec((error as Error).message);
    if (ambiguous)
      throw new UsageError(
        `${ambiguous[1]} is followed by an argument that starts with a dash, not by its value: ` +
          `give its value, or write a value that starts with a dash as ${ambiguous[1]}=VALUE`,
      );
    // Node's `Option '--name <value>' argument missing`, for a flag written last without its value.
    const missing = /^Option '(-[^' ]*) <value>' argument missing/.exec((error as Error).message);
    if (missing)
      throw new UsageError(`${missing[1]} needs a value: ${missing[1]} VALUE (or ${missing[1]}=VALUE)`);
    // The one switch a value may be given to (`--api-key-stdin=…`): that value is never quoted.
    if (/^Option '--api-key-stdin' does not take an argument/.test((error as Error).message))
      throw new UsageError(
        "--api-key-stdin takes no value: it reads the provider key from standard input " +
          "(to give the key on the command line, use --api-key)",
      );
    throw new UsageError((error as Error).message);
  }
  const args = positionals.slice(command.includes(" ") ? 2 : 1);
  const extra = args[spec.arguments.length];
  if (extra !== undefined) {
    const takes = spec.arguments.length > 0 ? spec.arguments.join(" ") : "no arguments";
    throw new UsageError(`unexpected argument ${quotedStart(extra)}: ${command} takes ${takes}`);
  }
  return { kind: "command", command, arguments: args, flags };
}

/**
 * The command the positionals name (`projects create`, `serve`), or undefined when there are none
 * and no flag either (the usage is printed). A flag without a command, a group without its
 * subcommand (`projects`) and an unknown command are usage errors.
 */
function commandNamed(
  positionals: string[],
  tokens: ReadonlyArray<{ kind: string; name?: string; rawName?: string }>,
): { command: string; spec: CommandSpec } | undefined {
  const [first, second] = positionals;
  if (first === undefined) {
    const flag = tokens.find((token) => token.kind === "option");
    if (flag)
      throw new UsageError(
        `${wordShown(flag.rawName ?? "")} given without a command: sluice <command> [flags]`,
      );
    return undefined;
  }
  // `usage` is a command (`usage PROJECT`) and a group (`usage prune`) at once: `usage prune` is the
  // subcommand, unless every flag given is one only the report takes (a project named `prune`).
  const standalone = commands[first];
  const pair = second === undefined ? undefined : commands[`${first} ${second}`];
  const given = tokens.flatMap((token) => (token.kind === "option" && token.name ? [token.name] : []));
  const reportsOn =
    pair !== undefined &&
    given.length > 0 &&
    given.every(
      (name) => standalone?.flags.includes(name as FlagName) && !pair.flags.includes(name as FlagName),
    );
  if (standalone && (pair === undefined || reportsOn)) return { command: first, spec: standalone };
  const group = subcommands.get(first);
  if (group && second === undefined)
    throw new UsageError(`${first} needs a subcommand: one of ${group.join(", ")}`);
  const command = group ? `${first} ${second}` : first;
  const spec = commands[command];
  if (spec) return { command, spec };
  const known = group ? `; ${first} takes ${group.join(", ")}` : "";
  const words = second === undefined ? [first] : [first, second];
  throw new UsageError(`unknown command: ${words.map(wordShown).join(" ")}${known}`);
}

/**
 * A word of an unknown command, or an unknown flag, as its message names it: bare when it is plain
 * printable ASCII (`frobnicate`, `--bogus`), quoted when it is empty or holds anything else (an
 * unset variable, a pasted escape sequence), and by its start and length only when it may be a key
 * typed in its place (`sluice keys sk-proj-…`), as an argument too many is.
 */
function wordShown(word: string): string {
  // A flag's name may hold a key typed into it (`--api-keysk-proj-…`, `--sk-proj-…`).
  if (mayBeKey(word) || holdsKeyForm(word)) return quotedStart(word);
  return /^[\x21-\x7e]+$/.test(word) ? word : JSON.stringify(word);
}
