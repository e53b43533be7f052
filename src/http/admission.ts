import { projectIdRecorded } from "../admin/project-id.js";
import type { AdmissionRecheck } from "../auth/admission-recheck.js";
import type { Authenticate, AuthMethod, AuthRequest, AuthResult } from "../auth/authenticate.js";
import { repeatedCredentialHeaderError, repeatedProjectIdError } from "../auth/repeated-credential-header.js";
import { deadlineRefusal, refusalOf, untilRefused } from "../deadline-refusal.js";
import { detachedString } from "../detached-string.js";
import { GatewayError, isGatewayError } from "../errors.js";
import { addressBlock } from "../net/ip-address.js";
import type { Metrics } from "../observability/metrics.js";
import type { ProviderId } from "../providers/provider-id.js";
import { recentIds } from "../proxy/background-run.js";
import { notInProxyAllowList, proxyAllowListCache } from "../proxy/proxy-allow-list.js";
import { rateLimitHeaders } from "../rate-limit/rate-limit-headers.js";
import type {
  LimitRequest,
  LimitsInScript,
  RateLimitDecision,
  RateLimiter,
} from "../rate-limit/rate-limiter.js";
import type { ReloadWait } from "../storage/database-unavailable.js";
import type { Project } from "../storage/project-repository.js";
import { countsAsUnpriced, type UsageRecord } from "../storage/usage-repository.js";
import { isoTimestamp } from "../usage/iso-timestamp.js";
import type { HeldWithLimits, KnownPriceVerdict, SpendGuard } from "../usage/spend-guard.js";
import { storedModelName } from "../usage/stored-model-name.js";
import type { TokenUsage } from "../usage/token-usage.js";
import type { UsageRecorder } from "../usage/usage-recorder.js";
import { usdText } from "../usage/usd-text.js";
import { clientDisconnected } from "./client-watch.js";
import type { RequestContext } from "./router.js";
import { setHeaders } from "./send.js";

export type Endpoint = "proxy" | "text" | "vision" | "pdf" | "image";

export interface AdmissionDeps {
  authenticate: Authenticate;
  /** The check of an admitted call's credentials once its body is in (`AdmittedCall.recheck`); none: never. */
  recheck?: AdmissionRecheck;
  limiter: RateLimiter;
  spend: SpendGuard;
  recorder: UsageRecorder;
  metrics: Metrics;
  now: () => Date;
  defaults: { projectPerMinute: number; devicePerMinute: number; ipPerMinute: number };
  /** How many background runs' rows this instance remembers having recorded (default 10,000). */
  backgroundRunsRemembered?: number;
  /**
   * Whether a project id naming no project holds a configured secret (`configuredSecretHeld`): its
   * row records `[redacted]` (`projectIdRecorded`). None by default.
   */
  isSecret?: (projectId: string) => boolean;
}

/** What a finished call reports for its usage row. */
export interface CallReport {
  status: number;
  outcome: "ok" | "error" | "aborted";
  provider: ProviderId | null;
  model: string | null;
  usage: TokenUsage | null;
  costUsd: number | null;
  streamed: boolean;
  timeToFirstByteMs: number | null;
  errorCode: string | null;
  /** A finished background run the call saw (provider A's Responses API): its row, besides the call's. */
  backgroundRun?: BackgroundRunReport | null;
  /**
   * The provider answered the call with a success (2xx): the row's `provider_answered`. Said where
   * it is known, so that a call that failed after such an answer (one Sluice could not read), which
   * the provider billed, counts toward the spend cap though its row has no tokens (decision 0057).
   */
  providerAnswered?: boolean;
  /**
   * The provider answered the call with a success (2xx), and its usage and cost leave out a part
   * of it the provider billed whose usage is not known (a structured call's repair whose answer was
   * not read, or reported no usage): the row's `provider_answered` is 2, and the spend cap counts
   * it at its cost plus the estimate of a call of unknown cost (decision 0057, amended).
   */
  partlyUnknown?: boolean;
}

/**
 * A background run's tokens, reported by every call that sees it finished (each poll, on any
 * instance): recorded on a row keyed `rowId`, one per project that sees the run (backgroundRowId),
 * which the usage table's `on conflict do nothing` keeps to one across instances sharing a database.
 * This instance records it once while it remembers the row id (the last `backgroundRunsRemembered`
 * rows: per project and run), so repeated polls add nothing to its metrics or spend figure either.
 * Across instances only the token and cost metrics can count a run twice (once per instance); the
 * spend guard's figure corrects itself at its next database read, which finds the one row.
 */
export interface BackgroundRunReport {
  rowId: string;
  model: string | null;
  usage: TokenUsage;
  costUsd: number | null;
  streamed: boolean;
}

/**
 * What a call consumed before it failed: the tokens the provider billed and their cost, and whether
 * the provider answered it with a success (2xx).
 */
