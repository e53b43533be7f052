import type { IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import type { Redis } from "ioredis";
import { createProjectAdmin, type ProjectAdmin } from "./admin/project-admin.js";
import type { App } from "./app.js";
import { createApp } from "./app.js";
import { createAdmissionRecheck } from "./auth/admission-recheck.js";
import { createAuthenticator } from "./auth/authenticate.js";
import { createCredentialDirectory } from "./auth/credential-directory.js";
import { createDeviceTokenVerifier } from "./auth/device-token-verifier.js";
import { allowsTestMode, type Config, disabledNodeWarnings } from "./config.js";
import { deadlineRefusal } from "./deadline-refusal.js";
import { closeGateway } from "./gateway-close.js";
import { createAdmission } from "./http/admission.js";
import { type BodyBudget, createBodyBudget, defaultMaxBufferedBodyBytes } from "./http/body-budget.js";
import { createClientIpResolver, trustMatcher } from "./http/client-ip.js";
import { type ConnectionCap, createConnectionCap } from "./http/connection-cap.js";
import { createCorsPolicy } from "./http/cors.js";
import { registerImageRoutes } from "./http/image-routes.js";
import { createMetricsListener, type MetricsListener } from "./http/metrics-listener.js";
import { connectionCapWarnings, defaultMaxConnections, readOpenFileLimit } from "./http/open-file-limit.js";
import { registerProxyRoutes } from "./http/proxy-routes.js";
import type { HealthCheck } from "./http/public-routes.js";
import { newRequestId } from "./http/request-id.js";
import type { Router } from "./http/router.js";
import { registerStructuredRoutes } from "./http/structured-routes.js";
import { imageModelWarnings } from "./image-model-warnings.js";
import { chooseVault } from "./images/vault-choice.js";
import { createVaultPruner, type VaultPrunerOptions } from "./images/vault-retention.js";
import { listeningUrl } from "./net/listening-url.js";
import { createDownCheckFollowUp } from "./observability/down-check-follow-up.js";
import {
  configuredSecretHeld,
  createStdoutLogger,
  type Logger,
  redactConfiguredSecrets,
} from "./observability/logger.js";
import { createMetrics } from "./observability/metrics.js";
import { createOutputMismatchLog } from "./observability/output-mismatch-log.js";
import { createSchemaRefusalLog } from "./observability/schema-refusal-log.js";
import { createSuppressionWindowsRegistry } from "./observability/suppression-windows.js";
import { openSealedStore } from "./open-sealed-store.js";
import { productionWarnings } from "./production-warnings.js";
import { createAiSdkModels } from "./providers/ai-sdk-provider.js";
import { fetchBlockedPortWarnings } from "./providers/fetch-blocked-ports.js";
import { createProviderAdapters } from "./providers/provider-adapter.js";
import { createProviderFetch } from "./providers/provider-fetch.js";
import { costOfProxiedCall } from "./proxy/call-cost.js";
import { createUpstreamPools } from "./proxy/forward.js";
import { createAuthThrottle } from "./rate-limit/auth-throttle.js";
import { limitsFallbackLog } from "./rate-limit/fallback-log.js";
import { createRateLimiter } from "./rate-limit/rate-limiter.js";
import { connectRedis } from "./redis/connect-redis.js";
import { RedisBreaker } from "./redis/redis-breaker.js";
import { redisKeyPrefixes } from "./redis/redis-keys.js";
import { sharedStateWarnings } from "./shared-state-warnings.js";
import { closedWhileWaiting, type OpenDatabase } from "./storage/database.js";
import { createKeyRepository } from "./storage/key-repository.js";
import { createProjectRepository } from "./storage/project-repository.js";
import { createUsageRepository } from "./storage/usage-repository.js";
import {
  createSafePdfFetcher,
  defaultMaxFetchesPerProject,
  type FetchPdf,
} from "./structured/safe-pdf-fetch.js";
import { createSharedCallsInFlight } from "./usage/shared-calls-in-flight.js";
import { createSpendGuard } from "./usage/spend-guard.js";
import { createUsageRecorder } from "./usage/usage-recorder.js";
import { usageRecorderReports } from "./usage/usage-recorder-reports.js";
import { createUsagePruner, type UsagePrunerOptions } from "./usage/usage-retention.js";
import { version } from "./version.js";

/** What tests and the CLI may swap: clocks, the log sink, outbound dispatchers. */
export interface Injectables {
  logger: Logger;
  now: () => Date;
  /** How PDFs are fetched by URL (tests allow their local server). */
  fetchPdf: FetchPdf;
  /** Extra API routes registered after the built-in ones (tests). */
  registerApiRoutes: (router: Router) => void;
  /** The address the server listens on, once it does (`server.address()`), for signed vault URLs. */
  listenAddress: () => AddressInfo | string | null;
  /** When SLUICE_USAGE_RETENTION_DAYS prunes, and how many rows a statement (tests). */
  usagePruning: Pick<UsagePrunerOptions, "firstRunDelayMs" | "intervalMs" | "batchSize">;
  /** When SLUICE_VAULT_RETENTION_DAYS prunes (tests). */
  vaultPruning: Pick<VaultPrunerOptions, "firstRunDelayMs" | "intervalMs">;
}

export interface Gateway {
  app: App;
  config: Config;
  logger: Logger;
  database: OpenDatabase;
  admin: ReturnType<typeof createProjectAdmin>;
  /**
   * Stops background work, flushes usage and closes every connection, by `shutdownMarginMs` after
   * `deadline` (epoch ms; default: SLUICE_SHUTDOWN_TIMEOUT_MS from now), or after the moment
   * `hurry` is aborted (a second signal), if sooner.
   */
  close(deadline?: number, hurry?: AbortSignal): Promise<void>;
  flushUsage(): Promise<void>;
  /**
   * The connections the caps count (`SLUICE_MAX_CONNECTIONS_PER_IP` per address, `SLUICE_MAX_CONNECTIONS`
   * all together), and the total cap in force (the setting, or its default from the open-file limit).
   */
  connections: Pick<ConnectionCap, "addresses" | "openFrom" | "open"> & { maxTotal: number };
  /**
   * The request-body bytes the structured and image endpoints hold, and the budget in force
   * (SLUICE_MAX_BUFFERED_BODY_BYTES, or its default from V8's heap limit; 0: none).
   */
  bodyBudget: Pick<BodyBudget, "held" | "maxBytes">;
  /** What the SLUICE_METRICS_PORT listener serves; null when it is unset (or metrics are off). */
  metricsListener: MetricsListener | null;
  /** From now on /health answers 503 `stopping` (the shutdown has begun, or its delay). */
  announceStopping(): void;
  /**
   * Whether the REDIS_URL client's connection is ready this moment (a Redis unreachable at start
   * is not, until it answers); undefined without REDIS_URL.
   */
  redisConnected(): boolean | undefined;
}

/**
 * Reads and checks SLUICE_CONFIG_FILE (seed-projects.ts), and answers what seeds its projects. That
 * module is loaded only then: it parses with zod, which a start without the file does not load
 * (docs/decisions/0005).
 */
async function seedingFrom(file: string) {
  const seeding = await import("./admin/seed-projects.js");
  const projectsFile = await seeding.readProjectsFile(file);
  return (admin: ProjectAdmin) => seeding.seedProjects(admin, projectsFile);
}

/** The one composition root: every dependency of the gateway is built here and nowhere else. */
export async function createGateway(config: Config, injected: Partial<Injectables> = {}): Promise<Gateway> {
  const metrics = createMetrics({ collectDefaults: config.metricsEnabled });
  const logger =
    injected.logger ??
    createStdoutLogger(config.logLevel, metrics.countLogLinesDropped, disabledNodeWarnings());
  // The secrets set as settings have no form the log's redaction knows: it is given them, so that
  // one pasted into a path or a query (an admin token of a project id's length) is in no line. The
  // S3 vault's secret access key (40 characters of base64) signs every URL the vault hands out.
  redactConfiguredSecrets(logger, [
    config.adminToken,
    config.masterKey,
    config.masterKeyPrevious,
    config.vaultS3SecretAccessKey,
  ]);
  // Every log that coalesces repeated lines in windows joins this: the close writes their open counts.
  const suppressionWindows = createSuppressionWindowsRegistry();
  // The AI SDK prints its warnings (an unsupported setting, a compatibility mode) with console.warn,
  // outside the JSON log; they go to the log instead (image warnings also reach the caller).
  globalThis.AI_SDK_LOG_WARNINGS = ({ warnings, provider, model }) =>
    logger.debug({ provider, model, warnings }, "AI SDK warnings");
  const now = injected.now ?? (() => new Date());
  // Read and checked before anything is written: a bad file leaves no master key or database behind.
  const seedFromFile = config.configFile ? await seedingFrom(config.configFile) : undefined;
  // The master key in use is redacted too, whatever it came from: a setting, the data dir's
  // master.key, or a key generated into it just now (which no setting names).
  const { database, secretBox } = await openSealedStore(
    config,
    (fields, message) => logger.warn(fields, message),
    (masterKey) => redactConfiguredSecrets(logger, [masterKey]),
  );
  const projects = createProjectRepository(database.db);
  const usage = createUsageRepository(database.db, database.sqlite, database.runReport);
  // On PostgreSQL, the gateway's close cancels the credential reads and the spend cap's reads still
  // running on the server (`sharedReads`): one may answer several calls, so no call's refusal does.
  const directory = createCredentialDirectory({
    projects: createProjectRepository(database.sharedReads.db),
    keys: createKeyRepository(database.sharedReads.db),
    secretBox,
    ttlMs: config.projectCacheTtlMs,
    maxStaleMs: config.projectCacheMaxStaleMs,
  });
  const testModeAllowed = allowsTestMode(config);
  // The admin API's own instances over the same database (`OpenDatabase.admin`): on PostgreSQL, the
  // shutdown's deadline cancels their queries in flight (decision 0049), never the proxy's reads
  // nor a usage batch's writes.
  const admin = createProjectAdmin({
    projects: createProjectRepository(database.admin.db),
    keys: createKeyRepository(database.admin.db),
    usage: createUsageRepository(database.admin.db, database.sqlite, database.admin.runReport),
    secretBox,
    now,
    onProjectChanged: directory.invalidate,
    testModeAllowed,
  });
  if (seedFromFile) {
    const seeded = await seedFromFile(admin).catch(async (error: unknown) => {
      await database.close();
      throw error;
    });
    logger.info(seeded, "projects seeded from SLUICE_CONFIG_FILE");
  }
  // Read now, after Node raised the soft open-file limit to the hard one as it started.
  const openFileLimit = readOpenFileLimit();
  for (const warning of [
    ...(await productionWarnings(config, projects)),
    ...connectionCapWarnings(config.maxConnections, openFileLimit),
    ...fetchBlockedPortWarnings(config),
    ...sharedStateWarnings(config),
    ...imageModelWarnings(config, now()),
  ])
    logger.warn(warning.fields, warning.message);

  const redis: Redis | undefined = config.redisUrl
    ? await connectRedis(config.redisUrl, logger, config.redisCommandTimeoutMs).catch(
        async (error: unknown) => {
          await database.close();
          throw error;
        },
      )
    : undefined;
  // Every component's gauge has a sample from the start, so an alert can tell 0 from missing: Redis
  // unreachable now is degraded until its first connection (the limiter takes over on its first call).
  metrics.setDegraded("database", false);
  if (redis) {
    metrics.setDegraded("redis", redis.status !== "ready");
    redis.once("ready", () => metrics.setDegraded("redis", false));
  }
  // Every key in Redis begins with one of these, under SLUICE_REDIS_KEY_PREFIX.
  const redisKeys = redisKeyPrefixes(config.redisKeyPrefix);
  // One view of Redis's health: a failure any user sees rests Redis for all, until a write of its
  // own succeeds (see RedisBreaker).
  const redisBreaker = redis ? new RedisBreaker(redis, undefined, redisKeys.writeProbe) : undefined;
  // A count another program wrote inside the prefix (another type, no count) was replaced by a
  // fresh one: the key is named (limit, window, project, address or token digest: no secret).
  const onKeyRepaired = (key: string) =>
    logger.warn(
      { redisKey: key },
      "a Redis key of Sluice's held what Sluice did not write: replaced by a fresh count",
    );
  const fallbackLog = limitsFallbackLog(logger);
  const limiter = createRateLimiter({
    redis,
    breaker: redisBreaker,
    keyPrefix: redisKeys.rateLimits,
    onFallback: (on, error) => {
      metrics.setDegraded("redis", on);
      // The breaker is shared: the spend cap's calls in flight go per instance, and shared again,
      // with the limits, whichever user saw Redis fail. Logged once per outage and reason (see
      // limitsFallbackLog).
      fallbackLog.report(on, error);
    },
    onDecision: (name, allowed) => metrics.countLimitDecision(name, allowed ? "allowed" : "limited"),
    onKeyRepaired,
  });
  // A project id that holds the admin token or a master key (typed where the id goes) is kept
  // nowhere as it was written: its row says `[redacted]`, and so does its
  // failed-authentication key in Redis (`project:[redacted]`).
  const isSecret = configuredSecretHeld(logger);
  const throttle = createAuthThrottle({
    redis,
    breaker: redisBreaker,
    failuresPerMinute: config.authFailureLimit,
    keyPrefix: redisKeys.authFailures,
    onKeyRepaired,
    isSecret,
  });
  const adminThrottle = createAuthThrottle({
    redis,
    breaker: redisBreaker,
    failuresPerMinute: config.authFailureLimit,
    keyPrefix: redisKeys.adminAuthFailures,
    onKeyRepaired,
  });
  /** Aborted by the close: the Apple calls still on their way are aborted (createDeviceTokenVerifier). */
  const closing = new AbortController();
  const deviceTokens = createDeviceTokenVerifier({
    closing: closing.signal,
    config,
    secretBox,
    redis,
    redisBreaker,
    redisKeyPrefix: redisKeys.deviceTokens,
    logger,
    suppressionWindows,
    onVerdict: metrics.countDeviceCheckResult,
  });
  const authenticate = createAuthenticator({ directory, deviceTokens, throttle, testModeAllowed });

  // Projects with a spend cap count their calls in flight in Redis, for every instance; none other
  // sends anything there for it.
  const sharedCallsInFlight = redis
    ? createSharedCallsInFlight({
        redis,
        breaker: redisBreaker,
        keyPrefix: redisKeys.spendInFlight,
        onKeyRepaired,
      })
    : undefined;
  // The month's spend is read through `sharedReads` (cancelled by the close, as the credentials'),
  // the usage rows written through `usage` (never cancelled).
  const spend = createSpendGuard({
    usage: createUsageRepository(database.sharedReads.db, database.sqlite),
    now,
    shared: sharedCallsInFlight,
    unpricedCallUsd: config.unpricedCallUsd,
  });
  const recorder = createUsageRecorder({
    repository: usage,
    flushIntervalMs: config.usageFlushIntervalMs,
    queueMax: config.usageQueueMax,
    onWritten(rows) {
      spend.written(rows);
      metrics.countUsageRowsWritten(rows.length);
    },
    // The clock the rows' created_at is read from, to tell when a minute of coalesced refusals ended.
    now: () => now().getTime(),
    ...usageRecorderReports(metrics, logger, { registry: suppressionWindows }),
  });
  // Usage rows past SLUICE_USAGE_RETENTION_DAYS are deleted on every instance's timer: the deletes
  // are idempotent, and instances pruning at once skip each other's locked rows (usage-retention.ts).
  const pruner =
    config.usageRetentionDays === undefined
      ? undefined
      : createUsagePruner({
          repository: usage,
          retentionDays: config.usageRetentionDays,
          now,
          ...injected.usagePruning,
          onPruned: (deleted, before) =>
            logger.info({ deleted, before }, "usage rows past the retention deleted"),
          // Given up by the shutdown while a batch waited for another process's lock on the SQLite
          // file (`close`, below): no failure, and nothing lost by it.
          onFailed: (error) =>
            database.sqliteLockWait?.gaveUp(error)
              ? logger.info(
                  "deleting usage rows past the retention given up by the shutdown while it waited for another process's lock on the SQLite file: it runs again after the next start",
                )
              : logger.warn(
                  { err: error },
                  "deleting usage rows past the retention failed: retried within the hour",
                ),
        });
  const admit = createAdmission({
    authenticate,
    recheck: createAdmissionRecheck({ directory, testModeAllowed }),
    limiter,
    spend,
    recorder,
    metrics,
    now,
    isSecret,
    defaults: {
      projectPerMinute: config.rateLimitProjectPerMinute,
      devicePerMinute: config.rateLimitDevicePerMinute,
      ipPerMinute: config.rateLimitIpPerMinute,
    },
  });
  // One for the proxies, the structured and the image endpoints together: the memory they hold is one process's.
  const bodyBudget = createBodyBudget(config.maxBufferedBodyBytes ?? defaultMaxBufferedBodyBytes());
  metrics.watchBodyBudget(bodyBudget);

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

  const providerFetch = createProviderFetch({
    connectMs: config.upstreamConnectTimeoutMs,
    headersMs: config.upstreamHeadersTimeoutMs,
    idleMs: config.upstreamIdleTimeoutMs,
    maxResponseBytes: config.maxProviderResponseBytes,
  });
  const aiModels = createAiSdkModels({
    baseUrls: {
      "provider-a": config.providerABaseUrl,
      "provider-b": config.providerBBaseUrl,
      "provider-c": config.providerCBaseUrl,
    },
    providerBVersion: config.providerBVersion,
    clientIdentifier: `sluice/${version}`,
    fetch: providerFetch.fetch,
  });

  const { vault, localVault, signer } = chooseVault(
    config,
    secretBox,
    () => listeningUrl(injected.listenAddress?.() ?? null, config, Boolean(config.tlsCert)),
    now,
  );
  // The local vault's days past SLUICE_VAULT_RETENTION_DAYS are deleted on the instance's timer
  // (vault-retention.ts); the S3 vault's bucket has a lifecycle rule of its own to do it.
  const vaultPruner =
    config.vaultRetentionDays === undefined
      ? undefined
      : createVaultPruner({
          directory: join(config.dataDir, "vault"),
          retentionDays: config.vaultRetentionDays,
          urlTtlSeconds: config.vaultUrlTtlSeconds,
          vaultTimeoutMs: config.vaultTimeoutMs,
          now,
          ...injected.vaultPruning,
          onPruned: (result) => logger.info(result, "vault images past the retention deleted"),
          onFailed: (error) =>
            logger.warn(
              { err: error },
              "deleting vault images past the retention failed: retried within the hour",
            ),
        });

  // While the database is down, an instance that holds projects serves their calls from memory
  // (degraded); one that holds none can authenticate no one (unavailable).
  // A database that answers reads but refuses writes (a read-only standby after a failover, a full
  // disk) is degraded: the ping reads, so the usage writer says whether rows can be written.
  // /health is public and unthrottled: a ping on its way is shared by the checks that ask meanwhile,
  // so a flood of them queues no query per request on the database's pool or Redis's connection.
  const checks: HealthCheck[] = [
    {
      name: "database",
      required: () => !directory.holdsProjects(),
      ping: sharedWhileRunning(() => database.ping()),
      degradation: () => (recorder.writesFailing() ? { usageWrites: "failing" } : undefined),
    },
  ];
  if (redis)
    checks.push({
      name: "redis",
      required: false,
      ping: sharedWhileRunning(async () => void (await redis.ping())),
      // A Redis that answers PING but refuses the limits' writes (full, or a replica after a
      // failover) leaves the limits per instance: the check says so. So does a Redis that does not
      // answer, before the limits met it too (an instance started without Redis has counted nothing).
      degradation: (answered) =>
        !answered || limiter.degraded() ? { rateLimits: "per-instance" } : undefined,
    });

  const downChecks = createDownCheckFollowUp(checks, (name, ok) => metrics.setDegraded(name, !ok, "health"));

  const startedAt = Date.now();
  /** Set by `announceStopping`: /health says the instance is going away. */
  let stopping = false;
  const generateRequestId = () => newRequestId();
  const maxConnections = config.maxConnections ?? defaultMaxConnections(openFileLimit);
  const connectionCap = createConnectionCap({
    maxPerAddress: config.maxConnectionsPerIp,
    maxTotal: maxConnections,
    isTrusted: trustMatcher(config.trustProxy ?? []),
    generateRequestId,
    onRefused(address, warn) {
      metrics.countConnectionRefused();
      if (warn)
        logger.warn(
          { clientIp: address, limit: config.maxConnectionsPerIp },
          "connection refused: the address holds SLUICE_MAX_CONNECTIONS_PER_IP connections already (logged once a minute per address; sluice_connections_refused_total counts them all)",
        );
    },
    onFull(address, warn) {
      metrics.countConnectionRefusedFull();
      if (warn)
        logger.warn(
          { clientIp: address, limit: maxConnections },
          "connection refused (503): the gateway holds SLUICE_MAX_CONNECTIONS connections already (logged once a minute; sluice_connections_refused_full_total counts them all)",
        );
    },
  });
  const app = createApp({
    logger,
    metrics,
    cors: config.corsOrigins ? createCorsPolicy(config.corsOrigins) : null,
    generateRequestId,
    connectionCap,
    suppressionWindows,
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
      knownProject: (projectId) => directory.holdsProject(projectId),
      countThrottled: () => metrics.countLimitDecision("auth_failures", "limited"),
      // The checks' names are the gauge's components: what /health finds, the gauge says too
      // (and a check found down is followed until it answers: see createDownCheckFollowUp).
      onCheck: (name, ok) => downChecks.heard(name, ok),
      stopping: () => stopping,
      // With a port of their own, the metrics are not served on the gateway's.
      ...(config.metricsEnabled && config.metricsPort === undefined
        ? { metrics: () => metrics.render() }
        : {}),
    },
    adminRoutes: {
      admin,
      adminToken: config.adminToken,
      throttle: adminThrottle,
      maxBodyBytes: config.maxBodyBytes,
      logger,
      ...(database.sqliteLockWait ? { sqliteLockWait: database.sqliteLockWait } : {}),
      ...(database.admin.queries ? { postgresQueries: database.admin.queries } : {}),
      onAuthResult(result) {
        metrics.countAuthResult("admin-token", result);
        if (result === "TOO_MANY_REQUESTS") metrics.countLimitDecision("admin_auth_failures", "limited");
      },
    },
    registerApiRoutes(router) {
      registerProxyRoutes(router, {
        admit,
        adapters,
        pools,
        metrics,
        maxBodyBytes: config.maxBodyBytes,
        bodyBudget,
        costOf: costOfProxiedCall,
      });
      registerStructuredRoutes(router, {
        admit,
        bodyBudget,
        models: aiModels,
        fetchPdf:
          injected.fetchPdf ??
          createSafePdfFetcher({
            maxBytes: config.maxPdfBytes,
            timeoutMs: config.pdfFetchTimeoutMs,
            maxFetches: config.maxPdfFetches,
            maxFetchesPerProject:
              config.maxPdfFetchesPerProject ?? defaultMaxFetchesPerProject(config.maxPdfFetches),
            // The client is told only that the host has no public address: the log says why.
            logRefusedHost: (facts) => logger.debug(facts, "PDF URL host refused"),
          }),
        maxBodyBytes: config.maxBodyBytes,
        maxImageBytes: config.maxImageBytes,
        maxPdfBytes: config.maxPdfBytes,
        timeoutMs: config.upstreamHeadersTimeoutMs,
        logSchemaRefusal: createSchemaRefusalLog(logger, { registry: suppressionWindows }),
        logOutputMismatch: createOutputMismatchLog(logger, { registry: suppressionWindows }),
      });
      registerImageRoutes(router, {
        admit,
        bodyBudget,
        models: aiModels,
        vault,
        vaultUrlTtlSeconds: config.vaultUrlTtlSeconds,
        vaultTimeoutMs: config.vaultTimeoutMs,
        timeoutMs: config.upstreamHeadersTimeoutMs,
        now,
        defaultImageModels: {
          "provider-a": config.providerAImageModel,
          "provider-c": config.providerCImageModel,
        },
        maxBodyBytes: config.maxBodyBytes,
        maxProviderResponseBytes: config.maxProviderResponseBytes,
        logger,
        vaultReadWindows: { registry: suppressionWindows },
        ...(vault === localVault ? { localVault: { signer, open: localVault.open } } : {}),
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
    announceStopping: () => {
      stopping = true;
    },
    redisConnected: () => (redis ? redis.status === "ready" : undefined),
    bodyBudget: { held: bodyBudget.held, maxBytes: bodyBudget.maxBytes },
    connections: {
      addresses: connectionCap.addresses,
      openFrom: connectionCap.openFrom,
      open: connectionCap.open,
      maxTotal: maxConnections,
    },
    metricsListener:
      config.metricsEnabled && config.metricsPort !== undefined
        ? createMetricsListener({ metrics, generateRequestId })
        : null,
    close: (deadline = Date.now() + config.shutdownTimeoutMs, hurry?: AbortSignal) => {
      // Their timers end now; a prune under way ends after its current batch (a vault prune, its
      // current day), awaited before the database closes. A usage prune's batch waiting for another
      // process's lock on the SQLite file is given up at once, as the database's close would give
      // it up: awaited, it held the close until the lock was released or the margin ran out, and a
      // prune is safe to skip (it runs again after the next start). Every wait ends so, and every
      // later one: the drain is over, and a call's wait ended with its refusal at the deadline.
      const pruned = pruner?.stop();
      const vaultPruned = vaultPruner?.stop();
      database.sqliteLockWait?.end(closedWhileWaiting);
      // What the calls the deadline refused were still waiting for, and may have shared with others
      // (so no refusal stopped it): Apple's answer about a device token, aborted; a credential read or
      // a read of a month's spend on PostgreSQL, cancelled on the server, which held the pool's close
      // until the margin ran out.
      closing.abort();
      const cancelled = database.sharedReads.queries?.end(deadlineRefusal()) ?? 0;
      // Calls whose clients left while they were being admitted: no drain refused them, and their
      // rows, left to the end of those waits, would come after the usage writer closed.
      admit.refuseWaiting();
      if (cancelled > 0)
        logger.info(
          { queries: cancelled },
          "closing: credential and spend reads in flight on PostgreSQL cancelled",
        );
      return closeGateway(
        deadline,
        {
          unrecorded: admit.unrecorded,
          recorder,
          suppressionWindows,
          closeConnections: async () => {
            downChecks.stop();
            await pools.close();
            await providerFetch.close();
            await limiter.close();
            fallbackLog.close();
            throttle.stop();
            adminThrottle.stop();
            await sharedCallsInFlight?.close();
            redisBreaker?.close();
            redis?.disconnect();
            await pruned;
            await vaultPruned;
            await database.close();
          },
        },
        hurry,
      );
    },
  };
}

/** `run`, whose call on its way (not yet settled) is shared by the calls made meanwhile. */
function sharedWhileRunning(run: () => Promise<void>): () => Promise<void> {
  let running: Promise<void> | null = null;
  return () => {
    running ??= run().finally(() => {
      running = null;
    });
    return running;
  };
}
