import {
  createServer as createHttpServer,
  type IncomingMessage,
  type Server,
  type ServerOptions,
  type ServerResponse,
} from "node:http";
import { createServer as createHttpsServer } from "node:https";
import type { App } from "./app.js";
import { loadConfig } from "./config.js";
import { createGateway, type Gateway } from "./deps.js";
import { type ConnectionDrain, trackConnections } from "./http/connection-drain.js";
import { continueWhenRead } from "./http/read-body.js";
import { listeningUrl } from "./net/listening-url.js";
import { readTlsFiles, StartSettingError } from "./net/tls-files.js";
import { version } from "./version.js";

/** Loads config, build the gateway, listen, and shut down gracefully on SIGTERM/SIGINT. */
export async function serve(): Promise<void> {
  const config = loadConfig();
  // Checked before the database opens: a bad file stops the start at once, named.
  const tls = config.tlsCert && config.tlsKey ? readTlsFiles(config.tlsCert, config.tlsKey) : undefined;
  // Signed vault URLs name the address the server got (PORT=0 picks a port), once it listens.
  let started: GatewayServer | undefined;
  const gateway = await createGateway(config, { listenAddress: () => started?.address() ?? null });
  const { logger, app } = gateway;
  const server = createGatewayServer(app, tls ? { tls } : {});
  started = server;
  await new Promise<void>((resolve, reject) => {
    // Node's reason (`getaddrinfo ENOTFOUND …`, `listen EADDRINUSE …`) names neither setting.
    server.once("error", (error) =>
      reject(
        new StartSettingError(`cannot listen on HOST ${config.host} PORT ${config.port}`, { cause: error }),
      ),
    );
    server.listen(config.port, config.host, resolve);
  });
  const address = server.address();
  const port = typeof address === "object" && address ? address.port : config.port;
  logger.info(
    {
      version,
      host: config.host,
      port,
      database: gateway.database.engine,
      redis: Boolean(config.redisUrl),
      tls: Boolean(config.tlsCert),
    },
    `sluice listening on ${listeningUrl(address, config, Boolean(config.tlsCert))}`,
  );

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, "shutting down: no new connections, finishing in-flight requests");
    await shutDown(server, gateway);
    logger.info("stopped");
    process.exit(0);
  };
  process.once("SIGTERM", () => void stop("SIGTERM"));
  process.once("SIGINT", () => void stop("SIGINT"));
}

/**
 * Graceful shutdown, as `serve` runs it on SIGTERM/SIGINT: no new connections; every connection
 * closes after the answer to its current request (each answer says `Connection: close`), within
 * `SLUICE_SHUTDOWN_TIMEOUT_MS`, when what is left is cut; then the gateway closes (the usage rows
 * of calls cut short are written, the usage queue flushed) in what is left of that time, and at
 * most `shutdownMarginMs` past it: one deadline for the whole shutdown.
 */
export async function shutDown(
  server: GatewayServer,
  gateway: Pick<Gateway, "config" | "logger" | "close">,
): Promise<void> {
  const deadline = Date.now() + gateway.config.shutdownTimeoutMs;
  const cut = await server.drain(gateway.config.shutdownTimeoutMs);
  if (cut > 0) gateway.logger.warn({ connections: cut }, "shutdown deadline reached: connections cut");
  await gateway.close(deadline);
}

/** The gateway's HTTP(S) server, with its graceful close (`ConnectionDrain.drain`). */
export type GatewayServer = Server & Pick<ConnectionDrain, "drain">;

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
  const connections = trackConnections(server, options.tls ? "secureConnection" : "connection");
  const handle = (request: IncomingMessage, response: ServerResponse) => {
    connections.closeIfDraining(response);
    app.handle(request, response);
  };
  server.on("request", handle);
  server.on("clientError", app.answerClientError);
  server.on("connect", app.answerConnect);
  server.on("checkExpectation", handle);
  server.on("checkContinue", (request: IncomingMessage, response: ServerResponse) => {
    continueWhenRead(request, response);
    handle(request, response);
  });
  return Object.assign(server, { drain: connections.drain });
}