export type CallSpend = Pick<CallReport, "usage" | "costUsd" | "providerAnswered" | "partlyUnknown">;

/**
 * A failed call's spend when nothing went to the provider (refused, or its client left before its
 * body was read): nothing billed. Its row's cost is 0 when the client left, not unknown: an aborted
 * call of unknown cost counts toward the spend cap at an estimate (decision 0057). A refusal's
 * (outcome `error`) stays unknown, as any failure's.
 */
export const nothingSent = "nothing-sent";

export interface AdmittedCall {
  project: Project;
  provider: ProviderId;
  /** The rebuilt provider key: in memory only. */
  providerKey: string;
  /** The RateLimit headers; already set on the response unless the route writes its own headers. */
  rateLimitHeaders: Record<string, string>;
  /** Writes the usage row for this call (once). */
  finish(report: CallReport): void;
  /**
   * The call's price, known before it runs (an image call's images at the pricing table's price),
   * before anything goes to the provider: under a spend cap the call counts in flight at it
   * (`SpendGuard`'s `HeldPlace.price`), or is refused, thrown: 403 `FORBIDDEN` when the month's
   * spend and the price pass the cap, the calls in flight's 429 when only the calls in flight with
   * them do. Only under a cap (a capped call holds a place): absent, nothing counts the price. A
   * promise when the place is in Redis (decided there for every instance, one script).
   */
  priceKnown?: (costUsd: number) => void | Promise<void>;
  /**
   * Once the body is in, before anything goes to the provider: throws the refusal a new request with
   * the same credentials would get when an admin change since admission refuses them (a key revoked,
   * the project disabled or deleted: `createAdmissionRecheck`); undefined when there is nothing to
   * check (no change on this instance, the records still fresh), the usual case.
   */
  recheck(): Promise<void> | undefined;
  /** Writes the usage row for a call that failed with `error` after admission. */
  fail(
    error: unknown,
    provider?: ProviderId | null,
    model?: string | null,
    spend?: CallSpend | typeof nothingSent,
  ): void;
}

export interface AdmissionOptions {
  endpoint: Endpoint;
  projectId: string | undefined;
  /**
   * `projectId` is the first of several `x-project-id` headers: refused (400) as a credential
   * header sent twice is, its row under that first id.
   */
  projectIdRepeated?: boolean;
  provider: AuthRequest["provider"];
  sdkKeyHeader?: AuthRequest["sdkKeyHeader"];
  /**
   * A proxied call's provider path (after `/v1/provider-x/{projectId}/`, as safeProviderPath
   * passed it): checked against the project's proxy allow-list, when it has one.
   */
  proxyPath?: string;
}

/**
 * Authentication (a credential header, or an `x-project-id` that is read, sent twice is refused
 * first, 400, counted by the failed-authentication throttle), then a proxied call's place on the
 * project's allow-list (a call it leaves out counts against the client IP and device limits), then
 * the monthly spend cap, then the rate limits (project, device, client IP).
 * Every request that reaches authentication gets exactly one usage row of its own, whatever happens
 * next (and a background run it reports finished gets one more, once), but for an authenticated
 * client's repeated refusals (`refusalKind`): past the first of a minute, they share a row that
 * counts them.
 */
