import { quotedStart } from "./quoted-start.js";

/**
 * Whether a value given where a file's name goes holds the file's contents instead: a line break,
 * a PEM's `-----BEGIN`, a JSON document, or more than a path can hold (PATH_MAX, 4096 on Linux).
 */
export function isFileContents(value: string): boolean {
  return /[\r\n]/.test(value) || /^\s*(?:-----|[{[])/.test(value) || value.length > 4096;
}

/**
 * A file's name as a message shows it (`quote` writes a name; as it is by default), unless the value
 * holds the file's contents instead: then only their start and length. A private key (TLS, a .p8)
 * or a projects file holding .p8 keys, set where its file's name goes, would otherwise be printed
 * in a start failure or a CLI error, which go where logs are collected.
 */
export function fileNameShown(value: string, quote: (name: string) => string = (name) => name): string {
  return isFileContents(value)
    ? `${quotedStart(value)}, which looks like a file's contents, not its name`
    : quote(value);
}

/** Why a file could not be read, from its error's code alone: Node's message repeats the name. */
export function unreadableReason(error: unknown): string {
  const code = (error as NodeJS.ErrnoException).code;
  return code === "ENOENT" ? "no such file" : code === "EISDIR" ? "a directory" : (code ?? "unreadable");
}
