import { afterEach, describe, expect, it, vi } from "vitest";
import { meterRun } from "../../test/support/meter-run.js";
import { emptyUsage } from "../usage/token-usage.js";
import { createUsageMeter, type SseEventTap } from "./usage-meter.js";

/** Runs a body through a fresh Interactions API meter, pushed in pieces cut at `splits`. */
function run(body: string | Buffer, streaming: boolean, splits: number[] = []) {
  const bytes = typeof body === "string" ? Buffer.from(body) : body;
  const meter = createUsageMeter("provider-c", {
    streaming,
    interactions: true,
  });
  let at = 0;
  for (const split of [...splits, bytes.length]) {
    meter.push(bytes.subarray(at, split));
    at = split;
  }
  return meter.finish();
}

/** The usage of an answer, as the API reports it (zero counts may be left out). */
const usage = {
  total_input_tokens: 11,
  total_output_tokens: 5,
  total_thought_tokens: 2,
  total_cached_tokens: 3,
  total_tokens: 18,
  input_tokens_by_modality: [{ modality: "text", tokens: 11 }],
};
/** What it records: output counts the thoughts too, as for generateContent. */
const recorded = { inputTokens: 11, outputTokens: 7, cachedInputTokens: 3, reasoningTokens: 2 };

const interaction = (fields: Record<string, unknown> = {}) => ({
  id: "v1_abc",
  status: "completed",
  created: "2025-11-13T02:13:20Z",
  updated: "2025-11-13T02:13:20Z",
  model: "gemini-2.5-flash",
  role: "model",
  object: "interaction",
  ...fields,
});

/** Events as Google sends them: named, the data repeating the name as `event_type`. */
const named = (type: string, data: Record<string, unknown>, lineEnd = "\n") =>
  `event: ${type}${lineEnd}data: ${JSON.stringify({ ...data, event_type: type })}${lineEnd}${lineEnd}`;

const stream = (lineEnd = "\n") =>
  [
    named("interaction.start", { interaction: interaction({ status: "in_progress" }) }, lineEnd),
    named("interaction.status_update", { interaction_id: "v1_abc", status: "in_progress" }, lineEnd),
    named("content.start", { index: 0, content: { type: "thought" } }, lineEnd),
    named("content.delta", { index: 0, delta: { type: "thought_signature", signature: "EpYC" } }, lineEnd),
    named("content.stop", { index: 0 }, lineEnd),
    named("content.start", { index: 1, content: { type: "text", text: "" } }, lineEnd),
    named("content.delta", { index: 1, delta: { type: "text", text: 'He said "usage": {' } }, lineEnd),
    named("content.delta", { index: 1, delta: { type: "text", text: " done." } }, lineEnd),
    named("content.stop", { index: 1 }, lineEnd),
    named("interaction.complete", { interaction: interaction({ usage, outputs: [] }) }, lineEnd),
  ].join("");

afterEach(() => {
  vi.restoreAllMocks();
});

