import { brotliCompressSync, deflateRawSync, deflateSync, gzipSync } from "node:zlib";
import { describe, expect, it, vi } from "vitest";
import {
  CompressedKeyMask,
  maskKeyInHeader,
  maxCompressedErrorBytes,
  ReflectedKeyMask,
} from "./reflected-key-mask.js";

// zlib's synchronous decoders would hold the event loop (and every other call) for as long as a
// compressed error takes to decode: the mask must not use them.
vi.mock("node:zlib", async (importOriginal) => {
  const zlib = await importOriginal<typeof import("node:zlib")>();
  const refused = (name: string) => () => {
    throw new Error(`${name} blocks the event loop`);
  };
  return {
    ...zlib,
    gunzipSync: refused("gunzipSync"),
    inflateSync: refused("inflateSync"),
    inflateRawSync: refused("inflateRawSync"),
    brotliDecompressSync: refused("brotliDecompressSync"),
    unzipSync: refused("unzipSync"),
  };
});

const key = "sk-live-0123456789abcdef";
const masked = "*".repeat(key.length);

function passAll(mask: ReflectedKeyMask, chunks: Buffer[]): string {
  const out = chunks.map((chunk) => mask.pass(chunk) ?? Buffer.alloc(0));
  return Buffer.concat([...out, mask.end() ?? Buffer.alloc(0)]).toString("latin1");
}

