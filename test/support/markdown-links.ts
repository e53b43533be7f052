import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/**
 * Links in Markdown as GitHub reads them, for test/e2e/docs-links.test.ts: the anchors GitHub gives
 * a file's headings, the links and named sections a text holds, and why one leads nowhere. Paths
 * are relative to the checkout.
 */

export const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

/** The files under `dir` (relative to the checkout) whose names end with `suffix`, recursively. */
export function filesUnder(dir: string, suffix: string): string[] {
  const found: string[] = [];
  for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) found.push(...filesUnder(path, suffix));
    else if (entry.name.endsWith(suffix)) found.push(path);
  }
  return found.sort();
}

/** The lines of a Markdown file outside fenced code blocks, each with its 1-based number. */
function proseLines(markdown: string): { text: string; line: number }[] {
  const lines: { text: string; line: number }[] = [];
  let fence: string | undefined;
  markdown.split("\n").forEach((text, index) => {
    const opener = /^ {0,3}(`{3,}|~{3,})/.exec(text)?.[1];
    if (fence === undefined && opener !== undefined) fence = opener;
    else if (fence !== undefined && opener !== undefined && text.trim().startsWith(fence)) fence = undefined;
    else if (fence === undefined) lines.push({ text, line: index + 1 });
  });
  return lines;
}

/** A heading's text as GitHub renders it: link targets, code ticks, emphasis and tags dropped. */
function renderedText(heading: string): string {
  return heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, "$1")
    .replace(/<[^>]+>/g, "")
    .replace(/`/g, "")
    .replace(/\*/g, "")
    .replace(/(^|[^\p{L}\p{N}_])_([^_]+)_(?=[^\p{L}\p{N}_]|$)/gu, "$1$2");
}

/**
 * GitHub's anchor for a heading (github-slugger): lower-case; every character but letters, marks,
 * digits, spaces, hyphens and underscores dropped; each space a hyphen.
 */
export function githubSlug(heading: string): string {
  return renderedText(heading)
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, "")
    .replace(/ /g, "-");
}

/** The anchors of a Markdown file's headings; a repeated one gets -1, -2… as on GitHub. */
export function headingAnchors(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const { text } of proseLines(markdown)) {
    const heading = /^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/.exec(text);
    if (!heading) continue;
    const slug = githubSlug(heading[1] ?? "");
    const times = seen.get(slug) ?? 0;
    seen.set(slug, times + 1);
    anchors.add(times === 0 ? slug : `${slug}-${times}`);
  }
  return anchors;
}

