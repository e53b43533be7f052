import { createServer, type Server } from "node:http";
import {
  type AddressInfo,
  createServer as createTcpServer,
  type Socket,
  type Server as TcpServer,
} from "node:net";
import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { beforeTimer, timerFiredFirst } from "../../test/support/before-timer.js";
import { GatewayError } from "../errors.js";
import { decodedLength } from "./base64.js";
import { parseImageInput, sniffImageType } from "./image-input.js";
import { parsePdfInput } from "./pdf-input.js";
import { isPublicAddress } from "./public-address.js";
import { createSafePdfFetcher } from "./safe-pdf-fetch.js";

// The signature and the IHDR chunk's length, type and size (1x1): a PNG's header, as every PNG begins.
const png = Buffer.from("89504e470d0a1a0a0000000d494844520000000100000001", "hex");
// A JPEG's start of image, its APP0 (JFIF) segment and its start-of-scan header: the scan follows.
const jpeg = Buffer.from("ffd8ffe000104a46494600010100000100010000ffda000c03010002110311003f00", "hex");
// A GIF's signature and its whole logical screen descriptor (GIF89a §18): 1x1, no colour table.
const gif = Buffer.from("GIF89a\u0001\u0000\u0001\u0000\u0000\u0000\u0000", "latin1");
// A lossy WebP's container, its VP8 chunk header and its key frame's header (1x1).
const webp = Buffer.concat([
  Buffer.from("RIFF"),
  Buffer.from([0x24, 0, 0, 0]),
  Buffer.from("WEBPVP8 "),
  Buffer.from("180000003001009d012a0100010000", "hex"),
]);
const heic = Buffer.concat([Buffer.from([0, 0, 0, 0x18]), Buffer.from("ftypheic"), Buffer.alloc(8)]);
const pdf = Buffer.from("%PDF-1.7\n%âãÏÓ\n1 0 obj\n<<>>\nendobj\n%%EOF\n", "latin1");

function codeOf(run: () => unknown): string {
  try {
    run();
  } catch (error) {
    return error instanceof GatewayError ? error.code : "OTHER";
  }
  return "NONE";
}

describe("image input", () => {
  it.each([
    ["png", png, "image/png"],
    ["jpeg", jpeg, "image/jpeg"],
    ["gif", gif, "image/gif"],
    ["webp", webp, "image/webp"],
    ["heic", heic, "image/heic"],
  ])("sniffs %s from raw base64 and from a data URL", (_name, bytes, type) => {
    expect(sniffImageType(bytes)).toBe(type);
    expect(parseImageInput(bytes.toString("base64"), { maxBytes: 1024 }).mediaType).toBe(type);
    const declared = `data:image/jpeg;base64,${bytes.toString("base64")}`;
    const parsed = parseImageInput(declared, { maxBytes: 1024 });
    expect(parsed.mediaType).toBe(type);
    expect(Buffer.from(parsed.bytes).equals(bytes)).toBe(true);
  });

  it("names, for bytes that are no image, the types the project's provider reads", () => {
    const text = Buffer.from("plain text, not an image").toString("base64");
    expect(() => parseImageInput(text, { maxBytes: 1024, provider: "provider-a" })).toThrow(
      /^image is not a PNG, JPEG, GIF or WEBP image$/,
    );
    expect(() => parseImageInput(text, { maxBytes: 1024, provider: "provider-c" })).toThrow(
      /^image is not a PNG, JPEG, WEBP, HEIC or HEIF image$/,
    );
  });

  it("tolerates MIME line wrapping", () => {
    const wrapped = png.toString("base64").replace(/(.{8})/g, "$1\r\n");
    expect(parseImageInput(wrapped, { maxBytes: 1024 }).mediaType).toBe("image/png");
  });

  // The cap is on decoded bytes: line breaks in the base64 do not count towards it.
  it("accepts MIME- and PEM-wrapped base64 just under the cap, and refuses it just over", () => {
    const under = Buffer.concat([png, Buffer.alloc(1024 - png.length)]);
    for (const width of [76, 64, 4]) {
      const wrap = (bytes: Buffer) =>
        bytes.toString("base64").replace(new RegExp(`(.{${width}})`, "g"), "$1\r\n");
      expect(parseImageInput(wrap(under), { maxBytes: 1024 }).bytes.length).toBe(1024);
      expect(parseImageInput(`data:image/png;base64,${wrap(under)}`, { maxBytes: 1024 }).mediaType).toBe(
        "image/png",
      );
      expect(codeOf(() => parseImageInput(wrap(Buffer.concat([under, png])), { maxBytes: 1024 }))).toBe(
        "PAYLOAD_TOO_LARGE",
      );
    }
  });

  it("estimates the decoded size without counting whitespace", () => {
    expect(decodedLength("QUJD")).toBe(3);
    expect(decodedLength("QUJD\r\nREVG\n")).toBe(6);
    expect(decodedLength(" Q U J D\tREVG ")).toBe(6);
    expect(decodedLength("\r\n".repeat(1000))).toBe(0);
  });

  it.each([
    ["not base64", "!!!not base64!!!", "VALIDATION_ERROR"],
    ["bad padding", "iVBORw0KGgo", "VALIDATION_ERROR"],
    ["text that is not an image", Buffer.from("hello world!").toString("base64"), "VALIDATION_ERROR"],
    ["a PDF", pdf.toString("base64"), "VALIDATION_ERROR"],
    ["a non-image data URL", `data:text/plain;base64,${png.toString("base64")}`, "VALIDATION_ERROR"],
    ["too large", Buffer.concat([png, Buffer.alloc(2000)]).toString("base64"), "PAYLOAD_TOO_LARGE"],
  ])("refuses %s", (_name, value, code) => {
    expect(codeOf(() => parseImageInput(value, { maxBytes: 1024 }))).toBe(code);
  });

  // Found by test/e2e/fuzz-bad-inputs.test.ts: the PNG signature alone was taken for a PNG and sent to
  // the provider, a billed call for bytes no provider reads as an image.
  it.each([
    ["the PNG signature alone", png.subarray(0, 8), /^image is malformed: a PNG without its header/],
    ["a PNG cut inside its IHDR", png.subarray(0, 20), /^image is malformed: a PNG without its header/],
    [
      "a PNG whose first chunk is not IHDR",
      Buffer.concat([png.subarray(0, 12), Buffer.from("IDAT"), png.subarray(16)]),
      /^image is malformed: a PNG without its header/,
    ],
    [
      "a PNG of no width",
      Buffer.concat([png.subarray(0, 16), Buffer.alloc(4), png.subarray(20)]),
      /0x1 pixels$/,
    ],
    [
      "a GIF cut before its screen descriptor",
      Buffer.from("GIF89a\u0001\u0000", "latin1"),
      /a GIF cut short/,
    ],
    [
      // Its logical screen descriptor is 7 bytes (GIF89a §18): width and height alone are not it.
      "a GIF cut inside its screen descriptor",
      Buffer.from("GIF89a\u0001\u0000\u0001\u0000\u0000\u0000", "latin1"),
      /a GIF cut short/,
    ],
    ["the JPEG signature alone", jpeg.subarray(0, 3), /a JPEG that ends before its image data/],
    ["a JPEG cut inside its APP0 segment", jpeg.subarray(0, 10), /a JPEG that ends before its image data/],
    [
      "a JPEG whose end of image comes before any scan",
      Buffer.concat([jpeg.subarray(0, 20), Buffer.from("ffd9", "hex")]),
      /a JPEG that ends before its image data/,
    ],
    ["a WebP cut inside its frame header", webp.subarray(0, 16), /a WebP without its header/],
    [
      "a WebP whose first chunk is not VP8, VP8L or VP8X",
      Buffer.concat([webp.subarray(0, 12), Buffer.from("EXIF"), webp.subarray(16)]),
      /a WebP without its header/,
    ],
  ])("refuses %s as a malformed image (422), whatever its signature says", (_name, bytes, message) => {
    for (const value of [bytes.toString("base64"), `data:image/png;base64,${bytes.toString("base64")}`]) {
      expect(codeOf(() => parseImageInput(value, { maxBytes: 1024 }))).toBe("VALIDATION_ERROR");
      expect(() => parseImageInput(value, { maxBytes: 1024 })).toThrow(message);
    }
  });
});

