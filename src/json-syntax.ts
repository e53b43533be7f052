/**
 * Why JSON.parse refused `text`, from the error it threw, as a message may show it: never the text
 * itself, which V8 quotes around some errors (`Unexpected token 'x', "…" is not valid JSON`) and may
 * be part of a private key, and with the line and column of a position V8 gives (Node 20 says only
 * "at position 1834", a count of characters to make in a file of many lines; later versions add
 * "(line 3 column 5)", replaced the same way).
 */
export function jsonSyntaxProblem(error: unknown, text: string): string {
  const message = (error as Error).message;
  const position = /in JSON at position (\d+)(?: \(line \d+ column \d+\))?/.exec(message);
  if (position) {
    const before = text.slice(0, Number(position[1]));
    const line = before.split("\n").length;
    const column = before.length - before.lastIndexOf("\n");
    return message.replace(position[0], `in JSON at line ${line}, column ${column}`);
  }
  // Everything from the quote on: `, "…" is not valid JSON` and `, …"…"… is not valid JSON`.
  return message.replace(/, (?:\.\.\.)?".*$/s, " (not valid JSON)");
}
