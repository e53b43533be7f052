import type { IncomingMessage, ServerResponse } from "node:http";
import { GatewayError } from "./errors.js";
import { type AdminRouteDeps, registerAdminRoutes } from "./http/admin-routes.js";
import type { CorsPolicy } from "./http/cors.js";
import { type PublicRouteDeps, registerPublicRoutes } from "./http/public-routes.js";
import { type Handler, type RequestContext, Router } from "./http/router.js";
import { sendError, setHeaders } from "./http/send.js";
import type { Logger } from "./observability/logger.js";
import type { Metrics } from "./observability/metrics.js";

export interface AppDeps {
  logger: Logger;
  metrics: Metrics;
  generateRequestId: () => string;
  clientIp: (request: IncomingMessage) => string;
  publicRoutes: PublicRouteDeps;
  adminRoutes: AdminRouteDeps;
  /** Registers the authenticated API routes (proxies, structured, images). */
  registerApiRoutes?: (router: Router) => void;
  /** Cross-origin access for browser apps (`SLUICE_CORS_ORIGINS`); null: no CORS headers at all. */
  cors?: CorsPolicy | null;
}

export interface App {
  handle(request: IncomingMessage, response: ServerResponse): void;
  /** Requests still being answered; graceful shutdown waits for zero. */
  inFlight(): number;
}

/** The router with every route registered explicitly, and the request lifecycle. No I/O here. */
export function createApp(deps: AppDeps): App {
  const router = new Router();
  registerPublicRoutes(router, deps.publicRoutes);
  registerAdminRoutes(router, deps.adminRoutes);
  deps.registerApiRoutes?.(router);

  let active = 0;
  const { logger, metrics } = deps;
  const corsPolicy = deps.cors ?? null;
  const accessLog = logger.isLevelEnabled("debug");

  async function run(handler: Handler, context: RequestContext, route: string): Promise<void> {
    try {
      await handler(context);
    } catch (error) {
      if (context.corsHeaders && context.writesOwnHeaders && !context.response.headersSent)
        setHeaders(context.response, context.corsHeaders);
      const status = sendError(context.response, error, context.requestId);
      if (status >= 500 && !(error instanceof GatewayError)) {
        logger.error({ err: error, requestId: context.requestId, route }, "request failed");
      }
    }
  }

  return {
    inFlight: () => active,
    handle(request, response) {
      const startedAt = performance.now();
      const requestId = deps.generateRequestId();
      const url = request.url ?? "/";
      const queryAt = url.indexOf("?");
      const path = queryAt < 0 ? url : url.slice(0, queryAt);
      const query = queryAt < 0 ? "" : url.slice(queryAt + 1);
      const origin = corsPolicy ? request.headers.origin : undefined;
      const cors = origin !== undefined && corsPolicy?.covers(path) ? corsPolicy : null;
      const preflight =
        cors !== null &&
        request.method === "OPTIONS" &&
        request.headers["access-control-request-method"] !== undefined;
      const lookup = router.find(request.method ?? "GET", path);
      const writesOwnHeaders = !preflight && lookup.kind === "found" && lookup.writesOwnHeaders;
      if (!writesOwnHeaders) response.setHeader("x-request-id", requestId);
      const corsHeaders = cors && !preflight ? cors.headersFor(origin as string) : null;
      if (corsHeaders && !writesOwnHeaders) setHeaders(response, corsHeaders);
      const route = preflight ? "preflight" : lookup.kind === "found" ? lookup.route : lookup.kind;
      active++;
      response.once("close", () => {
        active--;
        const seconds = (performance.now() - startedAt) / 1000;
        metrics.observeRequest(route, request.method ?? "GET", response.statusCode, seconds);
        // The path only: a query string may carry a credential (e.g. provider C's `key=`).
        if (accessLog) {
          logger.debug(
            {
              requestId,
              method: request.method,
              path,
              route,
              status: response.statusCode,
              ms: Math.round(seconds * 1e6) / 1000,
              clientIp: context.clientIp,
            },
            "request",
          );
        }
      });
      const context: RequestContext = {
        request,
        response,
        params: lookup.kind === "found" ? lookup.params : {},
        requestId,
        startedAt,
        clientIp: deps.clientIp(request),
        path,
        query,
        writesOwnHeaders,
        corsHeaders,
      };
      if (preflight) {
        request.resume();
        answerPreflight(cors, origin as string, context);
      } else if (lookup.kind === "found") {
        void run(lookup.handler, context, route);
      } else if (lookup.kind === "method-not-allowed") {
        request.resume();
        sendError(
          response,
          new GatewayError("METHOD_NOT_ALLOWED", `${request.method} is not allowed on this path`, {
            headers: { allow: lookup.allowed.join(", ") },
          }),
          requestId,
        );
      } else {
        request.resume();
        sendError(response, new GatewayError("NOT_FOUND", "No such route"), requestId);
      }
    },
  };

  /**
   * A browser's preflight (OPTIONS with Access-Control-Request-Method), answered here and never
   * forwarded or authenticated: browsers send it without credentials. No usage row: it reaches no
   * provider.
   */
  function answerPreflight(cors: CorsPolicy, origin: string, context: RequestContext): void {
    const { response, requestId } = context;
    const methods = router.methodsOf(context.path);
    if (methods.length === 0) {
      sendError(response, new GatewayError("NOT_FOUND", "No such route"), requestId);
      return;
    }
    if (!cors.allows(origin)) {
      const named = JSON.stringify(origin.slice(0, 200));
      sendError(
        response,
        new GatewayError("FORBIDDEN", `Origin ${named} may not call this gateway (SLUICE_CORS_ORIGINS)`),
        requestId,
      );
      return;
    }
    setHeaders(response, cors.preflightHeaders(origin, methods, context.request.headers));
    response.statusCode = 204;
    response.end();
  }
}
