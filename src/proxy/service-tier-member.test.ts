import { describe, expect, it } from "vitest";
import { lastUsageObject } from "./json-body-usage.js";
import { serviceTierMember } from "./service-tier-member.js";

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

  it("finds the answer's own past any number of keys of that name that are not the answer's", () => {
    // A tool's schema is the app's to write: nine such keys made the tier unreadable, and the
    // call's cost unknown (null), which the spend cap does not count.
    const decoys = Object.fromEntries(
      Array.from({ length: 1000 }, (_, index) => [`k${index}`, { service_tier: "flex" }]),
    );
    const tools = [{ type: "function", parameters: decoys }];
    expect(tierOf({ id: "r", service_tier: "priority", tools, usage })).toBe("priority");
    expect(tierOf({ id: "r", tools, usage })).toBeUndefined();
    // Nested in one another, each key's object holds every later one: read once, not once per key.
    const levels = 20_000;
    const chain = `${'{"service_tier":"flex","pad":"xxxxxxxxxxxxxxxxxxxx","next":'.repeat(levels)}{}${"}".repeat(levels)}`;
    const body = Buffer.from(
      `{"id":"r","service_tier":"priority","tools":[${chain}],"usage":${JSON.stringify(usage)}}`,
    );
    expect(() => JSON.parse(body.toString())).not.toThrow();
    // A walk per key would read ~24 GB here and run past the test's time-out; no clock is read.
    expect(serviceTierMember(body, 0)).toBe("priority");
    expect(serviceTierMember(body, 1)).toBe("priority");
  });
});

describe("provider A's service_tier, stepping over the usage object found", () => {
  const usageKey = Buffer.from('"usage"');
  const read = (text: string, depth: 0 | 1) => {
    const body = Buffer.from(text);
    return serviceTierMember(body, depth, lastUsageObject(body, usageKey, 2));
  };

  it("finds a stream's last chat chunk's tier before its usage, and never one inside the usage", () => {
    const usage = {
      prompt_tokens: 9,
      completion_tokens: 12,
      prompt_tokens_details: { cached_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 0 },
    };
    const chunk = { id: "c", object: "chat.completion.chunk", service_tier: "flex", choices: [], usage };
    expect(read(JSON.stringify(chunk), 1)).toBe("flex");
    expect(read(JSON.stringify({ ...chunk, obfuscation: "x".repeat(300) }), 1)).toBe("flex");
    // A key of that name inside the usage object is the usage's, not the chunk's.
    const { service_tier: _, ...untiered } = chunk;
    expect(
      read(JSON.stringify({ ...untiered, usage: { ...usage, service_tier: "priority" } }), 1),
    ).toBeUndefined();
    // The tier far before the usage (a Responses API object's tools between them).
    const tools = Array.from({ length: 50 }, (_, index) => ({ type: "function", name: `tool${index}` }));
    const response = { id: "r", output: [], service_tier: "priority", tools, usage, metadata: {} };
    expect(read(JSON.stringify(response), 0)).toBe("priority");
    expect(read(JSON.stringify({ type: "response.completed", response }), 1)).toBe("priority");
  });

  it("reads as the whole pass reads the answer with the usage object emptied", () => {
    let seed = 777;
    const random = () => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return seed / 0x7fffffff;
    };
    const pick = <T>(values: T[]) => values[Math.floor(random() * values.length)] as T;
    const member = (depth: number): unknown => {
      const roll = random();
      if (depth > 3 || roll < 0.3) return pick([null, 2, pick(["flex", "priority", 'x"usage":{']), false]);
      if (roll < 0.45) return [member(depth + 1)];
      const made: Record<string, unknown> = {};
      for (let index = Math.floor(random() * 4); index > 0; index--)
        made[pick(["usage", "service_tier", "a", "b"])] = member(depth + 1);
      return made;
    };
    for (let round = 0; round < 3000; round++) {
      const answer = member(0);
      if (typeof answer !== "object" || answer === null || Array.isArray(answer)) continue;
      const text = JSON.stringify(answer, null, random() < 0.3 ? 1 : undefined);
      const body = Buffer.from(text);
      const found = lastUsageObject(body, usageKey, 2);
      const emptied = Buffer.from(body);
      if (found) emptied.fill(0x20, found.start + 1, found.end);
      for (const depth of [0, 1] as const)
        expect(serviceTierMember(body, depth, found), text).toBe(serviceTierMember(emptied, depth));
    }
  });
});

describe("provider A's service_tier, against a parse of random answers", () => {
  // Keys and strings that look like the member from inside a string, and members of that name
  // nested anywhere, with values of every type.
  const strings = [
    "flex",
    "priority",
    'a "service_tier',
    "service_tier",
    '\\"service_tier\\"',
    "x\\",
    'b":"f',
  ];
  const keys = ["a", "service_tier", 'service_tier"', "k", "usage"];
  let seed = 12345;
  const random = () => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed / 0x7fffffff;
  };
  const pick = <T>(values: T[]) => values[Math.floor(random() * values.length)] as T;
  const value = (depth: number): unknown => {
    const roll = random();
    if (depth > 4 || roll < 0.3) return pick([null, 1, true, pick(strings)]);
    if (roll < 0.5) return Array.from({ length: Math.floor(random() * 3) }, () => value(depth + 1));
    return object(depth + 1);
  };
  const object = (depth: number): Record<string, unknown> => {
    const made: Record<string, unknown> = {};
    for (let index = Math.floor(random() * 4); index > 0; index--) made[`${pick(keys)}`] = value(depth);
    if (random() < 0.4) made.service_tier = pick<unknown>([...strings, null, 3]);
    return made;
  };
  const tier = (holder: unknown) => {
    const found = (holder as { service_tier?: unknown }).service_tier;
    return typeof found === "string" ? found : undefined;
  };

  it("finds what a parse finds: the root's member, or at depth 1 the last of its own and its objects'", () => {
    for (let round = 0; round < 5000; round++) {
      const answer = object(0);
      const text = JSON.stringify(answer, null, random() < 0.3 ? 1 : undefined);
      expect(serviceTierMember(Buffer.from(text), 0), text).toBe(tier(answer));
      // In text order: each member of the root, an object member's own member standing in its place.
      let last: string | undefined;
      for (const [name, member] of Object.entries(answer)) {
        const found =
          typeof member === "string"
            ? name === "service_tier"
              ? member
              : undefined
            : typeof member === "object" && member !== null && !Array.isArray(member)
              ? tier(member)
              : undefined;
        if (found !== undefined) last = found;
      }
      expect(serviceTierMember(Buffer.from(text), 1), text).toBe(last);
    }
  });
});
