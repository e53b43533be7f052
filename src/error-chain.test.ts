import { describe, expect, it } from "vitest";
import { errorChain } from "./error-chain.js";
import { GatewayError } from "./errors.js";

const messages = (error: unknown) => [...errorChain(error)].map((each) => each.message);

describe("errorChain", () => {
  it("yields the error, then its cause's chain", () => {
    const error = new Error("top", { cause: new Error("middle", { cause: new Error("bottom") }) });
    expect(messages(error)).toEqual(["top", "middle", "bottom"]);
  });

  it("yields an AggregateError's errors, each with its cause, before the AggregateError's own cause", () => {
    const error = new AggregateError(
      [new Error("first", { cause: new Error("first's cause") }), "not an error", new Error("second")],
      "all",
      { cause: new Error("all's cause") },
    );
    expect(messages(error)).toEqual(["all", "first", "first's cause", "second", "all's cause"]);
  });

  it("stops at a value that is not an Error", () => {
    expect(messages("ECONNREFUSED")).toEqual([]);
    expect(messages(new Error("top", { cause: { code: "ECONNREFUSED" } }))).toEqual(["top"]);
  });

  it("stops at a GatewayError, which already carries its answer, and yields nothing under it", () => {
    const answered = new GatewayError("SERVICE_UNAVAILABLE", "answered", {
      cause: new Error("under"),
      details: { retryable: true },
    });
    expect(messages(answered)).toEqual([]);
    expect(messages(new Error("top", { cause: answered }))).toEqual(["top"]);
  });

  it("reads no deeper than four links, so a cause that cycles back ends", () => {
    const cyclic = new Error("again");
    cyclic.cause = cyclic;
    expect(messages(cyclic)).toHaveLength(5);
  });
});
