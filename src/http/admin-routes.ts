import { createHash, timingSafeEqual } from "node:crypto";
import type { HTTPMethod } from "find-my-way";
import type { ProjectAdmin } from "../admin/project-admin.js";
import { shownParameterName } from "../admin/shown-name.js";
import type { AuthThrottle } from "../auth/authenticate.js";
import { repeatedCredentialHeaderError } from "../auth/repeated-credential-header.js";
import { offRefusal, onRefusal, type RefusalListener, untilRefused } from "../deadline-refusal.js";
import { GatewayError, problemsError } from "../errors.js";
import { repeatedMemberProblems } from "../json-repeated-members.js";
import type { Logger } from "../observability/logger.js";
import { throttled } from "../rate-limit/auth-throttle.js";
import type { CancellableQueries } from "../storage/cancellable-queries.js";
import type { LockWait } from "../storage/sqlite-lock-wait.js";
import type { JsonShapeLimits } from "./json-shape.js";
import { type JsonBodyBounds, parseJsonObject, readBody, requireUncompressedUtf8Json } from "./read-body.js";
import type { Handler, RequestContext, Router } from "./router.js";
import { closeIfBodyUnread, sendJson } from "./send.js";

export interface AdminRouteDeps {
  admin: ProjectAdmin;
  /** Unset: the admin API is off and its routes answer 404. */
  adminToken: string | undefined;
  /** Counts wrong admin tokens per client address (its own counts, apart from the apps'). */
  throttle: AuthThrottle;
  maxBodyBytes: number;
  /**
   * Each admin authentication's outcome: "ok", or the code it was refused with (`UNAUTHORIZED`, a
   * repeated header's `BAD_REQUEST`, the throttle's `TOO_MANY_REQUESTS`); for the metrics.
   */
  onAuthResult?: (result: string) => void;
  /** Takes one `admin change` line per write that succeeded (the audit trail), at `info`. */
  logger: Logger;
  /**
   * SQLite only: the statements' waits for another process's lock on the file, which the shutdown's
   * deadline ends for the calls it refuses (`refusingDatabaseWaits`).
   */
  sqliteLockWait?: Pick<LockWait, "end">;
  /**
   * PostgreSQL only: the admin API's queries in flight, which the shutdown's deadline cancels when
   * it refuses the calls (`refusingDatabaseWaits`).
   */
  postgresQueries?: Pick<CancellableQueries, "end">;
}

/**
 * A write that succeeded, as its audit line names it: the action (as the `sluice` command that does
 * the same is named), the project, the key or test key it issued or revoked, and for an update the
 * names of the fields whose value it changed. Ids and names only: never a value, as an update's may
 * be a secret (a DeviceCheck .p8 key) or large (an output schema), and a key's or test key's value
 * is a credential.
 */
interface AdminChange {
  action:
    | "projects create"
    | "projects update"
    | "projects delete"
    | "test-keys rotate"
    | "test-keys revoke"
    | "keys add"
    | "keys revoke";
  projectId: string;
  keyId?: string;
  testKeyId?: string;
  provider?: string;
  fields?: string[];
}

type RouteAnswer = { status?: number; body?: unknown; change?: AdminChange };

/**
 * What an admin call does when the shutdown's deadline refuses it before its answer began
 * (`refuseAtDeadline`): it may be waiting for the database. On SQLite, its write may be waiting for
 * another process's lock on the file (a `sqlite3` shell, a backup), for up to 5 s, off the event
 * loop (docs/decisions/0044): every such wait ends, its statement not tried again, failing with the
 * refusal, which the route answers (503, Retry-After, the envelope) before the drain cuts the
 * connection. Before, the connection was cut without an answer, and the next try, on the database
 * closed meanwhile, was logged as a `request failed` TypeError. On PostgreSQL, its query may be
 * waiting for a lock another session holds: every admin query in flight is cancelled on the server
 * and fails with the refusal once stopped, so its write is not made after the gateway has gone
 * (docs/decisions/0049). Every wait or query, not only this call's: the deadline refuses every call
 * not answered at once, and the database closes next. A body still arriving is refused by its read
 * (`readBody`), on either engine.
 */
