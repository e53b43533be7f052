import type { IncomingMessage, ServerResponse } from "node:http";
import { GatewayError } from "../errors.js";
import type { Metrics } from "../observability/metrics.js";
import { originForm } from "./origin-form.js";
import { onceAnswerCloses } from "./queued-answers.js";
import { Router } from "./router.js";
import { sendBytes, sendError } from "./send.js";

/** What the SLUICE_METRICS_PORT listener's HTTP server hands each request to. */
export type MetricsListener = (request: IncomingMessage, response: ServerResponse) => void;

/**
 * The requests of the SLUICE_METRICS_PORT listener: GET and HEAD /metrics, from the gateway's own
 * registry; any other path is 404 and any other method on it 405, in the error envelope, as the
 * gateway's port answers them. Its answers are counted in `sluice_http_requests_total` as that
 * port counts its own (a scrape under route `/metrics`), so a dashboard reads the same series
 * whichever port serves the metrics. None of the gateway's admission applies (connection caps,
 * CORS): the listener is for operators, on an address they keep inside their network.
 */
export function createMetricsListener(deps: {
  metrics: Metrics;
  generateRequestId: () => string;
}): MetricsListener {
  const { metrics } = deps;
  // The router only tells /metrics from other paths and methods, as the gateway's router does.
  const router = new Router().on("GET", "/metrics", () => {});
  return (request, response) => {
    const startedAt = performance.now();
    const requestId = deps.generateRequestId();
    response.setHeader("x-request-id", requestId);
    const url = originForm(request.url ?? "/");
    const queryAt = url.indexOf("?");
    const path = queryAt < 0 ? url : url.slice(0, queryAt);
    const method = request.method ?? "GET";
    const lookup = router.find(method, path);
    const route = lookup.kind === "found" ? lookup.route : lookup.kind;
    onceAnswerCloses(response, () => {
      // A scraper that left before the answer began got none: 499, as on the gateway's port.
      const status = response.headersSent ? response.statusCode : 499;
      metrics.observeRequest(route, method, status, (performance.now() - startedAt) / 1000);
    });
    request.resume();
    if (lookup.kind === "found") {
      metrics.render().then(
        ({ contentType, body }) => sendBytes(response, 200, Buffer.from(body), contentType),
        (error: unknown) => sendError(response, error, requestId),
      );
      return;
    }
    const error =
      lookup.kind === "method-not-allowed"
        ? new GatewayError("METHOD_NOT_ALLOWED", `${method} is not allowed on this path`, {
            headers: { allow: lookup.allowed.join(", ") },
          })
        : lookup.kind === "bad-path"
          ? new GatewayError("BAD_REQUEST", "The path is not valid percent-encoded UTF-8")
          : new GatewayError("NOT_FOUND", "No such route");
    sendError(response, error, requestId);
  };
}