export function createAdmission(deps: AdmissionDeps) {
  const recordedRuns = recentIds(deps.backgroundRunsRemembered ?? 10_000);
  const proxyAllowList = proxyAllowListCache();
  /** Admitted calls whose usage row is not written yet (shutdown waits for them). */
  let unrecorded = 0;
  /**
   * Admissions still waiting (`refusable`), each with its row and its refusal: the gateway's close
   * refuses those the drain could not (`refuseWaiting`), and waits for a row it could not write.
   */
  const waiting = new Set<{ row: CallRow; refuse: (refusal: GatewayError) => void }>();
  /**
   * Answers without a promise when authentication and the limits are decided in memory (cached
   * credentials, in-process limits, no spend cap): the usual proxy request waits for nothing here.
   */
  function admit(context: RequestContext, options: AdmissionOptions): AdmittedCall | Promise<AdmittedCall> {
    const repeated =
      repeatedCredentialHeaderError(context.request.rawHeaders, options.sdkKeyHeader) ??
      (options.projectIdRepeated ? repeatedProjectIdError() : null);
    // The request to authenticate is also the request's wait for stale records (credentials, the
    // month's spend): `reloadWaitMs` in all. A header sent twice is refused before any credential is
    // read (400, the value never named: it may be a credential), with its row, and counted by the
    // failed-authentication throttle as a wrong credential is: once over it, 429 with no row, so a
    // client without credentials cannot have a row written per request without limit.
    const reloadWait: AuthRequest = {
      projectId: options.projectId,
      headers: context.request.headers,
      clientIp: context.clientIp,
      provider: options.provider,
      ...(options.sdkKeyHeader ? { sdkKeyHeader: options.sdkKeyHeader } : {}),
      ...(repeated !== null ? { refusal: repeated } : {}),
      // A client gone before its device token's Apple call started has it asked of no one. A call the
      // shutdown's deadline refused is not the client's doing: its Apple call, if any, the close aborts.
      clientLeft: () => row.refusal === null && context.request.socket.destroyed,
    };
    const row: CallRow = {
      written: false,
      counted: false,
      release: undefined,
      base: null,
      provider: null,
      refusal: null,
      decided: undefined,
    };
    if (deps.limiter.inScript) reloadWait.beside = limitsBeside(context, options, reloadWait, row);
    const auth = deps.authenticate(reloadWait);
    const admission =
      auth instanceof Promise
        ? auth.then(
            (settled) => admitAuthenticated(context, options, settled, reloadWait, row),
            // Authentication could not be decided (the database is down, say: 503): a failed
            // authentication all the same, with its row.
            (error: unknown) => {
              if (!isGatewayError(error)) {
                // A failure of its own after the ledger's script took a place: given back all the
                // same, or it would be held (and renewed) for as long as the process runs.
                const decided = row.decided;
                row.decided = undefined;
                giveBackPlace(decided);
                throw error;
              }
              const failed = { ok: false, error, project: null, method: null } as const;
              return admitAuthenticated(context, options, failed, reloadWait, row);
            },
          )
        : admitAuthenticated(context, options, auth, reloadWait, row);
    return admission instanceof Promise ? refusable(context, options, row, admission) : admission;
  }

  /**
   * An admission that waits (for Apple's answer about a device token, the credentials or the month's
   * spend read again, the limits asked of Redis), ended by the shutdown's deadline should it come
   * first (`refuseAtDeadline`): the call is refused (503, Retry-After), its row written at once with
   * the refusal, under the project and key authentication found or, before it settled, the project
   * id the request named; and the wait, left to end on its own (or to the gateway's close, which
   * aborts Apple's calls and cancels the credential and spend reads on PostgreSQL: calls asking for
   * the same token, record or figure share them), admits nothing (`row.refusal`:
   * nothing goes to the provider, a device token's use is given back, a place under the spend cap
   * too). Before, nothing listened there, and the call's connection was cut without an answer. Only
   * an admission that waits pays the listener: the usual one, decided in memory, has no promise.
   */
  function refusable(
    context: RequestContext,
    options: AdmissionOptions,
    row: CallRow,
    admission: Promise<AdmittedCall>,
  ): Promise<AdmittedCall> {
    const refuse = (refusal: GatewayError) => {
      row.refusal = refusal;
      const claimed = options.projectId;
      const base =
        row.base ??
        (claimed
          ? {
              projectId: detachedString(projectIdRecorded(claimed, deps.isSecret)),
              keyId: null,
              method: null,
            }
          : null);
      const provider = row.provider ?? (typeof options.provider === "string" ? options.provider : null);
      if (base !== null)
        write(context, options, row, base, failureReport(context, refusal, provider, null, nothingSent));
    };
    const entry = { row, refuse };
    waiting.add(entry);
    return untilRefused(context.response, admission, refuse).finally(() => waiting.delete(entry));
  }

  /**
   * At the gateway's close, once the drain is over: the admissions still waiting are refused as the
   * deadline refuses those of open connections (`refusable`), their rows written now, and what their
   * waits end with admits nothing. They are calls whose clients left while they waited (the drain
   * refused every other): it had no connection of theirs to wait for or to refuse, and their rows,
   * written only once the wait ended (Apple's answer, a credential or spend read, Redis), came after
   * the usage writer had closed and were dropped. Each says 499, the client gone (`failureReport`).
   */
  function refuseWaiting(): void {
    for (const { row, refuse } of waiting)
      if (row.refusal === null && !row.written) refuse(deadlineRefusal());
  }

  /**
   * `admit`, and how many admitted calls have not written their usage row yet: a response can
   * close before its row is written (a compressed answer's usage is read after), so shutdown waits
   * for these before it flushes the usage queue.
   */
  return Object.assign(admit, {
    // An admission still waiting whose row is not written yet (one refused before authentication
    // found its project, with none named by the request: its row is written once the wait ends).
    unrecorded: () => unrecorded + [...waiting].filter(({ row }) => !row.written && !row.counted).length,
    refuseWaiting,
  });

  /** The metrics of a row: its tokens when it has any, and its cost (an image call has no tokens). */
  function countUsage(provider: ProviderId, usage: TokenUsage | null, costUsd: number | null): void {
    if (usage !== null) {
      deps.metrics.countTokens(provider, "input", usage.inputTokens);
      deps.metrics.countTokens(provider, "output", usage.outputTokens);
      deps.metrics.countTokens(provider, "cached", usage.cachedInputTokens);
      deps.metrics.countTokens(provider, "reasoning", usage.reasoningTokens);
    }
    deps.metrics.countCost(provider, costUsd);
  }

  /** A background run's own row: the reporting call's project, key, endpoint, auth method and client IP. */
  function recordRun(
    context: RequestContext,
    options: AdmissionOptions,
    base: RowBase,
    provider: ProviderId,
    run: BackgroundRunReport,
  ): void {
    const now = deps.now();
    const row: UsageRecord = {
      request_id: run.rowId,
      project_id: base.projectId,
      key_id: base.keyId,
      endpoint: options.endpoint,
      provider,
      model: storedModelName(run.model),
      status: 200,
      error_code: null,
      input_tokens: run.usage.inputTokens,
      output_tokens: run.usage.outputTokens,
      cached_tokens: run.usage.cachedInputTokens,
      reasoning_tokens: run.usage.reasoningTokens,
      cost_usd: run.costUsd,
      // No call of its own (the calls that reported it have their own rows); the column is NOT NULL.
      latency_ms: 0,
      ttfb_ms: null,
      streamed: run.streamed ? 1 : 0,
      outcome: "ok",
      auth_method: base.method,
      client_ip: context.clientIp,
      created_at: isoTimestamp(now),
      requests: 1,
    };
    deps.recorder.record(row);
    countUsage(provider, run.usage, run.costUsd);
    countTowardCap(base.projectId, row, now);
  }

  /**
   * Counts a row just recorded toward its project's spend cap: its cost, or, a call of unknown
   * cost, the cap's estimate of one (decision 0057), at once on this instance.
   */
  function countTowardCap(projectId: string, row: UsageRecord, now: Date): void {
    // With the call's length: one begun before its project's creation (a project deleted under the
    // id) is not the project's, though its row is stamped after.
    // Its request id tells `written` the row left out so (and that row alone).
    if (row.cost_usd) deps.spend.add(projectId, row.cost_usd, now, row.latency_ms, row.request_id);
    // Both for a row of a known cost and a part unknown (`provider_answered` 2).
    if (countsAsUnpriced(row)) deps.spend.addUnpriced(projectId, now, row.latency_ms, row.request_id);
  }

  /** Writes the call's usage row, once: later writes do nothing. */
  function write(
    context: RequestContext,
    options: AdmissionOptions,
    row: CallRow,
    base: RowBase,
    report: CallReport,
    kind: "call" | "refusal" | "authenticated-refusal" = "call",
  ): void {
    if (row.written) return;
    row.written = true;
    if (row.counted) unrecorded--;
    const latencyMs = performance.now() - context.startedAt;
    // One reading of the clock for the row and the spend guard: the cost counts in the row's month.
    const now = deps.now();
    const record: UsageRecord = {
      request_id: context.requestId,
      project_id: base.projectId,
      key_id: base.keyId,
      endpoint: options.endpoint,
      provider: report.provider,
      model: storedModelName(report.model),
      status: report.status,
      error_code: report.errorCode,
      input_tokens: report.usage?.inputTokens ?? null,
      output_tokens: report.usage?.outputTokens ?? null,
      cached_tokens: report.usage?.cachedInputTokens ?? null,
      reasoning_tokens: report.usage?.reasoningTokens ?? null,
      cost_usd: report.costUsd,
      latency_ms: Math.round(latencyMs * 1000) / 1000,
      ttfb_ms: report.timeToFirstByteMs === null ? null : Math.round(report.timeToFirstByteMs * 1000) / 1000,
      streamed: report.streamed ? 1 : 0,
      outcome: report.outcome,
      auth_method: base.method,
      client_ip: context.clientIp,
      created_at: isoTimestamp(now),
      requests: 1,
      provider_answered: report.partlyUnknown ? 2 : report.providerAnswered ? 1 : null,
    };
    deps.recorder.record(record, kind);
    if (report.provider) countUsage(report.provider, report.usage ?? null, report.costUsd);
    countTowardCap(base.projectId, record, now);
    row.release?.();
    const run = report.backgroundRun;
    if (run && report.provider && recordedRuns.add(run.rowId))
      recordRun(context, options, base, report.provider, run);
  }

  /**
   * What admission decides after a device token's ledger lookup, for the ledger in Redis to decide
   * in the same script (`AuthRequest.beside`): the call's rate limits, and a capped project's place
   * among its calls in flight with them, as `admitAuthenticated` would ask for them. What the script
   * decided is kept in `row.decided`. None for a proxied call the allow-list leaves out (refused
   * 403, counted by the client's own limits only), nor for a capped project whose month reached its
   * cap or cannot be read (its 403 or 503 comes once the token passed, 401 first), or that has no
   * room to ask for: those are decided after authentication, as before. Asked for again once Apple
   * passed a token the lookup did not (`DeviceVerifyOptions.besideAfterApple`), for the script that
   * remembers it; none then, nor before the lookup, for a client that left or a call the shutdown's
   * deadline refused: `admitAuthenticated` refuses those, no limit counting them.
   */
  function limitsBeside(
    context: RequestContext,
    options: AdmissionOptions,
    reloadWait: ReloadWait,
    row: CallRow,
  ): AuthRequest["beside"] {
    return async (project, provider, deviceDigest) => {
      const inScript = deps.limiter.inScript;
      if (!inScript || row.refusal !== null || context.request.socket.destroyed) return undefined;
      if (leftOut(context, options, project, provider) !== null) return undefined;
      const limits = inScript(limitRequests(deps, context, project, deviceDigest));
      const capUsd = project.monthlySpendCapUsd;
      if (capUsd === null) {
        return {
          ...limits,
          decide(reply) {
            const decisions = limits.decide(reply);
            row.decided = { decisions };
            return decisions;
          },
        };
      }
      let spent: number;
      try {
        spent = await checkSpend(deps, project, capUsd, reloadWait);
      } catch {
        return undefined;
      }
      const part = deps.spend.holdPart?.(project.id, capUsd, spent, limits);
      if (!part) return undefined;
      return {
        ...part,
        decide(reply) {
          const held = part.decide(reply);
          row.decided = held
            ? { decisions: held.decisions, release: held.release, price: held.price }
            : { full: capUsd };
          return held;
        },
      };
    };
  }

  /**
   * The refusal of a proxied call the project's allow-list leaves out; null for any other call
   * (and for every call of a project without a list).
   */
  function leftOut(
    context: RequestContext,
    options: AdmissionOptions,
    project: Project,
    provider: ProviderId,
  ): GatewayError | null {
    const allowList = project.proxyAllowList;
    if (allowList === null || options.proxyPath === undefined) return null;
    const method = context.request.method ?? "GET";
    return proxyAllowList(allowList).allows(provider, method, options.proxyPath)
      ? null
      : notInProxyAllowList(provider, method, options.proxyPath);
  }

  function admitAuthenticated(
    context: RequestContext,
    options: AdmissionOptions,
    auth: AuthResult,
    reloadWait: AuthRequest,
    row: CallRow,
  ): AdmittedCall | Promise<AdmittedCall> {
    // What the device token's ledger script decided with its lookup, if it did (`limitsBeside`).
    const decided = row.decided;
    row.decided = undefined;
    if (!auth.ok) {
      // Not met: a lookup that passed the token authenticates the call. Its place is given back.
      giveBackPlace(decided);
      deps.metrics.countAuthResult(auth.method ?? "none", auth.error.code);
      // The failed-authentication throttle's refusals; its allowances are every other request.
      if (auth.error.code === "TOO_MANY_REQUESTS")
        deps.metrics.countLimitDecision("auth_failures", "limited");
      // As the caller sent it, but only printable ASCII, not whole when it may be a key typed in its
      // place, and not at all when it holds the admin token or a master key (projectIdRecorded): the
      // row is evidence of the attempt, and a NUL would make PostgreSQL refuse the whole batch it
      // travels in. A request the throttle refused has none (its metric counts it): the throttle's
      // refusals cost a client nothing, and one row each let anyone without credentials grow the
      // table without bound (~1 MB/s from one client); the attempts the throttle let through, 30 a
      // minute, have theirs. So the id is worked out only for a row written: a flood's refusals skip
      // the search for configured secrets in it. A copy: the row may wait in the queue through an
      // outage, and a view would keep the whole request line or header the id was cut from
      // (detachedString).
      const claimed = options.projectId;
      if (claimed && auth.error.code !== "TOO_MANY_REQUESTS")
        write(
          context,
          options,
          row,
          {
            projectId: auth.project?.id ?? detachedString(projectIdRecorded(claimed, deps.isSecret)),
            keyId: null,
            method: auth.method,
          },
          failureReport(context, auth.error, null, null, nothingSent),
          refusalKind(auth.error, auth.project !== null),
        );
      throw auth.error;
    }
    deps.metrics.countAuthResult(auth.method, "ok");
    context.projectId = auth.project.id;
    const base = { projectId: auth.project.id, keyId: auth.keyId, method: auth.method };
    row.base = base;
    row.provider = auth.provider;
    /**
     * A request refused here was not admitted: a DeviceCheck token gives back the use authentication
     * counted (its budget, or its single-use mark), before the answer goes out so that a retry after
     * `Retry-After` finds it. A single-use token is still admitted at most once: the refund runs only
     * for this request, which was not admitted, and only once; any other request with the token
     * while the mark was set was refused at authentication (a replay), and not refunded, so the mark
     * is given back only when no request holding the token was admitted. Test keys have nothing to
     * give back and keep the synchronous path.
     */
    const refuse = (error: unknown, kind = refusalKind(error)): Promise<never> => {
      write(
        context,
        options,
        row,
        base,
        failureReport(context, error, auth.provider, null, nothingSent),
        kind,
      );
      const refund = auth.refundDeviceToken;
      if (!refund) throw error;
      return refund().then(() => {
        throw error;
      });
    };
    // A client that left while its credentials were checked (Apple's answer about its device token,
    // a record read again) is not admitted: nothing goes to the provider, no limit counts it (but
    // limits decided in its token's lookup script, counted there as when a client leaves while its
    // limits are asked), its row records the disconnect (499), a place under the cap is given back,
    // and a device token's use is given back as for any refusal here, so the app's retry with the
    // same token passes. A single-use token is still admitted at
    // most once: this request never was. One that leaves after this check keeps its use counted.
    // Refused at the shutdown's deadline while it waited (`refusable`), its row written then: so is
    // one refused while its limits or spend were asked (`admitted`). Its row is an authenticated
    // refusal's (coalesced past ten a minute, decision 0015): counted by no limit, and its credentials
    // passed the throttle, so a client sending and leaving would otherwise write rows without bound.
    if (row.refusal !== null || context.request.socket.destroyed) {
      // A place the ledger's script took is given back (the shutdown's refusal wrote the row already).
      giveBackPlace(decided);
      return row.refusal !== null
        ? refuse(row.refusal)
        : refuse(clientDisconnected(), "authenticated-refusal");
    }
    const admitted = (decisions: readonly RateLimitDecision[]): AdmittedCall => {
      if (row.refusal !== null) throw row.refusal;
      const limitHeaders = applyLimits(decisions);
      row.counted = true;
      unrecorded++;
      if (!context.writesOwnHeaders) setHeaders(context.response, limitHeaders);
      return {
        project: auth.project,
        provider: auth.provider,
        providerKey: auth.providerKey,
        rateLimitHeaders: limitHeaders,
        recheck: deps.recheck ? deps.recheck.since(auth, reloadWait) : noRecheck,
        finish: (report) => write(context, options, row, base, report),
        fail: (error, provider = auth.provider, model = null, spend) =>
          write(context, options, row, base, failureReport(context, error, provider, model, spend)),
      };
    };
    // A call the project's allow-list leaves out is refused after authentication (403 says nothing
    // to a caller without credentials), before the spend cap or the provider, with its row, and a
    // device token's use given back. It counts against the client's own limits (client IP, device),
    // so a client repeating it is held to them (429, Retry-After) as for any other call, but not
    // against the project's: calls that never reach the provider (a stale app build's, say) must not
    // use up the allowance of the project's other users. A project without a list pays this one check.
    const forbidden = leftOut(context, options, auth.project, auth.provider);
    if (forbidden !== null) {
      const own = limitRequests(deps, context, auth.project, auth.deviceDigest).filter(
        (request) => request.name !== "project",
      );
      const refuseWithin = (decisions: readonly RateLimitDecision[]): Promise<never> => {
        try {
          applyLimits(decisions);
        } catch (error) {
          return refuse(error);
        }
        return refuse(forbidden);
      };
      const limits = deps.limiter.consumeAll(own);
      // A limiter that cannot decide leaves the 403: the call is refused either way.
      return limits instanceof Promise
        ? limits.then(refuseWithin, () => refuse(forbidden))
        : refuseWithin(limits);
    }
    const capUsd = auth.project.monthlySpendCapUsd;
    try {
      // Decided with the device token's lookup, in its round trip (`limitsBeside`): a call the limits
      // or the calls in flight refused counted no use of the token, and took no place.
      if (decided) {
        if ("full" in decided) throw callsInFlightFull(decided.full);
        row.release = decided.release;
        try {
          return pricedUnderCap(admitted(decided.decisions), decided.price, capUsd);
        } catch (error) {
          decided.release?.();
          throw error;
        }
      }
      const requests = limitRequests(deps, context, auth.project, auth.deviceDigest);
      // All limits at once: a request one limit refuses is counted by none, so a client over its own
      // IP or device limit does not use up its project's allowance for everyone.
      if (capUsd === null) {
        const limits = deps.limiter.consumeAll(requests);
        return limits instanceof Promise ? limits.then(admitted).catch(refuse) : admitted(limits);
      }
      // The spend cap first: a request it refuses (or cannot decide) is counted by no limit, with
      // nothing to give back. A place among the calls in flight is held from the check on (so
      // requests at once see each other), and given back when the limits refuse the call. With
      // Redis the place and the limits are decided in one script (`holdWithLimits`: one round trip,
      // the place taken only if the limits admit the call); without, or when Redis does not decide
      // them there, the limits are asked after the place, as before.
      return (async () => {
        const spent = await checkSpend(deps, auth.project, capUsd, reloadWait);
        const held = await holdUnderCap(deps, auth.project, capUsd, spent, deps.limiter.inScript?.(requests));
        row.release = held.release;
        try {
          const limits = held.decisions ?? deps.limiter.consumeAll(requests);
          return pricedUnderCap(
            admitted(limits instanceof Promise ? await limits : limits),
            held.price,
            capUsd,
          );
        } catch (error) {
          held.release();
          throw error;
        }
      })().catch(refuse);
    } catch (error) {
      return refuse(error);
    }
  }
}

