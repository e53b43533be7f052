import { writeSync } from "node:fs";
import { type DestinationStream, type Logger, pino } from "pino";
import { redactKeyLike, redactLongBase64 } from "./key-like.js";
import { createLogDestination } from "./log-destination.js";
import { makeStdioNonBlocking } from "./non-blocking-stdio.js";

export type { Logger };

/** Headers that carry a credential (a provider key, Sluice's own, a session). */
const credentialHeaders = [
  "authorization",
  "proxy-authorization",
  "cookie",
  "set-cookie",
  "x-api-key",
  "x-goog-api-key",
  "x-sluice-test-key",
  "x-ai-key",
  "x-device-token",
];

/**
 * Field and header names whose values are credentials, compared after lower-casing and dropping
 * everything but letters and digits: `Authorization`, `X-Api-Key`, `x_api_key` and `apiKey` are
 * one name each, whoever built the object (Node lower-cases incoming headers; upstream responses,
 * hand-built header objects and errors from undici or the AI SDK need not).
 */
const redactedNames: ReadonlySet<string> = new Set(
  [
    ...credentialHeaders,
    "apiKey",
    "providerKey",
    "partialKey",
    "serverShare",
    "clientShare",
    "testKey",
    "privateKey",
    "privateKeyPem",
    "deviceToken",
    "masterKey",
    "masterKeyPrevious",
    "adminToken",
    "token",
    "accessToken",
    "jwt",
    "secretAccessKey",
    "password",
  ].map(normalizedName),
);

/** Header names whose value follows them in a flat list (`rawHeaders`, undici's `[name, value, …]`). */
const redactedHeaderPairs: ReadonlySet<string> = new Set(credentialHeaders.map(normalizedName));

const censor = "[redacted]";
/**
 * pino prints a log object with JSON.stringify, so without a depth limit (its `depthLimit` applies
 * to circular objects only): redaction walks every level, and anything deeper than this is dropped.
 */
const maxDepth = 64;

function normalizedName(name: string): string {
  return name.toLowerCase().replace(/[^a-z0-9]/g, "");
}

/**
 * The log object with every credential replaced by "[redacted]", at any depth and in any letter
 * case, and every string (a field's name included) as `redactText` writes it. Errors, at the top or
 * nested, are serialized first as pino's `err` serializer does (their own properties kept, the
 * messages of their causes appended), so a `headers` property on an error is covered too; what
 * JSON.stringify would print through `toJSON` is redacted as printed. Objects are copied only where
 * something changes: a record without secrets allocates nothing. The logger runs the same walk
 * (`createLogger`), with its configured secrets, once per line written; below the configured level
 * pino never calls it. This function, without configured secrets, is the walk as its tests see it.
 */
export function redactSecrets<T>(value: T): T {
  return redactValue(value, maxDepth, [], redactText) as T;
}

/**
 * A URL's user info with a password (`scheme://user:password@`), wherever it is in a string: the
 * password runs to the last `@` before the host, as URL parsers read it, so one holding an `@`
 * (`p@ss`, which node-postgres and ioredis take) is replaced whole. Matched from the `://` on, not
 * from the scheme: a pattern that began at a scheme was tried at every word start and ran each to
 * the end of the text, quadratic in its length (a 16 KiB path of `a.` cost the event loop ~100 ms).
 * From `://`, each scan stops at the next `/`, so the text is read about once.
 */
