import { EventEmitter } from "node:events";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { RequestContext } from "../../src/http/router.js";

/**
 * A request's context as admission sees it, from 192.0.2.1 on /v1/text unless `fields` say. Its
 * response is an emitter, as an admission that waits listens on it for the shutdown's refusal.
 */
export function admissionRequestContext(fields: Partial<RequestContext> = {}): RequestContext {
  return {
    request: { headers: {}, rawHeaders: [], socket: { destroyed: false } } as unknown as IncomingMessage,
    response: Object.assign(new EventEmitter(), { setHeader: () => {} }) as unknown as ServerResponse,
    params: {},
    requestId: "req_1",
    startedAt: performance.now(),
    clientIp: "192.0.2.1",
    path: "/v1/text",
    query: "",
    writesOwnHeaders: true,
    corsHeaders: null,
    ...fields,
  };
}