export type Admit = ReturnType<typeof createAdmission>;

/** `AdmittedCall.recheck` without an `AdmissionRecheck`: nothing to check. */
const noRecheck = (): undefined => undefined;

/** Whose a usage row is: the project, the key and the authentication method. */
interface RowBase {
  projectId: string;
  keyId: string | null;
  method: AuthMethod | null;
}

/**
 * A request's usage row, from authentication on, and what the call holds until it is written: one
 * row per request that reaches authentication (`write`).
 */
interface CallRow {
  written: boolean;
  /** The call is in `unrecorded`: admitted, its row not written yet. */
  counted: boolean;
  /** Gives back the call's place among its project's calls in flight under the cap (`spend.holdWithLimits`). */
  release: (() => void) | undefined;
  /** Whose the row is and the provider it names, once authentication passed. */
  base: RowBase | null;
  provider: ProviderId | null;
  /** The shutdown's refusal, should its deadline come while the call waits to be admitted (`refusable`). */
  refusal: GatewayError | null;
  /**
   * What the device token's ledger script decided after its lookup passed the token (`limitsBeside`):
   * the limits' decisions, and the place under the cap they hold (given back with the row), or a
   * capped project's calls in flight full (its cap), no limit asked.
   */
  decided:
    | { decisions: RateLimitDecision[]; release?: () => void; price?: HeldWithLimits["price"] }
    | { full: number }
    | undefined;
}

