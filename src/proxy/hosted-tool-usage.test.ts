import { describe, expect, it } from "vitest";
import { HostedToolWatch } from "./hosted-tool-usage.js";

describe("HostedToolWatch", () => {
  const watched = (chunks: string[]) => {
    const watch = new HostedToolWatch();
    for (const chunk of chunks) watch.push(Buffer.from(chunk));
    return watch.seen;
  };

  it("finds a hosted tool's output item however its name is split across chunks", () => {
    const text = `{"output":[{"type": "web_search_call","id":"ws_1"}],"x":"${"A".repeat(40)}"}`;
    expect(watched([text])).toBe(true);
    expect(watched([...text])).toBe(true);
    for (let at = 0; at <= text.length; at++) expect(watched([text.slice(0, at), text.slice(at)])).toBe(true);
    const image = `"type":"image_generation_call"`;
    for (let at = 0; at <= image.length; at++)
      expect(watched(["x".repeat(50), image.slice(0, at), image.slice(at), "y"])).toBe(true);
  });

  it("finds none in a string that only spells the name, escaped", () => {
    const text = `{"text":"the \\"web_search_call\\" and \\"image_generation_call\\" items"}`;
    expect(watched([text])).toBe(false);
    expect(watched([...text])).toBe(false);
  });
});
