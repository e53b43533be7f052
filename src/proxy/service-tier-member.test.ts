import { describe, expect, it } from "vitest";
import { serviceTierMember, unreadable } from "./service-tier-member.js";

const tierOf = (answer: unknown, depth: 0 | 1 = 0) =>
  serviceTierMember(Buffer.from(JSON.stringify(answer)), depth);

describe("provider A's service_tier, read from the answer's own object", () => {
  const usage = { prompt_tokens: 1, completion_tokens: 1 };

  it("finds the answer's member after or before its usage, and nothing where it names none", () => {
    expect(tierOf({ id: "c", choices: [], usage, service_tier: "flex", system_fingerprint: "fp" })).toBe(
      "flex",
    );
    expect(tierOf({ id: "r", output: [], service_tier: "priority", usage, metadata: {} })).toBe("priority");
    expect(tierOf({ id: "c", choices: [], usage })).toBeUndefined();
    expect(tierOf({ id: "c", choices: [], usage, service_tier: null })).toBeUndefined();
    // Pretty-printed, with a newline after it.
    const spaced = `${JSON.stringify({ id: "c", usage, service_tier: "flex" }, null, 2)}\n`;
    expect(serviceTierMember(Buffer.from(spaced), 0)).toBe("flex");
  });

  it("passes over a key of that name nested in the app's metadata, a prompt's variables or a tool's schema", () => {
    const nested = {
      id: "r",
      prompt: { id: "p", variables: { service_tier: "flex" } },
      service_tier: "priority",
      tools: [{ type: "function", parameters: { default: { service_tier: "flex" } } }],
      usage,
      metadata: { service_tier: "flex", 'a "service_tier': "flex" },
    };
    expect(tierOf(nested)).toBe("priority");
    const { service_tier: _, ...without } = nested;
    expect(tierOf(without)).toBeUndefined();
  });

  it("takes a Responses API event's response member at depth 1, but not deeper", () => {
    const response = { id: "r", service_tier: "flex", usage, metadata: { service_tier: "priority" } };
    const event = { type: "response.completed", sequence_number: 3, response };
    expect(tierOf(event, 1)).toBe("flex");
    // A body is the answer itself: its metadata's key is one level down, not the answer's.
    expect(tierOf({ id: "r", usage, metadata: { service_tier: "flex" } }, 0)).toBeUndefined();
    const { service_tier: _, ...untiered } = response;
    expect(tierOf({ ...event, response: untiered }, 1)).toBeUndefined();
  });

  it("passes over a key of that name in an object inside an array: a choice's is not the chunk's", () => {
    const chunk = {
      id: "c",
      object: "chat.completion.chunk",
      choices: [{ index: 0, delta: {}, service_tier: "flex" }],
    };
    expect(tierOf(chunk, 1)).toBeUndefined();
    expect(tierOf({ ...chunk, service_tier: "priority" }, 1)).toBe("priority");
  });

  it("reads the last bytes of a body over the cap as the whole", () => {
    const body = Buffer.from(
      JSON.stringify({ id: "c", choices: [{ text: "x".repeat(100) }], usage, service_tier: "flex" }),
    );
    expect(serviceTierMember(body.subarray(60), 0)).toBe("flex");
  });

  it("gives up, as unreadable, after eight keys of that name that are not the answer's", () => {
    const decoys = Object.fromEntries(
      Array.from({ length: 9 }, (_, index) => [`k${index}`, { service_tier: "flex" }]),
    );
    expect(tierOf({ id: "r", service_tier: "priority", usage, metadata: decoys })).toBe(unreadable);
    const fewer = Object.fromEntries(Object.entries(decoys).slice(0, 7));
    expect(tierOf({ id: "r", service_tier: "priority", usage, metadata: fewer })).toBe("priority");
  });
});
