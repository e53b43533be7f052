import { randomBytes } from "node:crypto";
import type { Gunzip } from "node:zlib";
import { brotliCompressSync, constants, deflateRawSync, deflateSync, gzipSync } from "node:zlib";
import { describe, expect, it, vi } from "vitest";
import { meterRun } from "../../test/support/meter-run.js";
import type { ProviderId } from "../providers/provider-id.js";
import { type DecompressingMeter, decompressingMeter, maxDecompressedBytes } from "./decompressing-meter.js";

/** The gunzip streams the meters made, last one last: the test reads how much waits in each. */
const decoders = vi.hoisted(() => [] as Gunzip[]);
vi.mock("node:zlib", async (importOriginal) => {
  const zlib = await importOriginal<typeof import("node:zlib")>();
  return {
    ...zlib,
    createGunzip: (options?: object) => {
      const decoder = zlib.createGunzip(options);
      decoders.push(decoder);
      return decoder;
    },
  };
});

/** The most compressed bytes a meter may hold for its decoder before it says it is full. */
const maxQueued = 1024 * 1024;

import { createUsageMeter, type UsageMeter } from "./usage-meter.js";

const chatJson = JSON.stringify({
  id: "chatcmpl-1",
  object: "chat.completion",
  model: "gpt-4o-mini-2024-07-18",
  choices: [{ index: 0, message: { role: "assistant", content: "Hé 🙂" }, finish_reason: "stop" }],
  usage: { prompt_tokens: 12, completion_tokens: 7, prompt_tokens_details: { cached_tokens: 4 } },
});

const messagesSse = [
  'event: message_start\ndata: {"type":"message_start","message":{"model":"claude-sonnet-4-5-20250929","usage":{"input_tokens":25,"cache_read_input_tokens":5,"output_tokens":1}}}',
  'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}',
  'event: message_delta\ndata: {"type":"message_delta","usage":{"output_tokens":15}}',
  'event: message_stop\ndata: {"type":"message_stop"}',
]
  .map((event) => `${event}\n\n`)
  .join("");

const compressors = {
  gzip: (bytes: Buffer) => gzipSync(bytes),
  "x-gzip": (bytes: Buffer) => gzipSync(bytes),
  deflate: (bytes: Buffer) => deflateSync(bytes),
  br: (bytes: Buffer) => brotliCompressSync(bytes),
};

const meterFor = (provider: ProviderId, streaming: boolean) =>
  createUsageMeter(provider, {
    streaming,
  });

function tap(meter: UsageMeter, coding: string, maxBytes?: number): DecompressingMeter {
  const decoding = decompressingMeter(meter, coding, maxBytes);
  if (decoding === null || decoding === meter) throw new Error(`no decompressor for ${coding}`);
  return decoding as DecompressingMeter;
}

/** Pushes `bytes` in pieces of `piece` bytes through a tap for `coding`, and reads what it saw. */
async function decodedRun(
  provider: ProviderId,
  bytes: Buffer,
  streaming: boolean,
  coding: string,
  piece = bytes.length,
) {
  const meter = tap(meterFor(provider, streaming), coding);
  for (let at = 0; at < bytes.length; at += piece) meter.push(bytes.subarray(at, at + piece));
  return meter.finish();
}

/** A meter that only counts what reaches it. */
function countingMeter() {
  const counted = { bytes: 0, chunks: 0 };
  const meter: UsageMeter = {
    push(chunk) {
      counted.bytes += chunk.length;
      counted.chunks++;
    },
    end() {},
    finish: () => ({
      usage: { inputTokens: null, outputTokens: null, cachedInputTokens: null, reasoningTokens: null },
      model: null,
    }),
  };
  return { meter, counted };
}

