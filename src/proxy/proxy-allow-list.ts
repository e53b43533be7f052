import { GatewayError } from "../errors.js";
import { holdsKeyForm } from "../observability/key-like.js";
import { apiPath, proxyMethods } from "../providers/provider-adapter.js";
import { type ProviderId, providerIds } from "../providers/provider-id.js";
import { quotedStart } from "../quoted-start.js";
import type { ProxyAllowListRules } from "../storage/project-repository.js";

/**
 * A project's proxy allow-list (docs/proxy.md, docs/decisions/0014-proxy-allow-list.md): when set,
 * a proxied call passes only if a rule of its provider matches it; a provider the list does not
 * name gets nothing. A rule is `[METHOD ]pattern`: an upper-case method (any when left out; `GET`
 * also allows `HEAD`), one space, and a pattern matched against the provider path without the
 * version segment an SDK adds (`messages` matches B's `v1/messages`), percent-decoded. In a
 * pattern `*` stands for any characters but `/` (none included) and a last segment `**` for one or
 * more further segments (`files/**`); `**` alone matches every path.
 */

export const proxyAllowListBounds = { rulesPerProvider: 100, ruleLength: 200 } as const;

/** One segment of a pattern: literal text, or the literal parts between its `*`s. */
type SegmentPattern = { literal: string } | { parts: readonly string[] };

interface Rule {
  /** Null: any method. */
  method: string | null;
  segments: readonly SegmentPattern[];
  /** Ends in `/**` (or is `**`): one or more segments follow those of `segments`. */
  rest: boolean;
}

/**
 * The characters a path matched against a rule may hold once decoded, and a pattern may hold
 * besides `*` and `/`: RFC 3986's unreserved characters, `:`, `@` and the sub-delimiters but `;`
 * (which some servers read as the start of path parameters, `..;/`). A path that holds any other
 * once decoded (`%3F`, `%25`, a space, non-ASCII) matches no rule: what it names depends on who
 * decodes it how, so it is refused rather than guessed at.
 */
