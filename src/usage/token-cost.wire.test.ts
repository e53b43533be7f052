import { describe, expect, it } from "vitest";
import { usageFromProviderA, usageFromProviderB, usageFromProviderC } from "../providers/usage-from-json.js";
import { costOfTokens } from "./token-cost.js";

/**
 * Representative calls of each provider, from the usage object its answer reports to the cost, each
 * computed by hand from the provider's list prices (USD per 1M tokens) and billing rules: OpenAI and
 * Gemini report cached tokens as a part of the input, Anthropic apart from it; reasoning and
 * thinking tokens are output, billed once; a long prompt is billed in whole at its own prices.
 */
describe("the cost of a provider A call, as it reports it", () => {
  const cost = (model: string, reported: unknown) =>
    costOfTokens(
      "provider-a",
      model,
      usageFromProviderA(reported) ?? {
        inputTokens: null,
        outputTokens: null,
        cachedInputTokens: null,
        reasoningTokens: null,
      },
    );

  it("bills a plain chat completion's prompt and completion (gpt-4o: $2.50 in, $10 out)", () => {
    // 1200 x 2.50 + 300 x 10 = 6000 micro-dollars.
    expect(cost("gpt-4o", { prompt_tokens: 1200, completion_tokens: 300, total_tokens: 1500 })).toBe(0.006);
    // A dated snapshot of gpt-4o is priced as gpt-4o.
    expect(cost("gpt-4o-2024-08-06", { prompt_tokens: 1200, completion_tokens: 300 })).toBe(0.006);
  });

  it("takes the cached tokens out of the prompt before the input price (gpt-4o: $1.25 cached)", () => {
    // 976 x 2.50 + 1024 x 1.25 + 100 x 10 = 2440 + 1280 + 1000.
    const reported = {
      prompt_tokens: 2000,
      completion_tokens: 100,
      prompt_tokens_details: { cached_tokens: 1024 },
    };
    expect(cost("gpt-4o", reported)).toBe(0.00472);
  });

  it("bills reasoning tokens once, as the part of the output they are (o4-mini: $1.10 in, $4.40 out)", () => {
    // Responses API: 500 x 1.10 + 1500 x 4.40 = 550 + 6600; the 1200 reasoning tokens are in the 1500.
    const reported = {
      input_tokens: 500,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens: 1500,
      output_tokens_details: { reasoning_tokens: 1200 },
      total_tokens: 2000,
    };
    expect(cost("o4-mini-2025-04-16", reported)).toBe(0.00715);
  });

  it("prices a cached reasoning call (gpt-5: $1.25 in, $0.125 cached, $10 out)", () => {
    // 2000 x 1.25 + 8000 x 0.125 + 2000 x 10 = 2500 + 1000 + 20000.
    const reported = {
      input_tokens: 10_000,
      input_tokens_details: { cached_tokens: 8000 },
      output_tokens: 2000,
      output_tokens_details: { reasoning_tokens: 1500 },
    };
    expect(cost("gpt-5-2025-08-07", reported)).toBe(0.0235);
  });

  it("bills a prompt over 272k input tokens, its cached part included, in whole at GPT-5.4's long prices", () => {
    // $5 in, $0.50 cached, $22.50 out: 200k x 5 + 100k x 0.50 + 1000 x 22.50.
    const long = {
      input_tokens: 300_000,
      input_tokens_details: { cached_tokens: 100_000 },
      output_tokens: 1000,
    };
    expect(cost("gpt-5.4", long)).toBe(1.0725);
    // At 272k exactly, the short prices: 172k x 2.50 + 100k x 0.25 + 1000 x 15.
    expect(cost("gpt-5.4", { ...long, input_tokens: 272_000 })).toBe(0.47);
  });
});

