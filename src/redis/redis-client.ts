import { createConnection } from "node:net";
import type { Command, Redis } from "ioredis";

const connectTimeoutMs = 1_000;
/** SLUICE_REDIS_COMMAND_TIMEOUT_MS's default, for a client built without one (tests). */
const defaultCommandTimeoutMs = 500;

/** The commands ioredis sends itself to set a connection up (user and password, database, ready check). */
const setupCommands: ReadonlySet<string> = new Set(["auth", "hello", "select", "info"]);

/**
 * Redis refused to set the first connection up as the URL asks (a wrong user or password, a
 * database index the server does not have): a configuration error, not an outage. The message
 * never carries the password.
 */
export class RedisSetupError extends Error {
  override name = "RedisSetupError";
}

/**
 * A Redis client built to fail fast, as limits need (`ioredis` is loaded only when Redis is
 * configured):
 * - no offline queue: a command while disconnected fails at once and the per-instance fallback answers;
 * - no retry of a command whose connection dropped (`maxRetriesPerRequest: 0`) and no replay of it
 *   after a reconnect: it fails at once, and a counter increment replayed later would count twice;
 * - short connect and command timeouts, so a Redis that hangs costs a command at most
 *   `commandTimeoutMs` (SLUICE_REDIS_COMMAND_TIMEOUT_MS, 500 ms by default; more for a Redis far away);
 * - a connection that goes silent is replaced: ioredis's command timeout fails the command but keeps
 *   the socket, and only a closed socket makes it reconnect, so a connection whose peer stopped
 *   answering (a black-holed path) would time out every command forever while a new connection
 *   would work. The first command that times out on a socket destroys that socket (once: later
 *   timeouts find it destroyed), and the client reconnects; unless the socket reads something in
 *   the same turn of the event loop. A timer that ran late, after a stall of this process, fails no
 *   command whose answer was waiting in the socket (`answerReadBeforeTimeout`): the command has its
 *   answer and the connection is kept; TCP keepalive also notices an idle
 *   connection whose peer vanished. A Redis that is only slow (a long script elsewhere) costs a
 *   reconnect too, which is cheap next to the timeouts it already caused;
 * - a connection answered READONLY (a primary demoted to a replica by a failover keeps its
 *   connections and refuses writes on them) is replaced, at most once in 5 s: the new connection
 *   reaches the server the URL's name points to now, the new primary;
 * - connects at once (`lazyConnect: false`) and reconnects forever with a capped backoff;
 * - an 'error' listener, so a lost Redis never crashes the process (ioredis emits 'error' on every
 *   failed reconnect, and an 'error' event without a listener would throw).
 *
 * Resolves once the first connection is ready, or failed, or after the connect timeout: without
 * an offline queue, commands sent while still connecting fail, so a gateway serving at once would
 * answer its first requests as if Redis were down (single-use device tokens refused with 503,
 * limits per instance). A Redis that is down still costs no wait beyond its first failure.
 * Rejects with `RedisSetupError` when Redis refuses the first connection's setup (AUTH, SELECT):
 * ioredis would otherwise report a connection whose SELECT failed as ready, on database 0; and when
 * a `rediss://` URL reaches a Redis that answers without TLS (`answersWithoutTls`). A later
 * connection whose SELECT is refused is dropped (and retried) rather than used on database 0.
 * The refusal is not passed to `onError` (the rejection says it), nor anything the client says once
 * its start failed (replies still arriving on the connection being closed).
 */
export async function createRedisClient(
  url: string,
  options: {
    commandTimeoutMs?: number;
    onError?: (error: Error) => void;
    onWarning?: (message: string) => void;
  } = {},
): Promise<Redis> {
  const commandTimeoutMs = options.commandTimeoutMs ?? defaultCommandTimeoutMs;
  // Through the default export: ioredis is CommonJS, and the production build's chunk of a CommonJS
  // package exports its `module.exports` as the default alone, so a named export read from import()
  // is undefined there (Node's own loader has both). `module.exports` is the Redis class, which
  // also carries itself as `Redis`, the name its types give it.
  const { Redis: RedisClient } = (await import("ioredis")).default;
  const client = new (replacingSilentConnections(RedisClient, commandTimeoutMs))(url, {
    lazyConnect: false,
    // RESP2, as ioredis 5 spoke (ioredis 6 says HELLO 3 by default): HELLO's AUTH names the default
    // user, which a Redis requiring no password takes silently, so a password it would not use could
    // not be reported (`authWarnings`); a Redis 5 or older would refuse HELLO on every connection.
    protocol: 2,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
    connectTimeout: connectTimeoutMs,
    commandTimeout: commandTimeoutMs,
    keepAlive: 10_000,
    retryStrategy: (attempt) => Math.min(100 * 2 ** attempt, 2_000),
  });
  let starting = true;
  // AUTH's own refusal (WRONGPASS): ioredis sends SELECT with it, whose NOAUTH may be heard first.
  let authRefusal: Error | undefined;
  reportingAuthWarnings(client, options.onWarning ?? (() => {}), (error) => {
    if (starting) authRefusal ??= error;
  });
  let failed = false;
  client.on("error", (error: Error) => {
    if (refusedCommand(error) === "select") client.stream?.destroy();
    if (failed || (starting && refusedCommand(error))) return;
    options.onError?.(error);
  });
  const refusal = await firstConnection(client, connectTimeoutMs);
  const refused = refusal && (authRefusal ?? refusal);
  const plainText =
    !refused && client.status !== "ready" && (await answersWithoutTls(client, commandTimeoutMs));
  starting = false;
  if (refused || plainText) {
    failed = true;
    client.disconnect();
    throw new RedisSetupError(
      refused
        ? setupRefusal(refused, client.options.db, Boolean(client.options.password))
        : `the URL is rediss:// (TLS), but the Redis at ${client.options.host}:${client.options.port} answers without TLS: write redis://, or turn TLS on in Redis`,
    );
  }
  return client;
}

