import { describe, expect, it } from "vitest";
import { structuredOnEachProvider } from "../support/structured-on-each-provider.js";

/**
 * An output schema whose properties are named as what every object inherits (`constructor`,
 * `toString`, …): a race result's `constructor` (the team), say. An answer that leaves out an
 * optional one is valid; Ajv read the inherited member (a function) as the property's value.
 */
const schema = {
  type: "object",
  properties: {
    driver: { type: "string" },
    constructor: { type: "string" },
    toString: { type: "string" },
    valueOf: { type: "number" },
  },
  required: ["driver"],
  additionalProperties: false,
};

describe("an output schema naming properties as an object's inherited members", () => {
  const on = structuredOnEachProvider(schema, { driver: "Lewis" });

  it.each(["provider-a", "provider-b", "provider-c"] as const)(
    "answers an object leaving the optional ones out on %s, without a repair",
    async (provider) => {
      const response = await on.postText(provider);
      const text = await response.text();
      expect(response.status, text).toBe(200);
      expect(JSON.parse(text).object ?? JSON.parse(text)).toMatchObject({ driver: "Lewis" });
      expect(on.fake.requests.length).toBe(1);
    },
  );
});
