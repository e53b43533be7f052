/**
 * The WHATWG "event stream interpretation" run on a whole decoded text at once: the reference the
 * incremental scanner is compared with. Each event comes with its raw size (its lines, without
 * line ends). An unterminated last line is never processed, as in a live stream; with
 * `dispatchLast` (a clean end read as openai's SDK reads it) it is a line, and the event in
 * progress is then dispatched as a blank line would dispatch it.
 */
export function referenceSseEvents(text: string, dispatchLast = false) {
  const seen: Array<{ event: string | undefined; data: string; rawBytes: number }> = [];
  const lines = text.split(/\r\n|\r|\n/);
  const unterminated = lines.pop() as string;
  if (dispatchLast) {
    if (unterminated !== "") lines.push(unterminated);
    lines.push("");
  }
  let data: string[] = [];
  let event: string | undefined;
  let rawBytes = 0;
  for (const line of lines) {
    if (line === "") {
      if (data.length > 0) seen.push({ event, data: data.join("\n"), rawBytes });
      data = [];
      event = undefined;
      rawBytes = 0;
      continue;
    }
    rawBytes += Buffer.byteLength(line);
    if (line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") data.push(value);
    else if (field === "event") event = value;
  }
  return seen;
}
