import { setMaxListeners } from "node:events";
import type { Redis } from "ioredis";
import { deviceCheckKeyAad } from "../admin/project-rules.js";
import type { Config } from "../config.js";
import type { Logger } from "../observability/logger.js";
import {
  createSuppressionWindows,
  type SuppressionWindowsRegistry,
} from "../observability/suppression-windows.js";
import type { RedisBreaker } from "../redis/redis-breaker.js";
import { errorReason } from "../redis/redis-script.js";
import type { Project } from "../storage/project-repository.js";
import type { DeviceTokenRecall, DeviceTokenVerifier, DeviceVerdict } from "./authenticate.js";
import {
  createDeviceCheckClient,
  type DeviceCheckClient,
  type DeviceCheckEnvironment,
  type DeviceCheckValidation,
  type DeviceCheckVerdict,
} from "./device-check-client.js";
import {
  createMemoryDeviceTokenLedger,
  createRedisDeviceTokenLedger,
  type DeviceTokenLedger,
  type DeviceTokenPolicy,
  type DeviceTokenReceipt,
  deviceTokenDigest,
  RedisKeyDataError,
  RedisRestingError,
} from "./device-token-cache.js";
import type { SecretBox } from "./secret-box.js";

export interface DeviceTokenVerifierDeps {
  config: Pick<
    Config,
    | "deviceCheckProductionUrl"
    | "deviceCheckDevelopmentUrl"
    | "deviceCheckTimeoutMs"
    | "deviceTokenTtlSeconds"
    | "deviceTokenBudget"
  >;
  secretBox: SecretBox;
  redis: Redis | undefined;
  /** The Redis client's shared health; by default one of the ledger's own. */
  redisBreaker?: RedisBreaker | undefined;
  /** What every key of the ledger in Redis begins with; `sluice:device-token:` by default. */
  redisKeyPrefix?: string | undefined;
  logger: Logger;
  /** The gateway's suppression windows, whose close writes the counts of the warnings' windows still open. */
  suppressionWindows?: SuppressionWindowsRegistry;
  client?: DeviceCheckClient;
  /**
   * Aborted when the gateway closes: it aborts the Apple calls still on their way. One call may
   * answer several requests (`askApple`), so none is aborted when one of them is refused or leaves
   * (a request whose client left before its call started starts none: `DeviceVerifyOptions.clientLeft`);
   * by the close, the shutdown's deadline has refused them all. Each call in flight listens to it
   * (its listener limit is lifted here).
   */
  closing?: AbortSignal;
  /**
   * Each verdict of the DeviceCheck client (once per Apple call, however many requests waited for
   * it), by environment: "valid", "rejected" (Apple refused the token), "malformed" (not sent), or
   * why Apple could not say (an unavailable verdict's reason); for the metrics.
   */
  onVerdict?: (environment: DeviceCheckEnvironment, result: string) => void;
}

/** One DeviceCheck warning per project and reason per this window; the rest are counted. */
const warningWindowMs = 10_000;
/** One warning per way the ledger in Redis fails per this window; the rest are counted. */
const ledgerFailureWindowMs = 60_000;

/** How long a single-use token is remembered so that a replay is refused. */
const singleUseRetentionMs = 24 * 60 * 60 * 1000;
/** Opened DeviceCheck private keys held at most (one per project). */
const maxPrivateKeys = 1000;
/** Tokens remembered as passed here at most (see `passedHere`); the oldest go first. */
const maxPassedHere = 100_000;

/**
 * DeviceCheck for authentication: a token verified by Apple is trusted for a TTL and a request
 * budget (or once, in single-use mode), keyed by its digest; only fresh tokens cost a call to
 * Apple. Apple unreachable is `unavailable` (503), never a pass.
 */