// What is not certainly malformed is left to the provider: a scan cut short still has pixels, and
// decoders skip stray bytes between a JPEG's segments.
it.each([
  ["a JPEG cut inside its scan", Buffer.concat([jpeg, Buffer.alloc(4, 0x55)])],
  [
    "a JPEG with stray bytes between segments",
    Buffer.concat([jpeg.subarray(0, 20), Buffer.from([0]), jpeg.subarray(20)]),
  ],
  [
    "a lossless WebP",
    Buffer.concat([
      webp.subarray(0, 12),
      Buffer.from("VP8L"),
      Buffer.from("0a0000002f00000000", "hex"),
      Buffer.alloc(6),
    ]),
  ],
  [
    // A 1x1 lossless image's whole bitstream fits in a few bytes: 28 in all, as small as WebP goes.
    "a lossless WebP of 28 bytes",
    Buffer.concat([
      webp.subarray(0, 12),
      Buffer.from("VP8L"),
      Buffer.from("080000002f00000000000000", "hex"),
    ]),
  ],
])("sends %s on", (_name, bytes) => {
  expect(() => parseImageInput(bytes.toString("base64"), { maxBytes: 1024 })).not.toThrow();
});

// RFC 2397: the scheme is case-insensitive, as the data URL of an image is read. Before, a non-image
// data URL in capitals was told its whole text was not valid base64.
it.each(["data:text/plain;base64,aGVsbG8=", "DATA:text/plain;base64,aGVsbG8=", "Data:image/png,aGVsbG8="])(
  "names the data URL form it takes for %s",
  (value) => {
    expect(() => parseImageInput(value, { maxBytes: 1024 })).toThrow(
      /^image must be base64 or a data URL of the form data:image\/<type>;base64,<data>$/,
    );
  },
);

