import type { IncomingMessage, ServerResponse } from "node:http";
import { GatewayError } from "./errors.js";
import { type AdminRouteDeps, registerAdminRoutes } from "./http/admin-routes.js";
import { type PublicRouteDeps, registerPublicRoutes } from "./http/public-routes.js";
import { type Handler, type RequestContext, Router } from "./http/router.js";
import { sendError } from "./http/send.js";
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
  const accessLog = logger.isLevelEnabled("debug");

  async function run(handler: Handler, context: RequestContext, route: string): Promise<void> {
    try {
      await handler(context);
    } catch (error) {
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
      const lookup = router.find(request.method ?? "GET", path);
      const writesOwnHeaders = lookup.kind === "found" && lookup.writesOwnHeaders;
      if (!writesOwnHeaders) response.setHeader("x-request-id", requestId);
      const route = lookup.kind === "found" ? lookup.route : lookup.kind;
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
      };
      if (lookup.kind === "found") {
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
}
