import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { describe, expect, it } from "vitest";
import { heapUsedAfterGc } from "../../test/support/garbage-collection.js";
import { defaultModel, deprecationNotices, findModel } from "./model-catalogue.js";
import { costOfTokens } from "./token-cost.js";

describe("findModel's memo", () => {
  it("answers a name the same way each time, found or not, also after the memo filled up", () => {
    const first = findModel("provider-a", "gpt-4o-mini-2024-07-18");
    expect(first?.id).toBe("gpt-4o-mini");
    expect(findModel("provider-a", "not-a-model")).toBeNull();
    for (let index = 0; index < 2500; index++) findModel("provider-a", `custom-${index}`);
    expect(findModel("provider-a", "gpt-4o-mini-2024-07-18")).toBe(first);
    expect(findModel("provider-a", "not-a-model")).toBeNull();
    // Per provider: the same name under another provider is looked up there.
    expect(findModel("provider-b", "gpt-4o-mini")).toBeNull();
    expect(findModel("provider-c", "models/gemini-2.5-flash")?.id).toBe("gemini-2.5-flash");
  });

  it("keeps neither a long name nor the request line or body a name was cut from", () => {
    // Names come from clients (provider C's path, a request body) as views of what they were cut
    // from, and a name may itself be as long as a request line: 1,000 of either, 16 KB each, held
    // by the memo would be 16 MB a provider. 500 a provider, so the memo (1,000) is not emptied.
    findModel("provider-c", "gemini-2.5-flash");
    const before = heapUsedAfterGc();
    for (let index = 0; index < 500; index++) {
      const line = `${"x".repeat(16_000)}custom-model-${String(index).padStart(6, "0")}`;
      expect(findModel("provider-c", line.slice(16_000))).toBeNull();
      expect(findModel("provider-b", `${line}-${index}`)).toBeNull();
    }
    expect(heapUsedAfterGc() - before).toBeLessThan((2 * 500 * 16_000) / 10);
    expect(findModel("provider-c", "custom-model-000499")).toBeNull();
  });
});

/**
 * The models the installed @anthropic-ai/sdk warns about as deprecated, with the end-of-life date
 * it prints, read from every `DEPRECATED_MODELS` table it ships (its data module and the copies its
 * messages resources keep). Read at test time, so an SDK upgrade that deprecates a default fails
 * here before the provider starts refusing the calls.
 */
function anthropicSdkDeprecatedModels(): Map<string, string> {
  const root = dirname(createRequire(import.meta.url).resolve("@anthropic-ai/sdk"));
  const files = [
    "internal/data/deprecated-models.js",
    "resources/messages/messages.js",
    "resources/beta/messages/messages.js",
  ];
  const deprecated = new Map<string, string>();
  let tables = 0;
  for (const file of files) {
    let source: string;
    try {
      source = readFileSync(join(root, file), "utf8");
    } catch {
      continue;
    }
    for (const table of source.matchAll(/DEPRECATED_MODELS\s*=\s*\{([^}]*)\}/g)) {
      tables++;
      for (const [, model, date] of (table[1] ?? "").matchAll(/['"]([^'"]+)['"]\s*:\s*['"]([^'"]+)['"]/g))
        if (model && date) deprecated.set(model, date);
    }
  }
  // An SDK that moved its table would make this test pass vacuously: fail instead.
  if (tables === 0) throw new Error(`no DEPRECATED_MODELS table found in @anthropic-ai/sdk at ${root}`);
  return deprecated;
}

/** The model names the installed @anthropic-ai/sdk's `Model` type lists (its messages resource). */
function anthropicSdkModelNames(): string[] {
  const root = dirname(createRequire(import.meta.url).resolve("@anthropic-ai/sdk"));
  const types = readFileSync(join(root, "resources/messages/messages.d.ts"), "utf8");
  const union = /export type Model = ([^;]*);/.exec(types)?.[1];
  if (!union) throw new Error(`no Model type found in @anthropic-ai/sdk at ${root}`);
  return [...union.matchAll(/'([^']+)'/g)].map((match) => match[1] as string);
}

const usage = (inputTokens: number, outputTokens: number, cachedInputTokens: number | null = null) => ({
  inputTokens,
  outputTokens,
  cachedInputTokens,
  reasoningTokens: null,
});