describe("the Interactions API's usage, unstreamed", () => {
  it("records the interaction's usage: input with its cached part, output with the thoughts", () => {
    const body = JSON.stringify(interaction({ usage, outputs: [{ type: "text", text: "Hi" }] }));
    expect(run(body, false)).toEqual({ usage: recorded, model: null });
    expect(run(body, false, [1, 40, 200])).toEqual({ usage: recorded, model: null });
  });

  it("counts tool-use tokens as input, and a count left out when zero as 0", () => {
    const body = JSON.stringify(
      interaction({ usage: { total_input_tokens: 40, total_output_tokens: 9, total_tool_use_tokens: 25 } }),
    );
    expect(run(body, false).usage).toEqual({
      inputTokens: 65,
      outputTokens: 9,
      cachedInputTokens: null,
      reasoningTokens: null,
    });
  });

  it("tells the audio part of the input apart (input_tokens_by_modality), as generateContent's", () => {
    const byModality = [
      { modality: "text", tokens: 100 },
      { modality: "audio", tokens: 900 },
    ];
    const body = JSON.stringify(
      interaction({
        usage: { total_input_tokens: 1000, total_output_tokens: 9, input_tokens_by_modality: byModality },
      }),
    );
    expect(run(body, false).usage).toEqual({
      inputTokens: 1000,
      outputTokens: 9,
      cachedInputTokens: null,
      reasoningTokens: null,
      audioInputTokens: 900,
    });
    // And the audio part of the cached input (cached_tokens_by_modality).
    const cached = JSON.stringify(
      interaction({
        usage: {
          total_input_tokens: 1000,
          total_cached_tokens: 600,
          total_output_tokens: 9,
          input_tokens_by_modality: byModality,
          cached_tokens_by_modality: [{ modality: "audio", tokens: 500 }],
        },
      }),
    );
    expect(run(cached, false).usage).toMatchObject({
      cachedInputTokens: 600,
      audioInputTokens: 900,
      cachedAudioInputTokens: 500,
    });
  });

  it("tells the generated images of the output apart (output_tokens_by_modality), as generateContent's", () => {
    const body = JSON.stringify(
      interaction({
        model: "gemini-nano-banana-2.1",
        usage: {
          total_input_tokens: 20,
          total_output_tokens: 1130,
          output_tokens_by_modality: [
            { modality: "text", tokens: 10 },
            { modality: "image", tokens: 1120 },
          ],
        },
      }),
    );
    expect(run(body, false).usage).toEqual({
      inputTokens: 20,
      outputTokens: 1130,
      cachedInputTokens: null,
      reasoningTokens: null,
      imageOutputTokens: 1120,
    });
  });

  it("reads only the top-level usage, not one in the outputs or the tools, before it or after", () => {
    const decoy = { usage: { total_input_tokens: 999, total_output_tokens: 999 } };
    const body = JSON.stringify(
      interaction({
        tools: [{ type: "function", name: "report", parameters: { properties: decoy } }],
        usage,
        outputs: [{ type: "function_call", name: "report", arguments: decoy }],
        metadata: decoy,
      }),
    );
    expect(run(body, false).usage).toEqual(recorded);
  });

  it("records no tokens for an answer without usage: a background run's first answer, an error", () => {
    for (const body of [
      JSON.stringify(interaction({ status: "in_progress" })),
      JSON.stringify({ error: { code: 400, message: "bad", status: "INVALID_ARGUMENT" } }),
      JSON.stringify(interaction({ usage: {} })),
      "",
      "[1,2]",
      "not json",
    ])
      expect(run(body, false), body).toEqual({ usage: emptyUsage(), model: null });
  });

  it("does not read generateContent's usageMetadata, nor does generateContent's reader read this usage", () => {
    const gemini = JSON.stringify({
      candidates: [],
      usageMetadata: { promptTokenCount: 11, candidatesTokenCount: 5 },
      modelVersion: "gemini-2.5-flash",
    });
    expect(run(gemini, false).usage).toEqual(emptyUsage());
    // Which reader applies is decided by the path: `interactions` chooses this one.
    expect(meterRun("provider-c", JSON.stringify(interaction({ usage })), false).usage).toEqual(emptyUsage());
  });

  it("records what a body cut short holds: its usage when it arrived whole before the cut", () => {
    const body = JSON.stringify(interaction({ usage, outputs: [{ type: "text", text: "Hi there" }] }));
    const afterUsage = body.indexOf('"outputs"') + 5;
    expect(run(body.slice(0, afterUsage), false).usage).toEqual(recorded);
    const insideUsage = body.indexOf('"total_tokens"');
    expect(run(body.slice(0, insideUsage), false).usage).toEqual(emptyUsage());
  });

  it("reads a body over the cap from its first bytes, where Google puts the usage, else from its last", () => {
    const image = "A".repeat(5 * 1024 * 1024);
    const before = JSON.stringify(interaction({ usage, outputs: [{ type: "image", data: image }] }));
    expect(run(before, false, [1000, 3000, 4_500_000]).usage).toEqual(recorded);
    const after = JSON.stringify(interaction({ outputs: [{ type: "image", data: image }], usage }));
    expect(run(after, false, [1000, 3000, 4_500_000]).usage).toEqual(recorded);
  });

  // A function call's arguments are model output, which a prompt can steer: a `usage` there is no report.
  it("of a body over the cap, reads from its last bytes only a usage that closes the interaction, not one in its outputs", () => {
    const image = { type: "image", mime_type: "image/png", data: "A".repeat(4_500_000) };
    const decoy = {
      type: "function_call",
      name: "log",
      arguments: { usage: { total_input_tokens: 1, total_output_tokens: 1 } },
    };
    const real = { total_input_tokens: 500_000, total_output_tokens: 20_000 };
    // The real usage is out of the first 4 KiB (after a long instruction) and of the last 64 KiB.
    const hidden = JSON.stringify(
      interaction({ system_instruction: "s".repeat(5000), usage: real, outputs: [image, decoy] }),
    );
    expect(run(hidden, false, [1000, 3000, 4_500_000]).usage).toEqual(emptyUsage());
    // The usage last, after such outputs, closes the interaction: it is read, whatever the outputs hold.
    const last = JSON.stringify(
      interaction({ outputs: [image, decoy], usage: real, previous_interaction_id: "v1_x" }),
    );
    expect(run(last, false, [1000, 3000, 4_500_000]).usage).toMatchObject({
      inputTokens: 500_000,
      outputTokens: 20_000,
    });
    // Nor is a usage object that the outputs end with read when the interaction has none after them.
    const none = JSON.stringify(
      interaction({ system_instruction: "s".repeat(5000), outputs: [image, decoy] }),
    );
    expect(run(none, false, [1000, 3000, 4_500_000]).usage).toEqual(emptyUsage());
  });
});

