import { describe, expect, it } from "vitest";
import { structuredOnEachProvider } from "../support/structured-on-each-provider.js";

/**
 * The repair asks the model again, naming why its answer does not match the schema. Ajv names every
 * mismatch (allErrors), so an answer of many wrong items made a repair prompt many times its size,
 * sent to the provider and billed as input: 5,000 strings for integers (20 KB) were a 149 KB prompt.
 */
describe("the repair prompt", () => {
  const schema = {
    type: "object",
    properties: { counts: { type: "array", items: { type: "integer" } } },
    required: ["counts"],
    additionalProperties: false,
  };
  const on = structuredOnEachProvider(schema, { counts: Array.from({ length: 5_000 }, () => "x") });

  it("names at most 50 of the answer's mismatches, and how many more there were", async () => {
    const response = await on.postText("provider-a");
    expect(response.status).toBe(502);
    const repair = on.fake.requests.at(-1);
    const sent = JSON.parse(repair?.body.toString() ?? "{}") as {
      messages: Array<{ role: string; content: unknown }>;
    };
    const asked = sent.messages.at(-1);
    expect(asked?.role).toBe("user");
    const text = JSON.stringify(asked?.content);
    expect(text.length).toBeLessThan(8 * 1024);
    expect(text).toContain("/counts/0 must be integer; /counts/1 must be integer;");
    expect(text).toContain("/counts/49 must be integer; and more than 950 other problems)");
  });
});

/**
 * Ajv's allErrors built an error object per wrong item, and Sluice a string for each, whatever the
 * answer's size: 100,000 wrong items were 100,000 of each on every attempt (~370 ms of the event
 * loop and ~36 MiB), only for the repair prompt to name 50 of them. The search stops past 1,000.
 */
describe("the repair prompt of a large wrong answer", () => {
  const schema = {
    type: "object",
    properties: { counts: { type: "array", items: { type: "integer" } } },
    required: ["counts"],
    additionalProperties: false,
  };
  const on = structuredOnEachProvider(schema, { counts: Array.from({ length: 100_000 }, () => "x") });

  it("names the first 50 mismatches and says that more than 950 others were found, without counting them all", async () => {
    const response = await on.postText("provider-a");
    expect(response.status).toBe(502);
    const body = (await response.json()) as { error: { message: string } };
    expect(body.error.message).toBe(
      "The model's output did not match the project's output schema, also after one repair attempt",
    );
    const repair = on.fake.requests.at(-1);
    const sent = JSON.parse(repair?.body.toString() ?? "{}") as {
      messages: Array<{ role: string; content: unknown }>;
    };
    const text = JSON.stringify(sent.messages.at(-1)?.content);
    expect(text.length).toBeLessThan(8 * 1024);
    expect(text).toContain("/counts/49 must be integer; and more than 950 other problems)");
  });
});