describe("the cost of a provider B call, as it reports it", () => {
  const cost = (model: string, reported: unknown) =>
    costOfTokens(
      "provider-b",
      model,
      usageFromProviderB(reported) ?? {
        inputTokens: null,
        outputTokens: null,
        cachedInputTokens: null,
        reasoningTokens: null,
      },
    );

  it("bills a plain message (Sonnet 4.5: $3 in, $15 out)", () => {
    // 1000 x 3 + 500 x 15.
    expect(cost("claude-sonnet-4-5-20250929", { input_tokens: 1000, output_tokens: 500 })).toBe(0.0105);
  });

  it("adds cache reads (0.1x) and 5-minute (1.25x) and 1-hour (2x) writes to the uncached input, reported apart", () => {
    // 50 x 3 + 10,000 x 0.30 + 1500 x 3.75 + 500 x 6 + 200 x 15 = 150 + 3000 + 5625 + 3000 + 3000.
    const reported = {
      input_tokens: 50,
      cache_read_input_tokens: 10_000,
      cache_creation_input_tokens: 2000,
      cache_creation: { ephemeral_5m_input_tokens: 1500, ephemeral_1h_input_tokens: 500 },
      output_tokens: 200,
    };
    expect(cost("claude-sonnet-4-5", reported)).toBe(0.014775);
  });

  it("bills thinking once, as the part of the output it is (Opus 4.1: $15 in, $75 out)", () => {
    // 100 x 15 + 3000 x 75.
    const reported = {
      input_tokens: 100,
      output_tokens: 3000,
      output_tokens_details: { thinking_tokens: 2500 },
    };
    expect(cost("claude-opus-4-1-20250805", reported)).toBe(0.2265);
  });

  it("counts cache reads and writes toward the 200k long-context threshold, then bills the whole call at its prices", () => {
    // 211k input with the cache: $6 in, $0.60 read, $7.50 5-minute write, $22.50 out.
    // 1000 x 6 + 150,000 x 0.60 + 60,000 x 7.50 + 2000 x 22.50 = 6000 + 90,000 + 450,000 + 45,000.
    const long = {
      input_tokens: 1000,
      cache_read_input_tokens: 150_000,
      cache_creation_input_tokens: 60_000,
      output_tokens: 2000,
    };
    expect(cost("claude-sonnet-4-5", long)).toBe(0.591);
    // 200k exactly is not over: 1000 x 3 + 150,000 x 0.30 + 49,000 x 3.75 + 2000 x 15.
    expect(cost("claude-sonnet-4-5", { ...long, cache_creation_input_tokens: 49_000 })).toBe(0.26175);
  });

  it("bills Haiku 5.5 by its prompt's length, its cache included ($0.10 and $0.50 in, $0.01 and $0.05 read)", () => {
    // 100,001 prompt tokens: 1 x 0.50 + 100,000 x 0.05 + 1000 x 2.50.
    const reported = { input_tokens: 1, cache_read_input_tokens: 100_000, output_tokens: 1000 };
    expect(cost("claude-haiku-5-5", reported)).toBe(0.0075005);
    // 100,000: 100,000 x 0.01 + 1000 x 0.50.
    expect(cost("claude-haiku-5-5", { ...reported, input_tokens: 0 })).toBe(0.0015);
  });
});

describe("the cost of a provider B call at a premium it reports", () => {
  const cost = (model: string, reported: unknown) => {
    const usage = usageFromProviderB(reported);
    return usage && costOfTokens("provider-b", model, usage);
  };

  // Anthropic's data residency page: `inference_geo: "us"` (Claude Opus 4.6 and later) costs 1.1x
  // every token price; the answer's usage says where inference ran.
  it("bills US-only inference at 1.1x every token price, its web searches at their price", () => {
    // Sonnet 4.6: (1000 x 3 + 10,000 x 0.30 + 1000 x 3.75 + 500 x 15) x 1.1 = 17,250 x 1.1.
    const reported = {
      input_tokens: 1000,
      cache_read_input_tokens: 10_000,
      cache_creation_input_tokens: 1000,
      output_tokens: 500,
      inference_geo: "us",
    };
    expect(cost("claude-sonnet-4-6", reported)).toBe(0.018975);
    expect(cost("claude-sonnet-4-6", { ...reported, inference_geo: "global" })).toBe(0.01725);
    // Two searches at $10 per 1,000 beside the tokens: 18,975 + 20,000.
    expect(cost("claude-sonnet-4-6", { ...reported, server_tool_use: { web_search_requests: 2 } })).toBe(
      0.038975,
    );
  });

  // Anthropic's fast mode page: fast mode is billed at a multiple of the model's standard prices,
  // which the catalogue does not list.
  it("leaves a fast-mode call's cost unknown, never the standard price", () => {
    const reported = { input_tokens: 1000, output_tokens: 500, speed: "fast" };
    expect(cost("claude-opus-5-5", reported)).toBeNull();
    expect(cost("claude-opus-5-5", { ...reported, speed: "standard" })).toBe(0.014);
  });
});

