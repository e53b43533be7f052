import { describe, expect, it } from "vitest";
import { storedModelName } from "./stored-model-name.js";

describe("stored model name", () => {
  it("keeps a model name as it is", () => {
    expect(storedModelName("gpt-4o-mini")).toBe("gpt-4o-mini");
    expect(storedModelName("models/gemini-2.5-flash")).toBe("models/gemini-2.5-flash");
    expect(storedModelName(null)).toBeNull();
  });

  it("replaces control characters (NUL, which PostgreSQL text refuses) and cuts it at 200 characters", () => {
    expect(storedModelName("gpt-4o\u0000x\n\u007f")).toBe("gpt-4o?x??");
    expect(storedModelName("m".repeat(5000))).toBe("m".repeat(200));
  });
});
