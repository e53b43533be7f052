import { describe, expect, it } from "vitest";
import { providerA, providerB, providerC } from "../../test/fakes/fake-upstream-responses.js";
import { createAiSdkModels } from "../providers/ai-sdk-provider.js";
import { usageFromProviderB } from "../providers/usage-from-json.js";
import { costOfTokens } from "../usage/token-cost.js";
import type { TokenUsage } from "../usage/token-usage.js";
import { addAttempt, addUsage, analyze, jsonInText } from "./analyze.js";
import { checkOutputSchema } from "./output-schema.js";

const usage = (
  inputTokens: number | null,
  outputTokens: number | null,
  cachedInputTokens: number | null = null,
  reasoningTokens: number | null = null,
): TokenUsage => ({ inputTokens, outputTokens, cachedInputTokens, reasoningTokens });

describe("addUsage (the first attempt's usage plus the repair's)", () => {
  const counts = ({ inputTokens, outputTokens, cachedInputTokens, reasoningTokens }: TokenUsage) => ({
    inputTokens,
    outputTokens,
    cachedInputTokens,
    reasoningTokens,
  });

  it("sums the counts both attempts report, a missing cached or reasoning count as 0", () => {
    expect(counts(addUsage(usage(10, 5, 4, null), usage(20, 7, null, 3)))).toEqual(usage(30, 12, 4, 3));
    expect(counts(addUsage(usage(10, 5), usage(20, 7)))).toEqual(usage(30, 12));
  });

  // Before, the known attempt's count stood for both, priced as the whole.
  it("leaves an input or output count unknown when one attempt did not report it", () => {
    expect(counts(addUsage(usage(null, 5), usage(20, 7)))).toEqual(usage(null, 12));
    expect(counts(addUsage(usage(10, 5), usage(20, null)))).toEqual(usage(30, null));
    expect(counts(addUsage(usage(10, 5, 4), null))).toEqual(usage(null, null, 4));
    expect(costOfTokens("provider-a", "gpt-5.4-mini", addUsage(usage(10, 5), null))).toBeNull();
  });

  // Before, the sum was priced as one call: 300k input tokens, over gemini-2.5-pro's 200k threshold,
  // billed both attempts at the long-context prices (twice the input price, 1.5x the output's).
  it("prices each attempt on its own, against the model's long-context threshold", () => {
    const one = usage(150_000, 100);
    const single = costOfTokens("provider-c", "gemini-2.5-pro", one);
    expect(single).toBeCloseTo(0.1885, 12);
    expect(costOfTokens("provider-c", "gemini-2.5-pro", addUsage(one, one))).toBeCloseTo(2 * 0.1885, 12);
    // What an attempt prices apart (cache writes) stays priced on the sum.
    const written: TokenUsage = { ...usage(1_000, 10), cacheWriteTokens: { thirtyMinutes: 400 } };
    const alone = costOfTokens("provider-a", "gpt-6-sol", written) ?? Number.NaN;
    expect(costOfTokens("provider-a", "gpt-6-sol", addUsage(written, written))).toBeCloseTo(2 * alone, 12);
  });
});

describe("addAttempt (the first attempt's usage and the repair's, one perhaps unknown)", () => {
  it("sums them when both are known", () => {
    const { usage: sum, partlyUnknown } = addAttempt(usage(10, 5), usage(20, 7));
    expect(sum).toMatchObject(usage(30, 12));
    expect(partlyUnknown).toBe(false);
  });

  // Before, an unknown attempt made the known one's counts, and so the cost, unknown too.
  it("keeps the known attempt's counts alone when the other's are unknown, and says so", () => {
    for (const [first, next] of [
      [usage(10, 5), null],
      [usage(10, 5), usage(20, null)],
      [usage(null, null), usage(10, 5)],
    ] as const) {
      const { usage: kept, partlyUnknown } = addAttempt(first, next);
      expect(kept).toMatchObject(usage(10, 5));
      expect(costOfTokens("provider-a", "gpt-5.4-mini", kept)).not.toBeNull();
      expect(partlyUnknown).toBe(true);
    }
  });

  it("leaves the counts unknown when neither attempt's are known", () => {
    const { usage: none, partlyUnknown } = addAttempt(usage(null, null), null);
    expect(none).toMatchObject({ inputTokens: null, outputTokens: null });
    expect(partlyUnknown).toBe(false);
  });
});

