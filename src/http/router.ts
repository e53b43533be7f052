import type { IncomingMessage, ServerResponse } from "node:http";
import FindMyWay, { type HTTPMethod } from "find-my-way";

export interface RequestContext {
  request: IncomingMessage;
  response: ServerResponse;
  params: Record<string, string | undefined>;
  requestId: string;
  /** process.hrtime.bigint() when the request arrived. */
  startedAt: bigint;
  clientIp: string;
  /** The raw query string without `?` (empty when none). */
  query: string;
}

export type Handler = (context: RequestContext) => Promise<void> | void;

export type Lookup =
  | { kind: "found"; handler: Handler; route: string; params: Record<string, string | undefined> }
  | { kind: "method-not-allowed"; allowed: string[] }
  | { kind: "not-found" };

const methods: HTTPMethod[] = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];

/** A thin wrapper over find-my-way that also tells 404 from 405. */
export class Router {
  private readonly tree = FindMyWay({
    ignoreTrailingSlash: true,
    ignoreDuplicateSlashes: false,
    maxParamLength: 500,
  });

  on(method: HTTPMethod | HTTPMethod[], path: string, handler: Handler): this {
    this.tree.on(method, path, () => {}, { handler, route: path });
    return this;
  }

  find(method: string, path: string): Lookup {
    const found = this.tree.find(method as HTTPMethod, path);
    if (found) {
      const { handler, route } = found.store as { handler: Handler; route: string };
      return { kind: "found", handler, route, params: found.params as Record<string, string | undefined> };
    }
    const allowed = methods.filter((other) => other !== method && this.tree.find(other, path));
    return allowed.length > 0 ? { kind: "method-not-allowed", allowed } : { kind: "not-found" };
  }
}
