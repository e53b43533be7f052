import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { openAdminContext } from "../admin/admin-context.js";
import type { ProjectAdmin } from "../admin/project-admin.js";
import { ConfigError, loadConfig } from "../config.js";
import { isGatewayError } from "../errors.js";

/**
 * Project flags whose value `--clear NAME` removes (sets to null), each with the field it clears.
 * A separate flag, not a value such as `none`: every text value is a valid model or team id.
 */
const clearable = new Map<string, { group: "project" | "rateLimits" | "deviceCheck"; field: string }>([
  ["model", { group: "project", field: "model" }],
  ["team-id", { group: "project", field: "teamId" }],
  ["output-schema", { group: "project", field: "outputSchema" }],
  ["rate-limit", { group: "rateLimits", field: "perMinute" }],
  ["device-rate-limit", { group: "rateLimits", field: "devicePerMinute" }],
  ["monthly-spend-cap", { group: "project", field: "monthlySpendCapUsd" }],
  ["device-check-team-id", { group: "deviceCheck", field: "teamId" }],
  ["device-check-key-id", { group: "deviceCheck", field: "keyId" }],
  ["device-check-private-key", { group: "deviceCheck", field: "privateKey" }],
]);

/** The `sluice` command: argument parsing only; the work is done by the admin use cases. */
const usage = `Usage: sluice <command>

  serve                                   start the gateway (same as npm start)
  projects create --name N --provider P [project flags]
  projects list | show ID | delete ID
  projects update ID [project flags]
  keys add PROJECT --provider P (--api-key K | --api-key-stdin) [--label L]
  keys list PROJECT | revoke PROJECT KEY_ID
  test-keys rotate PROJECT | list PROJECT | revoke PROJECT TEST_KEY_ID
  usage PROJECT [--from ISO] [--to ISO] [--group-by day|model|endpoint]

Project flags: --id ID --model M --team-id T --test-mode true|false --output-schema FILE_OR_JSON
  --save-images-to-vault true|false --rate-limit N --device-rate-limit N --monthly-spend-cap USD
  --disabled true|false --device-check true|false --device-check-team-id T --device-check-key-id K
  --device-check-private-key-file FILE.p8 --device-check-environment production|development
  --device-token-mode cached|single-use
  --clear F (repeatable) removes a value: F is one of ${[...clearable.keys()].join(", ")}
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
  clear: { type: "string", multiple: true },
  "api-key": { type: "string" },
  "api-key-stdin": { type: "boolean" },
  label: { type: "string" },
  from: { type: "string" },
  to: { type: "string" },
  "group-by": { type: "string" },
  help: { type: "boolean", short: "h" },
} as const;

type Flags = ReturnType<typeof parseArgs<{ options: typeof options; allowPositionals: true }>>["values"];

class UsageError extends Error {}

export interface CliIo {
  out: { write(text: string): unknown };
  err: { write(text: string): unknown };
  /** File descriptor read by --api-key-stdin. */
  stdin: number;
}

export async function runCli(
  argv: string[],
  io: CliIo = { out: process.stdout, err: process.stderr, stdin: 0 },
): Promise<number> {
  let parsed: { values: Flags; positionals: string[] };
  try {
    parsed = parseArgs({ args: argv, options, allowPositionals: true, strict: true });
  } catch (error) {
    io.err.write(`error: ${(error as Error).message}\n\n${usage}\n`);
    return 2;
  }
  const { values: flags, positionals } = parsed;
  const [command, sub, ...rest] = positionals;
  if (flags.help) {
    io.out.write(`${usage}\n`);
    return 0;
  }
  if (!command) {
    io.err.write(`${usage}\n`);
    return 2;
  }
  if (command === "serve") {
    // Loaded only here, so admin commands start fast and never build the server.
    const { serve } = await import("../server.js");
    try {
      await serve();
    } catch (error) {
      // Word for word what `npm start` (src/main.ts) prints for a failed start.
      io.err.write(`sluice failed to start: ${error instanceof Error ? error.message : String(error)}\n`);
      return 1;
    }
    return -1;
  }
  let context: Awaited<ReturnType<typeof openAdminContext>> | undefined;
  try {
    const run = commandOf(command, sub, rest, flags, io.stdin);
    const config = loadConfig();
    context = await openAdminContext(config, (file) =>
      io.err.write(
        `warning: generated a new master key at ${file}; back it up (without it stored keys cannot be opened)\n`,
      ),
    );
    const result = await run(context.admin);
    if (result !== undefined) io.out.write(`${JSON.stringify(result, null, 2)}\n`);
    return 0;
  } catch (error) {
    if (error instanceof UsageError) {
      io.err.write(`error: ${error.message}\n\n${usage}\n`);
      return 2;
    }
    if (isGatewayError(error) || error instanceof ConfigError) {
      io.err.write(`error: ${error.message}${causeOf(error)}\n`);
      return 1;
    }
    io.err.write(`error: ${(error as Error).message ?? String(error)}${causeOf(error)}\n`);
    return 1;
  } finally {
    await context?.close();
  }
}

/** " (innermost cause)" for an error that wraps one, e.g. the driver's "connect ECONNREFUSED …". */
function causeOf(error: unknown): string {
  let cause = error instanceof Error ? error.cause : undefined;
  while (cause instanceof Error && cause.cause instanceof Error) cause = cause.cause;
  if (!(cause instanceof Error)) return "";
  return ` (${cause.message || (cause as { code?: string }).code || cause.name})`;
}

/**
 * The command line as the work it asks for. Every usage error (an unknown command, a missing id, a
 * bad flag value) is thrown here, before the database is opened or a master key generated.
 */
function commandOf(
  command: string,
  sub: string | undefined,
  rest: string[],
  flags: Flags,
  stdin: number,
): (admin: ProjectAdmin) => Promise<unknown> {
  const need = (value: string | undefined, what: string): string => {
    if (!value) throw new UsageError(`${what} is required`);
    return value;
  };
  const project = () => need(rest[0], "the project id");
  switch (`${command} ${sub ?? ""}`.trim()) {
    case "projects create": {
      const fields = { ...projectFields(flags), ...(flags.id ? { id: flags.id } : {}) };
      return (admin) => admin.createProject(fields);
    }
    case "projects list":
      return (admin) => admin.listProjects();
    case "projects show": {
      const id = project();
      return (admin) => admin.getProject(id);
    }
    case "projects update": {
      const [id, fields] = [project(), projectFields(flags)];
      return (admin) => admin.updateProject(id, fields);
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
      const apiKey = flags["api-key-stdin"] ? readFileSync(stdin, "utf8").trim() : flags["api-key"];
      const fields = {
        provider: flags.provider,
        apiKey: need(apiKey, "--api-key or --api-key-stdin"),
        ...(flags.label ? { label: flags.label } : {}),
      };
      return (admin) => admin.addProviderKey(id, fields);
    }
    case "keys list": {
      const id = project();
      return (admin) => admin.listProviderKeys(id);
    }
    case "keys revoke": {
      const [id, keyId] = [project(), need(rest[1], "the key id")];
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
      const [id, testKeyId] = [project(), need(rest[1], "the test key id")];
      return async (admin) => {
        await admin.revokeTestKey(id, testKeyId);
        return { revoked: testKeyId };
      };
    }
    default: {
      if (command !== "usage")
        throw new UsageError(`unknown command: ${[command, sub].filter(Boolean).join(" ")}`);
      const id = need(sub, "the project id");
      const query = {
        ...(flags.from ? { from: flags.from } : {}),
        ...(flags.to ? { to: flags.to } : {}),
        ...(flags["group-by"] ? { groupBy: flags["group-by"] } : {}),
      };
      return (admin) => admin.usageReport(id, query);
    }
  }
}

/** Maps flags to the admin input; values are checked by the same schema the admin API uses. */
function projectFields(flags: Flags): Record<string, unknown> {
  const fields: Record<string, unknown> = {};
  const bool = (name: keyof Flags): boolean | undefined => {
    const value = flags[name];
    if (value === undefined) return undefined;
    if (value === "true" || value === "false") return value === "true";
    throw new UsageError(`--${String(name)} takes true or false`);
  };
  const number = (name: keyof Flags): number | undefined => {
    const value = flags[name];
    if (value === undefined) return undefined;
    const parsed = Number(value);
    if (typeof value !== "string" || value.trim() === "" || !Number.isFinite(parsed))
      throw new UsageError(`--${String(name)} takes a number`);
    return parsed;
  };
  const set = (key: string, value: unknown) => {
    if (value !== undefined) fields[key] = value;
  };
  set("name", flags.name);
  set("provider", flags.provider);
  set("model", flags.model);
  set("teamId", flags["team-id"]);
  set("testMode", bool("test-mode"));
  set("saveImagesToVault", bool("save-images-to-vault"));
  set("monthlySpendCapUsd", number("monthly-spend-cap"));
  set("disabled", bool("disabled"));
  if (flags["output-schema"] !== undefined) set("outputSchema", readJsonArgument(flags["output-schema"]));
  const rateLimits: Record<string, unknown> = {};
  if (flags["rate-limit"] !== undefined) rateLimits.perMinute = number("rate-limit");
  if (flags["device-rate-limit"] !== undefined) rateLimits.devicePerMinute = number("device-rate-limit");
  const deviceCheck: Record<string, unknown> = {};
  if (flags["device-check"] !== undefined) deviceCheck.enabled = bool("device-check");
  if (flags["device-check-team-id"] !== undefined) deviceCheck.teamId = flags["device-check-team-id"];
  if (flags["device-check-key-id"] !== undefined) deviceCheck.keyId = flags["device-check-key-id"];
  if (flags["device-check-environment"] !== undefined)
    deviceCheck.environment = flags["device-check-environment"];
  if (flags["device-token-mode"] !== undefined) deviceCheck.tokenMode = flags["device-token-mode"];
  if (flags["device-check-private-key-file"] !== undefined) {
    deviceCheck.privateKey = readFileSync(flags["device-check-private-key-file"], "utf8");
  }
  applyClears(flags, { project: fields, rateLimits, deviceCheck });
  if (Object.keys(rateLimits).length > 0) fields.rateLimits = rateLimits;
  if (Object.keys(deviceCheck).length > 0) fields.deviceCheck = deviceCheck;
  return fields;
}

/** `--clear NAME`: the field behind that project flag becomes null (the admin API's "remove"). */
function applyClears(
  flags: Flags,
  groups: Record<"project" | "rateLimits" | "deviceCheck", Record<string, unknown>>,
) {
  for (const name of flags.clear ?? []) {
    const target = clearable.get(name);
    if (!target) throw new UsageError(`--clear takes one of: ${[...clearable.keys()].join(", ")}`);
    const flag = (name === "device-check-private-key" ? `${name}-file` : name) as keyof Flags;
    if (flags[flag] !== undefined)
      throw new UsageError(`--${flag} and --clear ${name} contradict each other`);
    groups[target.group][target.field] = null;
  }
}

function readJsonArgument(value: string): unknown {
  const text = value.trim().startsWith("{") ? value : readFileSync(value, "utf8");
  try {
    return JSON.parse(text);
  } catch {
    throw new UsageError("--output-schema must be a JSON object or a file holding one");
  }
}

const isEntry = process.argv[1]?.endsWith("cli/main.ts") || process.argv[1]?.endsWith("cli/main.js");
if (isEntry) {
  runCli(process.argv.slice(2)).then((code) => {
    if (code >= 0) process.exit(code);
  });
}
