import { connect } from "node:net";

/** One command in RESP, as a client sends it. */
const command = (...args: string[]) =>
  `*${args.length}\r\n${args.map((arg) => `$${Buffer.byteLength(arg)}\r\n${arg}\r\n`).join("")}`;

const escapes: Record<string, number> = { n: 10, r: 13, t: 9, a: 7, b: 8, '"': 34, "\\": 92 };

/**
 * The arguments of one line MONITOR reports (`+1796208903.927604 [0 127.0.0.1:35486] "get" "k"`,
 * or `[0 lua] "GET" "k"` for a script's), each unquoted as Redis quotes it (`\"`, `\\`, `\n`,
 * `\xHH`…); none for a line of another shape. Never throws.
 */
export function monitorArguments(line: string): string[] {
  const start = line.indexOf("] ");
  if (!line.startsWith("+") || start === -1) return [];
  const args: string[] = [];
  let index = start + 2;
  while (index < line.length) {
    if (line[index] === " ") {
      index++;
      continue;
    }
    if (line[index] !== '"') return args;
    const bytes: number[] = [];
    index++;
    while (index < line.length && line[index] !== '"') {
      const char = line[index] as string;
      const next = line[index + 1] ?? "";
      if (char === "\\" && next === "x" && /^[0-9a-fA-F]{2}$/.test(line.slice(index + 2, index + 4))) {
        bytes.push(Number.parseInt(line.slice(index + 2, index + 4), 16));
        index += 4;
      } else if (char === "\\" && next in escapes) {
        bytes.push(escapes[next] as number);
        index += 2;
      } else {
        bytes.push(...Buffer.from(char));
        index++;
      }
    }
    args.push(Buffer.from(bytes).toString());
    index++;
  }
  return args;
}

/**
 * Every command the Redis at `redisUrl` runs, as MONITOR reports it, passed to `seen` as its
 * arguments: on a connection of its own that sends MONITOR and cuts what comes back into lines
 * itself. ioredis's `monitor()` takes the lines that reach it in the same chunk as MONITOR's `+OK`
 * (a busy server's, any client's commands) for replies to commands it never sent, and fails with
 * "Command queue state error" and as many unhandled errors. Resolves once MONITOR is on (its `+OK`
 * read), rejects if it is refused or the connection fails before; a failure after is only kept
 * (`failure()`), as is one `seen` throws: the test then misses lines it waits for, never an
 * unhandled error.
 */
export async function redisMonitor(redisUrl: string, seen: (args: string[]) => void) {
  const url = new URL(redisUrl);
  const socket = connect(Number(url.port || 6379), url.hostname);
  socket.setEncoding("utf8");
  let failure: Error | undefined;
  let closing = false;
  let pending = "";
  // The +OK still to read before the monitor's lines: AUTH's, if the URL has a password, and MONITOR's.
  let replies = url.password ? 2 : 1;
  const sent = url.password
    ? command(
        "AUTH",
        ...(url.username ? [decodeURIComponent(url.username)] : []),
        decodeURIComponent(url.password),
      )
    : "";
  const on = new Promise<void>((resolve, reject) => {
    const fail = (error: Error) => {
      failure ??= error;
      reject(error);
    };
    socket.on("error", fail);
    socket.on("close", () => {
      if (!closing) fail(new Error("The MONITOR connection closed"));
    });
    socket.on("data", (chunk: string) => {
      pending += chunk;
      const lines = pending.split("\r\n");
      pending = lines.pop() as string;
      for (const line of lines) {
        if (replies > 0) {
          if (line !== "+OK") {
            fail(new Error(`Redis refused MONITOR: ${line}`));
            socket.destroy();
            return;
          }
          if (--replies === 0) resolve();
          continue;
        }
        try {
          seen(monitorArguments(line));
        } catch (error) {
          failure ??= error as Error;
        }
      }
    });
  });
  socket.write(`${sent}${command("MONITOR")}`);
  await on;
  return {
    /** Why the connection failed after MONITOR was on, if it did. */
    failure: () => failure,
    /** Ends the connection. */
    close: () =>
      new Promise<void>((resolve) => {
        closing = true;
        if (socket.destroyed) resolve();
        else {
          socket.once("close", () => resolve());
          socket.destroy();
        }
      }),
  };
}