describe("the Interactions API's usage, streamed", () => {
  it("records the usage interaction.complete reports, the same as the unstreamed answer's, wherever the chunks split", () => {
    const body = stream();
    expect(run(body, true)).toEqual({ usage: recorded, model: null });
    for (let split = 1; split < body.length; split += 7)
      expect(run(body, true, [split]).usage, `split at ${split}`).toEqual(recorded);
    expect(run(stream("\r\n"), true, [13, 250, 251]).usage).toEqual(recorded);
  });

  it("parses only the event that reports the usage: the content events are passed over by their name", () => {
    const parse = vi.spyOn(JSON, "parse");
    expect(run(stream(), true).usage).toEqual(recorded);
    expect(parse).toHaveBeenCalledTimes(1);
  });

  it("reads the step-based stream's interaction.completed too", () => {
    const body = [
      named("interaction.created", { interaction: interaction({ status: "in_progress" }) }),
      named("step.start", { index: 0, step: { type: "model_output" } }),
      named("step.delta", { index: 0, delta: { type: "text", text: "Hi" } }),
      named("step.stop", { index: 0 }),
      named("interaction.completed", { interaction: interaction({ usage, steps: [] }) }),
    ].join("");
    expect(run(body, true).usage).toEqual(recorded);
  });

  it("records what a step-based stream cut before interaction.completed reported so far: step.stop's and status updates' usage", () => {
    const soFar = { total_input_tokens: 11, total_output_tokens: 3 };
    const steps = [
      named("interaction.created", { interaction: interaction({ status: "in_progress" }) }),
      named("step.start", { index: 0, step: { type: "function_call" } }),
      // A function call's arguments named `usage` are the model's, no report.
      named("step.delta", {
        index: 0,
        delta: { type: "arguments", arguments: { usage: { total_input_tokens: 9 } } },
      }),
      named("step.stop", { index: 0, step_usage: { total_output_tokens: 3 }, usage: soFar }),
    ];
    // The client left (or the provider stopped) after the first step: the running total it reported.
    const counts = (inputTokens: number, outputTokens: number) => ({
      inputTokens,
      outputTokens,
      cachedInputTokens: null,
      reasoningTokens: null,
    });
    expect(run(steps.join(""), true).usage).toEqual(counts(11, 3));
    const updated = named("interaction.status_update", {
      interaction_id: "v1_abc",
      status: "in_progress",
      usage: { total_input_tokens: 20, total_output_tokens: 4 },
    });
    expect(run(steps.join("") + updated, true).usage).toEqual(counts(20, 4));
    // The completion's usage is the last report, and wins.
    const completed = named("interaction.completed", { interaction: interaction({ usage, steps: [] }) });
    expect(run(steps.join("") + updated + completed, true).usage).toEqual(recorded);
  });

  it("reads a nameless step-based stream's step.stop usage by its event_type", () => {
    const stop = named("step.stop", {
      index: 0,
      step_usage: { total_output_tokens: 3 },
      usage: { total_input_tokens: 11, total_output_tokens: 3 },
    }).replace(/^event: .*\n/gm, "");
    expect(stop).not.toContain("event:");
    expect(run(stop, true).usage).toEqual({
      inputTokens: 11,
      outputTokens: 3,
      cachedInputTokens: null,
      reasoningTokens: null,
    });
  });

  it("reads a stream without event names from the events that hold a usage object", () => {
    const body = stream().replace(/^event: .*\n/gm, "");
    expect(body).not.toContain("event:");
    expect(run(body, true).usage).toEqual(recorded);
    // A function call's arguments named `usage` are no report.
    const call = `data: ${JSON.stringify({ event_type: "content.delta", index: 0, delta: { type: "function_call", arguments: { usage: { total_input_tokens: 9 } } } })}\n\n`;
    expect(run(call, true).usage).toEqual(emptyUsage());
  });

  it("records what a cut stream saw: nothing before the interaction completed, its usage after", () => {
    const body = stream();
    const complete = body.indexOf("event: interaction.complete");
    expect(run(body.slice(0, complete), true).usage).toEqual(emptyUsage());
    // Cut inside the completion event: it was never whole, so never dispatched.
    expect(run(body.slice(0, complete + 100), true).usage).toEqual(emptyUsage());
    expect(run(`${body}event: content.start\ndata: {"index":2`, true).usage).toEqual(recorded);
  });

  it("reads a completion event over the scanner's cap from its first bytes, else its last", () => {
    const big = "B".repeat(1_200_000);
    const early = named("interaction.complete", {
      interaction: interaction({ usage, outputs: [{ type: "text", text: big }] }),
    });
    expect(run(early, true).usage).toEqual(recorded);
    const late = named("interaction.complete", {
      interaction: interaction({ outputs: [{ type: "text", text: big }], usage }),
    });
    expect(run(late, true, [100_000, 1_100_000]).usage).toEqual(recorded);
    // A content event that large is not read.
    const delta = named("content.delta", {
      index: 0,
      delta: { type: "text", text: big },
      interaction: { usage },
    });
    expect(run(delta, true).usage).toEqual(emptyUsage());
  });

  it("of a completion event over the cap, reads the interaction's own usage, not one in its outputs, first bytes or last", () => {
    const image = { type: "image", mime_type: "image/png", data: "A".repeat(1_200_000) };
    const decoy = {
      type: "function_call",
      name: "log",
      arguments: { usage: { total_input_tokens: 1, total_output_tokens: 1 } },
    };
    const real = { total_input_tokens: 500_000, total_output_tokens: 20_000 };
    const expected = { inputTokens: 500_000, outputTokens: 20_000 };
    // The decoy in the first bytes, the interaction's usage at the end.
    const decoyFirst = named("interaction.complete", {
      interaction: interaction({ outputs: [decoy, image], usage: real }),
    });
    expect(run(decoyFirst, true).usage).toMatchObject(expected);
    // The usage first, the decoy at the end.
    const decoyLast = named("interaction.complete", {
      interaction: interaction({ usage: real, outputs: [image, decoy] }),
    });
    expect(run(decoyLast, true).usage).toMatchObject(expected);
    // Neither end shows the interaction's own usage: none is recorded, not the decoy's.
    const hidden = named("interaction.complete", {
      interaction: interaction({
        system_instruction: "s".repeat(5000),
        usage: real,
        outputs: [image, decoy],
      }),
    });
    expect(run(hidden, true).usage).toEqual(emptyUsage());
    const decoyOnly = named("interaction.complete", {
      interaction: interaction({ outputs: [decoy, image, decoy] }),
    });
    expect(run(decoyOnly, true).usage).toEqual(emptyUsage());
  });

  it("tells a tap which event it took the usage from", () => {
    const heard: Array<[string, boolean]> = [];
    const tap: SseEventTap = {
      onEvent: (data, usageRead) => heard.push([JSON.parse(data).event_type, usageRead]),
      onEventEnd: () => {},
    };
    const meter = createUsageMeter("provider-c", {
      streaming: true,
      interactions: true,
      tap,
    });
    meter.push(Buffer.from(stream()));
    expect(meter.finish().usage).toEqual(recorded);
    expect(heard.filter(([, read]) => read)).toEqual([["interaction.complete", true]]);
    expect(heard).toHaveLength(10);
  });
});
