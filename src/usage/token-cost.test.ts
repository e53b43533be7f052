import { describe, expect, it } from "vitest";
import { usageFromProviderB } from "../providers/usage-from-json.js";
import { defaultModel, findModel, modelsFor } from "./model-catalogue.js";
import { costOfTokens } from "./token-cost.js";
import { emptyUsage, reportsNoTokens, type TokenUsage } from "./token-usage.js";

const usage = (
  inputTokens: number | null,
  outputTokens: number | null,
  cachedInputTokens: number | null = null,
) => ({
  inputTokens,
  outputTokens,
  cachedInputTokens,
  reasoningTokens: null,
});

describe("model catalogue", () => {
  it("finds models by id, dated snapshot and models/ prefix", () => {
    expect(findModel("provider-a", "gpt-4o-mini-2024-07-18")?.id).toBe("gpt-4o-mini");
    expect(findModel("provider-a", "gpt-4o-2024-08-06")?.id).toBe("gpt-4o");
    expect(findModel("provider-b", "claude-sonnet-4-5-20250929")?.id).toBe("claude-sonnet-4-5");
    expect(findModel("provider-c", "models/gemini-2.5-flash")?.id).toBe("gemini-2.5-flash");
    expect(findModel("provider-c", "gemini-2.5-flash-lite")?.id).toBe("gemini-2.5-flash-lite");
    expect(findModel("provider-a", "nonexistent")).toBeNull();
    expect(findModel("provider-a", "gpt-4.1-2025-04-14")?.id).toBe("gpt-4.1");
    expect(findModel("provider-c", "gemini-2.0-flash-001")?.id).toBe("gemini-2.0-flash");
  });

  // A provider answers an alias request with the snapshot it resolved to; the row must keep its cost.
  it("finds an alias entry by the dated snapshot the provider answers with", () => {
    for (const [provider, alias, answered] of [
      ["provider-b", "claude-3-5-haiku-latest", "claude-3-5-haiku-20241022"],
      ["provider-a", "gpt-4o", "gpt-4o-2024-08-06"],
      ["provider-a", "gpt-5", "gpt-5-2025-08-07"],
      ["provider-a", "o4-mini", "o4-mini-2025-04-16"],
      ["provider-b", "claude-opus-4-1", "claude-opus-4-1-20250805"],
      ["provider-b", "claude-haiku-4-5", "claude-haiku-4-5-20251001"],
    ] as const) {
      expect(findModel(provider, answered)?.id).toBe(alias);
      expect(costOfTokens(provider, answered, usage(1000, 1000))).toBe(
        costOfTokens(provider, alias, usage(1000, 1000)),
      );
    }
    expect(costOfTokens("provider-b", "claude-3-5-haiku-20241022", usage(1_000_000, 1_000_000))).toBe(4.8);
    // Only the snapshots an entry names: another dated Haiku 3.5, or one under another provider, is not it.
    expect(findModel("provider-b", "claude-3-5-haiku-20990101")).toBeNull();
    expect(findModel("provider-a", "claude-3-5-haiku-20241022")).toBeNull();
  });

  // OpenAI's pricing page lists GPT-4o's first snapshot apart, at $5 in and $15 out (no cached
  // price), twice the price of the gpt-4o it would otherwise count as. Before, it was priced as that.
  it("prices a snapshot the provider prices apart at its own prices, not as its model's", () => {
    expect(findModel("provider-a", "gpt-4o-2024-05-13")?.id).toBe("gpt-4o-2024-05-13");
    expect(costOfTokens("provider-a", "gpt-4o-2024-05-13", usage(1_000_000, 1_000_000))).toBe(20);
    expect(costOfTokens("provider-a", "gpt-4o-2024-05-13", usage(1_000_000, 0, 500_000))).toBeNull();
    expect(costOfTokens("provider-a", "gpt-4o-2024-08-06", usage(1_000_000, 1_000_000))).toBe(12.5);
    // Still the gpt-4o it is a version of, for what it can do and when it goes.
    expect(findModel("provider-a", "gpt-4o-2024-05-13")?.capabilities).toEqual(
      findModel("provider-a", "gpt-4o")?.capabilities,
    );
    expect(findModel("provider-a", "gpt-4o-2024-05-13")?.deprecated).toEqual(
      findModel("provider-a", "gpt-4o")?.deprecated,
    );
  });

  it("does not take another model for a catalogued one that its name starts with", () => {
    for (const [provider, id] of [
      ["provider-a", "gpt-5-nano"],
      ["provider-a", "gpt-5-pro"],
      ["provider-a", "gpt-4o-audio-preview"],
      ["provider-a", "o4-mini-deep-research"],
      ["provider-c", "gemini-2.0-flash-lite"],
      ["provider-c", "gemini-2.5-flash-image"],
    ] as const) {
      expect(findModel(provider, id)).toBeNull();
      expect(costOfTokens(provider, id, usage(1000, 1000))).toBeNull();
    }
  });

  it("has defaults with the capability they are for, and no image model for provider B", () => {
    for (const provider of ["provider-a", "provider-b", "provider-c"] as const) {
      for (const purpose of ["structured", "vision", "pdf"] as const) {
        const model = findModel(provider, defaultModel(provider, purpose));
        expect(model?.capabilities[purpose === "structured" ? "structured" : purpose]).toBe(true);
      }
    }
    expect(defaultModel("provider-b", "image")).toBeNull();
    // SPEC.md's three image models of each provider, in its order, the first the default; the
    // providers' models after them follow (docs/decisions/0013).
    const imageModels = (provider: "provider-a" | "provider-c") =>
      modelsFor(provider)
        .filter((model) => model.capabilities.image)
        .map((model) => model.id);
    expect(imageModels("provider-a")).toEqual([
      "gpt-image-1",
      "dall-e-3",
      "gpt-image-1-mini",
      "gpt-image-2.6-sunburst",
      "gpt-image-2.6-flare",
      "gpt-image-2",
    ]);
    expect(imageModels("provider-c")).toEqual([
      "imagen-4.0-generate-001",
      "imagen-4.0-fast-generate-001",
      "imagen-4.0-ultra-generate-001",
      "gemini-nano-banana-2.1",
      "gemini-3.1-flash-lite-image",
      "gemini-3-pro-image",
    ]);
    expect(defaultModel("provider-a", "image")).toBe("gpt-image-1");
    expect(defaultModel("provider-c", "image")).toBe("imagen-4.0-generate-001");
  });
});

