import { randomBytes } from "node:crypto";
import { brotliCompressSync, deflateSync, gzipSync } from "node:zlib";
import { describe, expect, it } from "vitest";
import { collectGarbage } from "../../test/support/garbage-collection.js";
import { createBodyBudget } from "../http/body-budget.js";
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

  describe("once the body is sent", () => {
    const large = Buffer.from(
      JSON.stringify({ model: "gpt-image-1", prompt: "x".repeat(100_000), n: 2, size: "1024x1024" }),
    );
    const sentOnce = (facts: RequestFacts) => [...(facts.upstreamBody() as Iterable<Buffer>)];

    it("hands undici a body over 64 KiB as an iterable, and lets it go, keeping what it named", () => {
      const facts = new RequestFacts(a, "images/generations", large, undefined, 1 << 20);
      expect(facts.upstreamBody()).not.toBeInstanceOf(Buffer);
      expect(sentOnce(facts)).toEqual([large]);
      facts.release(openAiImageGeneration);
      // Nothing left to send or read: an attempt after this one would get no bytes.
      expect(sentOnce(facts)).toEqual([]);
      expect(facts.model()).toBe("gpt-image-1");
      expect(facts.imageModel(openAiImageGeneration)).toBe("gpt-image-1");
      expect(facts.requestedImages(openAiImageGeneration)).toEqual({
        count: 2,
        size: "1024x1024",
        quality: null,
      });
    });

    it("reads a large compressed body's facts from its decoded copy when it lets it go", async () => {
      const compressed = gzipSync(large);
      // Small compressed, large decoded: the decoded copy is what would be held.
      expect(compressed.length).toBeLessThan(64 * 1024);
      const facts = new RequestFacts(a, "chat/completions", compressed, "gzip", 1 << 20, large);
      expect(facts.upstreamBody()).toBe(compressed);
      facts.release(null);
      expect(await facts.model()).toBe("gpt-image-1");
      // Not decoded before (forwarded as sent): decoded once, as it is let go.
      const noisy = gzipSync(
        JSON.stringify({ model: "gpt-4o", input: randomBytes(100_000).toString("base64") }),
      );
      expect(noisy.length).toBeGreaterThan(64 * 1024);
      const undecoded = new RequestFacts(a, "responses", noisy, "gzip", 1 << 20);
      undecoded.release(null);
      expect(sentOnce(undecoded)).toEqual([]);
      expect(await undecoded.model()).toBe("gpt-4o");
    });

    // A capped project's image generation is priced from its body before it is sent (the proxy
    // route's holdToImagePrice): a compressed one is decoded for it then. A body of a few KiB may
    // decode to SLUICE_MAX_BODY_BYTES (JSON's whitespace between members): that copy was held for the
    // whole answer (an image generation's seconds to minutes) and counted in no share, so a few
    // hundred such calls held gigabytes past SLUICE_MAX_BUFFERED_BODY_BYTES.
    it("counts a small compressed body's copy decoded before it is sent in its share, and lets it go once sent", async () => {
      const padded = `{"model":"gpt-image-1",${" ".repeat(16 << 20)}"prompt":"a cat","n":2,"quality":"low"}`;
      const compressed = gzipSync(padded);
      expect(compressed.length).toBeLessThan(64 * 1024);
      const counted = { held: 0 };
      const share = {
        take: () => true,
        takeIfRoom: (bytes: number) => {
          counted.held += bytes;
          return true;
        },
        fits: () => true,
        hold: (bytes: number) => {
          counted.held += bytes;
        },
        giveBack: (bytes: number) => {
          counted.held -= bytes;
        },
        release: () => {
          counted.held = 0;
        },
      };
      // A Buffer's memory goes with its finalizer, which runs after the collection, between turns.
      const external = async () => {
        for (let round = 0; round < 4; round++) {
          collectGarbage();
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
        return process.memoryUsage().arrayBuffers;
      };
      const before = await external();
      const facts = new RequestFacts(
        a,
        "images/generations",
        compressed,
        "gzip",
        20 << 20,
        null,
        "application/json",
        share,
      );
      expect(await facts.requestedImages(openAiImageGeneration)).toEqual({
        count: 2,
        size: null,
        quality: "low",
      });
      expect(counted.held).toBe(padded.length);
      expect(facts.upstreamBody()).toBe(compressed);
      facts.release(openAiImageGeneration);
      expect(counted.held).toBe(0);
      // What it named is kept, and the compressed body undici holds.
      expect(await facts.model()).toBe("gpt-image-1");
      expect(await facts.imageModel(openAiImageGeneration)).toBe("gpt-image-1");
      expect(await facts.requestedImages(openAiImageGeneration)).toEqual({
        count: 2,
        size: null,
        quality: "low",
      });
      expect(facts.upstreamBody()).toBe(compressed);
      expect((await external()) - before, "the decoded copy let go").toBeLessThan(4 << 20);
    });

    it("takes a compressed body's copy decoded before it is sent into the budget, refused (503) when it does not fit", async () => {
      const mib = 1024 * 1024;
      const budget = createBodyBudget(3 * mib);
      const other = budget.share();
      expect(other.take(2 * mib)).toBe(true);
      const padded = `{"model":"gpt-image-1",${" ".repeat(2 * mib)}"prompt":"a cat","n":2,"quality":"low"}`;
      const compressed = gzipSync(padded);
      const share = budget.share();
      expect(share.take(compressed.length)).toBe(true);
      const facts = new RequestFacts(
        a,
        "images/generations",
        compressed,
        "gzip",
        20 * mib,
        null,
        "application/json",
        share,
      );
      // Its facts are read all the same (the failure row names its model)...
      expect((await facts.requestedImages(openAiImageGeneration)).count).toBe(2);
      // ...but its copy is not held past the budget, and the call is refused before it is sent.
      expect(budget.held()).toBe(2 * mib + compressed.length);
      expect(() => facts.requireDecodedHeld()).toThrow(
        expect.objectContaining({ code: "SERVICE_UNAVAILABLE" }),
      );
      expect(budget.refused()).toBe(1);
      expect(await facts.model()).toBe("gpt-image-1");
      // Alone in the budget, it fits, and is given back once sent.
      other.release();
      const alone = budget.share();
      expect(alone.take(compressed.length)).toBe(true);
      const fits = new RequestFacts(
        a,
        "images/generations",
        compressed,
        "gzip",
        20 * mib,
        null,
        "application/json",
        alone,
      );
      share.release();
      expect((await fits.requestedImages(openAiImageGeneration)).count).toBe(2);
      expect(() => fits.requireDecodedHeld()).not.toThrow();
      expect(budget.held()).toBe(compressed.length + padded.length);
      fits.release(openAiImageGeneration);
      expect(budget.held()).toBe(compressed.length);
    });

    it("keeps a body of at most 64 KiB, read only when asked, and hands undici the Buffer", () => {
      const body = Buffer.from(generation);
      const facts = new RequestFacts(a, "images/generations", body, undefined, 1024);
      expect(facts.upstreamBody()).toBe(body);
      facts.release(openAiImageGeneration);
      expect(facts.upstreamBody()).toBe(body);
      expect(facts.model()).toBe("gpt-image-1");
    });
  });
});