export function createDeviceTokenVerifier(deps: DeviceTokenVerifierDeps): DeviceTokenVerifier {
  const { config } = deps;
  // Each Apple call in flight listens to `closing` (the gateway's, for the process's life) until it
  // ends: more than ten at once are no leak, and Node's warning of one would say so on stderr.
  if (deps.closing) setMaxListeners(0, deps.closing);
  const client =
    deps.client ??
    createDeviceCheckClient({
      productionUrl: config.deviceCheckProductionUrl,
      developmentUrl: config.deviceCheckDevelopmentUrl,
      timeoutMs: config.deviceCheckTimeoutMs,
    });
  const memory = createMemoryDeviceTokenLedger();
  const shared = deps.redis
    ? createRedisDeviceTokenLedger({
        redis: deps.redis,
        breaker: deps.redisBreaker,
        keyPrefix: deps.redisKeyPrefix,
      })
    : null;
  /**
   * Each project's opened .p8 key, by project id: at most `maxPrivateKeys`, the oldest opened going
   * first (opening one again costs a decryption), so an instance serving many DeviceCheck projects
   * over its life, deleted ones too, does not hold every key it ever opened.
   */
  const privateKeys = new Map<string, { sealed: string; pem: string }>();
  /**
   * Apple calls in flight, by project, token digest and the credentials asked with: requests that
   * need the same answer while it is on its way wait for it instead of asking again, so a burst of
   * first requests with one token (an app's parallel calls, or one token replayed by many clients)
   * costs one Apple call, not one each. Each request still goes through the ledger on its own.
   */
  const appleCalls = new Map<string, Promise<DeviceCheckVerdict>>();
  /**
   * Budget-mode tokens this instance passed, by project id and digest (forgotten once the ledger
   * answers that the budget is used up: every lookup fails from then on): when its trust in them ends
   * (by this clock, the TTL from the first pass here) and the project's `verifiedSince` then. What
   * `recall` answers from, so that a token passed before takes no throttle slot for its ledger
   * lookup (see `authenticate.ts`). Only a hint: the ledger still decides, and a token it no longer
   * holds is asked of Apple only through `beforeApple`. At most `maxPassedHere`, oldest first.
   */
  const passedHere = new Map<string, { until: number; since: number }>();

  function notePassed(project: Project, digest: string, policy: DeviceTokenPolicy): void {
    if (policy.mode !== "budget") return;
    const key = `${project.id}:${digest}`;
    passedHere.delete(key);
    if (passedHere.size >= maxPassedHere) passedHere.delete(passedHere.keys().next().value as string);
    passedHere.set(key, { until: Date.now() + policy.ttlMs, since: policy.verifiedSince ?? 0 });
  }

  function privateKeyOf(project: Project): string | null {
    const sealed = project.deviceCheck.sealedPrivateKey;
    if (!sealed) return null;
    const cached = privateKeys.get(project.id);
    if (cached?.sealed === sealed) return cached.pem;
    const pem = deps.secretBox.open(sealed, deviceCheckKeyAad(project.id)).toString("utf8");
    privateKeys.delete(project.id);
    if (privateKeys.size >= maxPrivateKeys) privateKeys.delete(privateKeys.keys().next().value as string);
    privateKeys.set(project.id, { sealed, pem });
    return pem;
  }

  /**
   * Redis when configured; if it fails, budget mode falls back to this instance's memory, single-use
   * refuses. `counted.ledger` is set to the ledger asked last: the one a passing use was counted on.
   */
  async function withLedger<T>(
    policy: DeviceTokenPolicy,
    counted: { ledger: DeviceTokenLedger },
    use: (ledger: DeviceTokenLedger) => Promise<T>,
  ): Promise<T | null> {
    counted.ledger = shared ?? memory;
    if (!shared) return use(memory);
    try {
      return await use(shared);
    } catch (error) {
      logLedgerFailure(error, "device token ledger in Redis failed");
      if (policy.mode !== "budget") return null;
      counted.ledger = memory;
      return use(memory);
    }
  }

  /**
   * The `refund` of a passing verdict: gives its use back to the ledger that counted it, keyed by
   * the receipt, at most once. Never rejects: a refund the store cannot take (Redis down) leaves the
   * use counted, which refuses too much, never too little.
   */
  function refundOf(
    projectId: string,
    digest: string,
    counted: { ledger: DeviceTokenLedger },
    receipt: DeviceTokenReceipt,
  ): (() => Promise<void>) | undefined {
    const { stamp } = receipt;
    if (stamp === undefined) return undefined;
    const { ledger } = counted;
    let done = false;
    return async () => {
      if (done) return;
      done = true;
      try {
        await ledger.release(projectId, digest, stamp);
      } catch (error) {
        logLedgerFailure(error, "device token ledger could not give back a refused request's use");
      }
    };
  }

  /**
   * Warning windows of `warningWindowMs` per context (createSuppressionWindows): the first warning
   * of a window is written by the caller, the others counted into one `suppressedMessage` line with
   * the context when the window ends.
   */
  function warningWindows<T extends object>(suppressedMessage: string, windowMs = warningWindowMs) {
    return createSuppressionWindows<T>({
      windowMs,
      maxKeys: 200,
      registry: deps.suppressionWindows,
      onSuppressed: (context, suppressed) =>
        deps.logger.warn({ ...(context as object), suppressed, windowMs }, suppressedMessage),
    });
  }

  /**
   * Warnings per ledger entry another program wrote in Redis (`RedisKeyDataError`): the entry stays
   * as it is, so each use of its token fails alike; the first of a window names the key.
   */
  const keyWarnings = warningWindows<{ redisKey: string }>("device token ledger key warnings suppressed");

  /**
   * Warnings per way the ledger in Redis failed (the message, and Redis's error without the script's
   * digest): once a minute each. The calls answered during a rest fail nothing, and a rest ends only
   * once the breaker's write probe succeeds; but a Redis at the edge of its memory limit may take that
   * write now and then and refuse the next, and each such failure was a warning of its own, for as
   * long as the outage lasted.
   */
  const failureWarnings = warningWindows<{ redisError: string }>(
    "device token ledger failures in Redis suppressed",
    ledgerFailureWindowMs,
  );

  /**
   * Logs a failure of the ledger in Redis. The calls answered during a rest are not logged, and the
   * failures of one kind once per window (`failureWarnings`). An entry another program wrote is
   * named (its key holds the project id and the token's digest, never the token), once per window.
   */
  function logLedgerFailure(error: unknown, message: string): void {
    if (error instanceof RedisRestingError) return;
    if (error instanceof RedisKeyDataError) {
      if (keyWarnings.open(error.key, { redisKey: error.key }))
        deps.logger.warn(
          { redisKey: error.key, redisError: error.reply },
          "a device token ledger key in Redis holds what Sluice did not write: its token is answered as without Redis",
        );
      return;
    }
    const redisError = error instanceof Error ? errorReason(error.message) : String(error);
    if (failureWarnings.open(`${message}\u0000${redisError}`, { redisError }))
      deps.logger.warn({ err: error }, message);
  }

  /**
   * Apple's verdict on a token, shared with the requests that ask for it while it is on its way;
   * null, no call started, when none is and `clientLeft` says the request's client has left.
   */
  function askApple(
    project: Project,
    digest: string,
    input: DeviceCheckValidation,
    clientLeft: (() => boolean) | undefined,
  ): Promise<DeviceCheckVerdict> | null {
    const key = [
      project.id,
      digest,
      input.environment,
      input.teamId,
      input.keyId,
      project.deviceCheck.sealedPrivateKey,
    ].join("\u0000");
    const pending = appleCalls.get(key);
    if (pending) return pending;
    // No one would read the answer: a connect-send-leave flood of made-up tokens costs no Apple call.
    if (clientLeft?.()) return null;
    const asked = client
      .validate(input, deps.closing)
      .then((verdict) => {
        // Stopped by the gateway's close: no Apple outage to count or warn of.
        if (verdict.kind === "unavailable" && verdict.reason === "aborted") return verdict;
        deps.onVerdict?.(input.environment, verdictResult(verdict));
        if (verdict.kind === "unavailable") logUnavailable(project, verdict);
        return verdict;
      })
      .finally(() => appleCalls.delete(key));
    appleCalls.set(key, asked);
    return asked;
  }

  /**
   * Warnings per project and reason: a key Apple refuses, or Apple down, fails every fresh token of
   * the app, and one line per Apple answer would drown the log. The first of a window is written;
   * the others are counted into one line when the window ends, as for provider failures.
   */
  const warnings = warningWindows<{ projectId: string; reason: string }>(
    "Apple DeviceCheck warnings suppressed",
  );

  /**
   * Once per Apple answer (at most once per project, reason and window at warn); a request refused
   * while its key rests after a 429 asked no one. A key Apple refuses (or that does not load) is the
   * operator's to fix: the log says so.
   */
  function logUnavailable(project: Project, verdict: Extract<DeviceCheckVerdict, { kind: "unavailable" }>) {
    const fields = {
      projectId: project.id,
      reason: verdict.reason,
      status: verdict.status,
      keyId: project.deviceCheck.keyId,
      environment: project.deviceCheck.environment,
    };
    if (verdict.reason === "resting") {
      deps.logger.debug(fields, "Apple DeviceCheck unavailable");
      return;
    }
    if (!warnings.open(`${project.id} ${verdict.reason}`, { projectId: project.id, reason: verdict.reason }))
      return;
    deps.logger.warn(
      fields,
      verdict.reason === "misconfigured"
        ? "Apple DeviceCheck refused the project's credentials: check its team id, key id or .p8 key"
        : "Apple DeviceCheck unavailable",
    );
  }

  const singleUse: DeviceTokenPolicy = { mode: "single-use", retentionMs: singleUseRetentionMs };
  /**
   * Each project record's budget policy, made on its first request: the record is replaced, never
   * changed, when it is read again (credential-directory.ts), so a request costs one lookup, not a
   * parse of its timestamps.
   */
  const budgetPolicies = new WeakMap<Project, DeviceTokenPolicy>();

  function policyOf(project: Project): DeviceTokenPolicy {
    if (project.deviceCheck.tokenMode === "single-use") return singleUse;
    let policy = budgetPolicies.get(project);
    if (policy === undefined) {
      policy = {
        mode: "budget",
        ttlMs: config.deviceTokenTtlSeconds * 1000,
        maxRequests: config.deviceTokenBudget,
        verifiedSince: trustedSince(project),
      };
      budgetPolicies.set(project, policy);
    }
    return policy;
  }

  return {
    verifyNow(project, deviceToken) {
      // The shared ledger is in Redis: only `verify` can ask it.
      if (shared) return null;
      const digest = deviceTokenDigest(deviceToken);
      if (digest === null) return null;
      const counted = { ledger: memory };
      const receipt: DeviceTokenReceipt = {};
      if (memory.passNow(project.id, digest, policyOf(project), receipt) === null) return null;
      return passed(digest, refundOf(project.id, digest, counted, receipt));
    },

    recall(project, deviceToken): DeviceTokenRecall | null {
      const digest = deviceTokenDigest(deviceToken);
      if (digest === null) return null;
      const policy = policyOf(project);
      if (policy.mode !== "budget") return { digest, passedHere: false };
      const entry = passedHere.get(`${project.id}:${digest}`);
      return {
        digest,
        passedHere:
          entry !== undefined && entry.since === (policy.verifiedSince ?? 0) && Date.now() < entry.until,
      };
    },

    async verify(project, deviceToken, options = {}): Promise<DeviceVerdict> {
      const { recalled } = options;
      const digest = recalled?.digest ?? deviceTokenDigest(deviceToken);
      if (digest === null) return { kind: "invalid", reason: "the device token is not well-formed base64" };
      const policy = policyOf(project);
      const counted = { ledger: memory };
      const receipt: DeviceTokenReceipt = {};
      const { beside } = options;
      const seen = await withLedger(policy, counted, (ledger) =>
        ledger === shared && beside
          ? shared.checkWith(project.id, digest, policy, receipt, beside)
          : ledger.check(project.id, digest, policy, receipt),
      );
      if (seen === null) return unavailable("the device token store is unavailable");
      if (seen === "cached-ok") {
        if (!recalled?.passedHere) notePassed(project, digest, policy);
        return passed(digest, refundOf(project.id, digest, counted, receipt));
      }
      if (seen === "budget-exhausted") {
        // Its every replay now fails until its entry ends: it is no longer recalled as passed, so a
        // burst of them takes throttle slots again, held to the limit (`recall`).
        passedHere.delete(`${project.id}:${digest}`);
        return { kind: "invalid", reason: "this device token has used up its request budget; get a new one" };
      }
      if (seen === "replayed")
        return { kind: "invalid", reason: "this single-use device token was already used" };

      const privateKeyPem = privateKeyOf(project);
      if (!privateKeyPem || !project.deviceCheck.teamId || !project.deviceCheck.keyId) {
        return unavailable("device check is not fully configured for this project");
      }
      // A request that took no throttle slot (a token passed here, which the ledger no longer holds
      // as trusted: its entry gone, its settings changed) takes one now, or asks Apple nothing.
      const wait = options.beforeApple?.() ?? 0;
      if (wait > 0) return { kind: "throttled", retryAfterSeconds: wait };
      const asked = askApple(
        project,
        digest,
        {
          environment: project.deviceCheck.environment,
          teamId: project.deviceCheck.teamId,
          keyId: project.deviceCheck.keyId,
          privateKeyPem,
          deviceToken,
        },
        options.clientLeft,
      );
      if (asked === null) return { kind: "client-left" };
      const verdict = await asked;
      if (verdict.kind === "invalid") {
        return {
          kind: "invalid",
          reason:
            verdict.reason === "malformed-token"
              ? "the device token is malformed"
              : "Apple rejected the device token",
        };
      }
      if (verdict.kind === "unavailable") {
        return {
          kind: "unavailable",
          retryAfterSeconds: verdict.retryAfterSeconds,
          reason: verdict.reason,
          // Only a key that does not load (misconfigured, no status), or one resting after Apple's
          // 429, fails before the call; a call the gateway's close aborted is no attempt of the
          // caller's to count against it.
          askedApple:
            verdict.status !== undefined ||
            (verdict.reason !== "misconfigured" &&
              verdict.reason !== "resting" &&
              verdict.reason !== "aborted"),
        };
      }
      // With the ledger in Redis, what admission decides next goes in the script that remembers the
      // token (decision 0050): the lookup, then that, two round trips in all.
      const after = shared && options.besideAfterApple ? await options.besideAfterApple() : undefined;
      const remembered = await withLedger(policy, counted, (ledger) =>
        ledger === shared && after
          ? shared.rememberWith(project.id, digest, policy, receipt, after)
          : ledger.remember(project.id, digest, policy, receipt),
      );
      if (remembered === null) return unavailable("the device token store is unavailable");
      if (remembered === "accepted") {
        notePassed(project, digest, policy);
        return passed(digest, refundOf(project.id, digest, counted, receipt));
      }
      return {
        kind: "invalid",
        reason:
          remembered === "replayed"
            ? "this single-use device token was already used"
            : "this device token has used up its request budget",
      };
    },
  };
}

