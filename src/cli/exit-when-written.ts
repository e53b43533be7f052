/**
 * How a process that ran the CLI exits: once what it wrote has been written. On Linux a write to a
 * pipe that is full is queued, and an exit right after it cut the output at the pipe's size (a
 * `projects list` of 64 KiB or more piped to jq). Output that could not be written (a full disk)
 * fails the command with a line on stderr that says the command ran (a key it created and printed
 * is lost, not missing); a reader that stopped reading early (`| head`) does not fail it.
 * bin/sluice.js does the same in plain JavaScript (it runs before the build or tsx is loaded); this
 * is for src/cli/main.ts run directly (`npx tsx src/cli/main.ts …`).
 *
 * Call it before the CLI writes anything: it listens for the first output error from then on.
 */
export function exitWhenWritten(): (code: number) => Promise<never> {
  let outputError: NodeJS.ErrnoException | undefined;
  process.stdout.on("error", (error: NodeJS.ErrnoException) => {
    outputError ??= error;
  });
  process.stderr.on("error", () => {});
  const flushed = (stream: NodeJS.WriteStream) =>
    new Promise<void>((resolve) => stream.write("", () => resolve()));
  return async (code) => {
    await flushed(process.stdout);
    if (outputError && outputError.code !== "EPIPE") {
      // Only a command that succeeded writes to stdout: its change is made, and a key it printed lost.
      const ran = code === 0 ? ": the command ran, but what it printed is lost" : "";
      process.stderr.write(
        `error: cannot write the output to standard output (${outputError.code ?? outputError.message})${ran}\n`,
      );
      code = 1;
    }
    await flushed(process.stderr);
    process.exit(code);
  };
}