describe("addUsage of attempts billed at a premium", () => {
  // A workspace whose default inference geo is the US: each attempt reports inference_geo "us".
  it("keeps each attempt's premium: US-only inference at 1.1x, fast mode unknown", () => {
    const us = usageFromProviderB({ input_tokens: 1000, output_tokens: 100, inference_geo: "us" });
    const single = costOfTokens("provider-b", "claude-sonnet-4-6", us ?? usage(null, null));
    // (1000 x 3 + 100 x 15) x 1.1.
    expect(single).toBe(0.00495);
    expect(costOfTokens("provider-b", "claude-sonnet-4-6", addUsage(us ?? usage(null, null), us))).toBe(
      0.0099,
    );
    // With compaction iterations, each of the answer's samplings keeps it too.
    const compacted = usageFromProviderB({
      input_tokens: 1000,
      output_tokens: 100,
      inference_geo: "us",
      iterations: [{ type: "compaction", input_tokens: 1000, output_tokens: 100 }],
    });
    expect(
      costOfTokens("provider-b", "claude-sonnet-4-6", addUsage(compacted ?? usage(null, null), us)),
    ).toBe(0.01485);
    const fast = usageFromProviderB({ input_tokens: 1000, output_tokens: 100, speed: "fast" });
    expect(costOfTokens("provider-b", "claude-opus-5-5", addUsage(usage(1000, 100), fast))).toBeNull();
  });
});

describe("jsonInText (the JSON a text answer holds)", () => {
  it("reads a code fence's inside, else the first { to the last }", () => {
    expect(jsonInText('```json\n{"a":1}\n```')).toBe('{"a":1}');
    expect(jsonInText('Here:\n```JSON  \n\n {"a":1} \n  ```\nDone')).toBe('{"a":1}');
    expect(jsonInText('```\n{"a":1}```')).toBe('{"a":1}');
    expect(jsonInText('The answer is {"a":{"b":2}} as asked')).toBe('{"a":{"b":2}}');
    // An empty fence, or one whose line holds more than a language name, is no fence.
    expect(jsonInText('```\n\n``` {"a":1}')).toBe('{"a":1}');
    expect(jsonInText('```json5\n{"a":1}\n```')).toBe('{"a":1}');
    expect(jsonInText("no json here")).toBeNull();
  });

  it("reads as the regular expression it replaces did, over random answers", () => {
    const pattern = /```[a-z]*\s*\n([\s\S]*?)\n?\s*```/i;
    const reference = (text: string) => {
      const fenced = pattern.exec(text);
      if (fenced?.[1]) return fenced[1].trim();
      const start = text.indexOf("{");
      const end = text.lastIndexOf("}");
      return start >= 0 && end > start ? text.slice(start, end + 1) : null;
    };
    const pieces = ["```", "`", "json", "J", "5", " ", "\n", "\t", "{", "}", '"a"', ":", "1", "x"];
    let seed = 7;
    const next = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed;
    };
    for (let round = 0; round < 20_000; round++) {
      const length = next() % 14;
      const text = Array.from({ length }, () => pieces[next() % pieces.length]).join("");
      expect(jsonInText(text), JSON.stringify(text)).toBe(reference(text));
    }
  });

  // The regular expression took ~20 s on these 3,000 blank lines after an open fence (the time
  // grows with their cube), on the event loop: one answer stalled every request the instance
  // served. (Kept at a size that fails by the test's timeout rather than hanging the run.)
  it("reads an open fence over many blank lines or spaces in one pass", () => {
    expect(jsonInText(`\`\`\`json\n${"\n".repeat(3000)}`)).toBeNull();
    expect(jsonInText(`\`\`\`json\n${" ".repeat(200_000)}{"a":1}`)).toBe('{"a":1}');
  });
});

