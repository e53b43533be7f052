/**
 * A value as a message may quote it: whole when short, else its first characters and length.
 * A value in the wrong place may be a secret (a provider key given as a stray argument or as the
 * project id, a private key's contents given where its file's name goes), and the message goes to
 * the terminal and its logs.
 */
export function quotedStart(value: string): string {
  return value.length <= 8
    ? JSON.stringify(value)
    : `${JSON.stringify(`${value.slice(0, 4)}…`)} (${value.length} characters)`;
}