const matchable = /^[A-Za-z0-9\-._~!$&'()*+,=:@]+$/;
const patternCharacters = /^[A-Za-z0-9\-._~!$&'()*+,=:@/]+$/;
const onlyDots = /^\.+$/;

/** The segments of `path` (as the proxy holds it) that rules match, or null when no rule may match it. */
function matchedSegments(provider: ProviderId, path: string): string[] | null {
  const segments = apiPath(provider, path).split("/");
  for (let index = 0; index < segments.length; index++) {
    let segment = segments[index] as string;
    if (segment.includes("%")) {
      try {
        segment = decodeURIComponent(segment);
      } catch {
        return null;
      }
      segments[index] = segment;
    }
    // The proxy refuses these before; checked again, as a rule must never be passed by one.
    if (!matchable.test(segment) || onlyDots.test(segment)) return null;
  }
  return segments;
}

function segmentMatches(pattern: SegmentPattern, segment: string): boolean {
  if ("literal" in pattern) return pattern.literal === segment;
  // `first*middle*…*last`: the ends in place, each middle part at its leftmost place after the one
  // before (greedy leftmost is exact for `*`, and linear: no backtracking).
  const { parts } = pattern;
  const first = parts[0] as string;
  const last = parts[parts.length - 1] as string;
  if (segment.length < first.length + last.length || !segment.startsWith(first) || !segment.endsWith(last))
    return false;
  let at = first.length;
  const end = segment.length - last.length;
  for (let index = 1; index < parts.length - 1; index++) {
    const part = parts[index] as string;
    const found = segment.indexOf(part, at);
    if (found === -1 || found + part.length > end) return false;
    at = found + part.length;
  }
  return true;
}

function ruleMatches(rule: Rule, method: string, segments: readonly string[]): boolean {
  if (rule.method !== null && rule.method !== method && !(rule.method === "GET" && method === "HEAD"))
    return false;
  const count = rule.segments.length;
  if (rule.rest ? segments.length <= count : segments.length !== count) return false;
  for (let index = 0; index < count; index++)
    if (!segmentMatches(rule.segments[index] as SegmentPattern, segments[index] as string)) return false;
  return true;
}

/** A project's allow-list, compiled: whether it lets `method` reach `path` at `provider`. */
export interface CompiledProxyAllowList {
  allows(provider: ProviderId, method: string, path: string): boolean;
}

/**
 * Compiles stored rules. A rule that does not parse (none is saved: the admin input refuses them)
 * matches nothing, and so does a provider entry that is not a list: a list read back damaged
 * allows less, never more.
 */
export function compileProxyAllowList(rules: ProxyAllowListRules): CompiledProxyAllowList {
  const compiled = new Map<ProviderId, Rule[]>();
  for (const provider of providerIds) {
    const given = rules[provider];
    if (!Array.isArray(given)) continue;
    const parsed = given.flatMap((rule) => {
      const result = typeof rule === "string" ? parseRule(provider, rule) : null;
      return result !== null && typeof result !== "string" ? [result] : [];
    });
    compiled.set(provider, parsed);
  }
  return {
    allows(provider, method, path) {
      const providerRules = compiled.get(provider);
      if (providerRules === undefined || providerRules.length === 0) return false;
      const segments = matchedSegments(provider, path);
      if (segments === null) return false;
      return providerRules.some((rule) => ruleMatches(rule, method, segments));
    },
  };
}

/**
 * The compiled allow-list of each project record, found by the record's rules object. The
 * credential directory reads a project again every SLUICE_PROJECT_CACHE_TTL_MS (a new object with
 * the same rules), so a miss there looks the rules up by their text before compiling: a list is
 * compiled once per content, not once per reload on some request's path (up to ~3 ms for a list at
 * its bounds). The text cache keeps the `maxTexts` lists used last.
 */
export function proxyAllowListCache(maxTexts = 1000): (rules: ProxyAllowListRules) => CompiledProxyAllowList {
  const byRecord = new WeakMap<ProxyAllowListRules, CompiledProxyAllowList>();
  const byText = new Map<string, CompiledProxyAllowList>();
  return (rules) => {
    let list = byRecord.get(rules);
    if (list !== undefined) return list;
    const text = JSON.stringify(rules);
    list = byText.get(text);
    if (list === undefined) list = compileProxyAllowList(rules);
    else byText.delete(text);
    byText.set(text, list);
    if (byText.size > maxTexts) byText.delete(byText.keys().next().value as string);
    byRecord.set(rules, list);
    return list;
  };
}

/** The 403 of a proxied call the project's allow-list does not include (`path` as the list judged it). */
export function notInProxyAllowList(provider: ProviderId, method: string, path: string): GatewayError {
  return new GatewayError(
    "FORBIDDEN",
    `This project's proxy allow-list does not include ${method} ${path} on ${provider}`,
    { details: { provider, method, path } },
  );
}

/**
 * Why each rule of `rules` cannot be saved (empty: all can), each problem led by where the rule is
 * (`where("provider-a.2")`, as the caller names fields).
 */
export function proxyAllowListProblems(
  rules: ProxyAllowListRules,
  where: (path: string) => string,
): string[] {
  const problems: string[] = [];
  for (const provider of providerIds) {
    const given = rules[provider];
    if (given === undefined) continue;
    const { rulesPerProvider } = proxyAllowListBounds;
    if (given.length > rulesPerProvider) {
      problems.push(`${where(provider)}: holds ${given.length} rules; at most ${rulesPerProvider}`);
      continue;
    }
    given.forEach((rule, index) => {
      const parsed = parseRule(provider, rule);
      if (typeof parsed === "string")
        problems.push(`${where(`${provider}.${index}`)}: ${ruleQuoted(rule)} ${parsed}`);
    });
  }
  return problems;
}

/**
 * A rule as its problem quotes it: whole, or by its start and length when a key's form is in it (a
 * provider key pasted as a rule, or after `Bearer ` or `?key=` in one), as a CLI flag's value is
 * (`valueQuoted`): a refusal never echoes a key.
 */
function ruleQuoted(rule: string): string {
  return holdsKeyForm(rule) ? quotedStart(rule) : JSON.stringify(rule);
}

/** A rule, or why it is not one. */
function parseRule(provider: ProviderId, rule: string): Rule | string {
  if (rule.length === 0) return "is empty";
  if (rule.length > proxyAllowListBounds.ruleLength)
    return `is longer than ${proxyAllowListBounds.ruleLength} characters`;
  const space = rule.indexOf(" ");
  const pattern = space === -1 ? rule : rule.slice(space + 1);
  let method: string | null = null;
  if (space !== -1) {
    method = rule.slice(0, space);
    if (!/^[A-Za-z]+$/.test(method)) return "must be a method, one space and a path, or a path alone";
    const methods = proxyMethods[provider];
    if (!methods.includes(method)) {
      const upper = method.toUpperCase();
      return methods.includes(upper)
        ? `has a method in lower case: write ${upper}`
        : `names a method ${provider}'s proxy does not take (it takes ${methods.join(", ")})`;
    }
  }
  if (pattern.length === 0) return "has no path after its method";
  const problem = patternProblem(provider, pattern);
  if (problem !== null) return problem;
  if (pattern === "**") return { method, segments: [], rest: true };
  const rest = pattern.endsWith("/**");
  const segments = (rest ? pattern.slice(0, -3) : pattern)
    .split("/")
    .map(
      (segment): SegmentPattern =>
        segment.includes("*") ? { parts: segment.split("*") } : { literal: segment },
    );
  return { method, segments, rest };
}

/** A pattern's first segment that is an SDK's version segment (B `v1`, C `v1beta`, `v1alpha`, `v1`). */
const versionSegmentNames = new Set(["v1", "v1beta", "v1alpha"]);

function patternProblem(provider: ProviderId, pattern: string): string | null {
  if (pattern.includes(" ")) return "must be a method, one space and a path, or a path alone";
  if (pattern.startsWith("/"))
    return "starts with /: write the path after the provider's base URL (chat/completions)";
  if (pattern.includes("?")) return "holds a query string, which rules do not match: leave it out";
  if (pattern.includes("%")) return "holds percent-encoding: write the path decoded, as it is matched";
  if (!patternCharacters.test(pattern))
    return "may hold only letters, digits, / and - . _ ~ ! $ & ' ( ) * + , = : @ (* as the wildcard)";
  const segments = pattern.split("/");
  if (segments.some((segment) => segment === ""))
    return "has an empty segment (a leading, doubled or trailing slash), which no proxied path has";
  if (segments.some((segment) => onlyDots.test(segment)))
    return "has a segment of dots (. or ..), which no proxied path has";
  if (
    segments.some(
      (segment, index) => segment.includes("**") && (segment !== "**" || index !== segments.length - 1),
    )
  )
    return "has ** other than as its last segment (files/**) or alone (**)";
  const version = versionSegmentNames.has(segments[0] ?? "") ? `${segments[0]}/` : "";
  if (version === "" || segments.length <= 1) return null;
  if (provider === "provider-a")
    return `starts with ${version}: provider-a's base URL already ends in /v1, so write the path after it (chat/completions)`;
  // The example is the provider's own, so a provider C rule is not shown provider B's path.
  const example =
    provider === "provider-b"
      ? "messages matches v1/messages"
      : `models/*:generateContent matches ${version}models/x:generateContent`;
  return `starts with the version segment ${version}: rules match the path without it (${example})`;
}
