/**
 * The bad values of test/e2e/fuzz-bad-inputs.test.ts: methods, wrong JSON values, bytes that are not
 * UTF-8, and the images, PDFs and image options each structured route is sent, with the status the
 * docs give each (null: more than one answer is right, or the provider judges).
 */

export const png1x1 =
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
export const pdfMinimal = Buffer.from(
  "%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj\n3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 10 10]>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n",
).toString("base64");
export const allMethods = [
  "GET",
  "POST",
  "PUT",
  "PATCH",
  "DELETE",
  "HEAD",
  "OPTIONS",
  "TRACE",
  "get",
  "post",
  "Patch",
  "FOO",
  "PROPFIND",
  "M-SEARCH",
  "PURGE",
  "QUERY",
  "BREW",
  "G\u00c9T",
];

/** JSON values of every type, for a field that expects another. */
export const wrongValues: Array<[string, unknown]> = [
  ["number", 42],
  ["negative", -1],
  ["float", 0.5],
  ["numeric string", "20"],
  ["empty string", ""],
  ["whitespace", "   "],
  ["array", ["x"]],
  ["empty array", []],
  ["object", { value: "x" }],
  ["empty object", {}],
  ["null", null],
  ["true", true],
  ["false", false],
  ["huge number", 1e308],
  ["unicode string", "\u{1F600}\u202e\ud800"],
  ["NUL string", "a\u0000b"],
  ["long string", "x".repeat(300)],
];

/** Raw JSON texts for a value, for what JSON.stringify cannot write. */
export const rawValues: Array<[string, string]> = [
  ["1e999", "1e999"],
  ["-1e999", "-1e999"],
  ["big integer", "123456789012345678901234567890"],
  ["-0", "-0"],
  ["deep array", `${"[".repeat(80)}${"]".repeat(80)}`],
  ["deep object", `${'{"a":'.repeat(80)}1${"}".repeat(80)}`],
  ["NaN", "NaN"],
  ["undefined", "undefined"],
  ["single quotes", "'x'"],
  ["raw NUL in string", '"a\u0000b"'],
  ["lone surrogate escape", '"\\ud800"'],
];

/**
 * Strings SQLite stores and PostgreSQL `text` refuses, as the bytes that stand for a JSON string
 * (quotes included), and whether those bytes are valid JSON.
 */
export const storageHostileStrings: Array<[string, Buffer, boolean]> = [
  ["escaped NUL", Buffer.from('"gpt-4.1-mini\\u0000x"'), true],
  ["only an escaped NUL", Buffer.from('"\\u0000"'), true],
  ["escaped lone high surrogate", Buffer.from('"gpt\\ud800"'), true],
  ["escaped lone low surrogate", Buffer.from('"\\udc00x"'), true],
  ["escaped reversed surrogates", Buffer.from('"\\udc00\\ud800"'), true],
  ["C1 control, BOM and a non-character", Buffer.from('"a\u0085\ufeff\uffffb"'), true],
  ["raw NUL byte", Buffer.concat([Buffer.from('"gpt'), Buffer.from([0]), Buffer.from('x"')]), false],
  ["raw 0xFF byte", Buffer.concat([Buffer.from('"gpt'), Buffer.from([0xff, 0xfe]), Buffer.from('"')]), false],
  [
    "raw CESU-8 surrogate",
    Buffer.concat([Buffer.from('"gpt'), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from('"')]),
    false,
  ],
];

export const invalidUtf8 = [
  Buffer.from([0xff]),
  Buffer.from([0xc0, 0xae]),
  Buffer.from([0xed, 0xa0, 0x80]),
  Buffer.from([0xe2, 0x82]),
  Buffer.from([0xf8, 0x88, 0x80, 0x80, 0x80]),
];

/** A PNG's signature and IHDR chunk (no pixel data): `width`x`height`. */
function pngHeader(width: number, height: number): Buffer {
  const header = Buffer.from("89504e470d0a1a0a0000000d49484452000000000000000008060000001f15c489", "hex");
  header.writeUInt32BE(width, 16);
  header.writeUInt32BE(height, 20);
  return header;
}

/** `/v1/vision` images and what docs/structured.md answers (null: the provider judges). */
export const badImages: Array<[string, number | null]> = [
  ["not base64 at all!", 422],
  ["data:image/png;base64,%%%%", 422],
  ["data:image/png;base64,", 422],
  ["data:image/png,iVBORw0KGgo=", 422],
  ["data:text/plain;base64,aGVsbG8=", 422],
  ["data:image/png;base64,aGVsbG8gd29ybGQ=", 422],
  // The bytes decide the type: a PNG declared as JPEG or GIF is a PNG.
  [`data:image/jpeg;base64,${png1x1}`, null],
  [`data:image/gif;base64,${png1x1}`, null],
  ["data:image/svg+xml;base64,PHN2Zz48L3N2Zz4=", 422],
  [`data:application/pdf;base64,${pdfMinimal}`, 422],
  // The PNG signature alone, a PNG of 0x0 pixels, a GIF's signature alone: no header, no image.
  ["iVBORw0KGgo=", 422],
  ["DATA:IMAGE/PNG;BASE64,iVBORw0KGgo=", 422],
  [pngHeader(0, 0).toString("base64"), 422],
  [Buffer.from("GIF89a").toString("base64"), 422],
  // A JPEG's signature alone, a WebP cut before its frame header: no pixels, no image.
  [Buffer.from([0xff, 0xd8, 0xff]).toString("base64"), 422],
  [Buffer.from("RIFF\x24\0\0\0WEBPVP8 ", "latin1").toString("base64"), 422],
  ["====", 422],
  ["A", 422],
  [`data:image/png;base64,${"A".repeat(3000)}`, 422],
  [
    `data:image/png;base64,${Buffer.concat([Buffer.from(png1x1, "base64"), Buffer.alloc(2100)]).toString("base64")}`,
    null,
  ],
  // Over SLUICE_MAX_IMAGE_BYTES (the fuzz test's 16384) decoded, under the body's cap.
  [`data:image/png;base64,${Buffer.concat([pngHeader(1, 1), Buffer.alloc(16_400)]).toString("base64")}`, 413],
  ["data:image/png;charset=utf-8;base64,iVBORw0KGgo=", 422],
];