/** The link targets of a Markdown file (inline links, images and reference definitions). */
export function markdownLinks(markdown: string): { target: string; line: number }[] {
  const links: { target: string; line: number }[] = [];
  for (const { text, line } of proseLines(markdown)) {
    const prose = text.replace(/(`+)(?:(?!\1).)+\1/g, "");
    for (const match of prose.matchAll(/\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)/g)) {
      links.push({ target: match[1] ?? "", line });
    }
    const definition = /^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?/.exec(prose);
    if (definition) links.push({ target: definition[1] ?? "", line });
  }
  return links;
}

const anchorCache = new Map<string, Set<string>>();

/** The heading anchors of a Markdown file of the checkout. */
function anchorsOf(file: string): Set<string> {
  let anchors = anchorCache.get(file);
  if (!anchors) {
    anchors = headingAnchors(readFileSync(join(root, file), "utf8"));
    anchorCache.set(file, anchors);
  }
  return anchors;
}

/**
 * Why `target`, linked from the file `from` (relative to the checkout), leads nowhere; or undefined.
 * A relative path is taken from `base`, by default the folder of `from`.
 */
export function brokenLink(from: string, target: string, base = dirname(from)): string | undefined {
  if (/^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith("//")) return undefined;
  const hash = target.indexOf("#");
  const path = decodeURIComponent(hash === -1 ? target : target.slice(0, hash));
  const anchor = hash === -1 ? undefined : decodeURIComponent(target.slice(hash + 1));
  const file = path === "" ? from : join(base, path);
  if (!existsSync(join(root, file))) return `${file} does not exist`;
  if (anchor === undefined) return undefined;
  if (!file.endsWith(".md") || statSync(join(root, file)).isDirectory()) {
    return /^L\d+(-L\d+)?$/.test(anchor) ? undefined : `#${anchor}: ${file} is not a Markdown file`;
  }
  return anchorsOf(file).has(anchor) ? undefined : `${file} has no heading #${anchor}`;
}

/** A file's text with its whitespace runs made one space, lower-cased, for finding a quote in it. */
function flattened(file: string): string {
  return readFileSync(join(root, file), "utf8").replace(/\s+/g, " ").toLowerCase();
}

/**
 * Why a section named in prose (`docs/api.md, "Errors"`, a comment's or a doc's) is not there; or
 * undefined. A name in capitals is a section: a heading of the file, or the start of one ("PDF URLs"
 * for "PDF URLs (SSRF rules)"). One in lower case quotes the file's words (`docs/api.md: "a missing
 * or ill-typed field"`).
 */
export function brokenSection(file: string, phrase: string): string | undefined {
  if (!existsSync(join(root, file))) return `${file} does not exist`;
  if (/^\p{Lu}/u.test(phrase)) {
    const slug = githubSlug(phrase);
    const found = [...anchorsOf(file)].some((anchor) => anchor === slug || anchor.startsWith(`${slug}-`));
    return found ? undefined : `${file} has no heading "${phrase}"`;
  }
  return flattened(file).includes(phrase.toLowerCase()) ? undefined : `${file} does not say "${phrase}"`;
}

/**
 * The sections a text names as `docs/api.md, "Errors"` (or `: "words"`; `README, "Usage rows"` is
 * README.md's); a name may break a line.
 */
export function namedSections(text: string): { file: string; phrase: string; line: number }[] {
  const named: { file: string; phrase: string; line: number }[] = [];
  const pattern = /(?<![\w/.-])([\w./-]*\w\.md|README)[,:] "([^"\n]+(?:\n[\s*/]*[^"\n]+)*)"/g;
  for (const match of text.matchAll(pattern)) {
    const phrase = (match[2] ?? "").replace(/\n[\s*/]*/g, " ").replace(/\s+/g, " ");
    const line = text.slice(0, match.index).split("\n").length;
    const file = match[1] === "README" ? "README.md" : (match[1] ?? "");
    named.push({ file, phrase, line });
  }
  return named;
}

/**
 * The sections a text names without quotes, as `(README, Configuration)` or `docs/proxy.md, Usage`:
 * the words after the name from the capital one on, up to a punctuation mark or the line's end.
 */
export function unquotedSections(text: string): { file: string; words: string[]; line: number }[] {
  const named: { file: string; words: string[]; line: number }[] = [];
  const pattern = /(?<![\w/.-])([\w./-]*\w\.md|README)[,:] (\p{Lu}[\w-]*(?: [\w-]+)*)/gu;
  for (const match of text.matchAll(pattern)) {
    const line = text.slice(0, match.index).split("\n").length;
    const file = match[1] === "README" ? "README.md" : (match[1] ?? "");
    named.push({ file, words: (match[2] ?? "").split(" "), line });
  }
  return named;
}

/**
 * Why a section named without quotes is not there; or undefined. Its first words, one or more, are a
 * heading of the file or the start of one (the prose may go on after the name: `README, Shutdown
 * says`); a name in capitals alone (`DELETE`, `PROJECT_NOT_FOUND`: a row of a table) is in its text.
 */
export function brokenUnquotedSection(file: string, words: string[]): string | undefined {
  if (!existsSync(join(root, file))) {
    // A bare name of no file here is a document kept outside the checkout (SPEC.md, DESIGN.md).
    return file.includes("/") ? `${file} does not exist` : undefined;
  }
  for (let count = words.length; count >= 1; count -= 1) {
    if (brokenSection(file, words.slice(0, count).join(" ")) === undefined) return undefined;
  }
  const first = words[0] ?? "";
  if (/^[\p{Lu}\d_]+$/u.test(first) && flattened(file).includes(first.toLowerCase())) return undefined;
  return `${file} has no heading "${words.join(" ")}" nor one its first words start`;
}