/**
 * When a project's trust in verified device tokens begins (ms since the epoch): its creation, so a
 * project deleted and created again under its id trusts no token verified for the old one, or the
 * last change of its Apple settings (team, key, environment), so a token Apple verified for the old
 * app, a development build's say, is asked of Apple again on the new settings.
 */
function trustedSince(project: Project): number {
  const created = Date.parse(project.createdAt) || 0;
  const changed = project.deviceCheck.changedAt === null ? 0 : Date.parse(project.deviceCheck.changedAt) || 0;
  return Math.max(created, changed);
}

function passed(
  digest: string,
  refund: (() => Promise<void>) | undefined,
): Extract<DeviceVerdict, { kind: "ok" }> {
  return refund ? { kind: "ok", digest, refund } : { kind: "ok", digest };
}

function unavailable(reason: string): DeviceVerdict {
  return { kind: "unavailable", retryAfterSeconds: 5, reason };
}

/** The `result` a verdict is counted under (see `DeviceTokenVerifierDeps.onVerdict`). */
function verdictResult(verdict: DeviceCheckVerdict): string {
  if (verdict.kind === "valid") return "valid";
  if (verdict.kind === "invalid") return verdict.reason === "malformed-token" ? "malformed" : "rejected";
  return verdict.reason;
}
