import { projectNotFound } from "../admin/project-id.js";
import type { AuthThrottle } from "../auth/authenticate.js";
import { untilRefused } from "../deadline-refusal.js";
import { GatewayError } from "../errors.js";
import { modelEntryBody, sdkModelListPaths, sdkModelReadProviders } from "../providers/model-list.js";
import { type ListPage, listPage, modelListPageBody } from "../providers/model-list-page.js";
import type { ProviderId } from "../providers/provider-id.js";
import { providerIds } from "../providers/provider-id.js";
import { throttled } from "../rate-limit/auth-throttle.js";
import type { Router } from "./router.js";
import { sendBytes, sendJson } from "./send.js";

export interface HealthCheck {
  name: string;
  /**
   * Whether the gateway cannot serve while this check fails (503); otherwise a failure only degrades
   * it. Asked at each check when a function (the database is needed only while nothing is cached).
   */
  required: boolean | (() => boolean);
  ping(): Promise<void>;
  /**
   * What fails though the ping answers, as fields of the check's entry (the database's
   * `{ usageWrites: "failing" }`: it answers reads but refuses writes). Any: the check is `degraded`,
   * which never makes the gateway unavailable, as it can still serve. Asked after the ping, told
   * whether it answered: a `down` check's entry carries the fields too (Redis down: the limits run
   * per instance).
   */
  degradation?: (answered: boolean) => Record<string, string> | undefined;
}

export interface PublicRouteDeps {
  version: string;
  startedAt: number;
  now: () => number;
  checks: HealthCheck[];
  /**
   * The providers whose models a project may use (it holds a provider key for them that is not
   * revoked, and is not disabled); null when there is no such project.
   */
  projectProviders(projectId: string): Promise<ReadonlySet<ProviderId> | null>;
  /**
   * The apps' failed-authentication throttle (the one the authenticated routes use): an unknown
   * project id asked for here counts as a failure, so the lists are no free oracle of which ids
   * exist and no way to make the gateway read its database for every id an attacker makes up.
   */
  throttle: AuthThrottle;
  /**
   * True when the project is known to exist without a lookup: its list needs no throttle slot. Without
   * it every lookup holds one on the caller's address until its answer (see AuthThrottle.begin).
   */
  knownProject?: (projectId: string) => boolean;
  /** Counts one of the throttle's refusals here, as the authenticated routes count theirs. */
  countThrottled?: () => void;
  metrics?: () => Promise<{ contentType: string; body: string }>;
  /**
   * Hears whether each check's ping answered (the `sluice_degraded` gauge: a quiet instance learns of
   * an outage too). A degradation is not told: its source tells the gauge itself.
   */
  onCheck?: (name: string, ok: boolean) => void;
  /**
   * True once the gateway is shutting down (SIGTERM, SIGINT or SIGHUP, its
   * SLUICE_SHUTDOWN_DELAY_MS included): /health then answers 503 `stopping`, so a load balancer
   * takes the instance out while it still serves what it is sent.
   */
  stopping?: () => boolean;
}

/**
 * GET /health, the six model lists (the project-scoped ones also where each provider's SDK asks for
 * them) and /metrics. None needs authentication; the project-scoped lists are throttled as failed
 * authentications are.
 */