describe("pdf input", () => {
  it("accepts the data URL prefix with PDF bytes, and https URLs", () => {
    const data = parsePdfInput(`data:application/pdf;base64,${pdf.toString("base64")}`, { maxBytes: 1024 });
    expect(data.kind === "data" && Buffer.from(data.bytes).equals(pdf)).toBe(true);
    const parsed = parsePdfInput("https://example.com/a.pdf", { maxBytes: 1024 });
    expect(parsed.kind === "url" && parsed.url.href).toBe("https://example.com/a.pdf");
  });

  // RFC 2397 and RFC 2045: the scheme, the media type and "base64" are case-insensitive, as /v1/vision
  // reads them. Before, any letter in another case was refused (400).
  it.each(["data:application/pdf;BASE64,", "data:Application/PDF;base64,", "DATA:APPLICATION/PDF;BASE64,"])(
    "accepts the data URL prefix in any letter case (%s)",
    (prefix) => {
      const data = parsePdfInput(`${prefix}${pdf.toString("base64")}`, { maxBytes: 1024 });
      expect(data.kind === "data" && Buffer.from(data.bytes).equals(pdf)).toBe(true);
    },
  );

  it("accepts wrapped base64 just under the cap, and refuses it just over", () => {
    const under = Buffer.concat([pdf, Buffer.alloc(1024 - pdf.length, 0x20)]);
    const wrap = (bytes: Buffer) => bytes.toString("base64").replace(/(.{64})/g, "$1\n");
    const data = parsePdfInput(`data:application/pdf;base64,${wrap(under)}`, { maxBytes: 1024 });
    expect(data.kind === "data" && data.bytes.length).toBe(1024);
    expect(
      codeOf(() =>
        parsePdfInput(`data:application/pdf;base64,${wrap(Buffer.concat([under, pdf]))}`, { maxBytes: 1024 }),
      ),
    ).toBe("PAYLOAD_TOO_LARGE");
  });

  it.each([
    ["another media type", `data:application/octet-stream;base64,${pdf.toString("base64")}`, "BAD_REQUEST"],
    [
      "a data URL with parameters",
      `data:application/pdf;name=a.pdf;base64,${pdf.toString("base64")}`,
      "BAD_REQUEST",
    ],
    ["another media type in capitals", `DATA:TEXT/PLAIN;BASE64,${pdf.toString("base64")}`, "BAD_REQUEST"],
    ["bytes that are not a PDF", `data:application/pdf;base64,${png.toString("base64")}`, "BAD_REQUEST"],
    ["broken base64", "data:application/pdf;base64,%%%", "BAD_REQUEST"],
    ["ftp", "ftp://example.com/a.pdf", "BAD_REQUEST"],
    ["credentials", "https://user:pass@example.com/a.pdf", "BAD_REQUEST"],
    ["a relative path", "/etc/passwd", "BAD_REQUEST"],
    ["file:", "file:///etc/passwd", "BAD_REQUEST"],
    [
      "too large",
      `data:application/pdf;base64,${Buffer.concat([pdf, Buffer.alloc(2000)]).toString("base64")}`,
      "PAYLOAD_TOO_LARGE",
    ],
  ])("refuses %s", (_name, value, code) => {
    expect(codeOf(() => parsePdfInput(value, { maxBytes: 1024 }))).toBe(code);
  });
});

describe("public addresses", () => {
  it.each([
    "8.8.8.8",
    "1.1.1.1",
    "2606:4700:4700::1111",
    "2a00:1450:4001:80b::200e",
    "[2606:4700:4700::1111]",
    // NAT64 (well-known prefix) embedding a public IPv4 address, and the neighbours of refused ranges.
    "64:ff9b::808:808",
    "::ffff:0:808:808",
    "2001:3::1",
    "3fff:1000::1",
    "2c0f:fb50::1",
    // The globally reachable assignments inside the IETF's 2001::/23 (IANA's registry).
    "2001:1::1",
    "2001:1::3",
    "2001:4:112::1",
    "2001:30::1",
    "3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
  ])("allows %s", (ip) => {
    expect(isPublicAddress(ip)).toBe(true);
  });
  it.each([
    "127.0.0.1",
    "127.1.2.3",
    "0.0.0.0",
    "10.1.2.3",
    "172.16.0.1",
    "172.31.255.255",
    "192.168.1.1",
    "100.64.0.1",
    "169.254.169.254",
    "224.0.0.1",
    "255.255.255.255",
    "198.18.0.1",
    "::1",
    "::",
    "fe80::1",
    "fd00::1",
    "ff02::1",
    "::ffff:127.0.0.1",
    "::ffff:7f00:1",
    "::ffff:169.254.169.254",
    // IPv4-translated (RFC 2765), which a translator on the path makes the IPv4 address it holds.
    "::ffff:0:7f00:1",
    "::ffff:0:127.0.0.1",
    "::ffff:0:a9fe:a9fe",
    "::127.0.0.1",
    "64:ff9b::a00:1",
    "2002:7f00:1::",
    "2001:0:4136:e378::1",
    // Benchmarking (RFC 5180), local-use NAT64 (RFC 8215; refused whatever it embeds),
    // documentation (RFC 9637), the dummy prefix (RFC 9780) and SRv6 SIDs (RFC 9602).
    "2001:2::1",
    "2001:2:0:ffff:ffff:ffff:ffff:ffff",
    "64:ff9b:1::a00:1",
    "64:ff9b:1::808:808",
    "64:ff9b:1:ffff::8.8.8.8",
    "3fff::1",
    "3fff:fff:ffff::1",
    "100:0:0:1::1",
    "5f00::1",
    // Outside global unicast 2000::/3: reserved by the IETF, never a public host's address.
    "1::1",
    "400::1",
    "4000::1",
    "8000::1",
    "e000::1",
    "fe00::1",
    // In 64:ff9b::/32 but not the /96 well-known prefix, nor 64:ff9b:1::/48.
    "64:ff9b:0:0:0:1:7f00:1",
    // The unassigned rest of the IETF's 2001::/23 (IANA: not globally reachable).
    "2001:1::4",
    "2001:5::1",
    "2001:1ff:ffff::1",
    // Cloud metadata services (Oracle, Alibaba, AWS over IPv6), and the edges of the benchmarking,
    // documentation and multicast ranges.
    "192.0.0.192",
    "100.100.100.200",
    "fd00:ec2::254",
    "198.19.255.255",
    "192.0.2.1",
    "198.51.100.1",
    "203.0.113.255",
    "239.255.255.250",
    "fec0::1",
    "2001:10::1",
    "not an ip",
    "",
  ])("refuses %s", (ip) => {
    expect(isPublicAddress(ip)).toBe(false);
  });
});