// The AI SDK writes out provider C's $refs, copying the set of those it is inside at each one it
// follows: a chain of 2,000 definitions, each a $ref to the next (a 64 KiB schema every check takes),
// was ~1 s of the event loop a call, 5 s with a definition named twice by each of 14 more.
describe("analyze on provider C, whose schema the AI SDK sends with its $refs written out", () => {
  const chain = (links: number) => {
    const $defs: Record<string, unknown> = {
      leaf: {
        type: "object",
        properties: { n: { type: "integer", description: "A count" } },
        required: ["n"],
      },
    };
    for (let index = 0; index < links; index++)
      $defs[`a${index}`] = { $ref: index + 1 < links ? `#/$defs/a${index + 1}` : "#/$defs/leaf" };
    return { type: "object", properties: { x: { $ref: "#/$defs/a0" } }, required: ["x"], $defs };
  };
  const sent: Record<string, unknown>[] = [];
  const models = createAiSdkModels({
    baseUrls: { "provider-a": "", "provider-b": "", "provider-c": "http://127.0.0.1:9/v1beta" },
    providerBVersion: "2023-06-01",
    clientIdentifier: "sluice-test",
    fetch: async (_url, init) => {
      sent.push(JSON.parse(String(init?.body)) as Record<string, unknown>);
      throw new TypeError("fetch failed");
    },
  });
  const call = (schema: Record<string, unknown>) =>
    analyze(models, {
      provider: "provider-c",
      model: "gemini-3.5-flash-lite",
      providerKey: "key",
      schema,
      input: { kind: "text", text: "x" },
      timeoutMs: 60_000,
    }).catch(() => undefined);
  /** The least CPU time of three calls, in milliseconds (the process's, not the wall clock's). */
  const cpuMs = async (schema: Record<string, unknown>) => {
    let least = Number.POSITIVE_INFINITY;
    for (let run = 0; run < 3; run++) {
      const started = process.cpuUsage();
      await call(schema);
      const { user, system } = process.cpuUsage(started);
      least = Math.min(least, (user + system) / 1000);
    }
    return least;
  };

  it("sends a chain of $refs in time linear in its length", async () => {
    const long = chain(2000);
    expect(checkOutputSchema(long, "provider-c")).toEqual([]);
    expect(Buffer.byteLength(JSON.stringify(long))).toBeGreaterThan(50_000);
    await call(chain(125));
    const slowdown = (await cpuMs(long)) / (await cpuMs(chain(125)));
    expect(slowdown, `16 times the chain took ${slowdown.toFixed(1)} times as long`).toBeLessThan(64);
    // What the provider is sent is the SDK's writing out: the leaf, named where the chain began.
    expect(sent.at(-1)).toHaveProperty("generationConfig.responseSchema", {
      type: "object",
      properties: {
        x: {
          type: "object",
          properties: { n: { type: "integer", description: "A count" } },
          required: ["n"],
        },
      },
      required: ["x"],
    });
  });
});

// A compatible server that echoes the request can name the key it was sent as the answer's model.
// The model the provider says answered goes into a failed call's `details.model` (a 502 after the
// repair, a 422 refusal) and the row: it carried the whole rebuilt key to a client holding a share.
describe("analyze, when the provider's answer names the provider key as its model", () => {
  const key = "sk-echo-Zq8+Zr/0Ab+Kd/7WmX=";
  const usageOf = { input: 3, output: 2, cached: 0, reasoning: 0 };
  const answers = {
    "provider-a": (text: string, stop = "stop") => {
      const chat = providerA.chat(key, text, usageOf);
      return { ...chat, choices: chat.choices.map((choice) => ({ ...choice, finish_reason: stop })) };
    },
    "provider-b": (text: string) => providerB.message(key, [{ type: "text", text }], usageOf),
    "provider-c": (text: string) => providerC.response(key, text, usageOf),
  } as const;
  const asked = {
    "provider-a": "gpt-5.4-mini",
    "provider-b": "claude-sonnet-4-6",
    "provider-c": "gemini-3.5-flash-lite",
  };
  const schema = {
    type: "object",
    properties: { title: { type: "string" } },
    required: ["title"],
    additionalProperties: false,
  };
  const call = (provider: keyof typeof answers, answer: unknown) =>
    analyze(
      createAiSdkModels({
        baseUrls: {
          "provider-a": "http://127.0.0.1:9/v1",
          "provider-b": "http://127.0.0.1:9/v1",
          "provider-c": "http://127.0.0.1:9/v1beta",
        },
        providerBVersion: "2023-06-01",
        clientIdentifier: "sluice-test",
        fetch: async () =>
          new Response(JSON.stringify(answer), { headers: { "content-type": "application/json" } }),
      }),
      {
        provider,
        model: asked[provider],
        providerKey: key,
        schema,
        input: { kind: "text", text: "x" },
        timeoutMs: 60_000,
      },
    );

  for (const provider of ["provider-a", "provider-b", "provider-c"] as const) {
    it(`keeps it out of a mismatch's 502 and the row (${provider})`, async () => {
      const result = await call(provider, answers[provider]('{"nope":1}'));
      expect(result.ok).toBe(false);
      const error = result.ok ? null : result.error;
      expect(error?.code).toBe("PROVIDER_ERROR");
      expect(JSON.stringify(error?.details)).not.toContain(key);
      expect(error?.details).toMatchObject({ model: asked[provider] });
      expect(result.model).toBe(asked[provider]);
    });
  }

  it("keeps it out of a refusal's 422", async () => {
    const result = await call("provider-a", answers["provider-a"]("", "content_filter"));
    const error = result.ok ? null : result.error;
    expect(error?.code).toBe("VALIDATION_ERROR");
    expect(JSON.stringify(error?.details)).not.toContain(key);
    expect(error?.details).toMatchObject({ model: "gpt-5.4-mini" });
  });

  it("still names the model the provider says answered when it is another model", async () => {
    const result = await call("provider-a", {
      ...answers["provider-a"]('{"nope":1}'),
      model: "gpt-5.4-mini-2026-03-05",
    });
    expect(result.model).toBe("gpt-5.4-mini-2026-03-05");
  });
});