export function registerPublicRoutes(router: Router, deps: PublicRouteDeps): void {
  router.on("GET", "/health", async ({ response }) => {
    // Its pings take up to 2 s each: the shutdown's deadline refuses a check still waiting (503).
    const results = await untilRefused(response, Promise.all(deps.checks.map((check) => runCheck(check))));
    // The gauge hears the ping; what else degrades a component (usage writes) tells it itself.
    for (const result of results) deps.onCheck?.(result.name, result.status !== "down");
    const checks = Object.fromEntries(
      results.map((result) => [
        result.name,
        { status: result.status, latencyMs: result.latencyMs, ...result.degradation },
      ]),
    );
    const failedRequired = results.some((result) => result.required && result.status === "down");
    const degraded = results.some((result) => result.status !== "ok");
    // A stopping instance is still checked: the entries say what it could serve, the status that it
    // soon will not, whatever they say.
    const stopping = deps.stopping?.() === true;
    sendJson(
      response,
      stopping || failedRequired ? 503 : 200,
      {
        status: stopping ? "stopping" : failedRequired ? "unavailable" : degraded ? "degraded" : "ok",
        version: deps.version,
        uptimeSeconds: Math.floor((deps.now() - deps.startedAt) / 1000),
        checks,
      },
      { "cache-control": "no-store" },
    );
  });

  for (const provider of providerIds) {
    router.on("GET", `/v1/${provider}/models`, ({ response, query }) =>
      sendModels(response, provider, listPage(provider, query)),
    );
    for (const path of sdkModelListPaths[provider]) {
      router.on(
        "GET",
        `/v1/${provider}/:projectId/${path}`,
        async ({ response, params, clientIp, query }) => {
          // The query first: a bad one is refused alike for every project id, before any lookup.
          const page = listPage(provider, query);
          const usable = await untilRefused(
            response,
            requireKnownProject(deps, params.projectId ?? "", clientIp),
          );
          sendModels(response, provider, page, usable.has(provider));
        },
      );
      if (!sdkModelReadProviders.includes(provider)) continue;
      router.on(
        "GET",
        `/v1/${provider}/:projectId/${path}/:modelId`,
        async ({ response, params, clientIp }) => {
          const usable = await untilRefused(
            response,
            requireKnownProject(deps, params.projectId ?? "", clientIp),
          );
          // As in the project's list: a provider it holds no live key for has no models.
          const body = usable.has(provider) ? modelEntryBody(provider, params.modelId ?? "") : null;
          if (body === null)
            throw new GatewayError(
              "NOT_FOUND",
              `Model ${JSON.stringify((params.modelId ?? "").slice(0, 200))} is not in this project's model list`,
            );
          sendBytes(response, 200, body, "application/json; charset=utf-8", { "cache-control": "no-cache" });
        },
      );
    }
  }

  const metrics = deps.metrics;
  if (metrics) {
    router.on("GET", "/metrics", async ({ response }) => {
      const { contentType, body } = await metrics();
      sendBytes(response, 200, Buffer.from(body), contentType);
    });
  }
}

/**
 * As authentication treats a project id: a throttled address is refused before the lookup, known
 * project or not (otherwise 200 against 429 would still tell), and an unknown id is counted against
 * the address and the id (see createAuthThrottle).
 */
async function requireKnownProject(
  deps: PublicRouteDeps,
  projectId: string,
  clientIp: string,
): Promise<ReadonlySet<ProviderId>> {
  const refuse = (retryAfter: number) => {
    deps.countThrottled?.();
    const message = "Too many failed authentication attempts or unknown project ids; try again later";
    return throttled(deps.throttle, retryAfter, "auth-failures", message);
  };
  const retryAfter = await deps.throttle.retryAfter(clientIp, projectId);
  if (retryAfter > 0) throw refuse(retryAfter);
  // A lookup that may find no project holds a slot on the address until its failure is counted, so
  // a burst of made-up ids is refused rather than looked up (see AuthThrottle.begin).
  const release = deps.knownProject?.(projectId) ? undefined : deps.throttle.begin(clientIp, undefined);
  if (typeof release === "number") throw refuse(release);
  try {
    const usable = await deps.projectProviders(projectId);
    if (usable) return usable;
    const missingRetryAfter = await deps.throttle.retryAfterMissing(projectId);
    if (missingRetryAfter > 0) throw refuse(missingRetryAfter);
    await deps.throttle.recordFailure(clientIp, projectId, false);
    throw projectNotFound(projectId);
  } finally {
    release?.();
  }
}

/**
 * A page of a model list (see listPage): of the whole list, or (project-scoped) of the models the
 * project may use, all of the provider's or none. A project's list changes with its keys, so it is
 * not kept by caches.
 */
function sendModels(
  response: Parameters<typeof sendBytes>[0],
  provider: ProviderId,
  page: ListPage,
  usable?: boolean,
): void {
  const body = modelListPageBody(provider, page, usable === false);
  sendBytes(response, 200, body, "application/json; charset=utf-8", {
    "cache-control": usable === undefined ? "public, max-age=300" : "no-cache",
  });
}

/** `down` when the ping fails, else `degraded` when the check names a degradation, else `ok`. */
async function runCheck(check: HealthCheck): Promise<{
  name: string;
  required: boolean;
  status: "ok" | "degraded" | "down";
  latencyMs: number;
  degradation: Record<string, string> | undefined;
}> {
  const started = performance.now();
  const answered = await pingAnswers(check);
  const latencyMs = Math.round((performance.now() - started) * 100) / 100;
  const degradation = check.degradation?.(answered);
  return {
    name: check.name,
    required: typeof check.required === "function" ? check.required() : check.required,
    status: !answered ? "down" : degradation ? "degraded" : "ok",
    latencyMs,
    degradation,
  };
}

/** Whether the check's ping answers within 2 s. */
export async function pingAnswers(check: HealthCheck): Promise<boolean> {
  try {
    await Promise.race([
      check.ping(),
      new Promise((_, reject) => setTimeout(() => reject(new Error("timeout")), 2000).unref()),
    ]);
    return true;
  } catch {
    return false;
  }
}
