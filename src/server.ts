import {
  createServer as createHttpServer,
  type IncomingMessage,
  type Server,
  type ServerOptions,
  type ServerResponse,
} from "node:http";
import { createServer as createHttpsServer } from "node:https";
import type { Socket } from "node:net";
import { resolve } from "node:path";
import type { App } from "./app.js";
import { loadConfig, startedByNpmScript, unknownSettings } from "./config.js";
import { createGateway, type Gateway } from "./deps.js";
import { shutdownMarginMs } from "./gateway-close.js";
import { type ConnectionDrain, trackConnections } from "./http/connection-drain.js";
import { maxHeaderFields } from "./http/max-header-fields.js";
import { continueWhenRead } from "./http/read-body.js";
import { listeningUrl } from "./net/listening-url.js";
import { readTlsFiles, StartSettingError } from "./net/tls-files.js";
import { serviceUrlShown } from "./service-url-shown.js";
import { stopOnSignalWhileStarting } from "./stop-while-starting.js";
import { sqliteFileIn } from "./storage/database.js";
import { unknownSettingWarnings } from "./unknown-setting-warnings.js";
import { version } from "./version.js";

/**
 * Loads config, build the gateway, listen, and shut down gracefully on SIGTERM/SIGINT/SIGHUP (before
 * it listens, they end the start: `stopOnSignalWhileStarting`). A port that cannot be listened on
 * (in use, a host that does not resolve) closes what the start opened (the metrics listener, the
 * gateway: its database, Redis, pools and timers) before the error is thrown.
 */
export async function serve(): Promise<void> {
  const stopStart = stopOnSignalWhileStarting();
  try {
    await startServing();
  } finally {
    stopStart();
  }
}

async function startServing(): Promise<void> {
  const config = loadConfig();
  // Checked before the database opens: a bad file stops the start at once, named.
  const tls = config.tlsCert && config.tlsKey ? readTlsFiles(config.tlsCert, config.tlsKey) : undefined;
  // Signed vault URLs name the address the server got (PORT=0 picks a port), once it listens.
  let started: GatewayServer | undefined;
  const gateway = await createGateway(config, { listenAddress: () => started?.address() ?? null });
  const { logger, app } = gateway;
  for (const warning of unknownSettingWarnings(unknownSettings()))
    logger.warn(warning.fields, warning.message);
  const server = createGatewayServer(app, tls ? { tls } : {});
  started = server;
  // The metrics port first: when it is taken, the start fails before the gateway's port takes a call.
  const metricsServer = gateway.metricsListener ? createHttpServer(gateway.metricsListener) : null;
  try {
    if (metricsServer)
      await listen(
        metricsServer,
        config.metricsPort ?? 0,
        config.metricsHost,
        `SLUICE_METRICS_HOST ${config.metricsHost} SLUICE_METRICS_PORT ${config.metricsPort}`,
      );
    // One port for both: the metrics listener, started first, holds it, and Node's "address already
    // in use" alone sends the operator looking for another process.
    const sharedPort =
      metricsServer && config.port !== 0 && config.metricsPort === config.port
        ? "SLUICE_METRICS_PORT is the same port, which the metrics listener, started first, holds: give it a port of its own"
        : undefined;
    await listen(server, config.port, config.host, `HOST ${config.host} PORT ${config.port}`, sharedPort);
  } catch (error) {
    // A program that called serve() goes on: what was opened is closed before the failure is
    // thrown on (the CLI would exit anyway). Nothing was served, so the gateway closes at once.
    if (metricsServer?.listening) await new Promise((resolve) => metricsServer.close(resolve));
    await gateway.close(Date.now()).catch((closeError: unknown) => {
      logger.warn({ err: closeError }, "closing the gateway after its failed start failed");
    });
    throw error;
  }
  const address = server.address();
  const port = typeof address === "object" && address ? address.port : config.port;
  logger.info(
    {
      version,
      host: config.host,
      port,
      // Which database and Redis, as an operator checks a deployment against its settings: no
      // password, no query (either may hold one).
      database: gateway.database.engine,
      databaseAt: config.databaseUrl
        ? serviceUrlShown(config.databaseUrl)
        : resolve(sqliteFileIn(config.dataDir)),
      // `redis` says REDIS_URL is set; `redisConnected`, whether Redis answered by now. The start
      // waits for neither (an unreachable Redis costs it one failed connect at most).
      redis: Boolean(config.redisUrl),
      ...(config.redisUrl
        ? { redisAt: serviceUrlShown(config.redisUrl), redisConnected: gateway.redisConnected() === true }
        : {}),
      tls: Boolean(config.tlsCert),
      // SLUICE_MAX_CONNECTIONS in force: when unset, what the open-file limit gave (0: no cap).
      maxConnections: gateway.connections.maxTotal,
      // SLUICE_MAX_BUFFERED_BODY_BYTES in force: when unset, what V8's heap limit gave (0: no cap).
      maxBufferedBodyBytes: gateway.bodyBudget.maxBytes,
      ...(metricsServer
        ? {
            metrics: `${listeningUrl(metricsServer.address(), { host: config.metricsHost, port: config.metricsPort ?? 0 }, false)}/metrics`,
          }
        : {}),
    },
    `sluice listening on ${listeningUrl(address, config, Boolean(config.tlsCert))}`,
  );

  stopOnSignalOrCrash(server, gateway, metricsServer);
}

