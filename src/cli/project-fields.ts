import { readFileSync } from "node:fs";
import { valueQuoted } from "../admin/project-id.js";
import {
  maxMonthlySpendCapUsd,
  monthlySpendCapOf,
  monthlySpendCapRule,
  rateLimitBounds,
} from "../admin/project-input.js";
import { fileNameShown, unreadableReason } from "../file-name-shown.js";
import { repeatedMemberProblems } from "../json-repeated-members.js";
import { jsonSyntaxProblem } from "../json-syntax.js";
import { usdText } from "../usage/usd-text.js";
import type { Flags } from "./parse-command-line.js";
import { UsageError } from "./usage-error.js";

/**
 * Project flags whose value `--clear NAME` removes (sets to null), each with the field it clears.
 * A separate flag, not a value such as `none`: every text value is a valid model or team id.
 */
export const clearable = new Map<string, { group: "project" | "rateLimits" | "deviceCheck"; field: string }>([
  ["model", { group: "project", field: "model" }],
  ["team-id", { group: "project", field: "teamId" }],
  ["output-schema", { group: "project", field: "outputSchema" }],
  ["rate-limit", { group: "rateLimits", field: "perMinute" }],
  ["device-rate-limit", { group: "rateLimits", field: "devicePerMinute" }],
  ["monthly-spend-cap", { group: "project", field: "monthlySpendCapUsd" }],
  ["proxy-allow-list", { group: "project", field: "proxyAllowList" }],
  ["device-check-team-id", { group: "deviceCheck", field: "teamId" }],
  ["device-check-key-id", { group: "deviceCheck", field: "keyId" }],
  ["device-check-private-key", { group: "deviceCheck", field: "privateKey" }],
]);