/** `/v1/pdf` values and their answers (null: the provider judges). */
export const badPdfs: Array<[string, number | null]> = [
  ["data:application/pdf;base64,not-base64!!", 400],
  ["data:application/pdf;base64,", 400],
  [`data:application/pdf;base64,${png1x1}`, 400],
  // `%PDF-` and nothing more: its page count is not read, so the provider judges (docs/structured.md).
  ["data:application/pdf;base64,JVBERi0=", null],
  ["data:application/pdf,%PDF-1.4", 400],
  ["data:text/plain;base64,JVBERi0xLjQK", 400],
  [
    `data:application/pdf;base64,${Buffer.concat([Buffer.from("%PDF-1.4\n"), Buffer.alloc(2100)]).toString("base64")}`,
    null,
  ],
  // A page tree of no pages: nothing to analyse.
  [
    `data:application/pdf;base64,${Buffer.from("%PDF-1.4\n1 0 obj<</Type/Pages/Kids[]/Count 0>>endobj\n%%EOF").toString("base64")}`,
    400,
  ],
  [
    `data:application/pdf;base64,${Buffer.concat([Buffer.from("%PDF-1.4\n"), Buffer.alloc(16_400)]).toString("base64")}`,
    413,
  ],
  ["http://127.0.0.1/x.pdf", 400],
  ["https://10.0.0.1/a.pdf", 400],
  ["https://[::1]/a.pdf", 400],
  ["https://169.254.169.254/latest/meta-data", 400],
  ["https://127.0.0.1:1/a.pdf", 400],
  ["file:///etc/passwd", 400],
  ["ftp://127.0.0.1/a.pdf", 400],
  ["javascript:alert(1)", 400],
  ["https://user:pass@127.0.0.1/a.pdf", 400],
  ["https://", 400],
  ["//127.0.0.1/a.pdf", 400],
  ["not a url", 400],
];

/** `/v1/image` bodies and their answers (docs/images.md; null: served). */
export const badImageBodies: Array<[unknown, number | null]> = [
  [{ prompt: "x", size: "1024x1024", aspectRatio: "1:1" }, 422],
  [{ prompt: "x", size: "big" }, 422],
  [{ prompt: "x", size: "0x0" }, 422],
  [{ prompt: "x", size: "99999999x99999999" }, 422],
  [{ prompt: "x", size: 1024 }, 400],
  [{ prompt: "x", aspectRatio: "1:0" }, 422],
  [{ prompt: "x", aspectRatio: "a:b" }, 422],
  [{ prompt: "x", n: 0 }, 422],
  [{ prompt: "x", n: 21 }, 422],
  [{ prompt: "x", n: 1.5 }, 422],
  [{ prompt: "x", n: -3 }, 422],
  [{ prompt: "x", n: 1e308 }, 422],
  [{ prompt: "x", n: "2" }, 400],
  [{ prompt: "x", seed: "7" }, 400],
  [{ prompt: "x", seed: 1.5 }, 422],
  [{ prompt: "x", seed: -1 }, null],
  [{ prompt: "x", maxImagesPerCall: 0 }, 422],
  [{ prompt: "x", maxImagesPerCall: 1000 }, 422],
  [{ prompt: "x", maxImagesPerCall: "2" }, 400],
  [{ prompt: "x", model: "../../etc" }, 422],
  [{ prompt: "x", model: "dall-e-3?x=1" }, 422],
  [{ prompt: "x", model: "" }, 422],
  [{ prompt: "x", model: 3 }, 400],
  [{ prompt: "x", model: "gpt-4.1" }, 422],
  [{ prompt: "x", providerOptions: [] }, 400],
  [{ prompt: "x", providerOptions: { "provider-a": "low" } }, 400],
  [{ prompt: "x", providerOptions: { "provider-a": { quality: 5 } } }, 400],
  [{ prompt: "x", providerOptions: { "provider-a": { quality: "ultra" } } }, 422],
  [{ prompt: "x", providerOptions: { "provider-z": {} } }, null],
  [{ prompt: "x", providerOptions: { "provider-c": { safetyFilterLevel: 3 } } }, 400],
  [{ prompt: "x", providerOptions: { "provider-c": { safetyFilterLevel: "none" } } }, 422],
  [{ prompt: ["x"] }, 400],
  [{ prompt: "" }, 400],
  [{ prompt: " \n\t" }, 400],
];