function refusingDatabaseWaits(
  lockWait: Pick<LockWait, "end"> | undefined,
  queries: Pick<CancellableQueries, "end"> | undefined,
  logger: Logger,
): RefusalListener | null {
  if (lockWait === undefined && queries === undefined) return null;
  return (refusal) => {
    const statements = lockWait?.end(() => refusal) ?? 0;
    if (statements > 0)
      logger.warn(
        { statements },
        "shutting down: writes waiting for another process's lock on the SQLite file given up, their calls refused (503)",
      );
    const cancelled = queries?.end(refusal) ?? 0;
    if (cancelled > 0)
      logger.warn(
        { queries: cancelled },
        "shutting down: admin API queries in flight on PostgreSQL cancelled, their calls refused (503)",
      );
  };
}

/** `/admin/v1`: parse, call one admin use case, respond. */
export function registerAdminRoutes(router: Router, deps: AdminRouteDeps): void {
  const { admin, logger } = deps;
  const check = adminGuard(deps.adminToken, deps.throttle);
  const onAuthResult = deps.onAuthResult;
  const guard = onAuthResult
    ? async (context: RequestContext) => {
        // The admin API off (404) is no authentication: nothing is counted.
        if (!deps.adminToken) return check(context);
        try {
          await check(context);
        } catch (error) {
          onAuthResult(error instanceof GatewayError ? error.code : "INTERNAL_ERROR");
          throw error;
        }
        onAuthResult("ok");
      }
    : check;
  const refusal = refusingDatabaseWaits(deps.sqliteLockWait, deps.postgresQueries, logger);
  const route =
    (handler: (context: RequestContext) => Promise<RouteAnswer>, takesQuery = false): Handler =>
    async (context) => {
      if (refusal) onRefusal(context.response, refusal);
      try {
        // A wrong token is counted in Redis before its 401: a wait the deadline's refusal ends.
        await untilRefused(context.response, guard(context));
        if (!takesQuery) requireNoQuery(context.query);
        const { status = 200, body, change } = await handler(context);
        // Written once the change is, whether or not the client stays for the answer; a refused or
        // failed write threw above and is no change.
        if (change)
          logger.info(
            { ...change, clientIp: context.clientIp, requestId: context.requestId },
            "admin change",
          );
        if (body === undefined) {
          context.response.statusCode = status;
          closeIfBodyUnread(context.response);
          context.response.end();
        } else sendJson(context.response, status, body, noStore);
      } finally {
        if (refusal) offRefusal(context.response, refusal);
      }
    };
  const json = async (context: RequestContext) => {
    requireUncompressedUtf8Json(context.request);
    return parseAdminBody(await readBody(context.request, deps.maxBodyBytes, { response: context.response }));
  };
  // A route that takes no body still refuses one with fields, as docs/api.md says of unknown fields.
  const none = async (context: RequestContext) => {
    const body = await readBody(context.request, deps.maxBodyBytes, { response: context.response });
    if (body.length === 0) return;
    requireUncompressedUtf8Json(context.request);
    await admin.requireNoFields(parseAdminBody(body));
  };
  const id = (context: RequestContext, name = "projectId") => context.params[name] ?? "";
  // Each admin route is reached by its own path alone (RouteOptions.exactPath): a key's
  // `DELETE …/keys/..`, which the client resolves to `…/projects/p/`, must not delete the project.
  const exact = {
    on(method: HTTPMethod, path: string, handler: Handler) {
      router.on(method, path, handler, { exactPath: true });
      return this;
    },
  };

  exact
    .on(
      "POST",
      "/admin/v1/projects",
      route(async (c) => {
        const created = await admin.createProject(await json(c));
        const { testKeyId } = created;
        return {
          status: 201,
          body: created,
          change: { action: "projects create", projectId: created.project.id, testKeyId },
        };
      }),
    )
    .on(
      "GET",
      "/admin/v1/projects",
      route(async (c) => ({ body: await admin.listProjects(queryFields(c.query)) }), true),
    )
    .on(
      "GET",
      "/admin/v1/projects/:projectId",
      route(async (c) => ({ body: await admin.getProject(id(c)) })),
    )
    .on(
      "PATCH",
      "/admin/v1/projects/:projectId",
      route(async (c) => {
        const { project, written, changed } = await admin.changeProject(id(c), await json(c));
        // `{}` wrote nothing (the project answered as it is): no change. A write names the fields
        // whose value it changed: none when each field it set held that value already.
        if (!written) return { body: project };
        const change = { action: "projects update", projectId: project.id, fields: changed } as const;
        return { body: project, change };
      }),
    )
    .on(
      "DELETE",
      "/admin/v1/projects/:projectId",
      route(async (c) => {
        await none(c);
        await admin.deleteProject(id(c));
        return { status: 204, change: { action: "projects delete", projectId: id(c) } };
      }),
    )
    .on(
      "POST",
      "/admin/v1/projects/:projectId/test-keys",
      route(async (c) => {
        await none(c);
        const issued = await admin.rotateTestKey(id(c));
        const { testKeyId } = issued;
        return {
          status: 201,
          body: issued,
          change: { action: "test-keys rotate", projectId: id(c), testKeyId },
        };
      }),
    )
    .on(
      "GET",
      "/admin/v1/projects/:projectId/test-keys",
      route(async (c) => ({ body: { data: await admin.listTestKeys(id(c)) } })),
    )
    .on(
      "DELETE",
      "/admin/v1/projects/:projectId/test-keys/:testKeyId",
      route(async (c) => {
        await none(c);
        const testKeyId = id(c, "testKeyId");
        await admin.revokeTestKey(id(c), testKeyId);
        return { status: 204, change: { action: "test-keys revoke", projectId: id(c), testKeyId } };
      }),
    )
    .on(
      "POST",
      "/admin/v1/projects/:projectId/keys",
      route(async (c) => {
        const added = await admin.addProviderKey(id(c), await json(c));
        const { keyId, provider } = added;
        return {
          status: 201,
          body: added,
          change: { action: "keys add", projectId: id(c), keyId, provider },
        };
      }),
    )
    .on(
      "GET",
      "/admin/v1/projects/:projectId/keys",
      route(async (c) => ({ body: { data: await admin.listProviderKeys(id(c)) } })),
    )
    .on(
      "DELETE",
      "/admin/v1/projects/:projectId/keys/:keyId",
      route(async (c) => {
        await none(c);
        const keyId = id(c, "keyId");
        await admin.revokeProviderKey(id(c), keyId);
        return { status: 204, change: { action: "keys revoke", projectId: id(c), keyId } };
      }),
    )
    .on(
      "GET",
      "/admin/v1/projects/:projectId/usage",
      route(
        async (c) => ({
          body: await admin.usageReport(id(c), queryFields(c.query)),
        }),
        true,
      ),
    );
}