/**
 * The row of a call that failed with `error`. A client that left (mid-upload, say) is why the call
 * failed: recorded as the proxies record a disconnect, not as the client's error; but a call the
 * shutdown's deadline refused is recorded as refused (503) though its connection has closed since.
 * `spend`: what the provider billed, or `nothingSent`.
 */
function failureReport(
  context: RequestContext,
  error: unknown,
  provider: ProviderId | null,
  model: string | null,
  spend: CallSpend | typeof nothingSent = { usage: null, costUsd: null },
): CallReport {
  const gone = context.request.socket.destroyed && refusalOf(context.response) !== error;
  const gatewayError = isGatewayError(error) ? error : null;
  return {
    status: gone ? 499 : (gatewayError?.status ?? 500),
    outcome: gone ? "aborted" : "error",
    provider,
    model,
    ...(spend === nothingSent ? { usage: null, costUsd: gone ? 0 : null } : spend),
    streamed: false,
    timeToFirstByteMs: null,
    errorCode: gone ? null : (gatewayError?.code ?? "INTERNAL_ERROR"),
  };
}

/**
 * The kind of a refused request's usage row. A client whose credentials passed can repeat a rate
 * limit's 429 or the spend cap's for calls in flight (ignoring Retry-After), or a 403 (a revoked key,
 * a disabled project, a spent cap, a call the allow-list leaves out), as fast as it sends, and no
 * throttle of failed authentications holds it back: the recorder coalesces those rows past the
 * first of a minute (decision 0015). Only a 403 says the credentials passed (a 401 or 400 says they
 * did not), and a 429 here is a rate limit's or the spend cap's, the failed-authentication
 * throttle's having no row. So are a 503's once its project is known (`projectKnown`): DeviceCheck
 * resting after Apple's 429 or its key not loading, the spend cap that cannot be checked. Neither
 * the throttle nor a limit counts those, so a client holding an app's partial key could have a row
 * written per request for as long as they last. A 503 before a project was found (the credentials
 * could not be read) is not, nor is any other refusal: each is written as it is.
 */