describe("provider B's models", () => {
  // Claude Mythos models are offered to invited organisations only (Project Glasswing), not listed.
  const notListed = (id: string) => id.startsWith("claude-mythos-");

  it("list every model the installed Anthropic SDK names, priced, with images and PDFs read", () => {
    const names = anthropicSdkModelNames();
    expect(names.length).toBeGreaterThan(10);
    for (const id of names.filter((name) => !notListed(name))) {
      const model = findModel("provider-b", id);
      expect(model?.capabilities, id).toMatchObject({
        text: true,
        vision: true,
        pdf: true,
        structured: true,
      });
      expect(model?.pricing?.input, id).toBeGreaterThan(0);
      expect(model?.pricing?.output, id).toBeGreaterThan(0);
      expect(model?.pricing?.cachedInput, id).toBeGreaterThan(0);
    }
  });

  it("price Haiku 5.5 by its prompt's length, and the cache reads of the models that have their own price", () => {
    // Up to 100,000 input tokens: $0.10 in, $0.50 out; over: $0.50 and $2.50 for the whole call.
    expect(costOfTokens("provider-b", "claude-haiku-5-5", usage(100_000, 10_000))).toBe(0.015);
    expect(costOfTokens("provider-b", "claude-haiku-5-5", usage(100_001, 10_000))).toBe(0.0750005);
    // Opus 5.5 reads its cache at $0.20 (0.05x $4), Fable 5.1 at $0.25 (0.025x $10), Fable 5 at $1.
    expect(costOfTokens("provider-b", "claude-opus-5-5", usage(1_000_000, 0, 500_000))).toBe(2.1);
    expect(costOfTokens("provider-b", "claude-fable-5-1", usage(1_000_000, 0, 1_000_000))).toBe(0.25);
    expect(costOfTokens("provider-b", "claude-fable-5", usage(1_000_000, 0, 1_000_000))).toBe(1);
    // A dated snapshot counts as its model.
    expect(findModel("provider-b", "claude-opus-4-5-20251101")?.id).toBe("claude-opus-4-5");
    // Another model whose name starts with a listed one's does not.
    expect(findModel("provider-b", "claude-sonnet-5-6")).toBeNull();
  });
});

describe("provider A's models", () => {
  it("replace GPT-4.1 mini, shut down on 2027-01-14, by GPT-5.4 mini as the default", () => {
    expect(findModel("provider-a", "gpt-4.1-mini-2025-04-14")?.deprecated).toEqual({
      shutdown: "2027-01-14",
      replacement: "gpt-6-luna",
    });
    for (const purpose of ["structured", "vision", "pdf"] as const)
      expect(defaultModel("provider-a", purpose)).toBe("gpt-5.4-mini");
    // $0.75 in, $0.075 cached, $4.50 out per 1M tokens.
    expect(costOfTokens("provider-a", "gpt-5.4-mini-2026-03-17", usage(1_000_000, 100_000, 400_000))).toBe(
      0.93,
    );
  });

  it("price GPT-5.4's prompts over 272k input tokens in whole at their own prices", () => {
    expect(costOfTokens("provider-a", "gpt-5.4", usage(272_000, 1000, 72_000))).toBe(0.533);
    expect(costOfTokens("provider-a", "gpt-5.4", usage(272_001, 1000, 72_000))).toBe(1.058505);
    expect(findModel("provider-a", "gpt-5.4-nano")?.id).toBe("gpt-5.4-nano");
  });
});

describe("provider C's models", () => {
  it("replace Gemini 2.5 Flash, shut down on 2026-12-01, by Gemini 3.5 Flash-Lite as the default", () => {
    expect(findModel("provider-c", "gemini-2.5-flash")?.deprecated).toEqual({
      shutdown: "2026-12-01",
      replacement: "gemini-3.5-flash-lite",
    });
    for (const purpose of ["structured", "vision", "pdf"] as const)
      expect(defaultModel("provider-c", purpose)).toBe("gemini-3.5-flash-lite");
    // $0.30 in, $2.50 out, $0.03 cached input per 1M tokens.
    expect(
      costOfTokens("provider-c", "models/gemini-3.5-flash-lite", usage(1_000_000, 100_000, 500_000)),
    ).toBe(0.415);
  });

  it("price Gemini 3.1 Pro Preview's long prompts in whole, and leave unknown what uses a price not found", () => {
    expect(costOfTokens("provider-c", "gemini-3.1-pro-preview", usage(200_000, 1000))).toBe(0.412);
    expect(costOfTokens("provider-c", "gemini-3.1-pro-preview", usage(200_001, 1000))).toBe(0.818004);
    // No cached-input price is published for Gemini 3.5 Flash: a call reading the cache costs null.
    expect(costOfTokens("provider-c", "gemini-3.5-flash", usage(1000, 1000))).toBe(0.0105);
    expect(costOfTokens("provider-c", "gemini-3.5-flash", usage(1000, 1000, 10))).toBeNull();
  });
});