describe("reflected key mask", () => {
  const body = `{"error":"bad key ${key}, again ${key}${key}."}`;
  const expected = body.replaceAll(key, masked);

  it("masks every occurrence wherever two cuts fall, and keeps every other byte in order", () => {
    const bytes = Buffer.from(body, "latin1");
    for (let first = 0; first <= bytes.length; first++)
      for (let second = first; second <= bytes.length; second += 3) {
        const chunks = [bytes.subarray(0, first), bytes.subarray(first, second), bytes.subarray(second)];
        expect(passAll(new ReflectedKeyMask(Buffer.from(key), null), chunks)).toBe(expected);
      }
  });

  it("lets the meter read the provider's own bytes, and leaves the provider's chunk unchanged", () => {
    const seen: Buffer[] = [];
    const meter = { push: (chunk: Buffer) => void seen.push(chunk), finish: () => ({}) } as never;
    const chunk = Buffer.from(body, "latin1");
    expect(passAll(new ReflectedKeyMask(Buffer.from(key), meter), [chunk])).toBe(expected);
    expect(Buffer.concat(seen).toString("latin1")).toBe(body);
    expect(chunk.toString("latin1")).toBe(body);
  });

  it("passes a body without the key unchanged, holding back only the last key-length bytes", () => {
    const mask = new ReflectedKeyMask(Buffer.from(key), null);
    expect(mask.pass(Buffer.from("short"))).toBeNull();
    expect(mask.pass(Buffer.from("x".repeat(40)))?.toString()).toBe(
      `short${"x".repeat(40 - key.length + 1)}`,
    );
    expect(mask.end()?.toString()).toBe("x".repeat(key.length - 1));
  });

  // A body cut inside a quote of the key (a content-length that ends mid-key, a connection closed
  // there) ends on the key's first bytes: all but the last few would reach the client.
  it("masks a body's end that begins the key, from 8 of its bytes, wherever the chunks were cut", () => {
    for (const length of [8, 12, key.length - 1]) {
      const cutBody = `{"error":"bad key ${key.slice(0, length)}`;
      const bytes = Buffer.from(cutBody, "latin1");
      for (let first = 0; first <= bytes.length; first++) {
        const chunks = [bytes.subarray(0, first), bytes.subarray(first)];
        expect(passAll(new ReflectedKeyMask(Buffer.from(key), null), chunks)).toBe(
          `{"error":"bad key ${"*".repeat(length)}`,
        );
      }
    }
    // Seven bytes or fewer are a provider's public prefix at most (`sk-proj`), and may be the body's
    // own text: kept.
    expect(passAll(new ReflectedKeyMask(Buffer.from(key), null), [Buffer.from('{"a":"x"} sk-live')])).toBe(
      '{"a":"x"} sk-live',
    );
  });

  it("replaces the key in a header value", () => {
    expect(maskKeyInHeader(`Bearer ${key}`, key)).toBe("Bearer [redacted]");
    expect(maskKeyInHeader("no key here", key)).toBe("no key here");
    expect(maskKeyInHeader(`${key}, ${key}`, key)).toBe("[redacted], [redacted]");
  });

  describe("a key with characters encoders escape", () => {
    const escapable = "q8+Zr/0Ab+Kd/7WmX=";
    const forms: [string, string][] = [
      ["PHP's JSON (`\\/`)", escapable.replaceAll("/", "\\/")],
      ["JSON \\u escapes, any case", escapable.replaceAll("+", "\\u002B").replaceAll("=", "\\u003d")],
      [
        "every character \\u-escaped",
        [...escapable].map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`).join(""),
      ],
      ["percent-encoded", encodeURIComponent(escapable)],
      [
        "percent-encoded, lower case",
        encodeURIComponent(escapable).replace(/%[0-9A-F]{2}/g, (hex) => hex.toLowerCase()),
      ],
    ];

    it.each(forms)("masks it %s wherever two cuts fall, each byte of it becoming a `*`", (_, form) => {
      const body = `{"error":"bad key \\\\${form}, again ${escapable} and ${form}."}`;
      const expected = body
        .replaceAll(form, "*".repeat(form.length))
        .replaceAll(escapable, "*".repeat(escapable.length));
      const bytes = Buffer.from(body, "latin1");
      for (let first = 0; first <= bytes.length; first += 2)
        for (let second = first; second <= bytes.length; second += 5) {
          const chunks = [bytes.subarray(0, first), bytes.subarray(first, second), bytes.subarray(second)];
          expect(passAll(new ReflectedKeyMask(Buffer.from(escapable), null), chunks)).toBe(expected);
        }
    });

    it("leaves alone what decodes to another text, and an escape that only looks like one", () => {
      const other = `{"a":"${encodeURIComponent("q8+Zr/0Ab+Kd/7WmY=")}","b":"q8\\u002BZr\\\\/0Ab+Kd/7WmX="}`;
      expect(passAll(new ReflectedKeyMask(Buffer.from(escapable), null), [Buffer.from(other)])).toBe(other);
    });

    it("replaces it escaped in a header value", () => {
      expect(maskKeyInHeader(`https://x.example/?key=${encodeURIComponent(escapable)}&a=1`, escapable)).toBe(
        "https://x.example/?key=[redacted]&a=1",
      );
      expect(maskKeyInHeader(`"${escapable.replaceAll("/", "\\/")}" 100%`, escapable)).toBe(
        '"[redacted]" 100%',
      );
    });
  });

  describe("compressed key mask", () => {
    const text = Buffer.from(body, "latin1");

    /** The mask's whole output for `chunks`, and whether other work ran before its decode ended. */
    async function decodeAll(coding: string, chunks: Buffer[]) {
      const mask = new CompressedKeyMask(Buffer.from(key), coding, null);
      for (const chunk of chunks) expect(mask.pass(chunk)).toBeNull();
      const order: string[] = [];
      const decoded = Promise.resolve(mask.end()).then((out) => {
        order.push("decoded");
        return out;
      });
      queueMicrotask(() => order.push("other work"));
      const out = await decoded;
      return { out: out?.toString("latin1") ?? null, order };
    }

    it.each([
      ["gzip", gzipSync(text)],
      ["x-gzip", gzipSync(text)],
      ["deflate", deflateSync(text)],
      ["deflate", deflateRawSync(text)],
      ["br", brotliCompressSync(text)],
      ["gzip, br", brotliCompressSync(gzipSync(text))],
      ["identity, GZIP", gzipSync(text)],
    ])(
      "decodes %s off the event loop (other work runs meanwhile) and masks the key",
      async (coding, bytes) => {
        const cut = Math.floor(bytes.length / 2);
        const { out, order } = await decodeAll(coding, [bytes.subarray(0, cut), bytes.subarray(cut)]);
        expect(out).toBe(expected);
        expect(order).toEqual(["other work", "decoded"]);
      },
    );

    it("forwards nothing for a coding it cannot undo, bytes that do not decode, or a body past the caps", async () => {
      expect((await decodeAll("zstd", [gzipSync(text)])).out).toBeNull();
      expect((await decodeAll("gzip", [Buffer.from("not gzip")])).out).toBeNull();
      expect((await decodeAll("gzip", [gzipSync(text).subarray(0, 10)])).out).toBeNull();
      expect((await decodeAll("gzip", [])).out).toBeNull();
      // 9 MiB of zeros: a few KiB compressed, past the 8 MiB it may decode to.
      expect((await decodeAll("gzip", [gzipSync(Buffer.alloc(9 * 1024 * 1024))])).out).toBeNull();
      const big = gzipSync(Buffer.alloc(maxCompressedErrorBytes + 1), { level: 0 });
      expect((await decodeAll("gzip", [big])).out).toBeNull();
    });

    it("masks a key quoted escaped, plain or escaped, wherever it falls in a large decoded body", async () => {
      const escapable = "q8+Zr/0Ab+Kd/7WmX=";
      const quotes = [escapable, encodeURIComponent(escapable), escapable.replaceAll("/", "\\/")];
      // Each quote across one of the 64 KiB slices the decoded body is masked in: cut after its
      // first byte, in its middle, before its last byte, and starting on the boundary.
      let body = "";
      let boundary = 0;
      for (const quote of quotes)
        for (const before of [quote.length - 1, quote.length >> 1, 1, 0]) {
          boundary += 64 * 1024;
          body += "x".repeat(boundary - before - body.length) + quote;
        }
      const expected = quotes.reduce((text, quote) => text.replaceAll(quote, "*".repeat(quote.length)), body);
      const mask = new CompressedKeyMask(Buffer.from(escapable), "gzip", null);
      mask.pass(gzipSync(Buffer.from(body, "latin1")));
      const out = (await mask.end())?.toString("latin1");
      expect(out?.length).toBe(body.length);
      expect(out === expected).toBe(true);
    });

    it("lets the meter read the provider's compressed bytes", async () => {
      const seen: Buffer[] = [];
      const meter = { push: (chunk: Buffer) => void seen.push(chunk), finish: () => ({}) } as never;
      const bytes = gzipSync(text);
      const mask = new CompressedKeyMask(Buffer.from(key), "gzip", meter);
      mask.pass(bytes);
      expect((await mask.end())?.toString("latin1")).toBe(expected);
      expect(Buffer.concat(seen)).toEqual(bytes);
    });
  });
});
