import { describe, expect, it } from "vitest";
import { heapUsedAfterGc } from "../../test/support/garbage-collection.js";
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

  it("replaces a lone surrogate, given or left by the cut in a pair, with U+FFFD, as PostgreSQL stores it", () => {
    expect(storedModelName("x\ud800y\udc00")).toBe("x\ufffdy\ufffd");
    expect(storedModelName(`a${"\u{1f600}".repeat(100)}`)).toBe(`a${"\u{1f600}".repeat(99)}\ufffd`);
    expect(storedModelName("\u{1f600}\u{10000}")).toBe("\u{1f600}\u{10000}");
  });

  it("keeps its own characters, not the body or request line the name was cut from", () => {
    // A usage row waits in the queue (100,000 rows) while the database is down: a name that is a
    // view of the 16 KiB it was cut from (a regular expression's capture in a body, a path segment)
    // would keep all of it.
    const before = heapUsedAfterGc();
    const kept = Array.from({ length: 2000 }, (_, index) => {
      const line = `${"x".repeat(16_000)}gpt-4o-mini-${String(index).padStart(6, "0")}`;
      return storedModelName(line.slice(16_000));
    });
    const grown = heapUsedAfterGc() - before;
    expect(kept[1999]).toBe("gpt-4o-mini-001999");
    expect(grown).toBeLessThan((2000 * 16_000) / 10);
  });
});