function refusalKind(error: unknown, projectKnown = true): "refusal" | "authenticated-refusal" {
  const code = isGatewayError(error) ? error.code : null;
  return code === "TOO_MANY_REQUESTS" ||
    code === "FORBIDDEN" ||
    (code === "SERVICE_UNAVAILABLE" && projectKnown)
    ? "authenticated-refusal"
    : "refusal";
}

/** The rate limits of a request: project, client IP and, for a DeviceCheck token, device. */
function limitRequests(
  deps: AdmissionDeps,
  context: RequestContext,
  project: Project,
  deviceDigest: string | null,
): LimitRequest[] {
  const requests: LimitRequest[] = [
    {
      name: "project",
      key: project.id,
      limit: project.rateLimits.perMinute ?? deps.defaults.projectPerMinute,
    },
    // Per project and address block.
    { name: "ip", key: `${project.id}:${addressBlock(context.clientIp)}`, limit: deps.defaults.ipPerMinute },
  ];
  if (deviceDigest) {
    requests.push({
      name: "device",
      key: `${project.id}:${deviceDigest}`,
      limit: project.rateLimits.devicePerMinute ?? deps.defaults.devicePerMinute,
    });
  }
  return requests;
}

/** The RateLimit headers, or a 429 refusal (carrying them) when any limit is exhausted. */
function applyLimits(decisions: readonly RateLimitDecision[]): Record<string, string> {
  const headers = rateLimitHeaders(decisions);
  const refused = decisions.find((decision) => !decision.allowed);
  if (refused) {
    throw new GatewayError(
      "TOO_MANY_REQUESTS",
      `Rate limit exceeded (${refused.name}: ${refused.limit} per ${refused.windowSeconds}s)`,
      {
        headers,
      },
    );
  }
  return headers;
}