/**
 * The shape of an admin body, bounded before `JSON.parse` builds it (json-shape.ts), as the JSON
 * endpoints' are: at the body cap, 9M nested arrays held the event loop (every app's call with it)
 * for 13 s, and an output schema of a 9M-value enum for 36 s before it was refused. No admin input
 * comes near: an output schema within its 65,536 bytes holds fewer than 32,768 values (`[0,0,…]`),
 * the other fields a few hundred; and 10,000 levels leave a schema nested deeper than its 64 (4,500
 * levels, say) answered 422 naming where, as docs/api.md says.
 */
const adminBodyLimits: JsonShapeLimits = { maxDepth: 10_000, maxValues: 40_000 };
const adminBodyBounds: JsonBodyBounds = {
  limits: adminBodyLimits,
  takes: "the admin API takes one JSON object of the fields its route lists (docs/api.md)",
};

/**
 * An admin body: one JSON object within adminBodyLimits, each object naming a member once. A
 * repeated member is refused, as a repeated query parameter is, rather than the last one kept
 * without a word: `{"testMode":false,…,"testMode":true}` turned Test Mode on.
 */
function parseAdminBody(body: Buffer): Record<string, unknown> {
  const value = parseJsonObject(body, adminBodyBounds);
  const problems = repeatedMemberProblems(body);
  if (problems.length === 0) return value;
  throw problemsError("BAD_REQUEST", "Invalid request body", problems);
}