describe("token cost", () => {
  it("bills input, cached input and output at their prices", () => {
    // gpt-4o-mini: 0.15 in, 0.6 out, 0.075 cached per 1M
    expect(costOfTokens("provider-a", "gpt-4o-mini", usage(1_000_000, 1_000_000))).toBe(0.75);
    expect(costOfTokens("provider-a", "gpt-4o-mini", usage(1000, 500, 400))).toBe(0.00042);
    expect(costOfTokens("provider-b", "claude-sonnet-4-5-20250929", usage(10, 20))).toBe(0.00033);
  });

  it("bills provider B's prompt-cache writes at 1.25x the input price for five minutes, 2x for an hour", () => {
    // claude-sonnet-4-5: 3 in, 15 out, 0.3 cache read, 3.75 and 6 cache write per 1M (up to 200k input).
    const written = (fiveMinutes: number, oneHour: number) => ({
      ...usage(100_000 + fiveMinutes + oneHour + 20_000, 10_000, 20_000),
      cacheWriteTokens: { fiveMinutes, oneHour },
    });
    // 100k fresh input 0.3, 20k read 0.006, 10k output 0.15.
    expect(costOfTokens("provider-b", "claude-sonnet-4-5", written(0, 0))).toBe(0.456);
    expect(costOfTokens("provider-b", "claude-sonnet-4-5", written(50_000, 0))).toBe(0.6435);
    expect(costOfTokens("provider-b", "claude-sonnet-4-5", written(0, 50_000))).toBe(0.756);
    // More written than the input holds: the counts do not add up, so the cost is unknown.
    const inconsistent = { ...usage(100, 10), cacheWriteTokens: { fiveMinutes: 500, oneHour: 0 } };
    expect(costOfTokens("provider-b", "claude-sonnet-4-5", inconsistent)).toBeNull();
  });

  it("bills provider B's web searches at $10 per 1,000 beside the tokens; without a search price the cost is unknown", () => {
    // claude-haiku-4-5: 1 in, 5 out per 1M; 3 searches 0.03.
    expect(costOfTokens("provider-b", "claude-haiku-4-5", { ...usage(10_000, 1000), webSearches: 3 })).toBe(
      0.045,
    );
    expect(costOfTokens("provider-b", "claude-haiku-4-5", { ...usage(10_000, 1000), webSearches: 0 })).toBe(
      0.015,
    );
    expect(costOfTokens("provider-a", "gpt-4.1", { ...usage(10_000, 1000), webSearches: 1 })).toBeNull();
    expect(
      costOfTokens("provider-b", "claude-haiku-4-5", { ...usage(null, 1000), webSearches: 1 }),
    ).toBeNull();
  });

  // Anthropic's documented compaction example: the compaction step read 180k tokens, the answer 23k.
  // Each is a sampling of its own, under 200k: neither is billed at the 1M-window prices.
  it("prices each of provider B's sampling iterations against the long-context threshold on its own, and sums them", () => {
    const compacted = usageFromProviderB({
      input_tokens: 23_000,
      output_tokens: 1000,
      iterations: [
        { type: "compaction", input_tokens: 180_000, output_tokens: 3500 },
        { type: "message", input_tokens: 23_000, output_tokens: 1000 },
      ],
    });
    // The row's counts stay the sums.
    expect(compacted).toMatchObject({ inputTokens: 203_000, outputTokens: 4500 });
    // claude-sonnet-4-5 up to 200k input: $3 input, $15 output per 1M.
    const perIteration = (180_000 * 3 + 3500 * 15 + 23_000 * 3 + 1000 * 15) / 1e6;
    expect(costOfTokens("provider-b", "claude-sonnet-4-5", compacted as TokenUsage)).toBe(perIteration);
    // One iteration over 200k is billed at the long-context prices, and only that one.
    const longStep = usageFromProviderB({
      input_tokens: 23_000,
      cache_read_input_tokens: 2000,
      output_tokens: 1000,
      server_tool_use: { web_search_requests: 2 },
      iterations: [
        {
          type: "compaction",
          input_tokens: 190_000,
          cache_read_input_tokens: 15_000,
          cache_creation_input_tokens: 1000,
          cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 1000 },
          output_tokens: 3500,
        },
      ],
    });
    // The compaction: 206k input with its cache reads and writes, over 200k: $6 input, $0.60 read,
    // $12 one-hour write, $22.50 output. The answer: 25k, $3 and $0.30 read, $15 output, two searches.
    const compaction = (190_000 * 6 + 15_000 * 0.6 + 1000 * 12 + 3500 * 22.5) / 1e6;
    const answer = (23_000 * 3 + 2000 * 0.3 + 1000 * 15) / 1e6 + 0.02;
    expect(costOfTokens("provider-b", "claude-sonnet-4-5", longStep as TokenUsage)).toBeCloseTo(
      compaction + answer,
      12,
    );
    // A step whose counts are unknown leaves the call's cost unknown.
    const unknown = usageFromProviderB({
      input_tokens: 23_000,
      output_tokens: 1000,
      iterations: [{ type: "compaction", input_tokens: "many", output_tokens: 3500 }],
    });
    expect(costOfTokens("provider-b", "claude-sonnet-4-5", unknown as TokenUsage)).toBeNull();
  });

  it("prices provider B's advisor iterations at the prices of the model each names, beside the executor's", () => {
    const advised = (model: unknown, input = 30_000) =>
      usageFromProviderB({
        input_tokens: 10_000,
        output_tokens: 1000,
        iterations: [
          { type: "message", input_tokens: 6000, output_tokens: 600, model: null },
          {
            type: "advisor_message",
            model,
            input_tokens: input,
            cache_read_input_tokens: 4000,
            output_tokens: 1600,
          },
          { type: "message", input_tokens: 4000, output_tokens: 400, model: null },
        ],
      }) as TokenUsage;
    // The row keeps the executor's tokens: the advisor's are another model's.
    expect(advised("claude-opus-4-1")).toMatchObject({ inputTokens: 10_000, outputTokens: 1000 });
    // claude-haiku-4-5 executes ($1 input, $5 output per 1M); claude-opus-4-1 advises ($15 input,
    // $1.50 cache read, $75 output), a dated snapshot of it likewise.
    const executor = (10_000 * 1 + 1000 * 5) / 1e6;
    const advisor = (30_000 * 15 + 4000 * 1.5 + 1600 * 75) / 1e6;
    expect(costOfTokens("provider-b", "claude-haiku-4-5", advised("claude-opus-4-1"))).toBeCloseTo(
      executor + advisor,
      12,
    );
    expect(costOfTokens("provider-b", "claude-haiku-4-5", advised("claude-opus-4-1-20250805"))).toBe(
      costOfTokens("provider-b", "claude-haiku-4-5", advised("claude-opus-4-1")),
    );
    // A 1-token advisor call costs a little more than none, never nothing.
    expect(costOfTokens("provider-b", "claude-haiku-4-5", advised("claude-opus-4-1", 1))).toBeGreaterThan(
      executor,
    );
    // An advisor the catalogue does not list, or that names no model: its prices are unknown, and so the call's cost.
    for (const model of ["claude-unlisted-9", null, undefined, 7])
      expect(costOfTokens("provider-b", "claude-haiku-4-5", advised(model)), String(model)).toBeNull();
  });

  // Google's pricing page lists audio input apart: gemini-2.5-flash $0.30 text, image and video, $1
  // audio; cached $0.075 and $0.25 per 1M.
  it("prices provider C's audio input at the model's audio prices, and the rest of the input at its text prices", () => {
    const withAudio = { ...usage(1000, 20), audioInputTokens: 900 };
    // 100 text tokens at 0.30, 900 audio tokens at 1, 20 output at 2.50.
    expect(costOfTokens("provider-c", "gemini-2.5-flash", withAudio)).toBe(0.00098);
    expect(costOfTokens("provider-c", "gemini-2.5-flash", { ...withAudio, audioInputTokens: 0 })).toBe(
      0.00035,
    );
    // A single audio token costs the difference of a token, not the call's whole cost.
    const million = usage(1_000_000, 10_000);
    expect(costOfTokens("provider-c", "gemini-2.5-pro", { ...million, audioInputTokens: 1 })).toBe(
      costOfTokens("provider-c", "gemini-2.5-pro", million),
    );
    // gemini-2.5-flash-lite $0.30, gemini-2.0-flash $0.70 per 1M audio tokens.
    const allAudio = { ...usage(1_000_000, 0), audioInputTokens: 1_000_000 };
    expect(costOfTokens("provider-c", "gemini-2.5-flash-lite", allAudio)).toBe(0.3);
    expect(costOfTokens("provider-c", "gemini-2.0-flash", allAudio)).toBe(0.7);
    // gemini-2.5-pro lists one price for every modality, its long-context one included.
    expect(costOfTokens("provider-c", "gemini-2.5-pro", allAudio)).toBe(2.5);
    expect(
      costOfTokens("provider-c", "gemini-2.5-pro", { ...usage(100_000, 0), audioInputTokens: 100_000 }),
    ).toBe(0.125);
  });

  it("prices provider C's cached audio at the cached audio price, taking cached tokens as text first unless the breakdown says", () => {
    // 1000 input, 600 of them cached, 500 audio: without a breakdown of the cached part, it is taken
    // as the 500 text tokens and 100 audio ones (the dearest split): 400 audio at 1, 100 cached audio
    // at 0.25, 500 cached text at 0.075.
    const cachedAudio = { ...usage(1000, 0, 600), audioInputTokens: 500 };
    expect(costOfTokens("provider-c", "gemini-2.5-flash", cachedAudio)).toBe(0.0004625);
    // The breakdown says 500 cached tokens are audio: 400 text at 0.30, 500 cached audio at 0.25,
    // 100 cached text at 0.075.
    expect(
      costOfTokens("provider-c", "gemini-2.5-flash", { ...cachedAudio, cachedAudioInputTokens: 500 }),
    ).toBe(0.0002525);
    // A breakdown that cannot be (more cached audio than audio, or than cached) is held to the counts.
    expect(
      costOfTokens("provider-c", "gemini-2.5-flash", { ...cachedAudio, cachedAudioInputTokens: 5000 }),
    ).toBe(0.0002525);
    // gemini-2.5-pro's cached price is the same for audio: $0.31.
    expect(costOfTokens("provider-c", "gemini-2.5-pro", cachedAudio)).toBe(
      costOfTokens("provider-c", "gemini-2.5-pro", usage(1000, 0, 600)),
    );
  });

  // Flex on gemini-2.5-flash: half of every price ($0.15 text, $0.50 audio, $1.25 out); Google
  // publishes no flex price for cached input, audio's included.
  it("prices a provider C flex call's audio at half, and is null when its audio was read from the cache", () => {
    const flexAudio = { ...usage(1000, 20), audioInputTokens: 900, serviceTier: "flex" as const };
    // 100 text tokens at 0.15, 900 audio at 0.50, 20 output at 1.25.
    expect(costOfTokens("provider-c", "gemini-2.5-flash", flexAudio)).toBe(0.00049);
    const cachedAudio = { ...usage(1000, 0, 500), audioInputTokens: 500, cachedAudioInputTokens: 500 };
    expect(costOfTokens("provider-c", "gemini-2.5-flash", cachedAudio)).not.toBeNull();
    expect(
      costOfTokens("provider-c", "gemini-2.5-flash", { ...cachedAudio, serviceTier: "flex" }),
    ).toBeNull();
  });

  it("is null when the audio count is over the input count: counts that do not add up", () => {
    const moreAudio = { ...usage(1000, 20), audioInputTokens: 1500 };
    expect(costOfTokens("provider-c", "gemini-2.5-flash", moreAudio)).toBeNull();
  });

  it("is null for audio input on a model whose audio price is not published", () => {
    const withAudio = { ...usage(1000, 0), audioInputTokens: 900 };
    // Provider C's embeddings take text; provider A's audio models are not catalogued.
    expect(costOfTokens("provider-c", "gemini-embedding-001", withAudio)).toBeNull();
    expect(costOfTokens("provider-a", "gpt-4o", { ...usage(1000, 20), audioInputTokens: 900 })).toBeNull();
  });

  // GPT-6 Sol: $2 in, $0.20 cached, $2.50 per 1M written to the cache (30 minutes), $10 out; over
  // 272k input tokens the whole call at 2x the input and cache prices and 1.5x the output price.
  it("bills provider A's cache writes on the GPT-6 models at 1.25x the input price, doubled over 272k", () => {
    const written = { ...usage(10_000, 1000, 2000), cacheWriteTokens: { thirtyMinutes: 6000 } };
    // 2000 fresh at 2, 2000 cached at 0.20, 6000 written at 2.50, 1000 out at 10.
    expect(costOfTokens("provider-a", "gpt-6-sol", written)).toBe(0.0294);
    expect(costOfTokens("provider-a", "gpt-6.1-sol", written)).toBe(0.0292);
    expect(costOfTokens("provider-a", "gpt-6-luna", written)).toBe(0.00147);
    const long = { ...usage(300_000, 1000, 100_000), cacheWriteTokens: { thirtyMinutes: 100_000 } };
    // 100k fresh at 4, 100k cached at 0.40, 100k written at 5, 1000 out at 15.
    expect(costOfTokens("provider-a", "gpt-6-sol", long)).toBe(0.955);
    // A model that does not bill writes, or a lifetime it has no price for: unknown, not guessed.
    expect(costOfTokens("provider-a", "gpt-5.4-mini", written)).toBeNull();
    expect(
      costOfTokens("provider-a", "gpt-6-sol", { ...written, cacheWriteTokens: { oneHour: 6000 } }),
    ).toBeNull();
    expect(
      costOfTokens("provider-b", "claude-sonnet-4-5", { ...written, cacheWriteTokens: { thirtyMinutes: 1 } }),
    ).toBeNull();
    // More written than the uncached input: the counts do not add up.
    expect(
      costOfTokens("provider-a", "gpt-6-sol", { ...written, cacheWriteTokens: { thirtyMinutes: 8001 } }),
    ).toBeNull();
  });

  // GPT Image 2.6 Sunburst: text in $5, cached $1.25, image in $8, image out $30 per 1M tokens.
  // Gemini Nano Banana 2.1: $1.50 in, $7.50 text out, $30 per 1M generated image tokens.
  it("prices image models by the token: input images and generated images at their image prices, the rest as text", () => {
    // An edit: 50 text tokens and 1000 image tokens in, 4160 out (all images: no breakdown needed).
    const edit = { ...usage(1050, 4160), imageInputTokens: 1000 };
    expect(costOfTokens("provider-a", "gpt-image-2.6-sunburst", edit)).toBe(0.13305);
    // The same counts without a breakdown are all text input: 1050 at 5.
    expect(costOfTokens("provider-a", "gpt-image-2.6-sunburst", usage(1050, 4160))).toBe(0.13005);
    // A dated snapshot prices as its model; cached text input at the cached price.
    expect(
      costOfTokens("provider-a", "gpt-image-2-2026-04-21", { ...usage(1050, 0, 50), imageInputTokens: 1000 }),
    ).toBe(0.0080625);
    // Provider C: 20 prompt tokens, 1120 image tokens and 200 thoughts out.
    const generated = { ...usage(20, 1320), imageOutputTokens: 1120 };
    expect(costOfTokens("provider-c", "gemini-nano-banana-2.1", generated)).toBe(0.03513);
    expect(costOfTokens("provider-c", "gemini-3.1-flash-lite-image", generated)).toBe(0.033905);
    // Without the breakdown, all output is text: what the provider reported, not a guess.
    expect(costOfTokens("provider-c", "gemini-nano-banana-2.1", usage(20, 1320))).toBe(0.00993);
    // A model without image prices prices image tokens as text (GPT-5's input images, say).
    expect(costOfTokens("provider-a", "gpt-5", { ...usage(1000, 10), imageInputTokens: 900 })).toBe(
      costOfTokens("provider-a", "gpt-5", usage(1000, 10)),
    );
    // Counts that do not add up, or prices not published (Gemini 3 Pro Image's input): unknown.
    expect(
      costOfTokens("provider-a", "gpt-image-2.6-sunburst", { ...usage(10, 10), imageInputTokens: 11 }),
    ).toBeNull();
    expect(
      costOfTokens("provider-c", "gemini-nano-banana-2.1", { ...usage(10, 10), imageOutputTokens: 11 }),
    ).toBeNull();
    expect(costOfTokens("provider-c", "gemini-3-pro-image", generated)).toBeNull();
  });

  it("bills a call whose input is over the long-context threshold at the long-context prices, the whole call", () => {
    // gemini-2.5-pro: 1.25 in, 10 out, 0.31 cached up to 200k input; 2.5, 15 and 0.625 over it.
    expect(costOfTokens("provider-c", "gemini-2.5-pro", usage(200_000, 1000))).toBe(0.26);
    expect(costOfTokens("provider-c", "gemini-2.5-pro", usage(300_000, 1000, 100_000))).toBe(0.5775);
    // claude-sonnet-4-5 (1M context): 6 in, 22.5 out, 0.6 read, 7.5 and 12 cache write over 200k
    // input, its cache reads and writes included.
    const sonnet = {
      ...usage(250_000, 1000, 50_000),
      cacheWriteTokens: { fiveMinutes: 100_000, oneHour: 0 },
    };
    expect(costOfTokens("provider-b", "claude-sonnet-4-5-20250929", sonnet)).toBe(1.4025);
    expect(costOfTokens("provider-b", "claude-sonnet-4-5", { ...usage(250_000, 1000), webSearches: 1 })).toBe(
      1.5325,
    );
    // Models without a tier keep their prices.
    expect(costOfTokens("provider-c", "gemini-2.5-flash", usage(1_000_000, 0))).toBe(0.3);
  });

  it("is null, never 0, when the model or the counts are unknown", () => {
    expect(costOfTokens("provider-a", "mystery", usage(10, 10))).toBeNull();
    expect(costOfTokens("provider-a", null, usage(10, 10))).toBeNull();
    expect(costOfTokens("provider-a", "gpt-4o", usage(null, null))).toBeNull();
    expect(costOfTokens("provider-a", "gpt-image-1", usage(10, 10))).toBeNull();
  });

  // Before, an unknown count was priced as 0: the output alone made 0.0000112, too low a cost for
  // cost_usd and the spend cap.
  it("is null when a count its price needs is unknown, not the price of the counts that are known", () => {
    expect(costOfTokens("provider-a", "gpt-4.1-mini", usage(null, 7))).toBeNull();
    expect(costOfTokens("provider-a", "gpt-4.1-mini", usage(1000, null))).toBeNull();
    expect(costOfTokens("provider-b", "claude-sonnet-4-5", usage(null, 20, 5))).toBeNull();
    expect(costOfTokens("provider-c", "gemini-2.5-flash", usage(9, null))).toBeNull();
  });

  it("prices what it can: no output count at no output price (embeddings), no cached or reasoning count", () => {
    // text-embedding-3-small: 0.02 per 1M input, no output price.
    expect(costOfTokens("provider-a", "text-embedding-3-small", usage(1_000_000, null))).toBe(0.02);
    expect(costOfTokens("provider-a", "text-embedding-3-small", usage(1_000_000, 0))).toBe(0.02);
    expect(costOfTokens("provider-a", "text-embedding-3-small", usage(null, 0))).toBeNull();
    expect(
      costOfTokens("provider-a", "gpt-4o-mini", { ...usage(1_000_000, 0, null), reasoningTokens: null }),
    ).toBe(0.15);
  });

  it("bills a cached count over the input count as if all the input were cached, never less", () => {
    // gpt-4o-mini: 0.075 per 1M cached. 1,500 cached of 1,000 input: the 1,000 at the cached price.
    expect(costOfTokens("provider-a", "gpt-4o-mini", usage(1000, 0, 1500))).toBe(0.000075);
  });

  it("is exactly 0 only when the provider reported zero tokens", () => {
    expect(costOfTokens("provider-a", "gpt-4o", usage(0, 0))).toBe(0);
  });
});

describe("reportsNoTokens", () => {
  it("is true only when no count and nothing billed beside the tokens was reported", () => {
    expect(reportsNoTokens(emptyUsage())).toBe(true);
    expect(reportsNoTokens({ ...emptyUsage(), inputTokens: 0 })).toBe(false);
    expect(reportsNoTokens({ ...emptyUsage(), outputTokens: 3 })).toBe(false);
    expect(reportsNoTokens({ ...emptyUsage(), cachedInputTokens: 1 })).toBe(false);
    expect(reportsNoTokens({ ...emptyUsage(), webSearches: 2 })).toBe(false);
    expect(reportsNoTokens({ ...emptyUsage(), samplings: [] })).toBe(false);
  });
});