/**
 * Whether the server of a `rediss://` client whose first connection never became ready answers
 * a PING in plain text: a Redis without TLS waits for the end of a line that the TLS handshake never
 * sends, so the client only ever times out connecting, as for a Redis that is down. One connection
 * of its own, at start only, sending no credential; a TLS server answers the PING with an alert or by
 * closing, never with a RESP reply (`+PONG`, `-NOAUTH …`).
 */
function answersWithoutTls(client: Redis, commandTimeoutMs: number): Promise<boolean> {
  const { host = "localhost", port = 6379, tls, path } = client.options;
  if (!tls || path) return Promise.resolve(false);
  return new Promise((resolve) => {
    const socket = createConnection({ host, port });
    const settle = (plain: boolean) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(plain);
    };
    const timer = setTimeout(() => settle(false), commandTimeoutMs);
    socket.once("connect", () => socket.write("*1\r\n$4\r\nPING\r\n"));
    socket.once("data", (chunk: Buffer) => settle(chunk[0] === 0x2b || chunk[0] === 0x2d));
    socket.once("error", () => settle(false));
    socket.once("close", () => settle(false));
  });
}

/**
 * How often at most a connection answered READONLY is replaced: a Redis that stays a replica (a
 * REDIS_URL naming one, a name not yet moved after a failover) costs a reconnect and its log line
 * this often, not one per write.
 */
const readonlyReplacementMs = 5_000;

/**
 * The Redis class with every command watched for a timeout that leaves its socket silent, and for
 * a READONLY reply: after a failover the demoted primary keeps its connections open and refuses
 * every write on them, while a new connection to the same name reaches the new primary.
 */
function replacingSilentConnections(Base: typeof Redis, commandTimeoutMs: number): typeof Redis {
  let readonlyReplacedAt = Number.NEGATIVE_INFINITY;
  return class extends Base {
    override sendCommand(command: Command, stream?: Parameters<Redis["sendCommand"]>[1]): unknown {
      answerReadBeforeTimeout(command);
      // The socket the command is written to; by the time it times out, the client may have another.
      const socket = this.stream;
      const sent = super.sendCommand(command, stream);
      command.promise.catch((error: unknown) => {
        if (!socket || socket.destroyed || !(error instanceof Error)) return;
        if (error.message.startsWith("READONLY ")) {
          if (performance.now() - readonlyReplacedAt < readonlyReplacementMs) return;
          readonlyReplacedAt = performance.now();
          socket.destroy(
            new Error("Redis answered READONLY (a replica, as after a failover): connection replaced"),
          );
          return;
        }
        if (error.message !== "Command timed out") return;
        // After a stall of this process (a long GC pause, a burst of synchronous work) the timer
        // runs before the answer waiting in the socket is read: the socket gets the poll phase of
        // this turn of the event loop first, and is kept if it read anything.
        const read = socket.bytesRead;
        setImmediate(() => {
          if (socket.destroyed || socket.bytesRead !== read) return;
          socket.destroy(
            new Error(`Redis did not answer within ${commandTimeoutMs} ms: connection replaced`),
          );
        });
      });
      return sent;
    }
  };
}

/**
 * Makes `command`'s timeout (ioredis's `commandTimeout`) fail it only once the answers waiting in
 * the socket were read: the timer runs at the start of a turn of the event loop, before the poll
 * phase reads the socket, so after a stall of this process longer than the timeout (a long GC
 * pause, a busy machine that did not run it) every command sent before the stall failed although
 * Redis had answered it in time. The limits then went per instance (and rested Redis for 2 s) for
 * answers already counted in Redis. The timeout now waits for the check phase of the same turn
 * (`setImmediate`), after the socket was read: a command answered meanwhile has its answer, and one
 * still unanswered fails as before, one turn of the loop later.
 */
