import type { IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import type { Redis } from "ioredis";
import { createProjectAdmin } from "./admin/project-admin.js";
import { seedProjects } from "./admin/seed-projects.js";
import type { App } from "./app.js";
import { createApp } from "./app.js";
import { createAuthenticator } from "./auth/authenticate.js";
import { createCredentialDirectory } from "./auth/credential-directory.js";
import { createDeviceTokenVerifier } from "./auth/device-token-verifier.js";
import { loadMasterKey } from "./auth/master-key.js";
import { createSecretBox } from "./auth/secret-box.js";
import { allowsTestMode, type Config, ConfigError } from "./config.js";
import { createAdmission } from "./http/admission.js";
import { createClientIpResolver } from "./http/client-ip.js";
import { createCorsPolicy } from "./http/cors.js";
import { registerImageRoutes } from "./http/image-routes.js";
import { registerProxyRoutes } from "./http/proxy-routes.js";
import type { HealthCheck } from "./http/public-routes.js";
import { newRequestId } from "./http/request-id.js";
import type { Router } from "./http/router.js";
import { registerStructuredRoutes } from "./http/structured-routes.js";
import { createLocalVault } from "./images/local-vault.js";
import { createS3Vault } from "./images/s3-vault.js";
import { createUrlSigner } from "./images/signed-url.js";
import { listeningUrl } from "./net/listening-url.js";
import { createLogger, type Logger } from "./observability/logger.js";
import { createMetrics } from "./observability/metrics.js";
import { productionWarnings } from "./production-warnings.js";
import { createAiSdkModels } from "./providers/ai-sdk-provider.js";
import { createProviderAdapters } from "./providers/provider-adapter.js";
import { costOfProxiedCall } from "./proxy/call-cost.js";
import { createUpstreamPools } from "./proxy/forward.js";
import { createAuthThrottle } from "./rate-limit/auth-throttle.js";
import { createRateLimiter } from "./rate-limit/rate-limiter.js";
import { RedisBreaker } from "./redis/redis-breaker.js";
import { createRedisClient, RedisSetupError } from "./redis/redis-client.js";
import { type OpenDatabase, openDatabase } from "./storage/database.js";
import { createKeyRepository } from "./storage/key-repository.js";
import { createProjectRepository } from "./storage/project-repository.js";
import { createUsageRepository } from "./storage/usage-repository.js";
import { createSafePdfFetcher, type FetchPdf } from "./structured/safe-pdf-fetch.js";
import { createSpendGuard } from "./usage/spend-guard.js";
import { createUsageRecorder } from "./usage/usage-recorder.js";
import { version } from "./version.js";

/** What tests and the CLI may swap: clocks, ids, the log sink, outbound dispatchers. */
export interface Injectables {
  logger: Logger;
  now: () => Date;
  generateRequestId: () => string;
  /** How PDFs are fetched by URL (tests allow their local server). */
  fetchPdf: FetchPdf;
  /** Extra API routes registered after the built-in ones (tests). */
  registerApiRoutes: (router: Router) => void;
  /** The address the server listens on, once it does (`server.address()`), for signed vault URLs. */
  listenAddress: () => AddressInfo | string | null;
}

export interface Gateway {
  app: App;
  config: Config;
  logger: Logger;
  database: OpenDatabase;
  admin: ReturnType<typeof createProjectAdmin>;
  /**
   * Stops background work, flushes usage and closes every connection, by `shutdownMarginMs` after
   * `deadline` (epoch ms; default: SLUICE_SHUTDOWN_TIMEOUT_MS from now).
   */
  close(deadline?: number): Promise<void>;
  flushUsage(): Promise<void>;
}

/**
 * How long past its deadline (SLUICE_SHUTDOWN_TIMEOUT_MS after SIGTERM) the shutdown may take: half
 * for the usage rows of the calls the deadline cut short and the usage flush, half for closing the
 * pools and connections. A whole shutdown takes at most SLUICE_SHUTDOWN_TIMEOUT_MS plus this.
 */
export const shutdownMarginMs = 1000;

/** The one composition root: every dependency of the gateway is built here and nowhere else. */
export async function createGateway(config: Config, injected: Partial<Injectables> = {}): Promise<Gateway> {
  const logger = injected.logger ?? createLogger(config.logLevel);
  // The AI SDK prints its warnings (an unsupported setting, a compatibility mode) with console.warn,
  // outside the JSON log; they go to the log instead (image warnings also reach the caller).
  globalThis.AI_SDK_LOG_WARNINGS = ({ warnings, provider, model }) =>
    logger.debug({ provider, model, warnings }, "AI SDK warnings");
  const now = injected.now ?? (() => new Date());
  const metrics = createMetrics({ collectDefaults: config.metricsEnabled });
  const masterKey = loadMasterKey(config, (file) =>
    logger.warn(
      { file },
      "GENERATED A NEW MASTER KEY for secrets at rest. Back it up: without it stored provider keys cannot be opened. Set SLUICE_MASTER_KEY in production.",
    ),
  );
  const secretBox = createSecretBox(masterKey);
  masterKey.fill(0);

  const database = await openDatabase({
    databaseUrl: config.databaseUrl,
    dataDir: config.dataDir,
    queryTimeoutMs: config.databaseQueryTimeoutMs,
    reportTimeoutMs: config.usageReportTimeoutMs,
    startTimeoutMs: config.databaseStartTimeoutMs,
  });
  const projects = createProjectRepository(database.db);
  const keys = createKeyRepository(database.db);
  const usage = createUsageRepository(database.db, database.sqlite, database.runReport);
  const directory = createCredentialDirectory({ projects, keys, secretBox, ttlMs: config.projectCacheTtlMs });
  const testModeAllowed = allowsTestMode(config);
  const admin = createProjectAdmin({
    projects,
    keys,
    usage,
    secretBox,
    now,
    onProjectChanged: directory.invalidate,
    testModeAllowed,
  });
  if (config.configFile) {
    const seeded = await seedProjects(admin, config.configFile);
    logger.info(seeded, "projects seeded from SLUICE_CONFIG_FILE");
  }
  for (const warning of await productionWarnings(config, projects))
    logger.warn(warning.fields, warning.message);

  const redis: Redis | undefined = config.redisUrl
    ? await connectRedis(config.redisUrl, logger).catch(async (error: unknown) => {
        await database.close();
        throw error;
      })
    : undefined;
  // One view of Redis's health: a failure any user sees rests Redis for all (see RedisBreaker).
  const redisBreaker = redis ? new RedisBreaker(redis) : undefined;
  const limiter = createRateLimiter({
    redis,
    breaker: redisBreaker,
    onFallback: (on) => {
      metrics.setDegraded("redis", on);
      if (on) logger.warn("Redis is unreachable: rate limits fall back to per-instance limits");
      else logger.info("Redis answers again: rate limits are shared again");
    },
    onDecision: (name, allowed) => metrics.countLimitDecision(name, allowed ? "allowed" : "limited"),
  });
  const throttle = createAuthThrottle({
    redis,
    breaker: redisBreaker,
    failuresPerMinute: config.authFailureLimit,
  });
  const deviceTokens = createDeviceTokenVerifier({ config, secretBox, redis, redisBreaker, logger });
  const authenticate = createAuthenticator({ directory, deviceTokens, throttle, testModeAllowed });

  const spend = createSpendGuard({ usage, now });
  const recorder = createUsageRecorder({
    repository: usage,
    flushIntervalMs: config.usageFlushIntervalMs,
    queueMax: config.usageQueueMax,
    onQueueDepth: metrics.setUsageQueueDepth,
    onWritten: spend.written,
    onDropped: (count, reason) => {
      metrics.countUsageRowsDropped(count);
      logger.error(
        { count },
        reason === "shutdown"
          ? "usage rows not written before shutdown: dropped"
          : "usage queue full: usage rows dropped",
      );
    },
    onRefused: (row, error) => {
      metrics.countUsageRowsDropped(1);
      logger.error({ err: error, requestId: row.request_id }, "usage row refused by the database: dropped");
    },
    onWriteFailure: (error) => {
      metrics.countUsageWriteFailure();
      metrics.setDegraded("database", true);
      logger.warn({ err: error }, "usage batch not written; it stays queued and is retried");
    },
    onRecovered: () => {
      metrics.setDegraded("database", false);
      logger.info("usage writes recovered");
    },
  });
  const admit = createAdmission({
    authenticate,
    limiter,
    spend,
    recorder,
    metrics,
    now,
    defaults: {
      projectPerMinute: config.rateLimitProjectPerMinute,
      devicePerMinute: config.rateLimitDevicePerMinute,
      ipPerMinute: config.rateLimitIpPerMinute,
    },
  });

  const adapters = createProviderAdapters({
    providerABaseUrl: config.providerABaseUrl,
    providerBBaseUrl: config.providerBBaseUrl,
    providerCBaseUrl: config.providerCBaseUrl,
    providerBVersion: config.providerBVersion,
    clientIdentifier: `sluice/${version}`,
  });
  const pools = createUpstreamPools({
    connectMs: config.upstreamConnectTimeoutMs,
    headersMs: config.upstreamHeadersTimeoutMs,
    idleMs: config.upstreamIdleTimeoutMs,
  });

  const aiModels = createAiSdkModels({
    baseUrls: {
      "provider-a": config.providerABaseUrl,
      "provider-b": config.providerBBaseUrl,
      "provider-c": config.providerCBaseUrl,
    },
    providerBVersion: config.providerBVersion,
    clientIdentifier: `sluice/${version}`,
  });

  // Unset SLUICE_PUBLIC_URL: the address the server listens on, read when a URL is signed (with
  // PORT=0 the port is known only then).
  const publicUrl = () =>
    config.publicUrl ?? listeningUrl(injected.listenAddress?.() ?? null, config, Boolean(config.tlsCert));
  const signer = createUrlSigner(secretBox.deriveKey("vault-url-signing"));
  const localVault = createLocalVault({ directory: join(config.dataDir, "vault"), publicUrl, signer });
  const vault =
    config.vaultS3Endpoint &&
    config.vaultS3Bucket &&
    config.vaultS3AccessKeyId &&
    config.vaultS3SecretAccessKey
      ? createS3Vault({
          endpoint: config.vaultS3Endpoint,
          bucket: config.vaultS3Bucket,
          region: config.vaultS3Region,
          accessKeyId: config.vaultS3AccessKeyId,
          secretAccessKey: config.vaultS3SecretAccessKey,
        })
      : localVault;

  // While the database is down, an instance that holds projects serves their calls from memory
  // (degraded); one that holds none can authenticate no one (unavailable).
  const checks: HealthCheck[] = [
    { name: "database", required: () => !directory.holdsProjects(), ping: database.ping },
  ];
  if (redis) checks.push({ name: "redis", required: false, ping: async () => void (await redis.ping()) });

  const startedAt = Date.now();
  const app = createApp({
    logger,
    metrics,
    cors: config.corsOrigins ? createCorsPolicy(config.corsOrigins) : null,
    generateRequestId: injected.generateRequestId ?? (() => newRequestId()),
    clientIp: createClientIpResolver(config.trustProxy ?? []) as (request: IncomingMessage) => string,
    publicRoutes: {
      version,
      startedAt,
      now: Date.now,
      checks,
      projectProviders: async (projectId) => {
        const project = await directory.project(projectId);
        if (!project) return null;
        return project.disabled ? new Set() : directory.keyProviders(projectId);
      },
      throttle,
      countThrottled: () => metrics.countLimitDecision("auth_failures", "limited"),
      ...(config.metricsEnabled ? { metrics: () => metrics.render() } : {}),
    },
    adminRoutes: {
      admin,
      adminToken: config.adminToken,
      throttle: createAuthThrottle({
        redis,
        breaker: redisBreaker,
        failuresPerMinute: config.authFailureLimit,
        keyPrefix: "sluice:admin-auth",
      }),
      maxBodyBytes: config.maxBodyBytes,
    },
    registerApiRoutes(router) {
      registerProxyRoutes(router, {
        admit,
        adapters,
        pools,
        metrics,
        maxBodyBytes: config.maxBodyBytes,
        costOf: costOfProxiedCall,
      });
      registerStructuredRoutes(router, {
        admit,
        models: aiModels,
        fetchPdf:
          injected.fetchPdf ??
          createSafePdfFetcher({ maxBytes: config.maxPdfBytes, timeoutMs: config.pdfFetchTimeoutMs }),
        maxBodyBytes: config.maxBodyBytes,
        maxImageBytes: config.maxImageBytes,
        maxPdfBytes: config.maxPdfBytes,
        timeoutMs: config.upstreamHeadersTimeoutMs,
      });
      registerImageRoutes(router, {
        admit,
        models: aiModels,
        vault,
        vaultUrlTtlSeconds: config.vaultUrlTtlSeconds,
        timeoutMs: config.upstreamHeadersTimeoutMs,
        now,
        maxBodyBytes: config.maxBodyBytes,
        ...(vault === localVault ? { localVault: { signer, read: localVault.read } } : {}),
      });
      injected.registerApiRoutes?.(router);
    },
  });

  return {
    app,
    config,
    logger,
    database,
    admin,
    flushUsage: () => recorder.flush(),
    async close(deadline = Date.now() + config.shutdownTimeoutMs) {
      // Calls cut short at the deadline write their rows as they wind down (an aborted stream, a
      // compressed answer read after its response closed): they are waited for, then the queue is
      // flushed, until half the margin past it; a write still unanswered then (a database that
      // hangs) is given up on, and the rows still queued are dropped, logged and counted.
      const rowsBy = deadline + shutdownMarginMs / 2;
      const left = () => Math.max(0, rowsBy - Date.now());
      while (admit.unrecorded() > 0 && left() > 0) await new Promise((resolve) => setTimeout(resolve, 10));
      await recorder.flush(left());
      await recorder.stop(left());
      // Closing gets the other half: a connection that hangs (a stalled PostgreSQL) must not hold
      // the process past its shutdown time.
      const closing = (async () => {
        await pools.close();
        await limiter.close();
        redis?.disconnect();
        await database.close();
      })();
      const closedBy = deadline + shutdownMarginMs;
      await Promise.race([
        closing,
        new Promise((resolve) => setTimeout(resolve, Math.max(0, closedBy - Date.now())).unref()),
      ]);
    },
  };
}

/**
 * The Redis client of `REDIS_URL`, its errors logged (by message: an AUTH error carries the
 * command's arguments, the password among them). A Redis that refuses the URL's user, password or
 * database stops the start as invalid configuration does; one that is unreachable does not (the
 * gateway starts degraded, on per-instance limits, and connects when Redis comes).
 */
async function connectRedis(url: string, logger: Logger): Promise<Redis> {
  // ioredis reports every failed reconnect; a message is logged when it changes, not every 2 s.
  let last = "";
  let client: Redis;
  try {
    client = await createRedisClient(url, {
      onError(error) {
        if (error.message === last) return;
        last = error.message;
        logger.warn({ redisError: error.message }, "Redis client error");
      },
    });
  } catch (error) {
    if (error instanceof RedisSetupError)
      throw new ConfigError(`Invalid configuration:\n  REDIS_URL: ${error.message}`);
    throw error;
  }
  client.on("ready", () => {
    if (last !== "") logger.info("Redis connection ready again");
    last = "";
  });
  return client;
}
