import { describe, expect, it } from "vitest";
import { imageDimensions } from "./image-dimensions.js";

const u16be = (value: number) => Buffer.from([value >> 8, value & 0xff]);
const u16le = (value: number) => Buffer.from([value & 0xff, value >> 8]);
const u24le = (value: number) => Buffer.from([value & 0xff, (value >> 8) & 0xff, value >> 16]);
const segment = (marker: number, body: Buffer) =>
  Buffer.concat([Buffer.from([0xff, marker]), u16be(body.length + 2), body]);

/** A JPEG head: APP0, a DHT, then a start-of-frame `sof` with `components` (3 YCbCr, 4 CMYK). */
function jpeg(sof: number, width: number, height: number, components = 3): Buffer {
  const frame = Buffer.concat([Buffer.from([8]), u16be(height), u16be(width), Buffer.from([components])]);
  return Buffer.concat([
    Buffer.from([0xff, 0xd8]),
    segment(0xe0, Buffer.from("JFIF\0\x01\x01\0\0\x01\0\x01\0\0", "latin1")),
    segment(0xc4, Buffer.alloc(20)),
    Buffer.from([0xff]), // a fill byte before the next marker
    segment(sof, Buffer.concat([frame, Buffer.alloc(components * 3)])),
    segment(0xda, Buffer.alloc(10)),
  ]);
}

function webp(chunk: string, payload: Buffer): Buffer {
  const body = Buffer.concat([Buffer.from(chunk, "latin1"), Buffer.alloc(4), payload, Buffer.alloc(8)]);
  return Buffer.concat([Buffer.from("RIFF"), Buffer.alloc(4), Buffer.from("WEBP"), body]);
}

describe("image dimensions read from the header", () => {
  it("reads PNG's IHDR and GIF's logical screen", () => {
    const png = Buffer.from(
      "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==",
      "base64",
    );
    png.writeUInt32BE(9001, 16);
    png.writeUInt32BE(3, 20);
    expect(imageDimensions(png, "image/png")).toEqual({ width: 9001, height: 3 });
    const gif = Buffer.concat([Buffer.from("GIF89a"), u16le(640), u16le(480), Buffer.alloc(8)]);
    expect(imageDimensions(gif, "image/gif")).toEqual({ width: 640, height: 480 });
  });

  it.each([
    ["baseline", 0xc0, 3],
    ["progressive", 0xc2, 3],
    ["CMYK", 0xc0, 4],
  ])("reads a %s JPEG's frame past APP0, DHT and fill bytes", (_name, sof, components) => {
    expect(imageDimensions(jpeg(sof, 8192, 600, components), "image/jpeg")).toEqual({
      width: 8192,
      height: 600,
    });
  });

  it("reads lossy, lossless and extended WebP", () => {
    const vp8 = Buffer.concat([Buffer.alloc(3), Buffer.from([0x9d, 0x01, 0x2a]), u16le(8100), u16le(2)]);
    expect(imageDimensions(webp("VP8 ", vp8), "image/webp")).toEqual({ width: 8100, height: 2 });
    const bits = Buffer.alloc(4);
    bits.writeUInt32LE((300 - 1) | ((16383 - 1) << 14));
    const vp8l = Buffer.concat([Buffer.from([0x2f]), bits]);
    expect(imageDimensions(webp("VP8L", vp8l), "image/webp")).toEqual({ width: 300, height: 16383 });
    const vp8x = Buffer.concat([Buffer.alloc(4), u24le(9999), u24le(49)]);
    expect(imageDimensions(webp("VP8X", vp8x), "image/webp")).toEqual({ width: 10000, height: 50 });
  });

  it("says nothing for a header it cannot read, rather than guess", () => {
    expect(
      imageDimensions(Buffer.from([0xff, 0xd8, 0xff, 0xda, 0, 4, 0, 0, 0, 0, 0]), "image/jpeg"),
    ).toBeNull();
    expect(imageDimensions(Buffer.from("GIF89a"), "image/gif")).toBeNull();
    expect(imageDimensions(webp("VP8 ", Buffer.alloc(10)), "image/webp")).toBeNull();
    expect(imageDimensions(Buffer.alloc(40), "image/heic")).toBeNull();
  });
});
