import { describe, expect, it } from "vitest";
import { providerA } from "../../test/fakes/fake-upstream-responses.js";
import { InjectedUsageFilter } from "./injected-usage-filter.js";
import { createUsageMeter } from "./usage-meter.js";

const filter = () =>
  new InjectedUsageFilter((tap) => createUsageMeter("provider-a", { streaming: true, tap }));

/**
 * Passes `bytes` cut at `splits` to a clean end (the meter's end, then the filter's, as ProxyExchange
 * does); returns every forwarded piece, the end's included, and the meter's reading.
 */
function run(bytes: Buffer, splits: number[]) {
  const under = filter();
  const pieces: Buffer[] = [];
  let at = 0;
  for (const split of [...splits, bytes.length]) {
    const forwarded = under.pass(bytes.subarray(at, split));
    if (forwarded !== null) pieces.push(forwarded);
    at = split;
  }
  under.meter.end();
  const rest = under.end();
  if (rest !== null) pieces.push(rest);
  return { forwarded: Buffer.concat(pieces), pieces, reading: under.meter.finish() };
}

const usage = { input: 11, output: 7, cached: 3, reasoning: 2 };
const recorded = {
  inputTokens: 11,
  outputTokens: 7,
  cachedInputTokens: 3,
  reasoningTokens: 2,
};
/** Provider A's stream as it answers a request that asked for usage: every event, usage chunk included. */
const events = providerA.chunks("gpt-4o-mini", "Hello from the fake upstream", usage, true);
const usageEvent = events.at(-2) as string;
const stream = Buffer.from(events.join(""));
const withoutUsage = Buffer.from(events.filter((event) => event !== usageEvent).join(""));
const usageStart = stream.indexOf(usageEvent);
const usageEnd = usageStart + Buffer.byteLength(usageEvent);