/**
 * Listens on `port` at `host`; a failure names the settings (`settings`) they come from, and a port
 * in use says `whyInUse` when given.
 */
function listen(
  server: Server,
  port: number,
  host: string,
  settings: string,
  whyInUse?: string,
): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    // Node's reason (`getaddrinfo ENOTFOUND …`, `listen EADDRINUSE …`) names neither setting.
    server.once("error", (error: NodeJS.ErrnoException) => {
      const why = whyInUse && error.code === "EADDRINUSE" ? ` (${whyInUse})` : "";
      reject(new StartSettingError(`cannot listen on ${settings}${why}`, { cause: error }));
    });
    server.listen(port, host, resolve);
  });
}

/**
 * SIGTERM, SIGINT and SIGHUP start the graceful shutdown (`shutDown`), then the process exits.
 * With SLUICE_SHUTDOWN_DELAY_MS set, the first signal starts a delay instead: the gateway goes on
 * accepting connections and serving every route while /health answers 503 `stopping`, each answer
 * closing its connection (`Connection: close`), and the shutdown begins when it is over. A load
 * balancer learns of a stopping instance asynchronously (a Kubernetes endpoint removal reaches the
 * proxies some seconds after the SIGTERM), and meanwhile sends it new connections, which a server
 * that stopped listening refuses. A second signal while the delay or the shutdown runs hurries
 * it: what is still open is refused or cut at once, as at the deadline, and the usage rows are
 * written and the queue flushed within the margin before the exit; a later one is logged and
 * ignored. None kills the process (Node's default once no handler
 * listens), which would lose the queued rows. Under an npm script, the same signal again within
 * `npmCopyWindowMs` is npm's copy of the one before (a Ctrl-C reaches the gateway from the terminal
 * and from npm), not a second one: it is logged and ignored. A last resort for a bug that throws
 * outside any request (an uncaught exception or unhandled rejection): it is logged and the same
 * shutdown runs at once, the delay cut short, so the rows are written, and the process exits with
 * 1, at the latest a second after the shutdown's own limit.
 */
