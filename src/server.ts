import { readFileSync } from "node:fs";
import { createServer as createHttpServer, type Server } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import { loadConfig } from "./config.js";
import { createGateway } from "./deps.js";
import { version } from "./version.js";

/** Loads config, build the gateway, listen, and shut down gracefully on SIGTERM/SIGINT. */
export async function serve(): Promise<void> {
  const config = loadConfig();
  const gateway = await createGateway(config);
  const { logger, app } = gateway;
  const server: Server =
    config.tlsCert && config.tlsKey
      ? createHttpsServer(
          { cert: readFileSync(config.tlsCert), key: readFileSync(config.tlsKey) },
          app.handle,
        )
      : createHttpServer(app.handle);
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 66_000;
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
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
    `sluice listening on ${config.tlsCert ? "https" : "http"}://${config.host}:${port}`,
  );

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, "shutting down: no new connections, finishing in-flight requests");
    server.close();
    server.closeIdleConnections();
    const deadline = Date.now() + config.shutdownTimeoutMs;
    while (app.inFlight() > 0 && Date.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 25));
    server.closeAllConnections();
    await gateway.close();
    logger.info("stopped");
    process.exit(0);
  };
  process.once("SIGTERM", () => void stop("SIGTERM"));
  process.once("SIGINT", () => void stop("SIGINT"));
}