describe("the cost of a provider C call, as it reports it", () => {
  const cost = (model: string, reported: unknown) =>
    costOfTokens(
      "provider-c",
      model,
      usageFromProviderC(reported) ?? {
        inputTokens: null,
        outputTokens: null,
        cachedInputTokens: null,
        reasoningTokens: null,
      },
    );

  it("bills a plain call's prompt and candidates (2.5 Flash: $0.30 in, $2.50 out)", () => {
    // 1000 x 0.30 + 200 x 2.50.
    expect(
      cost("gemini-2.5-flash", { promptTokenCount: 1000, candidatesTokenCount: 200, totalTokenCount: 1200 }),
    ).toBe(0.0008);
  });

  it("bills thoughts as output, beside the candidates they are not part of", () => {
    // 1000 x 0.30 + (200 + 800) x 2.50.
    const reported = {
      promptTokenCount: 1000,
      candidatesTokenCount: 200,
      thoughtsTokenCount: 800,
      totalTokenCount: 2000,
    };
    expect(cost("gemini-2.5-flash", reported)).toBe(0.0028);
  });

  it("takes the cached tokens out of the prompt before the input price (2.5 Pro: $1.25 in, $0.31 cached, $10 out)", () => {
    // 2000 x 1.25 + 8000 x 0.31 + 100 x 10 = 2500 + 2480 + 1000.
    const reported = { promptTokenCount: 10_000, cachedContentTokenCount: 8000, candidatesTokenCount: 100 };
    expect(cost("gemini-2.5-pro", reported)).toBe(0.00598);
  });

  it("bills a prompt over 200k tokens in whole at 2.5 Pro's long prices ($2.50 in, $15 out)", () => {
    // 250,000 x 2.50 + (1000 + 1000) x 15.
    const long = { promptTokenCount: 250_000, candidatesTokenCount: 1000, thoughtsTokenCount: 1000 };
    expect(cost("gemini-2.5-pro", long)).toBe(0.655);
    // 200k exactly: 200,000 x 1.25 + 2000 x 10.
    expect(cost("gemini-2.5-pro", { ...long, promptTokenCount: 200_000 })).toBe(0.27);
  });

  it("bills audio input at the audio price (2.5 Flash: $1), the rest of the prompt at the text price", () => {
    // 200 x 0.30 + 800 x 1 + 50 x 2.50 = 60 + 800 + 125.
    const reported = {
      promptTokenCount: 1000,
      candidatesTokenCount: 50,
      promptTokensDetails: [
        { modality: "TEXT", tokenCount: 200 },
        { modality: "AUDIO", tokenCount: 800 },
      ],
    };
    expect(cost("gemini-2.5-flash", reported)).toBe(0.000985);
  });
});