/** Maps flags to the admin input; values are checked by the same schema the admin API uses. */
export function projectFields(flags: Flags): Record<string, unknown> {
  const fields: Record<string, unknown> = {};
  const bool = (name: keyof Flags): boolean | undefined => {
    const value = flags[name];
    if (value === undefined) return undefined;
    if (value === "true" || value === "false") return value === "true";
    throw new UsageError(`--${String(name)} takes true or false`);
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
  set("monthlySpendCapUsd", usdAmount("monthly-spend-cap", flags["monthly-spend-cap"]));
  set("disabled", bool("disabled"));
  if (flags["output-schema"] !== undefined)
    set("outputSchema", readJsonArgument("output-schema", flags["output-schema"]));
  if (flags["proxy-allow-list"] !== undefined)
    set("proxyAllowList", readJsonArgument("proxy-allow-list", flags["proxy-allow-list"]));
  const rateLimits: Record<string, unknown> = {};
  if (flags["rate-limit"] !== undefined) rateLimits.perMinute = perMinute("rate-limit", flags["rate-limit"]);
  if (flags["device-rate-limit"] !== undefined)
    rateLimits.devicePerMinute = perMinute("device-rate-limit", flags["device-rate-limit"]);
  const deviceCheck: Record<string, unknown> = {};
  if (flags["device-check"] !== undefined) deviceCheck.enabled = bool("device-check");
  if (flags["device-check-team-id"] !== undefined) deviceCheck.teamId = flags["device-check-team-id"];
  if (flags["device-check-key-id"] !== undefined) deviceCheck.keyId = flags["device-check-key-id"];
  if (flags["device-check-environment"] !== undefined)
    deviceCheck.environment = flags["device-check-environment"];
  if (flags["device-token-mode"] !== undefined) deviceCheck.tokenMode = flags["device-token-mode"];
  if (flags["device-check-private-key-file"] !== undefined) {
    deviceCheck.privateKey = readFlagFile(
      "device-check-private-key-file",
      flags["device-check-private-key-file"],
    );
  }
  applyClears(flags, { project: fields, rateLimits, deviceCheck });
  if (Object.keys(rateLimits).length > 0) fields.rateLimits = rateLimits;
  if (Object.keys(deviceCheck).length > 0) fields.deviceCheck = deviceCheck;
  return fields;
}

/**
 * A per-minute limit: digits only, within the admin schema's bounds. Not `Number()`, which reads
 * `0x10` as 16, `1e3` as 1000, `" 5 "` as 5 and `""` as 0.
 */
function perMinute(name: string, value: string): number {
  const parsed = /^[0-9]{1,16}$/.test(value) ? Number(value) : Number.NaN;
  if (!(parsed >= rateLimitBounds.min && parsed <= rateLimitBounds.max))
    throw new UsageError(
      `--${name} takes a whole number from ${rateLimitBounds.min} to ${rateLimitBounds.max}, not ${valueQuoted(value)}`,
    );
  return parsed;
}

/**
 * A monthly spend cap in USD: plain decimal digits with an optional fraction (`25`, `12.50`), its
 * amount by the admin input's own rule (monthlySpendCapOf). Typed digits are taken as written: the
 * rounding that rule forgives a JSON client's floating-point sum is not applied to them, and digits
 * the cap (a floating-point number) cannot keep are refused, not rounded away: `1000000000.000000001`
 * is above the most, not the most, and `123456789.123456789` would be kept as 123456789.123456791.
 */
function usdAmount(name: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  // At most 16 digits a side, not counting the zeros before the whole part and after the fraction,
  // which change no amount (`5.00000000000000000000` is 5).
  const digits = /^0*([0-9]{1,16})(?:\.([0-9]{1,16}?)0*)?$/.exec(value);
  const amount = digits ? Number(value) : Number.NaN;
  const refused = `--${name} takes ${monthlySpendCapRule}, in plain decimal digits (such as 25 or 12.50), not ${valueQuoted(value)}`;
  if (monthlySpendCapOf(amount) !== amount || !digits) throw new UsageError(refused);
  // The amount typed and the amount kept, each as plain digits without trailing zeros (a cap of at
  // most 9 decimal places is kept to the billionth, exactly as its double holds it: usdText).
  const typed = `${BigInt(digits[1] ?? "0")}${`.${digits[2] ?? ""}`.replace(/\.?0*$/, "")}`;
  const kept = usdText(amount);
  if (typed === kept) return amount;
  // Above the most, though the number it reads as is the most itself: the rule says why.
  if (BigInt(digits[1] ?? "0") >= BigInt(maxMonthlySpendCapUsd)) throw new UsageError(refused);
  throw new UsageError(`${refused}, which would be kept as ${kept}`);
}

/** `--clear NAME`: the field behind that project flag becomes null (the admin API's "remove"). */
function applyClears(
  flags: Flags,
  groups: Record<"project" | "rateLimits" | "deviceCheck", Record<string, unknown>>,
) {
  const seen = new Set<string>();
  for (const name of flags.clear ?? []) {
    const target = clearable.get(name);
    if (!target) throw new UsageError(`--clear takes one of: ${[...clearable.keys()].join(", ")}`);
    // As any other flag given twice: the same value twice is likely a slip for another one.
    if (seen.has(name)) throw new UsageError(`--clear ${name} is given more than once`);
    seen.add(name);
    const flag = (name === "device-check-private-key" ? `${name}-file` : name) as keyof Flags;
    if (flags[flag] !== undefined)
      throw new UsageError(`--${flag} and --clear ${name} contradict each other`);
    groups[target.group][target.field] = null;
  }
}

/**
 * A file a flag names, read; one that cannot be read is a usage error naming the flag. A UTF-8 byte
 * order mark (Windows editors save one) is left out: JSON.parse refuses it.
 */
function readFlagFile(flag: string, path: string): string {
  try {
    return readFileSync(path, "utf8").replace(/^\uFEFF/, "");
  } catch (error) {
    // `--device-check-private-key-file` given the .p8 key itself is shown by its start only.
    throw new UsageError(
      `--${flag}: cannot read ${fileNameShown(path, valueQuoted)} (${unreadableReason(error)})`,
    );
  }
}

/**
 * A flag that takes a JSON object, written on the command line (`{…}`) or in a file it names. A
 * list (`[…]`) is read as JSON too, and refused by the field's type, not as a file not found. An
 * object that names a member twice is refused, each one named as the flag's other problems are
 * (`--proxy-allow-list provider-a`), as the admin API refuses it: JSON.parse keeps the last.
 */
function readJsonArgument(flag: string, value: string): unknown {
  const inline = /^\s*[{[]/.test(value);
  const text = inline ? value : readFlagFile(flag, value);
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    // Typed on the command line or in a file, where its syntax breaks is named (never the text
    // there), so a trailing comma is found, not taken for a value of the wrong kind.
    if (inline)
      throw new UsageError(
        `--${flag} is not valid JSON: ${jsonSyntaxProblem(error, text)} (it takes a JSON object, or a file holding one)`,
      );
    // A file given is named too.
    throw new UsageError(
      `--${flag}: ${JSON.stringify(value)} is not valid JSON: ${jsonSyntaxProblem(error, text)}`,
    );
  }
  const repeated = repeatedMemberProblems(Buffer.from(text), `--${flag} `);
  if (repeated.length > 0) throw new UsageError(repeated.join("; "));
  return parsed;
}