describe("decompressing usage meter", () => {
  it.each(Object.entries(compressors))(
    "reads a %s JSON body and SSE stream as the meter reads them uncompressed, however the bytes are split",
    async (coding, compress) => {
      const json = Buffer.from(chatJson);
      const sse = Buffer.from(messagesSse);
      const plainJson = meterRun("provider-a", json, false);
      const plainSse = meterRun("provider-b", sse, true);
      expect(plainJson.usage.inputTokens).toBe(12);
      expect(plainSse.usage.outputTokens).toBe(15);
      for (const piece of [1, 7, 64, 1 << 20]) {
        expect(await decodedRun("provider-a", compress(json), false, coding, piece)).toEqual(plainJson);
        expect(await decodedRun("provider-b", compress(sse), true, coding, piece)).toEqual(plainSse);
      }
    },
  );

  it("reads raw deflate too, as servers send it under `deflate`", async () => {
    const body = deflateRawSync(Buffer.from(chatJson));
    expect((await decodedRun("provider-a", body, false, "deflate")).usage.inputTokens).toBe(12);
  });

  it("reads a coding named in any case and with spaces; identity is the meter itself; others are no meter", () => {
    const meter = meterFor("provider-a", false);
    expect(decompressingMeter(meter, "identity")).toBe(meter);
    expect(decompressingMeter(meter, " GZIP ")).not.toBe(meter);
    expect(decompressingMeter(meter, " GZIP ")).not.toBeNull();
    for (const coding of ["gzip, br", "zstd", "compress", "constructor", "__proto__", "toString"])
      expect(decompressingMeter(meter, coding)).toBeNull();
  });

  it("reads a stream that was cut, as a cut uncompressed stream is read", async () => {
    const cutAt = messagesSse.indexOf("event: message_delta");
    // The first events, flushed as a streaming provider flushes them, and then nothing more.
    const cut = gzipSync(messagesSse.slice(0, cutAt), { finishFlush: constants.Z_SYNC_FLUSH });
    const seen = await decodedRun("provider-b", cut, true, "gzip", 10);
    expect(seen.usage).toEqual({
      inputTokens: 30,
      outputTokens: 1,
      cachedInputTokens: 5,
      reasoningTokens: null,
    });
  });

  it("at a clean end, reads provider A's last event left without its blank line once the whole body is decoded", async () => {
    const completed =
      'event: response.completed\ndata: {"type":"response.completed","response":{"id":"resp_1","model":"gpt-4.1","usage":{"input_tokens":30,"output_tokens":8}}}';
    const open = Buffer.from(`event: response.created\ndata: {"type":"response.created"}\n\n${completed}`);
    const read = async (body: Buffer, ended: boolean) => {
      const meter = tap(meterFor("provider-a", true), "gzip");
      for (let at = 0; at < body.length; at += 10) meter.push(body.subarray(at, at + 10));
      if (ended) meter.end();
      return (await meter.finish()).usage;
    };
    expect(await read(gzipSync(open), true)).toMatchObject({ inputTokens: 30, outputTokens: 8 });
    // Not after a cut, nor when the body stops short of its compressed end (the decoder fails).
    expect((await read(gzipSync(open), false)).inputTokens).toBeNull();
    const truncated = gzipSync(open, { finishFlush: constants.Z_SYNC_FLUSH });
    expect((await read(truncated, true)).inputTokens).toBeNull();
  });

  it("never rejects on a corrupt body, and reads no usage from it", async () => {
    const corrupt = Buffer.from(gzipSync(Buffer.from(chatJson)));
    corrupt.fill(0x41, 10, 40);
    for (const coding of ["gzip", "deflate", "br"]) {
      const seen = await decodedRun("provider-a", corrupt, false, coding, 5);
      expect(seen.usage.inputTokens).toBeNull();
    }
  });

  it("applies the meter's bounds to the decompressed bytes: the usage after 6 MiB of embeddings is read from the kept tail", async () => {
    const vector = Array.from({ length: 1536 }, (_, index) => (index % 7) * 0.0123456).join(",");
    const data = Array.from(
      { length: 480 },
      (_, index) => `{"object":"embedding","index":${index},"embedding":[${vector}]}`,
    );
    const body = Buffer.from(
      `{"object":"list","data":[${data.join(",")}],"model":"text-embedding-3-small","usage":{"prompt_tokens":4100,"total_tokens":4100}}`,
    );
    expect(body.length).toBeGreaterThan(4 * 1024 * 1024);
    const seen = await decodedRun("provider-a", gzipSync(body), false, "gzip", 16 * 1024);
    expect(seen).toEqual(meterRun("provider-a", body, false));
    expect(seen.usage.inputTokens).toBe(4100);
  });

  it("stops decompressing at its cap: a body inflating past it is read up to there, and its usage beyond is not", async () => {
    const cap = 1024 * 1024;
    const body = Buffer.concat([
      Buffer.from('{"object":"list","data":"'),
      Buffer.alloc(4 * cap, 0x30),
      Buffer.from('","model":"m","usage":{"prompt_tokens":5,"total_tokens":5}}'),
    ]);
    const { meter, counted } = countingMeter();
    const decoding = tap(meter, "gzip", cap);
    decoding.push(gzipSync(body));
    await decoding.finish();
    expect(counted.bytes).toBe(cap);
    const real = tap(meterFor("provider-a", false), "gzip", cap);
    real.push(gzipSync(body));
    expect((await real.finish()).usage.inputTokens).toBeNull();
  });

  it("defuses a zip bomb with the default cap: no more than 64 MiB reach the meter", async () => {
    // 128 gzip members of 1 MiB of zeros each (gunzip reads them as one body): about 130 KiB that
    // would inflate to 128 MiB.
    const member = gzipSync(Buffer.alloc(1024 * 1024), { level: constants.Z_BEST_COMPRESSION });
    const bomb = Buffer.concat(Array.from({ length: 128 }, () => member));
    expect(bomb.length).toBeLessThan(256 * 1024);
    const { meter, counted } = countingMeter();
    const decoding = tap(meter, "gzip");
    for (let at = 0; at < bomb.length; at += 16 * 1024) decoding.push(bomb.subarray(at, at + 16 * 1024));
    await decoding.finish();
    expect(counted.bytes).toBe(maxDecompressedBytes);
  });

  it("catches up at once with a body sent a byte per chunk: small chunks reach the decompressor together", async () => {
    // Incompressible data (base64 of random bytes): about 230 KiB of gzip, one push per byte. Each
    // write to the decompressor is a trip to libuv's thread pool; one per byte took ~10 s and held
    // ~100 bytes of queue per byte until then. Counted as the writes the decompressor is given (all
    // of them made as the chunks are pushed, or at finish), not timed: under one per KiB.
    const filler = randomBytes(225 * 1024).toString("base64");
    const body = gzipSync(Buffer.from(chatJson.replace('"choices":', `"filler":"${filler}","choices":`)));
    const meter = tap(meterFor("provider-a", false), "gzip");
    meter.push(body.subarray(0, 1));
    const writes = vi.spyOn(decoders.at(-1) as Gunzip, "write");
    for (let at = 1; at < body.length; at++) meter.push(body.subarray(at, at + 1));
    expect(writes.mock.calls.length).toBeLessThan(body.length / 1024);
    const reading = await meter.finish();
    expect(writes.mock.calls.length).toBeLessThan(body.length / 1024);
    expect(reading.usage.inputTokens).toBe(12);
  });

  it("keeps no reference to the chunks it is given: the client's chunk may change once written", async () => {
    const body = gzipSync(Buffer.from(chatJson));
    const chunk = Buffer.from(body);
    const meter = tap(meterFor("provider-a", false), "gzip");
    meter.push(chunk);
    chunk.fill(0);
    expect((await meter.finish()).usage.inputTokens).toBe(12);
  });

  it("holds at most 1 MiB of compressed bytes for a lagging decoder when its feeder waits while it says it is full", async () => {
    // ~6 MiB of gzip (incompressible data, gzipped fast): pushed as a provider on a fast network
    // sends it, in 64 KiB chunks, far faster than the decoder catches up. A feeder (the exchange,
    // which then pauses the provider) waits while the meter says it is full.
    const filler = randomBytes(4608 * 1024).toString("base64");
    const body = gzipSync(Buffer.from(chatJson.replace('"choices":', `"filler":"${filler}","choices":`)), {
      level: 1,
    });
    expect(body.length).toBeGreaterThan(4 * maxQueued);
    const meter = tap(meterFor("provider-a", false), "gzip");
    const piece = 64 * 1024;
    let mostQueued = 0;
    let waits = 0;
    for (let at = 0; at < body.length; at += piece) {
      meter.push(body.subarray(at, at + piece));
      const decoder = decoders.at(-1) as Gunzip;
      mostQueued = Math.max(mostQueued, decoder.writableLength);
      const full = (meter as { full?: boolean }).full === true;
      if (full) {
        waits++;
        await new Promise<void>((resolve) => meter.whenRoom(resolve));
        expect((meter as { full?: boolean }).full).toBe(false);
      }
    }
    expect(mostQueued).toBeLessThanOrEqual(maxQueued + piece);
    expect(waits).toBeGreaterThan(0);
    // No usage lost: the usage after the filler is read.
    expect((await meter.finish()).usage.inputTokens).toBe(12);
  });

  it("is never full once it stopped reading, and calls a waiting feeder back then", async () => {
    // A body that is not gzip: the decoder fails on its first bytes, with more queued behind them.
    const junk = randomBytes(2 * maxQueued);
    const meter = tap(meterFor("provider-a", false), "gzip");
    for (let at = 0; at < junk.length; at += 64 * 1024) meter.push(junk.subarray(at, at + 64 * 1024));
    if (meter.full) await new Promise<void>((resolve) => meter.whenRoom(resolve));
    expect(meter.full).toBe(false);
    meter.push(junk);
    expect(meter.full).toBe(false);
    expect((await meter.finish()).usage.inputTokens).toBeNull();
  });
});
