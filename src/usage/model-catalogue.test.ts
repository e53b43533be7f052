import { describe, expect, it } from "vitest";
import { findModel } from "./model-catalogue.js";

describe("findModel's memo", () => {
  it("answers a name the same way each time, found or not, also after the memo filled up", () => {
    const first = findModel("provider-a", "gpt-4o-mini-2024-07-18");
    expect(first?.id).toBe("gpt-4o-mini");
    expect(findModel("provider-a", "not-a-model")).toBeNull();
    for (let index = 0; index < 2500; index++) findModel("provider-a", `custom-${index}`);
    expect(findModel("provider-a", "gpt-4o-mini-2024-07-18")).toBe(first);
    expect(findModel("provider-a", "not-a-model")).toBeNull();
    // Per provider: the same name under another provider is looked up there.
    expect(findModel("provider-b", "gpt-4o-mini")).toBeNull();
    expect(findModel("provider-c", "models/gemini-2.5-flash")?.id).toBe("gemini-2.5-flash");
  });
});