/**
 * A provider that answered a 2xx (and billed it) whose answer the AI SDK could not use: provider A's
 * `choices: []`, JSON of another shape than the provider's. Its usage, where the answer reports one,
 * is the call's (priced); where not, the call's cost is unknown (the route marks it answered).
 */
describe("analyze, when the provider answers a 2xx the AI SDK cannot use", () => {
  const reported = { input: 1000, output: 500, cached: 0, reasoning: 0 };
  const mismatching = providerA.chat("gpt-5.4-mini", '{"nope":1}', reported);
  const { choices: _, ...withoutChoices } = mismatching;
  const noChoices = { ...withoutChoices, choices: [] };
  const { usage: __, ...noChoicesNoUsage } = noChoices;
  /** JSON of another shape than provider A's (a choice without its message), with its usage. */
  const otherShape = { ...withoutChoices, choices: [{ index: 0, finish_reason: "stop", message: 5 }] };
  const call = (...answers: unknown[]) => {
    let sent = 0;
    return analyze(
      createAiSdkModels({
        baseUrls: {
          "provider-a": "http://127.0.0.1:9/v1",
          "provider-b": "http://127.0.0.1:9/v1",
          "provider-c": "http://127.0.0.1:9/v1beta",
        },
        providerBVersion: "2023-06-01",
        clientIdentifier: "sluice-test",
        fetch: async () =>
          new Response(JSON.stringify(answers[sent++]), { headers: { "content-type": "application/json" } }),
      }),
      {
        provider: "provider-a",
        model: "gpt-5.4-mini",
        providerKey: "sk-test",
        schema: { type: "object", properties: { title: { type: "string" } }, required: ["title"] },
        input: { kind: "text", text: "x" },
        timeoutMs: 60_000,
      },
    );
  };
  const price = (result: Awaited<ReturnType<typeof analyze>>) =>
    costOfTokens("provider-a", result.model, result.usage);
  const one = costOfTokens("provider-a", "gpt-5.4-mini", usage(1000, 500)) ?? Number.NaN;

  it("gives a first attempt's usage where its answer reports one: `choices: []` is priced", async () => {
    const result = await call(noChoices);
    expect(result.ok).toBe(false);
    // Answered as any first attempt's failure is: the usage is the row's.
    expect(result.ok ? null : result.error).toMatchObject({
      code: "PROVIDER_ERROR",
      details: { retryable: false },
    });
    expect(result.usage).toMatchObject({ inputTokens: 1000, outputTokens: 500 });
    expect(price(result)).toBe(one);
  });

  it("gives a first attempt no usage, so no cost, where its answer reports none", async () => {
    const result = await call(noChoicesNoUsage);
    expect(result.ok).toBe(false);
    expect(result.ok ? null : result.error.code).toBe("PROVIDER_ERROR");
    expect(price(result)).toBeNull();
  });

  it("adds an unread repair's reported usage to the first attempt's", async () => {
    for (const repair of [noChoices, otherShape]) {
      const result = await call(mismatching, repair);
      expect(result.ok).toBe(false);
      expect(result.usage).toMatchObject({ inputTokens: 2000, outputTokens: 1000 });
      expect(price(result)).toBeCloseTo(2 * one, 12);
    }
  });

  // Before the first amendment, the row held the first attempt's cost alone, as if complete: the
  // billed repair counted nothing. Before the second, it held no tokens and no cost at all.
  it("keeps the first attempt's usage, and says a part is unknown, when an unread repair reports no usage", async () => {
    const result = await call(mismatching, noChoicesNoUsage);
    expect(result.ok).toBe(false);
    expect(result.ok ? null : result.error).toMatchObject({
      code: "PROVIDER_ERROR",
      details: { usage: { inputTokens: 1000, outputTokens: 500 } },
    });
    expect(result.partlyUnknown).toBe(true);
    expect(result.usage).toMatchObject({ inputTokens: 1000, outputTokens: 500 });
    expect(price(result)).toBe(one);
  });

  it("says no part is unknown when every attempt's usage is known", async () => {
    expect((await call(noChoices)).partlyUnknown).toBeUndefined();
    expect((await call(mismatching, noChoices)).partlyUnknown).toBeUndefined();
  });
});