describe("SSRF-safe PDF fetch", () => {
  let forbidden: Server;
  let forbiddenPort = 0;
  let forbiddenConnections = 0;
  let allowed: Server;
  let allowedPort = 0;
  const allowedRequests: string[] = [];
  /** When the connection of the last `/drip` request closed (ms since the epoch). */
  let dripClosed: number | undefined;
  /** Takes connections and never says a word: no TLS handshake, no HTTP answer. */
  let mute: TcpServer;
  let mutePort = 0;
  /** When each of the mute server's connections opened and closed (ms since the epoch). */
  const muteConnections: Array<{ opened: number; closed?: number }> = [];
  const muteSockets = new Set<Socket>();

  beforeAll(async () => {
    forbidden = createServer((_request, response) => response.end(pdf));
    forbidden.on("connection", () => forbiddenConnections++);
    await new Promise<void>((resolve) => forbidden.listen(0, "127.0.0.1", resolve));
    forbiddenPort = (forbidden.address() as AddressInfo).port;
    allowed = createServer((request, response) => {
      allowedRequests.push(request.url ?? "");
      if (request.url === "/to-credentials")
        return void response
          .writeHead(302, { location: `http://user:pass@127.0.0.3:${allowedPort}/doc.pdf` })
          .end();
      if (request.url === "/doc.pdf") return void response.end(pdf);
      if (request.url === "/not-a-pdf") return void response.end("<html></html>");
      if (request.url === "/endless-page") {
        // A page that is no PDF and never ends: its first bytes, then 1 KiB every 10 ms.
        response.write("<html><body>");
        const timer = setInterval(() => response.write(Buffer.alloc(1024, 0x20)), 10);
        response.on("close", () => clearInterval(timer));
        return;
      }
      if (request.url === "/big") return void response.end(Buffer.concat([pdf, Buffer.alloc(5000)]));
      if (request.url === "/missing") return void response.writeHead(404).end();
      if (request.url === "/slow") return void setTimeout(() => response.end(pdf), 3000);
      if (request.url === "/drip") {
        // The headers at once, then one byte every 100 ms (the PDF, then spaces), never ending.
        dripClosed = undefined;
        response.writeHead(200, { "content-type": "application/pdf" });
        let index = 0;
        const timer = setInterval(() => {
          response.write(index < pdf.length ? pdf.subarray(index, ++index) : " ");
        }, 100);
        response.on("close", () => {
          clearInterval(timer);
          dripClosed = Date.now();
        });
        return;
      }
      if (request.url === "/to-forbidden")
        // The forbidden server's own address: a redirect followed unchecked would reach it (on
        // 127.0.0.2, where nothing listens, it failed to connect and was refused all the same).
        return void response.writeHead(302, { location: `http://127.0.0.1:${forbiddenPort}/x.pdf` }).end();
      if (request.url === "/to-bad-port")
        return void response.writeHead(302, { location: "http://127.0.0.3:6667/doc.pdf" }).end();
      if (request.url === "/to-self") return void response.writeHead(302, { location: "/doc.pdf" }).end();
      // `/to?<location>`: a redirect to the location given (percent-encoded).
      if (request.url?.startsWith("/to?"))
        return void response.writeHead(302, { location: decodeURIComponent(request.url.slice(4)) }).end();
      if (request.url === "/gzip-bomb") {
        // A PDF of 1 MiB (512 times the cap), gzip-encoded into about 1 KiB (under it).
        const body = gzipSync(Buffer.concat([pdf, Buffer.alloc(1 << 20)]));
        response.writeHead(200, { "content-type": "application/pdf", "content-encoding": "gzip" });
        return void response.end(body);
      }
      if (request.url === "/compressed-unless-identity") {
        // A server that compresses unless told not to (RFC 9110 §12.5.3: no Accept-Encoding, any).
        if (request.headers["accept-encoding"] === "identity")
          return void response.writeHead(200, { "content-type": "application/pdf" }).end(pdf);
        response.writeHead(200, { "content-type": "application/pdf", "content-encoding": "gzip" });
        return void response.end(gzipSync(pdf));
      }
      if (request.url === "/to-self-endless") {
        // A redirect whose body never ends: 64 KiB a millisecond until the connection closes.
        response.writeHead(302, { location: "/doc.pdf" });
        const timer = setInterval(() => response.write(Buffer.alloc(65536)), 1);
        response.on("close", () => clearInterval(timer));
        return;
      }
      if (request.url === "/loop") return void response.writeHead(302, { location: "/loop" }).end();
      // `/hops/N`: N redirects, each to the next, before the PDF.
      const hops = /^\/hops\/(\d+)$/.exec(request.url ?? "");
      if (hops) {
        const left = Number(hops[1]);
        return void response.writeHead(302, { location: left > 1 ? `/hops/${left - 1}` : "/doc.pdf" }).end();
      }
      response.writeHead(404).end();
    });
    await new Promise<void>((resolve) => allowed.listen(0, "127.0.0.3", resolve));
    allowedPort = (allowed.address() as AddressInfo).port;
    mute = createTcpServer((socket) => {
      const connection: { opened: number; closed?: number } = { opened: Date.now() };
      muteConnections.push(connection);
      muteSockets.add(socket);
      // Read (and drop) what comes: a paused socket never hears the client close it.
      socket.resume();
      socket.on("error", () => {});
      socket.on("close", () => {
        connection.closed = Date.now();
        muteSockets.delete(socket);
      });
    });
    await new Promise<void>((resolve) => mute.listen(0, "127.0.0.3", resolve));
    mutePort = (mute.address() as AddressInfo).port;
  });

  afterAll(async () => {
    forbidden.closeAllConnections();
    allowed.closeAllConnections();
    await new Promise((resolve) => forbidden.close(resolve));
    await new Promise((resolve) => allowed.close(resolve));
    for (const socket of muteSockets) socket.destroy();
    await new Promise((resolve) => mute.close(resolve));
  });

  /** A fetcher like production's, except that the one test server's address counts as allowed. */
  const fetcher = (
    lookup?: (host: string) => Promise<Array<{ address: string; family: number }>>,
    timeoutMs = 1500,
  ) =>
    createSafePdfFetcher({
      ...(lookup ? { lookup } : {}),
      isAllowedAddress: (ip) => ip === "127.0.0.3" || isPublicAddress(ip),
      allowedProtocols: ["http:", "https:"],
      maxBytes: 2048,
      timeoutMs,
    });
  /** A deadline no test waits for: what ends a fetch before it is the caller's signal. */
  const patientMs = 60_000;
  /** A lookup that never answers: what ends it is the deadline or the caller's signal. */
  const neverAnswers = () => new Promise<Array<{ address: string; family: number }>>(() => {});

  async function expectRefused(run: Promise<unknown>, code = "BAD_REQUEST") {
    const error = await run.then(
      () => null,
      (caught: unknown) => caught,
    );
    expect(error instanceof GatewayError ? error.code : error).toBe(code);
  }

  it("fetches a PDF from an allowed address, also through a redirect", async () => {
    const bytes = await fetcher()(new URL(`http://127.0.0.3:${allowedPort}/doc.pdf`));
    expect(Buffer.from(bytes).equals(pdf)).toBe(true);
    expect(Buffer.from(await fetcher()(new URL(`http://127.0.0.3:${allowedPort}/to-self`))).equals(pdf)).toBe(
      true,
    );
  });

  it.each([
    "https://127.1/x.pdf",
    "https://0x7f000001/x.pdf",
    "https://2130706433/x.pdf",
    "https://017700000001/x.pdf",
    "https://[::ffff:127.0.0.1]/x.pdf",
    "https://[::1]/x.pdf",
    "https://169.254.169.254/latest/meta-data",
    "https://10.0.0.1/x.pdf",
    "https://[fd00::1]/x.pdf",
    // Loopback by RFC 6761: refused by name, not asked of a resolver.
    "https://localhost/x.pdf",
    "https://0177.0.0.1/x.pdf",
    "https://0x7f.1/x.pdf",
    "https://0.0.0.0/x.pdf",
    "https://[::]/x.pdf",
    "https://[0:0:0:0:0:ffff:127.0.0.1]/x.pdf",
    "https://[::ffff:0:127.0.0.1]/x.pdf",
    "https://[64:ff9b::7f00:1]/x.pdf",
    "https://[2002:7f00:1::]/x.pdf",
    // Spellings the URL parser turns into a loopback address or name: a trailing dot, a
    // percent-encoded or full-width host, IPv4-compatible IPv6, and `localhost` in other letters.
    "https://127.0.0.1./x.pdf",
    "https://127.0.0.1%2e/x.pdf",
    "https://%31%32%37.0.0.1/x.pdf",
    "https://１２７．０．０．１/x.pdf",
    "https://[::127.0.0.1]/x.pdf",
    "https://[::ffff:0.0.0.0]/x.pdf",
    "https://0/x.pdf",
    "https://LOCALHOST./x.pdf",
    "https://ｌｏｃａｌｈｏｓｔ/x.pdf",
    "https://a.b.localhost/x.pdf",
  ])("refuses %s with no connection", async (target) => {
    const before = forbiddenConnections;
    const url = new URL(
      target.replace("/x.pdf", `:${forbiddenPort}/x.pdf`).replace("/latest", `:${forbiddenPort}/latest`),
    );
    // Refused for its address, before any connection: not a connection that merely failed.
    await expect(createSafePdfFetcher({ maxBytes: 2048, timeoutMs: 1000 })(url)).rejects.toThrow(
      /^the PDF URL's host has no public address$/,
    );
    expect(forbiddenConnections).toBe(before);
  });

  it("refuses a host whose DNS answers a private address, or one private among public ones", async () => {
    const before = forbiddenConnections;
    await expectRefused(
      fetcher(async () => [{ address: "127.0.0.1", family: 4 }])(
        new URL(`https://evil.example:${forbiddenPort}/x.pdf`),
      ),
    );
    // The allowed address first, where the connection would go: with a public one first (outside
    // the machine) a fetcher that checked only it failed to connect and was refused all the same.
    allowedRequests.length = 0;
    await expect(
      fetcher(async () => [
        { address: "127.0.0.3", family: 4 },
        { address: "10.0.0.7", family: 4 },
      ])(new URL(`http://mixed.example:${allowedPort}/doc.pdf`)),
    ).rejects.toThrow(/^the PDF URL's host has no public address$/);
    expect(allowedRequests).toEqual([]);
    expect(forbiddenConnections).toBe(before);
  });

  it("refuses a host whose DNS answers a reserved IPv6 address", async () => {
    for (const address of ["1::1", "4000::7", "2001:5::1"]) {
      const error = await fetcher(async () => [{ address, family: 6 }])(
        new URL(`https://reserved.example:${forbiddenPort}/x.pdf`),
      ).then(
        () => null,
        (caught: unknown) => caught,
      );
      expect(error instanceof GatewayError && error.message).toBe("the PDF URL's host has no public address");
    }
  });

  it("refuses a port fetch refuses (a WHATWG bad port: SMTP, IRC…), on the first URL and on a redirect", async () => {
    let lookups = 0;
    const counting = async () => {
      lookups++;
      return [{ address: "127.0.0.3", family: 4 }];
    };
    for (const target of ["http://mail.example:25/doc.pdf", "https://irc.example:6697/doc.pdf"]) {
      const error = await fetcher(counting)(new URL(target)).then(
        () => null,
        (caught: unknown) => caught,
      );
      expect(error instanceof GatewayError && error.code).toBe("BAD_REQUEST");
      expect((error as Error).message).toMatch(/^the PDF URL's port \d+ is one fetch refuses/);
    }
    expect(lookups).toBe(0);
    allowedRequests.length = 0;
    const error = await fetcher()(new URL(`http://127.0.0.3:${allowedPort}/to-bad-port`)).then(
      () => null,
      (caught: unknown) => caught,
    );
    expect((error as Error).message).toBe("the PDF URL's port 6667 is one fetch refuses to call");
    expect(allowedRequests).toEqual(["/to-bad-port"]);
  });

  it("pins the connection to the address it checked: DNS asked again (rebinding) is not asked", async () => {
    let lookups = 0;
    // The first answer is allowed; any later one (the connection's own lookup) points elsewhere.
    const rebinding = async () =>
      ++lookups === 1 ? [{ address: "127.0.0.3", family: 4 }] : [{ address: "127.0.0.1", family: 4 }];
    const before = forbiddenConnections;
    const bytes = await fetcher(rebinding)(new URL(`http://rebind.example:${allowedPort}/doc.pdf`));
    expect(Buffer.from(bytes).equals(pdf)).toBe(true);
    expect(lookups).toBe(1);
    expect(forbiddenConnections).toBe(before);
  });

  it("refuses a redirect to a private address without connecting to it", async () => {
    const before = forbiddenConnections;
    await expect(fetcher()(new URL(`http://127.0.0.3:${allowedPort}/to-forbidden`))).rejects.toThrow(
      /^the PDF URL's host has no public address$/,
    );
    expect(forbiddenConnections).toBe(before);
  });

  it("refuses a redirect to a URL with credentials, without following it", async () => {
    allowedRequests.length = 0;
    const error = await fetcher()(new URL(`http://127.0.0.3:${allowedPort}/to-credentials`)).then(
      () => null,
      (caught: unknown) => caught,
    );
    expect(error instanceof GatewayError && error.code).toBe("BAD_REQUEST");
    expect((error as Error).message).toContain("credentials");
    expect(allowedRequests).toEqual(["/to-credentials"]);
  });

  // A lookup outside the time cap would hold the fetch as long as the lookup: here, for ever.
  it("puts the DNS lookup under the time cap: a lookup that takes longer fails as a time-out", async () => {
    const started = Date.now();
    const error = await fetcher(neverAnswers)(new URL(`http://slow-dns.example:${allowedPort}/doc.pdf`)).then(
      () => null,
      (caught: unknown) => caught,
    );
    expect(error instanceof GatewayError && error.code).toBe("BAD_REQUEST");
    expect((error as Error).message).toBe("fetching the PDF took too long");
    expect(Date.now() - started).toBeGreaterThanOrEqual(1500 - 50);
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it("counts a redirect hop's lookup against the same deadline", async () => {
    let lookups = 0;
    const secondSlow = async () =>
      ++lookups === 1 ? [{ address: "127.0.0.3", family: 4 }] : await neverAnswers();
    allowedRequests.length = 0;
    const started = Date.now();
    const error = await fetcher(secondSlow)(new URL(`http://dns.example:${allowedPort}/to-self`)).then(
      () => null,
      (caught: unknown) => caught,
    );
    expect((error as Error).message).toBe("fetching the PDF took too long");
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(allowedRequests).toEqual(["/to-self"]);
  });

  it("stops at once when the caller's signal aborts, mid-body or mid-lookup, well before the deadline", async () => {
    const abortIn = (ms: number) => {
      const controller = new AbortController();
      setTimeout(() => controller.abort(new Error("The client disconnected")), ms);
      return controller.signal;
    };
    // Under a deadline of 60 s, from a download and a lookup that never end: stopped within 10 s,
    // they were stopped by the signal (a few ms after it; over a second on a loaded machine).
    let started = Date.now();
    let error = await fetcher(undefined, patientMs)(
      new URL(`http://127.0.0.3:${allowedPort}/drip`),
      abortIn(200),
    ).then(
      () => null,
      (caught: unknown) => caught,
    );
    expect(error instanceof GatewayError && error.code).toBe("BAD_REQUEST");
    expect((error as Error).message).toBe("fetching the PDF was cancelled");
    expect(Date.now() - started).toBeLessThan(10_000);
    // The download itself stopped: the server saw its connection close (a moment after the fetch
    // gave up; waited for, as a fixed wait could end first on a loaded machine).
    const closedAt = await vi.waitFor(
      () => {
        expect(dripClosed).toBeDefined();
        return dripClosed as number;
      },
      { timeout: 10_000, interval: 5 },
    );
    expect(closedAt - started).toBeLessThan(10_000);

    started = Date.now();
    error = await fetcher(neverAnswers, patientMs)(
      new URL(`http://slow-dns.example:${allowedPort}/doc.pdf`),
      abortIn(100),
    ).then(
      () => null,
      (caught: unknown) => caught,
    );
    expect((error as Error).message).toBe("fetching the PDF was cancelled");
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  // The connection (its TLS handshake above all) was outside both: undici waits for a connection
  // before it hears of an abort, and its connect timeout (SLUICE_PDF_FETCH_TIMEOUT_MS again) started
  // after the DNS lookup. A host that took the TCP connection and never answered the handshake held
  // the fetch, and its socket, up to twice the cap, and past the client's leaving.
  it("stops at once when the caller's signal aborts during a TLS handshake that never ends", async () => {
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error("The client disconnected")), 200);
    muteConnections.length = 0;
    // Under a deadline (and so a connect timeout) of 60 s: what ends it within 10 s is the signal.
    const started = Date.now();
    const error = await fetcher(undefined, patientMs)(
      new URL(`https://127.0.0.3:${mutePort}/doc.pdf`),
      controller.signal,
    ).then(
      () => null,
      (caught: unknown) => caught,
    );
    expect((error as Error).message).toBe("fetching the PDF was cancelled");
    expect(Date.now() - started).toBeLessThan(10_000);
    // The connection itself was closed then, not left to its connect timeout.
    const closedAt = await vi.waitFor(
      () => {
        expect(muteConnections[0]?.closed).toBeDefined();
        return muteConnections[0]?.closed as number;
      },
      { timeout: 10_000, interval: 5 },
    );
    expect(closedAt - started).toBeLessThan(10_000);
  });

  it("ends a TLS handshake that never ends at the deadline, the DNS lookup's time included", async () => {
    // The deadline is 3 s; the handshake's own timeout (as long, counted from the connection, after
    // the 2.5 s lookup) would end it at 5.5 s. Told by the order of events, before a timer of 4.25 s
    // set as the fetch starts: the deadline's timer is due first on any machine, and the handshake's
    // after it, however late the lookup's answer came; a loaded machine has 1.25 s to stop the fetch.
    const timeoutMs = 3000;
    const lookupMs = 2500;
    const slowLookup = () =>
      new Promise<Array<{ address: string; family: number }>>((resolve) =>
        setTimeout(() => resolve([{ address: "127.0.0.3", family: 4 }]), lookupMs),
      );
    const error = await beforeTimer(
      fetcher(
        slowLookup,
        timeoutMs,
      )(new URL(`https://mute.example:${mutePort}/doc.pdf`)).then(
        () => null,
        (caught: unknown) => caught,
      ),
      timeoutMs + lookupMs / 2,
    );
    expect((error as Error).message).toBe("fetching the PDF took too long");
  });

  // Closing the agent (rather than destroying it) after an aborted request had undici connect to
  // the host again, and a connection made once the deadline had aborted was never closed.
  it("makes no further connection once a fetch stopped, and leaves none open", async () => {
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error("The client disconnected")), 200);
    muteConnections.length = 0;
    const error = await fetcher()(new URL(`http://127.0.0.3:${mutePort}/doc.pdf`), controller.signal).then(
      () => null,
      (caught: unknown) => caught,
    );
    expect((error as Error).message).toBe("fetching the PDF was cancelled");
    await vi.waitFor(() => expect(muteConnections[0]?.closed).toBeDefined(), { timeout: 5000, interval: 5 });
    // Time for a connection made after the fetch gave up to arrive.
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(muteConnections.map((connection) => connection.closed !== undefined)).toEqual([true]);
  });

  // Told by the order of events, before a timer of 5 s set as the fetch starts: the deadline's timer
  // (1.5 s) is due first on any machine, and a loaded one has 3.5 s to stop the fetch. Without its
  // deadline the fetch of a download that never ends would end only with the test.
  it("still names its own deadline when a caller's signal is given and does not abort", async () => {
    const error = await beforeTimer(
      fetcher()(new URL(`http://127.0.0.3:${allowedPort}/drip`), new AbortController().signal).then(
        () => null,
        (caught: unknown) => caught,
      ),
      5000,
    );
    expect(error).not.toBe(timerFiredFirst);
    expect((error as Error).message).toBe("fetching the PDF took too long");
  });

  it("follows three redirects and refuses a fourth, without requesting its target", async () => {
    const bytes = await fetcher()(new URL(`http://127.0.0.3:${allowedPort}/hops/3`));
    expect(Buffer.from(bytes).equals(pdf)).toBe(true);
    allowedRequests.length = 0;
    const error = await fetcher()(new URL(`http://127.0.0.3:${allowedPort}/hops/4`)).then(
      () => null,
      (caught: unknown) => caught,
    );
    expect(error instanceof GatewayError ? `${error.code}: ${error.message}` : error).toBe(
      "BAD_REQUEST: the PDF URL redirected more than 3 times",
    );
    expect(allowedRequests).toEqual(["/hops/4", "/hops/3", "/hops/2", "/hops/1"]);
  });

  // The forms a Location may take that the URL parser reads as another host (backslashes, no
  // scheme, an IPv4-mapped or numeric address, a fully qualified `localhost`): each is checked as
  // a first URL would be, and the loopback server is never reached.
  it.each([
    "\\\\127.0.0.1:PORT/x.pdf",
    "/\\127.0.0.1:PORT/x.pdf",
    "//127.0.0.1:PORT/x.pdf",
    "http:\\\\127.0.0.1:PORT/x.pdf",
    "http://[::ffff:7f00:1]:PORT/x.pdf",
    "http://2130706433:PORT/x.pdf",
    "http://0:PORT/x.pdf",
    "http://localhost.:PORT/x.pdf",
  ])("refuses a redirect to %s without connecting to it", async (location) => {
    allowedRequests.length = 0;
    const before = forbiddenConnections;
    const to = `/to?${encodeURIComponent(location.replace("PORT", String(forbiddenPort)))}`;
    const error = await fetcher()(new URL(`http://127.0.0.3:${allowedPort}${to}`)).then(
      () => null,
      (caught: unknown) => caught,
    );
    expect(error instanceof GatewayError ? `${error.code}: ${error.message}` : error).toBe(
      "BAD_REQUEST: the PDF URL's host has no public address",
    );
    expect(allowedRequests).toEqual([to]);
    expect(forbiddenConnections).toBe(before);
  });

  it.each([
    "data:application/pdf;base64,JVBERi0xLjQK",
    "file:///etc/passwd",
    "javascript:alert(1)",
    "ftp://127.0.0.3/doc.pdf",
  ])("refuses a redirect to %s without following it", async (location) => {
    allowedRequests.length = 0;
    const to = `/to?${encodeURIComponent(location)}`;
    const error = await fetcher()(new URL(`http://127.0.0.3:${allowedPort}${to}`)).then(
      () => null,
      (caught: unknown) => caught,
    );
    expect(error instanceof GatewayError ? `${error.code}: ${error.message}` : error).toBe(
      "BAD_REQUEST: the PDF URL must use http or https",
    );
    expect(allowedRequests).toEqual([to]);
  });

  it("reads a compressed body as it came: a gzip bomb is not inflated, and is no PDF", async () => {
    const error = await fetcher()(new URL(`http://127.0.0.3:${allowedPort}/gzip-bomb`)).then(
      () => null,
      (caught: unknown) => caught,
    );
    expect(error instanceof GatewayError ? `${error.code}: ${error.message}` : error).toBe(
      "BAD_REQUEST: the URL did not return a PDF (it does not start with %PDF-)",
    );
  });

  it("asks for the PDF uncompressed (Accept-Encoding: identity), so a server that compresses by default sends it as it is", async () => {
    const bytes = await fetcher()(new URL(`http://127.0.0.3:${allowedPort}/compressed-unless-identity`));
    expect(Buffer.from(bytes).equals(pdf)).toBe(true);
  });

  it("refuses a body that is no PDF once its first bytes say so, not at the size cap or the deadline", async () => {
    const started = performance.now();
    const error = await fetcher(
      undefined,
      patientMs,
    )(new URL(`http://127.0.0.3:${allowedPort}/endless-page`)).then(
      () => null,
      (caught: unknown) => caught,
    );
    expect(error instanceof GatewayError ? `${error.code}: ${error.message}` : error).toBe(
      "BAD_REQUEST: the URL did not return a PDF (it does not start with %PDF-)",
    );
    expect(performance.now() - started).toBeLessThan(patientMs / 2);
  });

  it("follows a redirect whose body never ends without reading it to the deadline", async () => {
    const started = Date.now();
    const bytes = await fetcher(
      undefined,
      patientMs,
    )(new URL(`http://127.0.0.3:${allowedPort}/to-self-endless`));
    expect(Buffer.from(bytes).equals(pdf)).toBe(true);
    expect(Date.now() - started).toBeLessThan(5000);
  });

  it("refuses http in production, redirect loops, non-PDF content, errors, slowness and size", async () => {
    const plainHttp = createSafePdfFetcher({ maxBytes: 2048, timeoutMs: 1000 })(
      new URL("http://example.com/a.pdf"),
    );
    await expect(plainHttp).rejects.toThrow(/^the PDF URL must use https$/);
    await expectRefused(plainHttp);
    // The parser and the fetcher say it in the same words.
    expect(() => parsePdfInput("ftp://example.com/a.pdf", { maxBytes: 1024 })).toThrow(
      /^the PDF URL must use https$/,
    );
    await expectRefused(fetcher()(new URL(`http://127.0.0.3:${allowedPort}/loop`)));
    await expectRefused(fetcher()(new URL(`http://127.0.0.3:${allowedPort}/not-a-pdf`)));
    await expectRefused(fetcher()(new URL(`http://127.0.0.3:${allowedPort}/missing`)));
    await expectRefused(fetcher()(new URL(`http://127.0.0.3:${allowedPort}/slow`)));
    await expectRefused(fetcher()(new URL(`http://127.0.0.3:${allowedPort}/big`)), "PAYLOAD_TOO_LARGE");
  });
});

// An image URL is a common first try (provider A's vision input takes one, and /v1/pdf takes an
// https URL), but /v1/vision fetches none. Before, its whole text was told it was not valid base64.
it.each(["https://example.com/cat.png", "http://example.com/cat.png", "HTTPS://EXAMPLE.COM/CAT.PNG"])(
  "tells a client that sent the URL %s that images are sent as data, not fetched",
  (value) => {
    expect(codeOf(() => parseImageInput(value, { maxBytes: 1024 }))).toBe("VALIDATION_ERROR");
    expect(() => parseImageInput(value, { maxBytes: 1024 })).toThrow(
      /^image must be base64 or a data URL of the form data:image\/<type>;base64,<data>: \/v1\/vision does not fetch image URLs$/,
    );
  },
);
