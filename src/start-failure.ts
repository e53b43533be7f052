/**
 * The line `npm start` and `sluice serve` print when the gateway cannot start: the error's message
 * and those of its causes (a failed migration wraps the database's own error, which says why). A
 * cause whose message its wrapper already holds (`SLUICE_CONFIG_FILE …: project "x": <reason>;
 * project "y": <reason>`) is not repeated; its own causes still are.
 */
export function startFailureMessage(error: unknown): string {
  const parts: string[] = [];
  let current: unknown = error;
  // Not errorChain: it prints each message down one path, a cause that is no Error included (errorChain stops there).
  for (let depth = 0; current !== undefined && current !== null && depth < 4; depth++) {
    const message = current instanceof Error ? current.message : String(current);
    if (!parts.at(-1)?.includes(message)) parts.push(message);
    current = current instanceof Error ? current.cause : undefined;
  }
  return `sluice failed to start: ${parts.join(": ")}\n`;
}
