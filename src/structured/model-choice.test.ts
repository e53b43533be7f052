import { describe, expect, it } from "vitest";
import { defaultModel } from "../usage/model-catalogue.js";
import { chooseModel, routeModels } from "./model-choice.js";

describe("chooseModel", () => {
  it("sends a catalogued model without the models/ prefix the admin API accepts", () => {
    expect(chooseModel({ model: "models/gpt-4.1" }, "provider-a", "text")).toBe("gpt-4.1");
    expect(chooseModel({ model: "models/gemini-2.5-flash" }, "provider-c", "vision")).toBe(
      "gemini-2.5-flash",
    );
    expect(chooseModel({ model: "gpt-4.1" }, "provider-a", "text")).toBe("gpt-4.1");
  });

  it("trusts a model the catalogue does not know as configured, and sends it without the prefix too", () => {
    expect(chooseModel({ model: "models/my-tuned-model" }, "provider-c", "text")).toBe("my-tuned-model");
    expect(chooseModel({ model: "models/gpt-9-preview" }, "provider-a", "pdf")).toBe("gpt-9-preview");
    expect(chooseModel({ model: "my-tuned-model" }, "provider-c", "vision")).toBe("my-tuned-model");
  });

  it("uses the provider's default without a model, or for a model lacking the capability", () => {
    expect(chooseModel({ model: null }, "provider-a", "text")).toBe(defaultModel("provider-a", "structured"));
    expect(chooseModel({ model: "models/text-embedding-3-small" }, "provider-a", "text")).toBe(
      defaultModel("provider-a", "structured"),
    );
  });

  it("lists each structured route with the model it sends, which may differ", () => {
    expect(routeModels({ model: "claude-3-5-haiku-latest" }, "provider-b")).toEqual([
      { kind: "text", route: "/v1/text", model: "claude-3-5-haiku-latest" },
      { kind: "vision", route: "/v1/vision", model: "claude-3-5-haiku-latest" },
      { kind: "pdf", route: "/v1/pdf", model: defaultModel("provider-b", "pdf") },
    ]);
  });
});