/** The month's spend, checked against the cap (403 once it reached it). */
async function checkSpend(
  deps: AdmissionDeps,
  project: Project,
  capUsd: number,
  reloadWait: ReloadWait,
): Promise<number> {
  let spent: number;
  try {
    spent = await deps.spend.monthToDate(project.id, project.createdAt, reloadWait);
  } catch (error) {
    throw new GatewayError("SERVICE_UNAVAILABLE", "The spend cap cannot be checked right now", {
      cause: error,
      headers: { "retry-after": "5" },
      details: { retryable: true },
    });
  }
  // Compared in billionths of a dollar, the precision a row's cost is stored at: the month's figure
  // is a sum of floats, and ten calls of 0.1 add up to 0.9999999999999999, short of a cap of 1.
  if (Math.round(spent * 1e9) >= Math.round(capUsd * 1e9)) {
    throw new GatewayError(
      "FORBIDDEN",
      `This project reached its monthly spend cap of ${usdText(capUsd)} USD; it resets on the 1st (UTC) or when an admin raises it`,
    );
  }
  return spent;
}

/**
 * A place among the project's calls in flight (`SpendGuard.holdWithLimits`: on this instance, or on
 * every instance sharing Redis, with the limits' decisions when Redis made them in the same script),
 * or a 429 when those, each at the largest cost of one call seen this month (SLUICE_UNPRICED_CALL_USD
 * before any), would take the month to its cap: a call sent when they end is admitted if they left room.
 */
