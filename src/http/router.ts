import type { IncomingMessage, ServerResponse } from "node:http";
import FindMyWay, { type HTTPMethod } from "find-my-way";

export interface RequestContext {
  request: IncomingMessage;
  response: ServerResponse;
  params: Record<string, string | undefined>;
  requestId: string;
  /** performance.now() when the request arrived (ms, monotonic; no BigInt per reading). */
  startedAt: number;
  clientIp: string;
  /** The path as the client sent it, still percent-encoded (route params are decoded). */
  path: string;
  /** The raw query string without `?` (empty when none). */
  query: string;
  /** The route writes all its headers itself (RouteOptions.writesOwnHeaders). */
  writesOwnHeaders: boolean;
  /**
   * CORS headers for an allowed cross-origin caller (null: none). Already set on the response,
   * except on a route that writes its own headers, which adds them to its `writeHead`.
   */
  corsHeaders: Record<string, string> | null;
  /**
   * The project the request was admitted for, once admission authenticated it (an id, no secret):
   * for the log lines of its failure.
   */
  projectId?: string;
}

export type Handler = (context: RequestContext) => Promise<void> | void;

export interface RouteOptions {
  /**
   * The handler writes every response header itself, `x-request-id` included, in one `writeHead`
   * (the proxies: Node then skips its per-header bookkeeping). Errors still get the id.
   */
  writesOwnHeaders?: boolean;
  /**
   * Only the route's own path reaches it: a trailing slash or an empty segment (`//`) is no route
   * (404) rather than ignored. For the admin API, whose DELETE of a key was a DELETE of the project
   * once a client had resolved `keys/..` to `/admin/v1/projects/p/` (curl and fetch both do).
   */
  exactPath?: boolean;
}

interface Stored {
  handler: Handler;
  route: string;
  writesOwnHeaders: boolean;
  exactPath: boolean;
}

export type Lookup =
  | {
      kind: "found";
      handler: Handler;
      route: string;
      params: Record<string, string | undefined>;
      writesOwnHeaders: boolean;
    }
  | { kind: "method-not-allowed"; allowed: string[] }
  /** `inexactFor`: the exactPath route the path would reach without its trailing or doubled slash. */
  | { kind: "not-found"; inexactFor?: string }
  /** The path's percent-encoding does not decode (`%zz`, or bytes that are not UTF-8). */
  | { kind: "bad-path" };

const methods: HTTPMethod[] = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];

/** A thin wrapper over find-my-way that also tells 404 from 405. */
export class Router {
  private readonly tree = FindMyWay({
    ignoreTrailingSlash: true,
    ignoreDuplicateSlashes: false,
    // A segment longer than this matches no route: none here, a request line is at most Node's
    // 16 KiB of head. Project ids are 64 characters at most, but a longer one is still a project
    // that does not exist (404 PROJECT_NOT_FOUND, named by its start), not an unknown route.
    maxParamLength: 16 * 1024,
  });

  /** Registers `handler`; a GET route answers HEAD too (Node then sends the headers only). */
  on(method: HTTPMethod | HTTPMethod[], path: string, handler: Handler, options: RouteOptions = {}): this {
    const given = Array.isArray(method) ? method : [method];
    const all = given.includes("GET") && !given.includes("HEAD") ? [...given, "HEAD" as const] : given;
    const stored: Stored = {
      handler,
      route: path,
      writesOwnHeaders: options.writesOwnHeaders === true,
      exactPath: options.exactPath === true,
    };
    this.tree.on(all, path, () => {}, stored);
    return this;
  }

  find(method: string, path: string): Lookup {
    const found = this.tree.find(method as HTTPMethod, path);
    if (found) {
      const { handler, route, writesOwnHeaders, exactPath } = found.store as Stored;
      if (exactPath && !exactly(path)) return { kind: "not-found", inexactFor: route };
      return {
        kind: "found",
        handler,
        route,
        params: found.params as Record<string, string | undefined>,
        writesOwnHeaders,
      };
    }
    const allowed = methods.filter((other) => other !== method && this.answers(other, path));
    if (allowed.length > 0) return { kind: "method-not-allowed", allowed };
    // find-my-way matches nothing when the path does not decode, existing route or not.
    return decodes(path) ? { kind: "not-found" } : { kind: "bad-path" };
  }

  /** Every method `path` answers (empty: no such route). */
  methodsOf(path: string): HTTPMethod[] {
    return methods.filter((method) => this.answers(method, path));
  }

  private answers(method: HTTPMethod, path: string): boolean {
    const found = this.tree.find(method, path);
    return found !== null && (!(found.store as Stored).exactPath || exactly(path));
  }
}

/**
 * `path` is an exactPath route's own: find-my-way ignores a trailing slash (ignoreTrailingSlash) and
 * lets a parameter match an empty segment, so `/admin/v1/projects/p/` and `…/projects//keys` match.
 */
function exactly(path: string): boolean {
  return !path.endsWith("/") && !path.includes("//");
}

function decodes(path: string): boolean {
  try {
    decodeURI(path);
    return true;
  } catch {
    return false;
  }
}