function answerReadBeforeTimeout(command: Command): void {
  const timed = command as unknown as {
    isSettled: boolean;
    _commandTimeoutTimer?: ReturnType<typeof setTimeout>;
  };
  command.setTimeout = (ms: number) => {
    // Once, as ioredis's own: a command moved from one queue to another keeps its first timer.
    if (timed._commandTimeoutTimer) return;
    // Kept where ioredis clears it when the command settles.
    timed._commandTimeoutTimer = setTimeout(() => {
      setImmediate(() => {
        if (!timed.isSettled) command.reject(new Error("Command timed out"));
      });
    }, ms);
  };
}

/**
 * The AUTH replies ioredis answers with a line of its own on the console (outside the JSON log,
 * whatever the log level) and then carries on without the URL's AUTH, each with what to tell the
 * operator instead. Never the password: these are Redis's replies about it, not the command.
 */
const authWarnings: ReadonlyArray<{ reply: string; warning: string }> = [
  {
    // Redis 6 and later.
    reply: "without any password configured for the default user",
    warning:
      "REDIS_URL gives a password, but this Redis requires none (its default user has no password): the password is not used, and anyone who can reach this Redis can use it",
  },
  {
    // Redis 5 and older.
    reply: "no password is set",
    warning:
      "REDIS_URL gives a password, but this Redis requires none (it has no requirepass): the password is not used, and anyone who can reach this Redis can use it",
  },
  {
    // Redis 5 and older, given a user name and a password.
    reply: "wrong number of arguments for 'auth' command",
    warning:
      "REDIS_URL gives a user name, which Redis 5 and older do not take: its AUTH was not used; write the URL without the user (redis://:password@host)",
  },
];

/**
 * Reports the AUTH replies ioredis would print on the console (`[WARN] This Redis server's
 * \`default\` user does not require a password, but a password was supplied`) to `onWarning`
 * instead, once per client, and any other refusal of AUTH to `onRefused`: ioredis sends its AUTH
 * through `client.auth` and prints these replies when its promise rejects, so AUTH is wrapped to
 * hear them first and take them as answered (the connection carries on without the URL's AUTH, as
 * ioredis would have it); every other error still rejects.
 */
function reportingAuthWarnings(
  client: Redis,
  onWarning: (message: string) => void,
  onRefused: (error: Error) => void,
): void {
  const auth = client.auth.bind(client) as (...args: unknown[]) => Promise<unknown>;
  let warned = false;
  const wrapped = (...args: unknown[]) =>
    auth(...args).catch((error: unknown) => {
      const known = error instanceof Error && authWarnings.find(({ reply }) => error.message.includes(reply));
      if (!known) {
        if (error instanceof Error) onRefused(error);
        throw error;
      }
      if (!warned) onWarning(known.warning);
      warned = true;
      return "OK";
    });
  client.auth = wrapped as Redis["auth"];
}

/** The setup command a reply error answered, e.g. "select"; undefined for any other error. */
function refusedCommand(error: Error): string | undefined {
  if (error.name !== "ReplyError") return undefined;
  const name = (error as Error & { command?: { name?: unknown } }).command?.name;
  return typeof name === "string" && setupCommands.has(name.toLowerCase()) ? name.toLowerCase() : undefined;
}

/**
 * What Redis refused, in words that never include the password (AUTH's arguments). A password
 * missing (NOAUTH) or refused (WRONGPASS) is named whatever command was answered so: without a
 * password in the URL the first command sent is SELECT, when the URL names a database, and its
 * NOAUTH says nothing of the database index. A NOAUTH after the URL's own AUTH (which an old Redis
 * answers with an error ioredis only warns about) says the AUTH was not taken.
 */
function setupRefusal(error: Error, db: number | undefined, urlHasPassword: boolean): string {
  const command = refusedCommand(error);
  const what = error.message.startsWith("NOAUTH")
    ? urlHasPassword
      ? // The URL's AUTH was not taken (Redis 5 and older take a password only, no user name).
        "the connection (it still requires authentication after the URL's AUTH; Redis 5 and older take a password without a user name)"
      : "the connection (it requires a password, and the URL gives none)"
    : error.message.startsWith("WRONGPASS") || command === "auth" || command === "hello"
      ? "AUTH (the user and password in the URL)"
      : command === "select"
        ? `SELECT ${db ?? "?"} (the database index in the URL)`
        : "the connection (a password may be required)";
  return `Redis refused ${what}: ${error.message}`;
}

/** Waits for the first connection to be ready, fail or time out; returns a setup refusal, if any. */
function firstConnection(client: Redis, timeoutMs: number): Promise<Error | undefined> {
  const events = ["ready", "error", "end"] as const;
  return new Promise((resolve) => {
    const settle = (error?: unknown) => {
      clearTimeout(timer);
      for (const event of events) client.off(event, settle);
      resolve(error instanceof Error && refusedCommand(error) ? error : undefined);
    };
    const timer = setTimeout(settle, timeoutMs);
    for (const event of events) client.once(event, settle);
  });
}