function stopOnSignalOrCrash(server: GatewayServer, gateway: Gateway, metricsServer: Server | null): void {
  const { logger } = gateway;
  const hurry = new AbortController();
  /** The delay's timer, while the delay runs; cleared when the shutdown begins by other means. */
  let delay: NodeJS.Timeout | undefined;
  let stopping = false;
  let exitCode = 0;
  const stop = (fields: Record<string, unknown>) => {
    clearTimeout(delay);
    delay = undefined;
    stopping = true;
    // The metrics port closes at once, its kept-alive scrapes and one under way too: a scrape is no
    // call to finish, and the drain of the gateway's port must not wait for a scraper.
    metricsServer?.close();
    metricsServer?.closeAllConnections();
    logger.info(fields, "shutting down: no new connections, finishing in-flight requests");
    void shutDown(server, gateway, hurry.signal)
      .then(
        () => logger.info("stopped"),
        (error: unknown) => {
          exitCode = 1;
          process.exitCode = 1;
          logger.error({ err: error }, "shutdown failed");
        },
      )
      .finally(() => process.exit(exitCode));
  };
  const delayMs = gateway.config.shutdownDelayMs;
  const passedOnByNpm = startedByNpmScript();
  /** The last signal acted on, and when: npm's copy of it is not a second one. */
  let last: { signal: NodeJS.Signals; at: number } | undefined;
  const onSignal = (signal: NodeJS.Signals) => {
    const at = performance.now();
    if (passedOnByNpm && last?.signal === signal && at - last.at < npmCopyWindowMs) {
      logger.info(
        { signal },
        "signal received again, as npm passes on the one it got: taken as the same one",
      );
      return;
    }
    last = { signal, at };
    if (!stopping && delay === undefined && delayMs > 0) {
      gateway.announceStopping();
      // Kept-alive clients reconnect after their next answer, through the load balancer, while
      // this instance still accepts (a TCP load balancer never moves an open connection).
      server.closeAfterAnswers();
      logger.info(
        { signal, delayMs },
        "shutdown delayed: still accepting and serving, /health answers 503 stopping so load balancers take this instance out",
      );
      delay = setTimeout(() => stop({ signal, delayedMs: delayMs }), delayMs);
    } else if (!stopping && delay === undefined) stop({ signal });
    else if (!hurry.signal.aborted) {
      // During the delay: the rest of it is skipped, and the shutdown begins hurried.
      if (!stopping) stop({ signal, delayCutShort: true });
      logger.warn({ signal }, "signal repeated: cutting what is still open, writing the usage rows, exiting");
      hurry.abort();
    } else logger.warn({ signal }, "signal repeated: the shutdown is already hurried, ignored");
  };
  const onCrash = (error: unknown) => {
    try {
      logger.fatal({ err: error }, "uncaught error: shutting down");
    } catch {
      // Not even logged; the rows are still written.
    }
    if (exitCode === 0) {
      exitCode = 1;
      // Also should the process end by itself (nothing left to wait for) before the exit below.
      process.exitCode = 1;
      const limit = gateway.config.shutdownTimeoutMs + shutdownMarginMs + 1000;
      setTimeout(() => process.exit(exitCode), limit).unref();
    }
    if (!stopping) stop({ reason: "uncaught error" });
  };
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);
  // A hangup (the terminal or ssh session the gateway runs in closed; `nohup` does not spare a Node
  // process, which resets the signal's disposition at start) or a `kill -HUP` meant as a reload
  // (there is none): Node's default action killed the process at once, cutting the calls in flight
  // and losing their rows and the queue's.
  process.on("SIGHUP", onSignal);
  process.on("uncaughtException", onCrash);
  process.on("unhandledRejection", onCrash);
}

/**
 * How long after a signal the same signal is taken as npm's copy of it, under an npm script
 * (stopOnSignalOrCrash, above). npm passes it on at once; a person pressing Ctrl-C again to hurry
 * the shutdown does so later.
 */
const npmCopyWindowMs = 1000;

/**
 * Graceful shutdown, as `serve` runs it on SIGTERM/SIGINT/SIGHUP (after SLUICE_SHUTDOWN_DELAY_MS): /health
 * answers 503 `stopping` to a request still sent on an open connection; no new connections; every connection
 * closes after the answer to its current request (each answer says `Connection: close`), within
 * `SLUICE_SHUTDOWN_TIMEOUT_MS`, when a call still waiting for its provider is refused (503) and
 * what is left is cut; then the gateway closes (the usage rows of calls refused or cut short are
 * written, the usage queue flushed) in what is left of that time, and at most `shutdownMarginMs`
 * past it: one deadline for the whole shutdown. `hurry` aborted (a second signal) refuses and cuts
 * what is left at once, and the gateway closes within the margin from then, also when it comes
 * after the drain ended, while the close waits for a database to take the usage rows.
 */
