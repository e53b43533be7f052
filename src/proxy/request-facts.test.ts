import { brotliCompressSync, deflateSync, gzipSync } from "node:zlib";
import { describe, expect, it } from "vitest";
import { imagenPrediction, openAiImageGeneration } from "../providers/image-calls.js";
import { createProviderAdapters } from "../providers/provider-adapter.js";
import { RequestFacts } from "./request-facts.js";

const adapters = createProviderAdapters({
  providerABaseUrl: "http://a.test/v1",
  providerBBaseUrl: "http://b.test/v1",
  providerCBaseUrl: "http://c.test/v1beta",
  providerBVersion: "2023-06-01",
  clientIdentifier: "sluice/test",
});
const a = adapters["provider-a"];
const generation = JSON.stringify({ model: "gpt-image-1", prompt: "a cat", n: 3, size: "1024x1536" });

describe("RequestFacts", () => {
  it("reads an uncompressed body as it is, without a promise", () => {
    const facts = new RequestFacts(a, "images/generations", Buffer.from(generation), undefined, 1024);
    expect(facts.model()).toBe("gpt-image-1");
    expect(facts.requestedImages(openAiImageGeneration)).toEqual({
      count: 3,
      size: "1024x1536",
      quality: null,
    });
  });

  it("reads a compressed body from its decoded bytes, in any coding Sluice undoes", async () => {
    const bodies: Array<[Buffer, string]> = [
      [gzipSync(generation), "gzip"],
      [deflateSync(generation), "deflate"],
      [brotliCompressSync(generation), "br"],
      [gzipSync(generation), "identity, x-gzip"],
    ];
    for (const [body, coding] of bodies) {
      const facts = new RequestFacts(a, "images/generations", body, coding, 1024);
      expect(await facts.model(), coding).toBe("gpt-image-1");
      expect((await facts.requestedImages(openAiImageGeneration)).count, coding).toBe(3);
    }
  });

  it("reads a body that does not decode as empty: no model, the default count, never an error", async () => {
    const bodies: Array<[Buffer, string]> = [
      [gzipSync(generation), "zstd"],
      [Buffer.from(generation), "gzip"],
      [gzipSync(generation), "gzip, gzip"],
      // Its model comes first, but it decodes beyond the cap.
      [gzipSync(`${generation.slice(0, -1)},"pad":"${" ".repeat(4096)}"}`), "gzip"],
    ];
    for (const [body, coding] of bodies) {
      const facts = new RequestFacts(a, "images/generations", body, coding, 1024);
      expect(await facts.model(), coding).toBeNull();
      expect(await facts.requestedImages(openAiImageGeneration), coding).toEqual({
        count: 1,
        size: null,
        quality: null,
      });
    }
  });

  it("names provider C's model from its path, without decoding the body", async () => {
    const facts = new RequestFacts(
      adapters["provider-c"],
      "v1beta/models/imagen-4.0-generate-001:predict",
      Buffer.from("not gzip"),
      "gzip",
      1024,
    );
    // Without decoding the body: the path says.
    expect(facts.model()).toBe("imagen-4.0-generate-001");
    expect((await facts.requestedImages(imagenPrediction)).count).toBe(4);
  });
});
