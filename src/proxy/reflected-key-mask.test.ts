import { brotliCompressSync, deflateRawSync, deflateSync, gzipSync } from "node:zlib";
import { describe, expect, it, vi } from "vitest";
import { seededBelow } from "../../test/support/seeded-random.js";
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

    /** A quote of `escapable`, one piece per character, each written as `write` writes it. */
    const piecesOf = (write: (character: string) => string) => [...escapable].map(write);
    const unicode = (character: string) => `\\u${character.charCodeAt(0).toString(16).padStart(4, "0")}`;
    const cutForms: [string, string[]][] = [
      ["PHP's JSON (`\\/`)", piecesOf((c) => (c === "/" ? "\\/" : c))],
      ["JSON \\u escapes, any case", piecesOf((c) => (c === "+" ? "\\u002B" : c === "=" ? "\\u003d" : c))],
      ["every character \\u-escaped", piecesOf(unicode)],
      ["percent-encoded", piecesOf(encodeURIComponent)],
      [
        "percent-encoded, lower case",
        piecesOf((c) => encodeURIComponent(c).replace(/%[0-9A-F]{2}/, (hex) => hex.toLowerCase())),
      ],
      // Escapes of every kind in one quote, as no one encoder writes it but a client still decodes it.
      [
        "mixed escapes",
        piecesOf((c) => (c === "+" ? "%2B" : c === "/" ? "\\/" : /[0-9]/.test(c) ? unicode(c) : c)),
      ],
    ];

    // A body cut inside an escaped quote of the key (a content-length that ends mid-quote, even mid-
    // escape) ends on the key's first characters, as a plain cut quote does: the same rule applies,
    // counted in the key's characters the end decodes to, not in the bytes that write them.
    it.each(cutForms)(
      "masks a body's end inside a quote of it %s, from 8 of its characters, at every cut and every chunk split",
      (_, pieces) => {
        const form = pieces.join("");
        const prefix = '{"error":"bad key \\\\';
        for (let cut = 1; cut < form.length; cut++) {
          // The key's characters whose whole writing the cut keeps.
          let characters = 0;
          for (let end = 0; characters < pieces.length; characters++) {
            end += (pieces[characters] as string).length;
            if (end > cut) break;
          }
          const body = prefix + form.slice(0, cut);
          const expected = characters >= 8 ? prefix + "*".repeat(cut) : body;
          const bytes = Buffer.from(body, "latin1");
          for (let first = 0; first <= bytes.length; first++) {
            const chunks = [bytes.subarray(0, first), bytes.subarray(first)];
            expect(
              passAll(new ReflectedKeyMask(Buffer.from(escapable), null), chunks),
              `cut ${cut}, split ${first}`,
            ).toBe(expected);
          }
        }
      },
    );

    it("keeps a body's end that begins the key but goes on otherwise, or holds fewer than 8 of its characters", () => {
      const mask = (body: string) =>
        passAll(new ReflectedKeyMask(Buffer.from(escapable), null), [Buffer.from(body)]);
      // The key's 10th character is `+` (`\u002B`, `%2B`): an escape cut short that cannot be it is
      // no quote of the key, as a plain body that goes on with another byte is not.
      for (const body of ["x q8+Zr/0Ab\\u003", "x q8+Zr/0Ab%3", "x q8%2BZr/0Ab\\u1", "x q8%2BZr\\/0Ab%2C"])
        expect(mask(body)).toBe(body);
      // Seven characters, however they are written, are kept: a public prefix's length at most.
      for (const body of [
        "x q8\\u002BZr\\/0",
        "x q8%2BZr%2F0\\u00",
        "x \\u0071\\u0038\\u002B\\u005A\\u0072\\u002F\\u0030%",
      ])
        expect(mask(body)).toBe(body);
      // Eight and an escape cut where it may still be the ninth: masked, the unfinished escape too.
      for (const body of ["x q8%2BZr%2F0A\\u006", "x q8%2BZr%2F0A%", "x q8%2BZr%2F0A\\", "x q8%2BZr%2F0A%6"])
        expect(mask(body)).toBe(`x ${"*".repeat(body.length - 2)}`);
    });

    // The text before a quote may begin an escape of the other kind that takes in the quote's first
    // characters (a literal `%` before JSON, which leaves `%` as it is; `\u00` before a URL's), and a
    // key may hold such an escape itself (`%41`, which JSON leaves as it is): the quote is found as
    // JSON alone and as a URL alone decode it, too.
    it("masks a quote whose first characters an escape of the other kind before it would take in", () => {
      const hexFirst = "ab+Zr/0Ab+Kd/7WmX=";
      const holdsPercent = "q8%41+Zr/0Ab+Kd7W";
      const cases: [string, string, string][] = [
        [hexFirst, '{"error":"at 100%', `${hexFirst.replaceAll("/", "\\/")}"}`],
        [hexFirst, "x\\u00", `${encodeURIComponent(hexFirst)} y`],
        [holdsPercent, '{"error":"', `${holdsPercent.replaceAll("+", "\\u002B")}"}`],
      ];
      for (const [quoted, before, rest] of cases) {
        const form = rest.slice(0, rest.length - 2);
        const body = before + rest;
        const expected = before + "*".repeat(form.length) + rest.slice(form.length);
        const bytes = Buffer.from(body, "latin1");
        for (let split = 0; split <= bytes.length; split++) {
          const chunks = [bytes.subarray(0, split), bytes.subarray(split)];
          expect(
            passAll(new ReflectedKeyMask(Buffer.from(quoted), null), chunks),
            `${body}, split ${split}`,
          ).toBe(expected);
        }
        expect(maskKeyInHeader(body, quoted)).toBe(`${before}[redacted]${rest.slice(form.length)}`);
      }
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

  // Property-style: seeded random keys, bodies that quote them in every escape (one encoder per
  // character), with bytes that begin escapes around them, cut at every point, into single bytes and
  // into random chunks. Not one byte of a quote, nor of a body's end inside one, may pass.
  describe("escaped quotes wherever chunk boundaries fall", () => {
    const keyCharacters = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.+/=";
    /** Text between quotes: bytes that begin escapes (`\\`, `%`, `\\u0`), none that ends one's quote. */
    const fillerBytes = 'ab {}":,\\%u0';

    /** One key character as some encoder writes it. */
    function write(character: string, random: (below: number) => number): string {
      const hex = character.charCodeAt(0).toString(16).padStart(2, "0");
      switch (random(6)) {
        case 0:
          return `\\u00${hex.toUpperCase()}`;
        case 1:
          return `\\u00${hex}`;
        case 2:
          return `%${hex.toUpperCase()}`;
        case 3:
          return `%${hex}`;
        case 4:
          return character === "/" ? "\\/" : character;
        default:
          return character;
      }
    }

    /** A body quoting a random key, and what the client must get of it. */
    function randomCase(seed: number) {
      const random = seededBelow(seed);
      const length = 9 + random(24);
      let key = "";
      for (let index = 0; index < length; index++) key += keyCharacters[random(keyCharacters.length)];
      // At least one character that encoders escape, so the key is searched for escaped.
      const at = random(length);
      key = key.slice(0, at) + "+/="[random(3)] + key.slice(at + 1);
      let body = "";
      let expected = "";
      const add = (text: string, masked: boolean) => {
        body += text;
        expected += masked ? "*".repeat(text.length) : text;
      };
      const filler = () => {
        let text = "";
        for (let count = random(12); count > 0; count--) text += fillerBytes[random(fillerBytes.length)];
        // A space after it, so that no escape it begins takes in the quote's first byte.
        add(`${text} `, false);
      };
      for (let quotes = 1 + random(3); quotes > 0; quotes--) {
        filler();
        add([...key].map((character) => write(character, random)).join(""), true);
        add(" ", false);
      }
      filler();
      if (random(2) === 0) {
        // The body ends inside a quote, maybe inside an escape: masked from 8 whole characters on.
        const pieces = [...key].map((character) => write(character, random));
        const characters = 1 + random(length - 1);
        const written = pieces.slice(0, characters).join("");
        const cut = written.length - random((pieces[characters - 1] as string).length);
        const whole = cut === written.length ? characters : characters - 1;
        add(written.slice(0, cut), whole >= 8);
      }
      return { key: Buffer.from(key, "latin1"), bytes: Buffer.from(body, "latin1"), expected };
    }

    function randomChunks(bytes: Buffer, random: (below: number) => number): Buffer[] {
      const chunks: Buffer[] = [];
      for (let at = 0; at < bytes.length; ) {
        const size = random(3) === 0 ? 1 + random(4) : 1 + random(64);
        chunks.push(bytes.subarray(at, at + size));
        at += size;
      }
      return chunks;
    }

    it("masks every quote and every cut quote's end, at every split point, in single bytes and in random chunks", () => {
      for (let seed = 1; seed <= 150; seed++) {
        const { key, bytes, expected } = randomCase(seed);
        const check = (chunks: Buffer[], how: string) =>
          expect(passAll(new ReflectedKeyMask(key, null), chunks), `seed ${seed}, ${how}`).toBe(expected);
        for (let first = 0; first <= bytes.length; first++)
          check([bytes.subarray(0, first), bytes.subarray(first)], `split at ${first}`);
        check(
          [...bytes].map((byte) => Buffer.from([byte])),
          "single bytes",
        );
        const random = seededBelow(seed * 7919);
        for (let round = 0; round < 20; round++)
          check(randomChunks(bytes, random), `random chunks, round ${round}`);
      }
    });
  });

  // A compatible server's key may be any printable ASCII, so it may end in `\` or `%`: its plain
  // bytes then begin its escaped quote (`…Ab\` of JSON's `…Ab\\`, `…Ab%` of a URL's `…Ab%25`), and
  // a quote masked as soon as those bytes were found gave the escape's rest away (`****\`, `****25`),
  // in one chunk or where a chunk boundary fell after them. So did a key ending in `%` and a hex
  // digit (`…%2`, quoted in a URL as `…%252`) cut between the escape and the digit.
  describe("a key that ends in a character beginning an escape", () => {
    const unicode = (character: string) => `\\u${character.charCodeAt(0).toString(16).padStart(4, "0")}`;
    /** A quote of `key` as each of some encoders writes it. */
    const encoders: Record<string, (key: string) => string> = {
      plain: (key) => key,
      JSON: (key) => JSON.stringify(key).slice(1, -1),
      "PHP's JSON": (key) => JSON.stringify(key).slice(1, -1).replaceAll("/", "\\/"),
      ".NET's JSON": (key) =>
        [...key].map((c) => (`+<>&'"`.includes(c) ? unicode(c) : c === "\\" ? "\\\\" : c)).join(""),
      "JSON, every character \\u-escaped": (key) => [...key].map(unicode).join(""),
      "a URL": encodeURIComponent,
      "a URL, lower case": (key) =>
        encodeURIComponent(key).replace(/%[0-9A-F]{2}/g, (hex) => hex.toLowerCase()),
    };

    it.each(["q8+Zr/0Ab+Kd\\", "q8+Zr/0Ab+Kd%", "a8+Zr/0Ab+Kd%2", "q8-Zr_0Ab.Kd\\\\"])(
      "masks every byte of %s quoted once or twice in a row, in every encoding, wherever the body is cut",
      (key) => {
        for (const [name, encode] of Object.entries(encoders)) {
          const form = encode(key);
          for (const quote of [form, form + form]) {
            for (const after of ['"}', "n", "5 x", "u0041", ""]) {
              const body = `{"error":"bad key ${quote}${after}`;
              const expected = `{"error":"bad key ${"*".repeat(quote.length)}${after}`;
              const bytes = Buffer.from(body, "latin1");
              const check = (chunks: Buffer[], how: string) =>
                expect(passAll(new ReflectedKeyMask(Buffer.from(key, "latin1"), null), chunks), how).toBe(
                  expected,
                );
              for (let split = 0; split <= bytes.length; split++)
                check([bytes.subarray(0, split), bytes.subarray(split)], `${name}: ${body}, split ${split}`);
              check(
                [...bytes].map((byte) => Buffer.from([byte])),
                `${name}: ${body}, single bytes`,
              );
            }
            expect(maskKeyInHeader(`bad key ${quote}!`, key), `${name} in a header`).toMatch(
              /^bad key (?:\[redacted\])+!$/,
            );
          }
        }
      },
    );

    // A quote held back until the next chunk shows whether it goes on is masked at the body's end,
    // even when the bytes still held there have no escape in them.
    it("masks at the body's end a plain quote held back beside an escape that is no longer held", () => {
      const key = "q8+Zr/0Ab+Kd/7WmX=";
      const body = `100% ${"x".repeat(200)} bad key ${key}`;
      expect(passAll(new ReflectedKeyMask(Buffer.from(key), null), [Buffer.from(body)])).toBe(
        body.replace(key, "*".repeat(key.length)),
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