/**
 * Admin answers are never stored by a cache on the way: a project's test key and a partial key are
 * in the answer that issues them, and only there (RFC 9111 §5.2.2.5).
 */
const noStore = { "cache-control": "no-store" };

/**
 * A route that takes no query refuses one with parameters, as a body's unknown fields are refused:
 * the lists of a project's keys are not paged, so a `limit` or `offset` ignored would answer every
 * key without a word.
 */
function requireNoQuery(query: string): void {
  const names = [...new Set(new URLSearchParams(query).keys())];
  if (names.length === 0) return;
  const problems = names.map(
    (name) => `${shownParameterName(name)}: unknown parameter (this route takes none)`,
  );
  throw problemsError("BAD_REQUEST", "Invalid query", problems);
}

/** The query string as fields; a repeated parameter stays a list, which the input schema refuses. */
function queryFields(query: string): Record<string, string | string[]> {
  const params = new URLSearchParams(query);
  return Object.fromEntries(
    [...new Set(params.keys())].map((name) => {
      const values = params.getAll(name);
      return [name, values.length === 1 ? (values[0] as string) : values];
    }),
  );
}

function adminGuard(
  adminToken: string | undefined,
  throttle: AuthThrottle,
): (context: RequestContext) => Promise<void> {
  const expected = adminToken ? createHash("sha256").update(adminToken).digest() : null;
  return async (context) => {
    if (!expected)
      throw new GatewayError("NOT_FOUND", "The admin API is off: set SLUICE_ADMIN_TOKEN to enable it");
    // As on the app routes (admission): two `Authorization` headers are ambiguous (Node reads the
    // first, a proxy in front may read the last), so they are refused before the token is compared,
    // and not counted as a wrong token. The values are never named.
    const repeated = repeatedCredentialHeaderError(context.request.rawHeaders);
    if (repeated !== null) throw repeated;
    // Only a Bearer credential can be the token, so only one is a guess the throttle counts. A
    // request without one (no Authorization, or another scheme) is refused uncounted: it is all a
    // page in another origin can make a browser send here (an Authorization header needs a
    // preflight, which /admin refuses), and counted it let such a page, open in the admin's browser
    // or any behind the admin's address, keep that address refused, the right token included.
    const header = context.request.headers.authorization ?? "";
    const match = /^Bearer +(\S+)$/i.exec(header);
    if (!match) throw new GatewayError("UNAUTHORIZED", "A valid admin token is required");
    // Guessing the token is slowed like guessing an app's credentials: after too many wrong
    // tokens from one address, even the right one waits out the window.
    const retryAfter = await throttle.retryAfter(context.clientIp, undefined);
    if (retryAfter > 0) {
      const message = "Too many failed admin authentication attempts; try again later";
      throw throttled(throttle, retryAfter, "admin-auth-failures", message);
    }
    // A guess holds a slot until its failure is counted: guesses pipelined on one connection (or
    // sent at once) all pass the check above before the first is counted, so they are counted here.
    const release = throttle.begin(context.clientIp, undefined);
    if (typeof release === "number") {
      const message = "Too many failed or pending admin authentication attempts; try again later";
      throw throttled(throttle, release, "admin-auth-failures", message);
    }
    try {
      const actual = createHash("sha256")
        .update(match[1] ?? "")
        .digest();
      if (!timingSafeEqual(actual, expected)) {
        await throttle.recordFailure(context.clientIp, undefined, true);
        throw new GatewayError("UNAUTHORIZED", "A valid admin token is required");
      }
    } finally {
      release();
    }
  };
}
