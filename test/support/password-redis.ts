import { startLocalTcpServer } from "./local-server.js";

/**
 * A Redis that requires a password and takes none: AUTH is answered WRONGPASS and every other
 * command NOAUTH, as a Redis with `requirepass` answers a client without the right password.
 * `authReply` replaces the AUTH answer: Redis 5 and older answer an AUTH with a user name
 * `-ERR wrong number of arguments for 'auth' command`, which ioredis only warns about.
 */
export async function startPasswordRedis(
  authReply = "-WRONGPASS invalid username-password pair or user is disabled.",
): Promise<{ port: number; close(): Promise<void> }> {
  return startLocalTcpServer((socket) => {
    let buffered = Buffer.alloc(0);
    socket.on("data", (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      for (let command = nextCommand(buffered); command; command = nextCommand(buffered)) {
        buffered = buffered.subarray(command.length);
        socket.write(
          command.name.toLowerCase() === "auth" ? `${authReply}\r\n` : "-NOAUTH Authentication required.\r\n",
        );
      }
    });
  });
}

/**
 * The first command in `buffer` (RESP: an array of bulk strings, as clients send them): its name
 * and how many bytes it takes; undefined until it has arrived whole.
 */
function nextCommand(buffer: Buffer): { name: string; length: number } | undefined {
  let offset = 0;
  const line = (): string | undefined => {
    const end = buffer.indexOf("\r\n", offset);
    if (end < 0) return undefined;
    const text = buffer.toString("latin1", offset, end);
    offset = end + 2;
    return text;
  };
  const header = line();
  if (header === undefined) return undefined;
  let name = "";
  for (let index = 0; index < Number(header.slice(1)); index++) {
    const size = line();
    if (size === undefined) return undefined;
    const length = Number(size.slice(1));
    if (buffer.length < offset + length + 2) return undefined;
    if (index === 0) name = buffer.toString("latin1", offset, offset + length);
    offset += length + 2;
  }
  return { name, length: offset };
}