export async function shutDown(
  server: GatewayServer,
  gateway: Pick<Gateway, "config" | "logger" | "close" | "announceStopping">,
  hurry?: AbortSignal,
): Promise<void> {
  gateway.announceStopping();
  const deadline = Date.now() + gateway.config.shutdownTimeoutMs;
  const { refused, cut } = await server.drain(gateway.config.shutdownTimeoutMs, hurry);
  const hurried = hurry?.aborted === true;
  const reached = hurried ? "shutdown hurried" : "shutdown deadline reached";
  if (refused > 0) gateway.logger.warn({ refused }, `${reached}: unanswered calls refused`);
  if (cut > 0) gateway.logger.warn({ connections: cut }, `${reached}: connections cut`);
  // A second signal after the drain ended still hurries the close (the flush against a database that
  // cannot take the rows, above all).
  await gateway.close(hurried ? Math.min(deadline, Date.now()) : deadline, hurry);
}

/** The gateway's HTTP(S) server, with its graceful close (`ConnectionDrain.drain`). */
export type GatewayServer = Server & Pick<ConnectionDrain, "drain" | "closeAfterAnswers">;

/**
 * The HTTP(S) server around `app`. Node answers some requests itself, without a body; these are
 * handed to the app instead, so they get the error envelope too: a request Node cannot parse or
 * that does not arrive in time (`clientError`), CONNECT, and an HTTP/1.1 request without Host
 * (`requireHostHeader: false`: the app checks it). An `Expect` other than `100-continue` is
 * ignored, as RFC 9110 §10.1.1 allows, where Node would answer 417. `Expect: 100-continue` is
 * answered with 100 only when a route reads the body (after authentication, the limits and the
 * size cap), not at once as Node would: a refused upload is never sent.
 */
export function createGatewayServer(
  app: App,
  options: { tls?: { cert: Buffer; key: Buffer }; http?: ServerOptions } = {},
): GatewayServer {
  const http: ServerOptions = {
    requireHostHeader: false,
    keepAliveTimeout: 65_000,
    headersTimeout: 66_000,
    ...options.http,
  };
  const server: Server = options.tls
    ? createHttpsServer({ ...http, ...options.tls })
    : createHttpServer(http);
  // Node's own count, said here: the app refuses a request that reaches it (431).
  server.maxHeadersCount = maxHeaderFields;
  const connections = trackConnections(server, options.tls ? "secureConnection" : "connection");
  capConnections(server, app, Boolean(options.tls));
  const handle = (request: IncomingMessage, response: ServerResponse) => {
    if (connections.admitRequest(request, response)) app.handle(request, response);
    else request.resume();
  };
  server.on("request", handle);
  server.on("clientError", app.answerClientError);
  server.on("connect", app.answerConnect);
  server.on("checkExpectation", handle);
  server.on("checkContinue", (request: IncomingMessage, response: ServerResponse) => {
    continueWhenRead(request, response);
    handle(request, response);
  });
  return Object.assign(server, {
    drain: connections.drain,
    closeAfterAnswers: connections.closeAfterAnswers,
  });
}

/**
 * Puts `app.admitConnection` (the connection caps, per address and in all) in front of every `connection`
 * listener the server has so far: Node's own (the HTTP parser's, or TLS's handshake), and the
 * drain's tracking. A refused socket is never handed to them: no parser, no handshake, no timers,
 * and no request of it reaches the app.
 */
function capConnections(server: Server, app: App, encrypted: boolean): void {
  const listeners = server.listeners("connection") as ((socket: Socket) => void)[];
  server.removeAllListeners("connection");
  server.on("connection", (socket: Socket) => {
    if (!app.admitConnection(socket, encrypted)) return;
    for (const listener of listeners) listener.call(server, socket);
  });
}