async function holdUnderCap(
  deps: AdmissionDeps,
  project: Project,
  capUsd: number,
  spent: number,
  limits: LimitsInScript | undefined,
): Promise<HeldWithLimits> {
  const held = await deps.spend.holdWithLimits(project.id, capUsd, spent, limits);
  if (held) return held;
  throw callsInFlightFull(capUsd);
}

/** Gives back the place among the calls in flight the device token's ledger script took, if it did. */
function giveBackPlace(decided: CallRow["decided"]): void {
  if (decided && "release" in decided) decided.release?.();
}

/**
 * A capped call admitted, its `priceKnown` given by the place it holds (`HeldWithLimits.price`):
 * added only here, so an uncapped call (the usual proxied one) allocates nothing more.
 */
function pricedUnderCap(
  call: AdmittedCall,
  price: HeldWithLimits["price"],
  capUsd: number | null,
): AdmittedCall {
  if (price && capUsd !== null)
    call.priceKnown = (costUsd) => {
      const verdict = price(costUsd);
      return verdict instanceof Promise
        ? verdict.then((decided) => refuseOverPrice(decided, capUsd, costUsd))
        : refuseOverPrice(verdict, capUsd, costUsd);
    };
  return call;
}

/**
 * Throws the refusal of a call whose price, known before it runs, `HeldPlace.price` did not count:
 * the cap's 403 when the month's spend and the price alone pass it (no retry fits it this month),
 * else the calls in flight's 429 (it may fit once they end).
 */
function refuseOverPrice(verdict: KnownPriceVerdict, capUsd: number, costUsd: number): void {
  if (verdict === "counted") return;
  if (verdict === "in-flight") throw callsInFlightFull(capUsd);
  throw new GatewayError(
    "FORBIDDEN",
    `This call's price, ${usdText(costUsd)} USD, would take this project past its monthly spend cap of ${usdText(capUsd)} USD; a cheaper call may fit, or the cap resets on the 1st (UTC) or when an admin raises it`,
  );
}

/** The 429 of a call the project's calls in flight leave no room for under its cap. */
function callsInFlightFull(capUsd: number): GatewayError {
  return new GatewayError(
    "TOO_MANY_REQUESTS",
    `This project's calls in flight may reach its monthly spend cap of ${usdText(capUsd)} USD; retry when they end`,
    { headers: { "retry-after": "1" } },
  );
}