const urlPassword = /(:\/\/[^\s/?#@:]*:)[^\s/?#]*@/g;

/** A query parameter (`?name=value`, `&name=value`): its name and value. */
const queryParameter = /([?&;])([^=&#\s?;]+)=([^&#\s"'<>;]*)/g;

/**
 * Query parameters whose values are credentials, besides the field names above: provider C's
 * `key=`, the password node-postgres (`password=`, `sslpassword=`) and ioredis take from a URL's
 * query, a signed vault URL's `signature=` and an S3 presigned URL's `X-Amz-Signature=`.
 */
const redactedQueryNames: ReadonlySet<string> = new Set([
  ...redactedNames,
  ...["key", "sslPassword", "signature", "sig", "X-Amz-Signature", "X-Amz-Security-Token", "secret"].map(
    normalizedName,
  ),
]);

/**
 * The string with the credentials of every URL in it replaced: a password in its user info
 * (`postgres://u:[redacted]@host`) and the value of a credential query parameter (`?key=[redacted]`),
 * as a library's error message, stack or options object may quote a DATABASE_URL, a REDIS_URL, a
 * provider call or a signed URL. A string with neither `://` and `@` nor `=` after `?` or `&` is
 * returned as it is, without a regular expression run.
 */
function redactUrlCredentials(text: string): string {
  let redacted = text;
  if (redacted.includes("@") && redacted.includes("://"))
    redacted = redacted.replace(urlPassword, `$1${censor}@`);
  if (redacted.includes("=") && (redacted.includes("?") || redacted.includes("&")))
    redacted = redacted.replace(queryParameter, (parameter, start: string, name: string, value: string) =>
      value !== "" && redactedQueryNames.has(normalizedName(name)) ? `${start}${name}=${censor}` : parameter,
    );
  return redacted;
}

/**
 * A string as the log writes it: without a URL's credentials (`redactUrlCredentials`), nor anything
 * with the form of a provider key or a Sluice credential (`redactKeyLike`), which a client may type
 * where a name goes (a project id in a path, which the access line and errors quote), nor a long run
 * of base64 (`redactLongBase64`: a device token typed there alone).
 */
function redactText(text: string): string {
  return redactLongBase64(redactKeyLike(redactUrlCredentials(text), censor), censor);
}

/**
 * A text a client wrote (the path the access line quotes, up to Node's 16 KiB of head) as a log line
 * shows it: whole up to `max` characters, else its first `max` and its length
 * (`/aaa… (12001 characters)`), so that a request costs the log a line of bounded size. Redacted
 * before it is cut, of the logger's configured secrets (`configured`: `configuredSecretsRedaction`)
 * and of every credential `redactText` knows by its form: a cut through a key or a configured secret
 * would leave its start too short to have a key's form, or to be told for the secret.
 */
export function shownStart(
  text: string,
  max: number,
  configured: (text: string) => string = (unchanged) => unchanged,
): string {
  if (text.length <= max) return text;
  const redacted = redactText(configured(text));
  return redacted.length <= max ? redacted : `${redacted.slice(0, max)}… (${text.length} characters)`;
}

/**
 * The secrets a gateway is configured with (`redactConfiguredSecrets`), each as the pattern of the
 * forms a text may hold it in: every character as it is or percent-encoded (upper- or lower-case hex,
 * as a client may write a path or a query), and a `"` or `\` also as JSON escapes it.
 */
interface ConfiguredSecret {
  value: string;
  pattern: RegExp;
  /** Whether a text without the secret as it is may hold it all the same: escaped or encoded. */
  mayBeEscaped: (text: string) => boolean;
  /**
   * For a secret holding a `?` after its first character: its start up to the `?`, in the same
   * forms, at the end of a text (`configuredSecretStartsRedaction`); with at most how many
   * characters of the text's end it can take.
   */
  startBeforeQuery?: { pattern: RegExp; longest: number };
  /**
   * Its starts up to each of its `/`, `?` and `#` (where a request's target cuts it), each in the
   * same forms and whole (`configuredSecretHeld`).
   */
  starts: RegExp[];
}

/** Where a request's target ends a path's segment: a secret holding one was cut there. */
const cutAt = ["/", "?", "#"];

/** The shortest configured secret redacted: a shorter one would be found in ordinary words. */
const shortestConfiguredSecret = 8;

function configuredSecret(value: string): ConfiguredSecret {
  const escapes = value.includes('"') || value.includes("\\");
  const query = value.indexOf("?");
  const starts: RegExp[] = [];
  for (let at = 1; at < value.length; at++)
    if (cutAt.includes(value.charAt(at))) starts.push(new RegExp(`^(?:${formsOf(value.slice(0, at))})$`));
  return {
    value,
    starts,
    pattern: new RegExp(formsOf(value), "g"),
    mayBeEscaped: (text) => text.includes("%") || (escapes && text.includes("\\")),
    ...(query > 0
      ? {
          startBeforeQuery: {
            pattern: new RegExp(`(?:${formsOf(value.slice(0, query))})$`),
            // A character percent-encoded is 3 of a text's for each of its (up to 4) UTF-8 bytes.
            longest: 12 * query,
          },
        }
      : {}),
  };
}

/** The source of a pattern matching `value` in any of its forms (see `ConfiguredSecret`). */
function formsOf(value: string): string {
  const forms = [...value].map((character) => {
    const hex = [...Buffer.from(character)]
      .map((byte) => {
        const [high, low] = byte.toString(16).padStart(2, "0");
        const either = (digit = "") => (/[a-f]/.test(digit) ? `[${digit}${digit.toUpperCase()}]` : digit);
        return `%${either(high)}${either(low)}`;
      })
      .join("");
    const as = character.replace(/[\\^$.*+?()[\]{}|/-]/g, "\\$&");
    const json = character === '"' || character === "\\" ? `|\\\\${as}` : "";
    return `(?:${as}|${hex}${json})`;
  });
  return forms.join("");
}

/** `text` with every configured secret in it, in any of its forms (`configuredSecret`), replaced. */
function redactConfigured(text: string, secrets: readonly ConfiguredSecret[]): string {
  let redacted = text;
  for (const secret of secrets)
    if (redacted.includes(secret.value) || secret.mayBeEscaped(redacted))
      redacted = redacted.replace(secret.pattern, censor);
  return redacted;
}

/** The configured secrets of each logger `createLogger` made, and of its children. */
const configuredSecretsOf = new WeakMap<object, ConfiguredSecret[]>();

/**
 * Makes `logger` (its children, made before or after, included) redact each of `secrets` wherever a
 * string it logs holds it (a field's name included), as it is, percent-encoded or JSON-escaped,
 * before any other redaction:
 * the admin token and the master keys, which have no form the other redactions know, and which a
 * client may paste into a path or a query the access line or an error quotes. Unset ones
 * (undefined) and ones shorter than 8 characters are skipped. Called before any child is made: a
 * child's bindings are written into its lines as they were redacted when it was made.
 */
export function redactConfiguredSecrets(logger: Logger, secrets: Iterable<string | undefined>): void {
  const configured = configuredSecretsOf.get(logger);
  if (configured === undefined) throw new Error("not a logger made by createLogger");
  for (const secret of secrets)
    if (
      secret !== undefined &&
      secret.length >= shortestConfiguredSecret &&
      !configured.some((known) => known.value === secret)
    )
      configured.push(configuredSecret(secret));
}

/**
 * The redaction of `logger`'s configured secrets (`redactConfiguredSecrets`) alone, for a text
 * shortened before it is logged, which the logger could no longer tell them in (`shownStart`).
 */
export function configuredSecretsRedaction(logger: Logger): (text: string) => string {
  const configured = configuredSecretsOf.get(logger) ?? [];
  return (text) => (configured.length === 0 ? text : redactConfigured(text, configured));
}

/**
 * The redaction of a request's path (its target up to the first `?`, when it has a query) that ends
 * with the start of one of `logger`'s configured secrets holding a `?`, up to that `?`, in the forms
 * `redactConfigured` finds: the target cut the secret there, its rest in the query, and the path
 * holds only a piece of it, which the logger could not tell (the access line quotes the path).
 */
export function configuredSecretStartsRedaction(logger: Logger): (path: string) => string {
  const configured = configuredSecretsOf.get(logger) ?? [];
  return (path) => {
    let redacted = path;
    for (const { startBeforeQuery: start } of configured) {
      if (start === undefined) continue;
      // The end only: a pattern anchored at the end is still tried from every start.
      const at = Math.max(0, redacted.length - start.longest);
      const end = redacted.slice(at).replace(start.pattern, censor);
      redacted = redacted.slice(0, at) + end;
    }
    return redacted;
  };
}

/**
 * Whether `value`, a text a client wrote that is kept outside the log (a project id naming no
 * project: its usage row, its failed-authentication key in Redis), holds one of `logger`'s
 * configured secrets in a form its redaction finds (`redactConfigured`), or is the start of one that
 * a request's target cut where the secret has a `/`, `?` or `#` (the route took the segment up to
 * it), in those forms too (a client's URL percent-encodes a `"`, a space or a `{` in a path). Asked
 * only of ids that name no project: not on an admitted call's path.
 */
export function configuredSecretHeld(logger: Logger): (value: string) => boolean {
  const configured = configuredSecretsOf.get(logger) ?? [];
  return (value) =>
    value !== "" &&
    configured.some(
      (secret) =>
        redactConfigured(value, [secret]) !== value || secret.starts.some((start) => start.test(value)),
    );
}

/** How a string is redacted: `redactText`, or a logger's with its configured secrets first. */
type TextRedaction = (text: string) => string;

function redactValue(value: unknown, depth: number, ancestors: object[], text: TextRedaction): unknown {
  if (typeof value === "string") return text(value);
  if (typeof value !== "object" || value === null) return value;
  if (value instanceof Error) return redactValue(pino.stdSerializers.err(value), depth, ancestors, text);
  const toJSON = (value as { toJSON?: unknown }).toJSON;
  if (typeof toJSON === "function") {
    const printed: unknown = toJSON.call(value, "");
    return printed === value ? value : redactValue(printed, depth - 1, ancestors, text);
  }
  if (ancestors.includes(value)) return "[Circular]";
  if (depth <= 0) return "[Too deep]";
  ancestors.push(value);
  try {
    return Array.isArray(value)
      ? redactArray(value, depth, ancestors, text)
      : redactObject(value, depth, ancestors, text);
  } finally {
    ancestors.pop();
  }
}

/**
 * The Redis commands whose arguments hold a password: an ioredis reply error quotes the command it
 * answered (`command: { name: "auth", args: [user, password] }`), and so does its AbortError.
 */
const passwordCommands: ReadonlySet<string> = new Set(["auth", "hello", "migrate"]);

function redactObject(value: object, depth: number, ancestors: object[], text: TextRedaction): object {
  let copy: Record<string, unknown> | undefined;
  const commandName = (value as { name?: unknown }).name;
  const passwordCommand = typeof commandName === "string" && passwordCommands.has(commandName.toLowerCase());
  for (const key of Object.keys(value)) {
    const field = (value as Record<string, unknown>)[key];
    const redacted =
      redactedNames.has(normalizedName(key)) || (passwordCommand && key === "args")
        ? field === undefined || field === null
          ? field
          : censor
        : redactValue(field, depth - 1, ancestors, text);
    // A name is written as a value is: a record keyed by what a client wrote (a query's parameters,
    // a schema's properties) may hold a secret in a name.
    const name = text(key);
    if (name !== key) {
      copy ??= { ...value };
      delete copy[key];
      copy[name] = redacted;
    } else if (redacted !== field) {
      copy ??= { ...value };
      copy[key] = redacted;
    }
  }
  return copy ?? value;
}

function redactArray(value: unknown[], depth: number, ancestors: object[], text: TextRedaction): unknown[] {
  let copy: unknown[] | undefined;
  for (let index = 0; index < value.length; index++) {
    const item = value[index];
    const previous = value[index - 1];
    const redacted =
      typeof previous === "string" &&
      typeof item === "string" &&
      redactedHeaderPairs.has(normalizedName(previous))
        ? censor
        : redactValue(item, depth - 1, ancestors, text);
    if (redacted !== item) {
      copy ??= [...value];
      copy[index] = redacted;
    }
  }
  return copy ?? value;
}

/**
 * Secrets are redacted by this configuration, not by the callers' discipline: the walk
 * `redactSecrets` does (`redactValue`), with the configured secrets redacted first, runs on every
 * object logged, on the base and every child logger's bindings (pino's `bindings`
 * formatter sees the base's only, so `child` is wrapped) and on the values a message interpolates
 * (`%o`, `%j`); `redactText` on the message, the one pino takes from an error when none is given
 * included. The secrets the logger is given later (`redactConfiguredSecrets`) are redacted first,
 * wherever the others are, by the logger and every child. A test logs objects full of secrets, in
 * every letter case, and checks that none comes out.
 */
export function createLogger(level: string, destination: DestinationStream): Logger {
  const configured: ConfiguredSecret[] = [];
  const text: TextRedaction = (value) =>
    redactText(configured.length === 0 ? value : redactConfigured(value, configured));
  const secrets = <T>(value: T): T => redactValue(value, maxDepth, [], text) as T;
  const logger = pino(
    {
      level,
      base: { service: "sluice" },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: {
        level: (label) => ({ level: label }),
        bindings: (bindings) => secrets(bindings),
        log: (object) => secrets(object),
      },
      // `log` above has serialized every error already; serializing the result again would
      // report each error's type as "Object".
      serializers: { err: (error: unknown) => error },
      // The message and its interpolation values are never seen by the formatters.
      hooks: {
        logMethod(args, method) {
          // Past the first argument (the object the formatters redact): the message and the values
          // it interpolates.
          const redacted = args.map((arg, index) =>
            typeof arg === "string" ? text(arg) : index > 0 ? secrets(arg) : arg,
          );
          const implied = args.length === 1 ? impliedMessage(args[0]) : undefined;
          if (implied !== undefined) redacted.push(text(implied));
          method.apply(this, redacted as Parameters<typeof method>);
        },
      },
    },
    destination,
  );
  configuredSecretsOf.set(logger, configured);
  const child = logger.child;
  // Children inherit this wrapper (pino makes each from its parent's prototype), theirs included.
  logger.child = function (this: Logger, bindings, options) {
    const made = child.call(this, secrets(bindings), options);
    configuredSecretsOf.set(made, configured);
    return made;
  } as Logger["child"];
  return logger;
}

/**
 * The message pino writes for a record logged without one: an error's (`logger.error(err)`), or
 * that of the record's `err` when it has no `msg` (`logger.warn({ err })`). Written as it is, it
 * would escape the redaction, which sees only the record.
 */
function impliedMessage(record: unknown): string | undefined {
  if (typeof record !== "object" || record === null) return undefined;
  const error =
    record instanceof Error
      ? record
      : (record as { msg?: unknown }).msg === undefined
        ? (record as { err?: unknown }).err
        : undefined;
  const message = (error as { message?: unknown } | null | undefined)?.message;
  return typeof message === "string" ? message : undefined;
}

/**
 * The gateway's logger, on stdout (`createLogDestination`): a line that cannot be written (a full
 * disk, a closed pipe) is dropped and counted with `onDropped`, and the first line written again
 * is a warning saying how many were and why. What is held when the process exits is written then;
 * lines dropped and not reported by then are reported on stderr, if it can be written. A pipe or
 * socket on stdout or stderr is written without blocking (`makeStdioNonBlocking`), so a reader that
 * stopped reading holds neither the event loop nor the exit. Lines are written in the order they
 * were logged, the exit's included (`createLogDestination` writes on the main thread).
 */
export function createStdoutLogger(
  level: string,
  onDropped: (lines: number) => void,
  disabledWarnings: ReadonlySet<string>,
): Logger {
  makeStdioNonBlocking();
  ignoreStdioWriteErrors();
  const report = (to: Logger, dropped: number, reason: string) =>
    to.warn({ dropped, reason }, "log lines could not be written: dropped");
  const destination = createLogDestination({
    fd: 1,
    onDropped,
    onRecovered: (dropped, reason) => report(logger, dropped, reason),
  });
  const logger = createLogger(level, destination);
  logProcessWarnings(logger, disabledWarnings);
  process.once("exit", () => {
    destination.flushSync();
    const { dropped, reason } = destination.unreported();
    if (dropped > 0) report(createLogger(level, { write: writeStderr }), dropped, reason);
  });
  return logger;
}

/** The logger Node's warnings go to: the last stdout logger made (`logProcessWarnings`). */
let warningsLogger: Logger | undefined;

/**
 * Node prints a process warning (node-postgres's SECURITY WARNING for `sslmode=require`, a
 * package's deprecation) as plain text on stderr, often over several lines, which a log collector
 * takes for as many entries outside the JSON log. It goes to `logger` instead, as one line at
 * `warn` (`warning`: its name, `code` when it has one; the message whole). Once per process, in
 * place of Node's printer; with `--no-warnings` or NODE_NO_WARNINGS=1, Node added none, and
 * warnings stay unprinted. A warning whose code or name is in `disabled` (`--disable-warning`,
 * `disabledNodeWarnings`) is left out, as Node's printer leaves it out: Node emits it all the same.
 */
function logProcessWarnings(logger: Logger, disabled: ReadonlySet<string>): void {
  const first = warningsLogger === undefined;
  warningsLogger = logger;
  if (!first) return;
  const printers = process.listeners("warning");
  if (printers.length === 0) return;
  for (const printer of printers) process.removeListener("warning", printer);
  process.on("warning", (warning) => {
    const code = (warning as { code?: unknown }).code;
    if (disabled.has(warning.name) || (typeof code === "string" && disabled.has(code))) return;
    warningsLogger?.warn(
      { warning: warning.name, ...(typeof code === "string" ? { code } : {}) },
      warning.message,
    );
  });
}

function writeStderr(line: string): void {
  try {
    writeSync(2, line);
  } catch {
    // Nowhere left to say it.
  }
}

let stdioWriteErrorsIgnored = false;

/**
 * What the gateway's dependencies print goes through Node's own streams on the log's descriptors
 * (a package's console.warn, a Node warning). A write they refuse (a pipe whose reader left, a
 * full disk) is an `error` event, and with nobody listening an uncaught exception that ends the
 * process: the line gives way instead, as the log's do. Once per process, however many loggers
 * are made (a listener each would pile up past Node's warning in a process that builds many).
 */
export function ignoreStdioWriteErrors(): void {
  if (stdioWriteErrorsIgnored) return;
  stdioWriteErrorsIgnored = true;
  process.stdout.on("error", () => {});
  process.stderr.on("error", () => {});
}
