import { GatewayError } from "../errors.js";
import { modelEntryTexts, modelIds } from "./model-list.js";
import type { ProviderId } from "./provider-id.js";

/**
 * Which part of a model list a request asks for, with the paging parameters of the API the list
 * stands in for, so that each official SDK's auto-paging reads every model exactly once:
 *
 * - provider B, Anthropic's Models API: `limit` (1–1000, default 20), `after_id` (the page just
 *   after that model) or `before_id` (the page just before it, in the list's order); the answer's
 *   `has_more` says whether more models lie in that direction, `first_id`/`last_id` name the page's
 *   ends (null when it is empty).
 * - provider C, Gemini's `models.list`: `pageSize` (default 50; 0 is the default too, more than
 *   1000 is taken as 1000, as Gemini does) and `pageToken`, the `nextPageToken` of the page before,
 *   which the answer carries only while models remain.
 * - provider A: none; OpenAI's list takes no parameters and answers every model, so any query is
 *   ignored.
 *
 * A value the provider's API would refuse (a `limit` outside 1–1000, a cursor that names no model
 * of the catalogue, a negative `pageSize`, a `pageToken` the list did not give), `after_id` with
 * `before_id`, or one of these parameters given twice is 400 `BAD_REQUEST`. Other parameters are
 * ignored, as the providers ignore them.
 */
export interface ListPage {
  /** The models' positions in the catalogue's list: `start` up to, not including, `end`. */
  start: number;
  end: number;
  /** Provider B: whether models remain in the page's direction. */
  hasMore: boolean;
  /** Provider C: the last model given, when models remain after it (its `nextPageToken`). */
  nextAfter: string | null;
  /** Whether the query named no paging parameter: the default page, whose bytes are kept. */
  isDefault: boolean;
}

const bDefaultLimit = 20;
const bMaxLimit = 1000;
const cDefaultPageSize = 50;
const cMaxPageSize = 1000;

/** The page `query` (the raw query string, without `?`) asks for; throws a 400 for a bad one. */
export function listPage(provider: ProviderId, query: string): ListPage {
  const count = modelIds(provider).length;
  const params = new URLSearchParams(query);
  switch (provider) {
    case "provider-a":
      return { start: 0, end: count, hasMore: false, nextAfter: null, isDefault: true };
    case "provider-b": {
      const limitText = one(params, "limit");
      const after = one(params, "after_id");
      const before = one(params, "before_id");
      if (after !== undefined && before !== undefined)
        throw badRequest("Give after_id or before_id, not both: each names the page's direction");
      const limit = limitText === undefined ? bDefaultLimit : bLimit(limitText);
      const isDefault = limitText === undefined && after === undefined && before === undefined;
      if (before !== undefined) {
        const end = position(provider, before, "before_id");
        const start = Math.max(0, end - limit);
        return { start, end, hasMore: start > 0, nextAfter: null, isDefault };
      }
      const start = after === undefined ? 0 : position(provider, after, "after_id") + 1;
      const end = Math.min(count, start + limit);
      return { start, end, hasMore: end < count, nextAfter: null, isDefault };
    }
    case "provider-c": {
      const sizeText = one(params, "pageSize");
      const token = one(params, "pageToken");
      const size = sizeText === undefined ? cDefaultPageSize : cPageSize(sizeText);
      // An empty token is the first page, as in Google's APIs (a proto string's default).
      const start = token === undefined || token === "" ? 0 : tokenPosition(provider, token) + 1;
      const end = Math.min(count, start + size);
      const nextAfter = end < count ? (modelIds(provider)[end - 1] ?? null) : null;
      return { start, end, hasMore: end < count, nextAfter, isDefault: sizeText === undefined && !token };
    }
  }
}

const defaultPages = new Map<string, Buffer>();

/**
 * The page's bytes in the provider's list envelope: the catalogue's models from `page.start`, or
 * (`empty`: a project that may not use the provider) the same envelope with none. The default
 * page's bytes are rendered once: these are public, hot endpoints.
 */
export function modelListPageBody(provider: ProviderId, page: ListPage, empty: boolean): Buffer {
  const key = `${provider}:${empty}`;
  const kept = page.isDefault ? defaultPages.get(key) : undefined;
  if (kept) return kept;
  const body = Buffer.from(renderPage(provider, empty ? null : page));
  if (page.isDefault) defaultPages.set(key, body);
  return body;
}

/** The list envelope's text; `page` null: no models. */
function renderPage(provider: ProviderId, page: ListPage | null): string {
  const texts = page ? modelEntryTexts(provider).slice(page.start, page.end) : [];
  const data = `[${texts.join(",")}]`;
  switch (provider) {
    case "provider-a":
      return `{"object":"list","data":${data}}`;
    case "provider-b": {
      const ids = page ? modelIds(provider).slice(page.start, page.end) : [];
      return `{"data":${data},"has_more":${page?.hasMore ?? false},"first_id":${JSON.stringify(ids[0] ?? null)},"last_id":${JSON.stringify(ids.at(-1) ?? null)}}`;
    }
    case "provider-c": {
      const next = page?.nextAfter;
      return next
        ? `{"models":${data},"nextPageToken":${JSON.stringify(pageToken(next))}}`
        : `{"models":${data}}`;
    }
  }
}

/** Provider C's `nextPageToken` after the model `id`: opaque to the caller. */
function pageToken(id: string): string {
  return Buffer.from(id).toString("base64url");
}

function tokenPosition(provider: ProviderId, token: string): number {
  const at = /^[A-Za-z0-9_-]{1,400}$/.test(token)
    ? modelIds(provider).indexOf(Buffer.from(token, "base64url").toString())
    : -1;
  if (at < 0) throw badRequest(`pageToken ${quoted(token)} is not one this list gave`);
  return at;
}

/** Where the model a cursor names stands in the catalogue's list (any project's list is it, or none). */
function position(provider: ProviderId, id: string, name: "after_id" | "before_id"): number {
  const at = modelIds(provider).indexOf(id);
  if (at < 0) throw badRequest(`${name} ${quoted(id)} is not a model of this list`);
  return at;
}

function bLimit(text: string): number {
  const limit = /^[0-9]{1,4}$/.test(text) ? Number(text) : 0;
  if (limit < 1 || limit > bMaxLimit)
    throw badRequest(`limit must be an integer from 1 to ${bMaxLimit}, not ${quoted(text)}`);
  return limit;
}

function cPageSize(text: string): number {
  if (!/^[0-9]+$/.test(text))
    throw badRequest(
      `pageSize must be a whole number, 0 or more (0 is the default ${cDefaultPageSize}; more than ${cMaxPageSize} is taken as ${cMaxPageSize}), not ${quoted(text)}`,
    );
  const size = Number(text);
  return size === 0 ? cDefaultPageSize : Math.min(size, cMaxPageSize);
}

/** The parameter's one value; undefined when absent. Given twice is a 400: which was meant? */
function one(params: URLSearchParams, name: string): string | undefined {
  const values = params.getAll(name);
  if (values.length > 1) throw badRequest(`${name} is given more than once`);
  return values[0];
}

function quoted(value: string): string {
  return JSON.stringify(value.slice(0, 200));
}

function badRequest(message: string): GatewayError {
  return new GatewayError("BAD_REQUEST", message);
}