describe("the defaults against the providers' deprecations", () => {
  it("gives no text, vision or PDF default that the installed Anthropic SDK calls deprecated", () => {
    const deprecated = anthropicSdkDeprecatedModels();
    expect(deprecated.size).toBeGreaterThan(0);
    for (const provider of ["provider-a", "provider-b", "provider-c"] as const) {
      for (const purpose of ["structured", "vision", "pdf"] as const) {
        const model = defaultModel(provider, purpose);
        expect(model, `${provider} ${purpose}`).not.toBeNull();
        expect(deprecated.get(model as string), `${provider} ${purpose}: ${model}`).toBeUndefined();
      }
    }
  });

  it("prices every text, vision and PDF default in full, so the spend cap sees its calls", () => {
    for (const provider of ["provider-a", "provider-b", "provider-c"] as const) {
      for (const purpose of ["structured", "vision", "pdf"] as const) {
        const pricing = findModel(provider, defaultModel(provider, purpose))?.pricing;
        for (const price of ["input", "output", "cachedInput"] as const)
          expect(pricing?.[price], `${provider} ${purpose} ${price}`).toBeGreaterThan(0);
        // Provider C's models read audio, billed at its own price: an audio part must not make the
        // default's calls unpriced.
        if (provider === "provider-c") {
          expect(pricing?.audio?.input, `${provider} ${purpose} audio`).toBeGreaterThan(0);
          expect(pricing?.audio?.cachedInput, `${provider} ${purpose} cached audio`).toBeGreaterThan(0);
        }
      }
    }
  });

  it("uses claude-sonnet-5-5 for provider B, Anthropic's replacement for Sonnet 4.5, at its prices", () => {
    for (const purpose of ["structured", "vision", "pdf"] as const)
      expect(defaultModel("provider-b", purpose)).toBe("claude-sonnet-5-5");
    // $2 in, $10 out, $0.10 cache read, $2.50 and $4 cache writes per 1M tokens.
    const usage = {
      inputTokens: 1_000_000,
      outputTokens: 100_000,
      cachedInputTokens: 200_000,
      reasoningTokens: null,
      cacheWriteTokens: { fiveMinutes: 100_000, oneHour: 100_000 },
    };
    expect(costOfTokens("provider-b", "claude-sonnet-5-5", usage)).toBe(2.87);
  });

  it("gives no text, vision or PDF default that its provider has deprecated", () => {
    for (const provider of ["provider-a", "provider-b", "provider-c"] as const) {
      for (const purpose of ["structured", "vision", "pdf"] as const)
        expect(
          findModel(provider, defaultModel(provider, purpose))?.deprecated,
          `${provider} ${purpose}`,
        ).toBe(undefined);
    }
  });
});

describe("deprecation notices", () => {
  /** "November 30th, 2026", as the SDK writes it, as 2026-11-30. */
  const isoDate = (date: string) =>
    new Date(`${date.replace(/(\d+)(st|nd|rd|th)/, "$1")} UTC`).toISOString().slice(0, 10);

  it("mark every catalogued model the installed Anthropic SDK calls deprecated, on the SDK's date", () => {
    let marked = 0;
    for (const [id, endOfLife] of anthropicSdkDeprecatedModels()) {
      const model = findModel("provider-b", id);
      if (!model) continue;
      expect(model.deprecated?.shutdown, id).toBe(isoDate(endOfLife));
      marked++;
    }
    expect(marked).toBeGreaterThan(0);
  });

  it("name catalogued models, with a YYYY-MM-DD date and a replacement that is not deprecated itself", () => {
    for (const [provider, notices] of Object.entries(deprecationNotices()) as [
      "provider-a" | "provider-b" | "provider-c",
      Record<string, { shutdown: string; replacement?: string }>,
    ][]) {
      for (const [id, notice] of Object.entries(notices)) {
        expect(findModel(provider, id)?.deprecated, `${provider} ${id}`).toEqual(notice);
        expect(notice.shutdown).toMatch(/^\d{4}-\d{2}-\d{2}$/);
        expect(isoDate(notice.shutdown)).toBe(notice.shutdown);
        if (notice.replacement)
          expect(findModel(provider, notice.replacement)?.deprecated, notice.replacement).toBe(undefined);
      }
    }
  });
});
