import { Writable } from "node:stream";
import { runCli } from "../../src/cli/main.js";

/** A stream that keeps what is written to it, and the text so far. */
export function capture(): { stream: Writable; text: () => string } {
  let text = "";
  const stream = new Writable({
    write(chunk, _encoding, done) {
      text += String(chunk);
      done();
    },
  });
  return { stream, text: () => text };
}

/**
 * Runs the `sluice` command in this process (`runCli`) with `argv`, no standard input, and what it
 * writes captured: its exit code, its output, its errors, and its output read as JSON.
 */
export async function cli(
  ...argv: string[]
): Promise<{ code: number; out: string; err: string; json: () => unknown }> {
  const out = capture();
  const err = capture();
  const code = await runCli(argv, { out: out.stream, err: err.stream, stdin: 0 });
  return {
    code,
    out: out.text(),
    err: err.text(),
    json: () => JSON.parse(out.text()) as unknown,
  };
}