describe("InjectedUsageFilter", () => {
  it("drops exactly the usage chunk and meters it, wherever one cut falls", () => {
    expect(usageEvent).toMatch(/^data: \{.*"choices":\[\],"usage":\{"prompt_tokens":11/);
    for (let split = 0; split <= stream.length; split++) {
      const { forwarded, reading } = run(stream, [split]);
      expect(forwarded.toString(), `cut at ${split}`).toBe(withoutUsage.toString());
      expect(reading, `cut at ${split}`).toEqual({ usage: recorded, model: "gpt-4o-mini" });
    }
  });

  it("drops exactly the usage chunk wherever two cuts fall around it, and when every byte is a chunk", () => {
    for (let first = usageStart - 2; first <= usageEnd + 2; first++)
      for (let second = first; second <= usageEnd + 2; second++) {
        const { forwarded } = run(stream, [first, second]);
        // (Compared as strings only on a difference: 45,000 runs.)
        if (!forwarded.equals(withoutUsage))
          expect(forwarded.toString(), `cuts at ${first}, ${second}`).toBe(withoutUsage.toString());
      }
    const everyByte = run(
      stream,
      Array.from({ length: stream.length - 1 }, (_, index) => index + 1),
    );
    expect(everyByte.forwarded.equals(withoutUsage)).toBe(true);
    expect(everyByte.reading.usage).toEqual(recorded);
  });

  it("keeps every other byte, line ends (CR, CRLF) and comments included, at every cut", () => {
    const usageLine = usageEvent.trimEnd();
    const kept = [
      ": keep-alive\r\n\r\n",
      'data: {"choices":[{"index":0,"delta":{"content":"Hé 🙂"}}],"usage":null}\r\n\r\n',
      "\n",
      'data: {"choices":[{"index":0,"delta":{}}],\r\ndata: "usage":null}\r\r',
      // Not the usage chunk: its usage is null, or not at the top level, or it has choices.
      'data: {"choices":[],"usage":null}\n\n',
      'data: {"x":{"choices":[],"usage":{"prompt_tokens":1}}}\n\n',
      'data: {"choices":[{"index":0}],"usage":{"prompt_tokens":1}}\n\n',
      'data: "\\"choices\\":[],\\"usage\\":{}"\n\n',
    ];
    for (const [name, ending] of [
      ["CRLF", "\r\n\r\n"],
      ["CR", "\r\r"],
      ["LF", "\n\n"],
    ] as const) {
      const before = kept.join("");
      const after = ": after\r\ndata: [DONE]\r\n\r\n";
      const text = Buffer.from(`${before}${usageLine}${ending}${after}`);
      const expected = Buffer.from(`${before}${after}`);
      for (let split = 0; split <= text.length; split++) {
        const { forwarded, reading } = run(text, [split]);
        expect(forwarded.toString(), `${name}, cut at ${split}`).toBe(expected.toString());
        expect(reading.usage, `${name}, cut at ${split}`).toEqual(recorded);
      }
    }
  });

  it("keeps a blank LF line that follows a usage chunk whose CRLF ends a chunk", () => {
    // The usage chunk's blank line is a CRLF, both bytes in the first chunk; the next chunk's LF is
    // a blank line of its own, not the rest of that line end.
    const text = Buffer.from(`${usageEvent.trimEnd()}\r\r\n\ndata: [DONE]\n\n`);
    const cut = text.indexOf("\r\r\n") + 3;
    for (const splits of [[], [cut]])
      expect(run(text, splits).forwarded.toString(), `cuts ${splits}`).toBe("\ndata: [DONE]\n\n");
  });

  it("forwards each complete event as it arrives, and holds back only an event's unfinished part", () => {
    const under = filter();
    const first = Buffer.from(events[0] as string);
    expect(under.pass(first)).toBe(first);
    const second = Buffer.from(events[1] as string);
    expect(under.pass(second.subarray(0, 10))).toBeNull();
    expect(under.pass(second.subarray(10))?.toString()).toBe(second.toString());
    expect(under.pass(Buffer.from(usageEvent))).toBeNull();
    expect(under.pass(Buffer.from("data: [DONE]\n\ndata: unfinis"))?.toString()).toBe("data: [DONE]\n\n");
    // At the provider's clean end, an unterminated last event is forwarded as it came.
    under.meter.end();
    expect(under.end()?.toString()).toBe("data: unfinis");
  });

  it("drops the usage chunk the stream ends with, without its blank line, at a clean end, and meters it", () => {
    // No [DONE]: the usage chunk is the last event; openai's SDK would dispatch it at the clean end.
    const open = Buffer.from(events.slice(0, -1).join("").replace(/\n+$/, ""));
    const expected = stream.subarray(0, usageStart).toString();
    for (let split = 0; split <= open.length; split++) {
      const { forwarded, reading } = run(open, [split]);
      expect(forwarded.toString(), `cut at ${split}`).toBe(expected);
      expect(reading.usage, `cut at ${split}`).toEqual(recorded);
    }
    // Another last event left open is forwarded, as before.
    const last = 'data: {"choices":[{"index":0}],"usage":null}';
    const other = Buffer.from(`${events.slice(0, -1).join("")}${last}`);
    expect(run(other, []).forwarded.toString()).toBe(`${expected}${last}`);
  });

  it("forwards an event that outgrows the hold limit as it arrives, whatever it is", () => {
    const large = `data: {"choices":[],"usage":{"prompt_tokens":1},"padding":"${"x".repeat(100_000)}"}\n\n`;
    const bytes = Buffer.from(`${large}${usageEvent}data: [DONE]\n\n`);
    const under = filter();
    const forwarded: Buffer[] = [];
    for (let at = 0; at < bytes.length; at += 8192) {
      const piece = under.pass(bytes.subarray(at, at + 8192));
      if (piece !== null) forwarded.push(piece);
      // Of the large event, never more than the limit (64 KiB) is held back.
      const passed = Math.min(at + 8192, large.length);
      expect(Buffer.concat(forwarded).length).toBeGreaterThanOrEqual(passed - 64 * 1024);
    }
    expect(under.end()).toBeNull();
    expect(Buffer.concat(forwarded).toString()).toBe(`${large}data: [DONE]\n\n`);
  });

  it("forwards nothing of an event the stream cut short, and meters what came before", () => {
    const cut = stream.subarray(0, usageStart + 20);
    const under = filter();
    const forwarded = under.pass(cut);
    expect(forwarded?.toString()).toBe(stream.subarray(0, usageStart).toString());
    expect(under.meter.finish()).toEqual({
      usage: { inputTokens: null, outputTokens: null, cachedInputTokens: null, reasoningTokens: null },
      model: "gpt-4o-mini",
    });
  });
});