describe("the cost of a call on the service tier its answer names", () => {
  // Provider A's answer names the tier that served it at its top level (`service_tier`), beside the
  // usage object; the usage reader takes it as a second argument.
  const costA = (model: string, reported: unknown, tier?: unknown) => {
    const usage = usageFromProviderA(reported, tier);
    return usage && costOfTokens("provider-a", model, usage);
  };
  const chat = {
    prompt_tokens: 12_000,
    completion_tokens: 3000,
    prompt_tokens_details: { cached_tokens: 8000 },
  };

  // OpenAI's flex guide: flex is billed at Batch API rates, 50% of every standard price (cached
  // input included); its priority (now "Fast mode") page lists a price per model.
  it("bills provider A's flex at half every price, priority at the model's published priority prices", () => {
    // gpt-5: 4000 x 1.25 + 8000 x 0.125 + 3000 x 10 = 36,000 micro-dollars.
    expect(costA("gpt-5", chat)).toBe(0.036);
    expect(costA("gpt-5", chat, "default")).toBe(0.036);
    expect(costA("gpt-5", chat, "flex")).toBe(0.018);
    // Priority: $2.50 in, $0.25 cached, $20 out: 10,000 + 2000 + 60,000. "fast" is its new name.
    expect(costA("gpt-5", chat, "priority")).toBe(0.072);
    expect(costA("gpt-5", chat, "fast")).toBe(0.072);
    // gpt-4.1 priority: $3.50 in, $14 out: 1000 x 3.50 + 100 x 14.
    expect(costA("gpt-4.1", { prompt_tokens: 1000, completion_tokens: 100 }, "priority")).toBe(0.0049);
  });

  it("leaves a tier without a published price unknown (null), never the standard price", () => {
    // gpt-4.1 takes no flex; scale is prepaid; auto names no tier; gpt-5.4 nano has no priority row.
    expect(costA("gpt-4.1", chat, "flex")).toBeNull();
    expect(costA("gpt-5", chat, "scale")).toBeNull();
    expect(costA("gpt-5", chat, "auto")).toBeNull();
    expect(costA("gpt-5", chat, "ultrafast")).toBeNull();
    expect(costA("gpt-5", chat, "constructor")).toBeNull();
    expect(costA("gpt-5.4-nano", chat, "priority")).toBeNull();
  });

  it("prices a long prompt on a tier at that tier's long-context prices, unknown where none is published", () => {
    const long = {
      input_tokens: 300_000,
      input_tokens_details: { cached_tokens: 100_000 },
      output_tokens: 5000,
    };
    // gpt-5.4 over 272k: 200,000 x 5 + 100,000 x 0.50 + 5000 x 22.50 = 1,162,500; flex half of it.
    expect(costA("gpt-5.4", long)).toBe(1.1625);
    expect(costA("gpt-5.4", long, "flex")).toBe(0.58125);
    // Its priority prices exclude long context.
    expect(costA("gpt-5.4", long, "priority")).toBeNull();
    // Under the threshold: $5 in, $30 out.
    expect(costA("gpt-5.4", { input_tokens: 200_000, output_tokens: 1000 }, "priority")).toBe(1.03);
  });

  // The GPT-6 model pages: Batch and Flex cost 50% of Standard, Fast mode twice the applicable rate.
  it("bills GPT-6's cache writes on a tier at the tier's multiple too", () => {
    const reported = {
      prompt_tokens: 10_000,
      completion_tokens: 1000,
      prompt_tokens_details: { cached_tokens: 2000, cache_write_tokens: 4000 },
    };
    // 4000 x 2 + 2000 x 0.20 + 4000 x 2.50 + 1000 x 10 = 28,400.
    expect(costA("gpt-6-sol", reported)).toBe(0.0284);
    expect(costA("gpt-6-sol", reported, "priority")).toBe(0.0568);
    expect(costA("gpt-6-sol", reported, "flex")).toBe(0.0142);
  });

  // Anthropic's service tiers page: Priority Tier is billed against a capacity commitment, not a
  // published price per token; the answer's `usage.service_tier` names the tier.
  it("leaves provider B's priority and batch tiers unknown, its standard tier at the standard price", () => {
    const cost = (tier: string) => {
      const usage = usageFromProviderB({ input_tokens: 1000, output_tokens: 500, service_tier: tier });
      return usage && costOfTokens("provider-b", "claude-sonnet-4-6", usage);
    };
    // 1000 x 3 + 500 x 15.
    expect(cost("standard")).toBe(0.0105);
    expect(cost("priority")).toBeNull();
    expect(cost("batch")).toBeNull();
  });

  // Google's flex inference page: a 50% cost reduction compared to standard rates; priority costs 75%
  // to 100% more, by model, with no price per model published. The answer's
  // `usageMetadata.serviceTier` names the tier.
  it("bills provider C's flex at half its input, audio and output prices, priority as unknown", () => {
    const cost = (reported: Record<string, unknown>) => {
      const usage = usageFromProviderC(reported);
      return usage && costOfTokens("provider-c", "gemini-2.5-flash", usage);
    };
    const plain = { promptTokenCount: 1000, candidatesTokenCount: 200 };
    // (1000 x 0.30 + 200 x 2.50) / 2.
    expect(cost({ ...plain, serviceTier: "standard" })).toBe(0.0008);
    expect(cost({ ...plain, serviceTier: "flex" })).toBe(0.0004);
    expect(cost({ ...plain, serviceTier: "FLEX" })).toBe(0.0004);
    expect(cost({ ...plain, serviceTier: "priority" })).toBeNull();
    // (200 x 0.30 + 800 x 1 + 200 x 2.50) / 2: audio at half the audio price.
    const audio = [
      { modality: "TEXT", tokenCount: 200 },
      { modality: "AUDIO", tokenCount: 800 },
    ];
    expect(cost({ ...plain, promptTokensDetails: audio, serviceTier: "flex" })).toBe(0.00068);
    // No flex price for cached input is published: unknown.
    expect(cost({ ...plain, cachedContentTokenCount: 500, serviceTier: "flex" })).toBeNull();
  });
});

describe("the price of a model named by a version of it", () => {
  const reported = {
    inputTokens: 100_000,
    outputTokens: 0,
    cachedInputTokens: null,
    reasoningTokens: null,
  };

  it("prices a dated or numbered snapshot as its model, and a preview, priced apart in its time, as unknown", () => {
    expect(costOfTokens("provider-a", "gpt-4o-2024-08-06", reported)).toBe(0.25);
    expect(costOfTokens("provider-a", "gpt-4o-mini-2024-07-18", reported)).toBe(0.015);
    expect(costOfTokens("provider-b", "claude-sonnet-4-5-20250929", reported)).toBe(0.3);
    expect(costOfTokens("provider-b", "claude-3-5-haiku-20241022", reported)).toBe(0.08);
    expect(costOfTokens("provider-c", "models/gemini-2.5-flash-001", reported)).toBe(0.03);
    // gemini-2.5-flash-preview-04-17 was $0.15 in, $0.60 out ($3.50 thinking): not gemini-2.5-flash's prices.
    expect(costOfTokens("provider-c", "gemini-2.5-flash-preview-04-17", reported)).toBeNull();
    expect(costOfTokens("provider-c", "gemini-2.5-flash-lite-preview-06-17", reported)).toBeNull();
    // chatgpt-4o-latest ($5 in, $15 out) is not gpt-4o.
    expect(costOfTokens("provider-a", "chatgpt-4o-latest", reported)).toBeNull();
  });
});
