import { existsSync, readFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import {
  brokenLink,
  brokenSection,
  brokenUnquotedSection,
  filesUnder,
  githubSlug,
  headingAnchors,
  markdownLinks,
  namedSections,
  root,
  unquotedSections,
} from "../support/markdown-links.js";

/**
 * Every relative link in the docs, and every docs/… path that a source comment or error message
 * points to, leads to a file that exists and, where it names an anchor, to a heading of that file
 * as GitHub slugs it; a section named in prose (`docs/api.md, "Errors"`, or without quotes,
 * `README, Configuration`) is a heading of its file. The benchmark's Markdown is checked as the docs are.
 */

// The benchmark's README and its reports are docs too: the README links to them, and they link on.
const docs = ["README.md", "CHANGELOG.md", ...filesUnder("docs", ".md"), ...filesUnder("bench", ".md")];
const self = relative(root, fileURLToPath(import.meta.url));
const sources = ["src", "test", "bin", "scripts", "bench"]
  .flatMap((dir) => [...filesUnder(dir, ".ts"), ...filesUnder(dir, ".js")])
  .filter((file) => file !== self);

describe("links in the docs", () => {
  it.each(docs)("%s links only to files and headings that exist", (doc) => {
    const text = readFileSync(join(root, doc), "utf8");
    const broken = markdownLinks(text).flatMap(({ target, line }) => {
      const why = brokenLink(doc, target);
      return why ? [`${doc}:${line}: (${target}) ${why}`] : [];
    });
    // Prose names a doc by its path from the checkout (docs/api.md) or from this file (api.md).
    for (const { file, phrase, line } of namedSections(text)) {
      const path = existsSync(join(root, dirname(doc), file)) ? join(dirname(doc), file) : file;
      const why = brokenSection(path, phrase);
      if (why) broken.push(`${doc}:${line}: ${file}, "${phrase}": ${why}`);
    }
    for (const { file, words, line } of unquotedSections(text)) {
      const path = existsSync(join(root, dirname(doc), file)) ? join(dirname(doc), file) : file;
      const why = brokenUnquotedSection(path, words);
      if (why) broken.push(`${doc}:${line}: ${file}, ${words.join(" ")}: ${why}`);
    }
    expect(broken).toEqual([]);
  });
});

describe("files of the checkout named in the docs", () => {
  // The changelog, the decision records and the benchmark's reports are left out: they tell what
  // was so when written.
  const current = docs.filter(
    (doc) =>
      doc !== "CHANGELOG.md" && !doc.startsWith("docs/decisions/") && !doc.startsWith("bench/results/"),
  );
  it.each(current)("%s names only source, test and script files that exist", (doc) => {
    const missing: string[] = [];
    readFileSync(join(root, doc), "utf8")
      .split("\n")
      .forEach((line, index) => {
        for (const match of line.matchAll(
          /(?<![\w/.-])(?:src|test|bench|scripts|bin)\/[\w./-]*\.(?:ts|js|json|md)\b/g,
        )) {
          if (!existsSync(join(root, match[0]))) missing.push(`${doc}:${index + 1}: ${match[0]}`);
        }
      });
    expect(missing).toEqual([]);
  });
});

describe("docs named in the source (comments and messages)", () => {
  it("are files that exist, an anchor is a heading of the file, and a named section is in it", () => {
    const broken: string[] = [];
    let named = 0;
    for (const source of sources) {
      const text = readFileSync(join(root, source), "utf8");
      text.split("\n").forEach((line, index) => {
        for (const match of line.matchAll(/\b(?:docs\/[\w./-]*\w|README|CHANGELOG)\.md(?:#[\w-]*)?/g)) {
          named += 1;
          const why = brokenLink(source, match[0], ".");
          if (why) broken.push(`${source}:${index + 1}: ${match[0]}: ${why}`);
        }
      });
      for (const { file, phrase, line } of namedSections(text)) {
        const why = brokenSection(file, phrase);
        if (why) broken.push(`${source}:${line}: ${file}, "${phrase}": ${why}`);
      }
      for (const { file, words, line } of unquotedSections(text)) {
        const why = brokenUnquotedSection(file, words);
        if (why) broken.push(`${source}:${line}: ${file}, ${words.join(" ")}: ${why}`);
      }
    }
    expect(named).toBeGreaterThan(50);
    expect(broken).toEqual([]);
  });
});

describe("the link checker", () => {
  it("slugs headings as GitHub does", () => {
    expect(githubSlug("Behind a load balancer: SLUICE_SHUTDOWN_DELAY_MS or a preStop sleep")).toBe(
      "behind-a-load-balancer-sluice_shutdown_delay_ms-or-a-prestop-sleep",
    );
    expect(githubSlug("Projects as code (`SLUICE_CONFIG_FILE`)")).toBe("projects-as-code-sluice_config_file");
    expect(githubSlug("0032: A SLUICE_ name — warned of, *not* refused")).toBe(
      "0032-a-sluice_-name--warned-of-not-refused",
    );
    expect(githubSlug("See [the API](api.md) v1.2")).toBe("see-the-api-v12");
    expect(githubSlug("An _emphasised_ word")).toBe("an-emphasised-word");
  });

  it("numbers repeated headings and skips code blocks", () => {
    const anchors = headingAnchors("# Usage\n## Usage\n```\n# not a heading\n```\n## Usage\n");
    expect([...anchors]).toEqual(["usage", "usage-1", "usage-2"]);
  });

  it("finds a section named without quotes that is no heading", () => {
    const named = unquotedSections("see (README, Shutdown) and docs/proxy.md: Bodies and streams, then\n");
    expect(named).toEqual([
      { file: "README.md", words: ["Shutdown"], line: 1 },
      { file: "docs/proxy.md", words: ["Bodies", "and", "streams"], line: 1 },
    ]);
    expect(brokenUnquotedSection("README.md", ["Shutdown", "says", "so"])).toBeUndefined();
    expect(brokenUnquotedSection("docs/api.md", ["PROJECT_NOT_FOUND"])).toBeUndefined();
    expect(brokenUnquotedSection("SPEC.md", ["Errors"])).toBeUndefined();
    expect(brokenUnquotedSection("README.md", ["Graceful", "shutdown"])).toBe(
      'README.md has no heading "Graceful shutdown" nor one its first words start',
    );
    expect(brokenUnquotedSection("docs/missing.md", ["Errors"])).toBe("docs/missing.md does not exist");
  });

  it("finds a link that leads to no file or no heading", () => {
    const links = markdownLinks(
      "[a](missing.md) [b](api.md#no-such-heading) `[c](x.md)` [d](https://x.test/y)\n",
    );
    expect(links.map(({ target }) => target)).toEqual([
      "missing.md",
      "api.md#no-such-heading",
      "https://x.test/y",
    ]);
    expect(brokenLink("docs/proxy.md", "missing.md")).toBe("docs/missing.md does not exist");
    expect(brokenLink("docs/proxy.md", "api.md#no-such-heading")).toBe(
      "docs/api.md has no heading #no-such-heading",
    );
    expect(brokenLink("docs/proxy.md", "#paths")).toBeUndefined();
    expect(brokenLink("docs/proxy.md", "https://x.test/y")).toBeUndefined();
  });
});
