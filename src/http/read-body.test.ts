import { createServer, type IncomingMessage } from "node:http";
import { connect } from "node:net";
import { describe, expect, it, vi } from "vitest";
import { refuseAtDeadline } from "../deadline-refusal.js";
import { parseJsonObject, readBody, requireUncompressedUtf8Json } from "./read-body.js";

/** Sends raw bytes to a server whose handler reads the body; resolves with what readBody did. */
async function readRaw(raw: string, maxBytes = 1024, cut = false): Promise<Buffer | Error> {
  let settle: (value: Buffer | Error) => void = () => {};
  const outcome = new Promise<Buffer | Error>((resolve) => {
    settle = resolve;
  });
  const server = createServer((request: IncomingMessage, response) => {
    readBody(request, maxBytes).then(
      (body) => {
        settle(body);
        response.end();
      },
      (error: Error) => {
        settle(error);
        response.destroy();
      },
    );
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  const socket = connect(typeof address === "object" && address ? address.port : 0, "127.0.0.1");
  socket.on("error", () => {});
  socket.write(raw);
  if (cut) setTimeout(() => socket.destroy(), 50);
  const result = await outcome;
  socket.destroy();
  await new Promise((resolve) => server.close(resolve));
  return result;
}

const head = (length: number) => `POST / HTTP/1.1\r\nhost: x\r\ncontent-length: ${length}\r\n\r\n`;

describe("readBody", () => {
  it("reads the whole body", async () => {
    expect(String(await readRaw(`${head(5)}hello`))).toBe("hello");
  });

  it("refuses a body announced or found larger than the cap with 413", async () => {
    expect(await readRaw(`${head(2000)}x`, 1024)).toMatchObject({ code: "PAYLOAD_TOO_LARGE" });
    const chunked = `POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n800\r\n${"x".repeat(2048)}\r\n0\r\n\r\n`;
    expect(await readRaw(chunked, 1024)).toMatchObject({ code: "PAYLOAD_TOO_LARGE" });
  });

  it("takes a body of exactly the cap and refuses one byte more, announced or chunked", async () => {
    const chunked = (size: number) =>
      `POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n${size.toString(16)}\r\n${"x".repeat(size)}\r\n0\r\n\r\n`;
    expect(String(await readRaw(`${head(1024)}${"x".repeat(1024)}`, 1024))).toHaveLength(1024);
    expect(String(await readRaw(chunked(1024), 1024))).toHaveLength(1024);
    expect(await readRaw(`${head(1025)}${"x".repeat(1025)}`, 1024)).toMatchObject({
      code: "PAYLOAD_TOO_LARGE",
    });
    expect(await readRaw(chunked(1025), 1024)).toMatchObject({ code: "PAYLOAD_TOO_LARGE" });
  });

  it("fails with 400 when the client leaves in the middle of the body", async () => {
    expect(await readRaw(`${head(100)}only ten b`, 1024, true)).toMatchObject({
      code: "BAD_REQUEST",
      status: 400,
    });
  });

  it("fails with 400 at once when the client left before the body was read", async () => {
    let settle: (value: unknown) => void = () => {};
    const outcome = new Promise((resolve) => {
      settle = resolve;
    });
    const server = createServer((request: IncomingMessage) => {
      // As when admission awaits I/O and the client leaves meanwhile.
      request.socket.destroy();
      setTimeout(() => readBody(request, 1024).then(settle, settle), 20);
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const address = server.address();
    const socket = connect(typeof address === "object" && address ? address.port : 0, "127.0.0.1");
    socket.on("error", () => {});
    socket.write(`${head(5)}hello`);
    expect(await outcome).toMatchObject({ code: "BAD_REQUEST", status: 400 });
    socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  });

  it("fails with the refusal when the shutdown's deadline refuses the call mid-body, and at once after", async () => {
    let settle: (value: unknown) => void = () => {};
    const outcome = new Promise((resolve) => {
      settle = resolve;
    });
    const server = createServer((request: IncomingMessage, response) => {
      const reading = readBody(request, 1024, { response });
      request.once("data", () => {
        // Half the body has come: the deadline refuses the call, and something listened.
        const listened = refuseAtDeadline(response);
        void reading.then(settle, async (error: unknown) => {
          const again = await readBody(request, 1024, { response }).catch((later: unknown) => later);
          settle({ listened, error, again });
        });
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const address = server.address();
    const socket = connect(typeof address === "object" && address ? address.port : 0, "127.0.0.1");
    socket.on("error", () => {});
    socket.write(`${head(100)}only ten b`);
    const { listened, error, again } = (await outcome) as Record<string, unknown>;
    expect(listened).toBe(true);
    expect(error).toMatchObject({ code: "SERVICE_UNAVAILABLE", status: 503 });
    expect(again).toBe(error);
    socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  });
});

describe("parseJsonObject", () => {
  const bytes = (...parts: Array<string | number[]>) =>
    Buffer.concat(parts.map((part) => (typeof part === "string" ? Buffer.from(part) : Buffer.from(part))));

  it.each([
    ["a lone 0xFF", bytes('{"name":"bad', [0xff], '"}')],
    ["an overlong encoding of '.'", bytes('{"name":"bad', [0xc0, 0xae], '"}')],
    ["an encoded surrogate", bytes('{"name":"', [0xed, 0xa0, 0x80], '"}')],
    ["a sequence cut short at the end", bytes('{"name":"x"}', [0xe2, 0x82])],
    ["a Latin-1 byte in a key", bytes('{"caf', [0xe9], '":1}')],
  ])("refuses a body with %s with 400 instead of replacing it with U+FFFD", (_name, body) => {
    expect(() => parseJsonObject(body)).toThrow(
      expect.objectContaining({ code: "BAD_REQUEST", status: 400, message: "The body is not valid UTF-8" }),
    );
  });

  it("reads valid multi-byte UTF-8 as the text it encodes", () => {
    expect(parseJsonObject(Buffer.from('{"name":"café ☕ 𝄞"}'))).toEqual({ name: "café ☕ 𝄞" });
  });

  it("skips a leading byte order mark, and only a leading one", () => {
    expect(parseJsonObject(bytes([0xef, 0xbb, 0xbf], '{"name":"x"}'))).toEqual({ name: "x" });
    expect(() => parseJsonObject(bytes([0xef, 0xbb, 0xbf, 0xef, 0xbb, 0xbf], "{}"))).toThrow(
      expect.objectContaining({ code: "BAD_REQUEST", message: "The request body is not valid JSON" }),
    );
  });
});

describe("parseJsonObject with bounds", () => {
  const bounds = { limits: { maxDepth: 64, maxValues: 10_000 }, takes: '/v1/text takes {"text": "…"}' };

  it("refuses a body nested too deep or holding too many values with 400, before JSON.parse", () => {
    const parse = vi.spyOn(JSON, "parse");
    const refusals = [
      [`{"text":"x","a":${"[".repeat(10_000_000)}`, "nests objects and arrays more than 64 deep"],
      [
        `{"text":"x","a":{${'"0":0,'.repeat(2_000_000)}"1":0}}`,
        "holds more than 10000 object members and array elements",
      ],
    ] as const;
    for (const [text, says] of refusals)
      expect(() => parseJsonObject(Buffer.from(text), bounds)).toThrow(
        expect.objectContaining({
          code: "BAD_REQUEST",
          status: 400,
          message: `The request body ${says}: /v1/text takes {"text": "…"}`,
          details: { maxDepth: 64, maxValues: 10_000 },
        }),
      );
    const calls = parse.mock.calls.length;
    parse.mockRestore();
    expect(calls).toBe(0);
  });

  it("parses a body within them, and any body without them (the admin API's)", () => {
    const body = Buffer.from(`{"text":"[[[[,:,:","a":${"[".repeat(63)}${"]".repeat(63)}}`);
    expect(parseJsonObject(body, bounds).text).toBe("[[[[,:,:");
    expect(parseJsonObject(Buffer.from(`{"a":${"[".repeat(100)}${"]".repeat(100)}}`))).toHaveProperty("a");
  });
});

describe("requireUncompressedUtf8Json", () => {
  const withType = (type: string | undefined) =>
    ({ headers: type === undefined ? {} : { "content-type": type } }) as IncomingMessage;

  it.each([
    "application/json",
    "application/json; charset=utf-8",
    "application/json;charset=UTF-8",
    'application/json; charset="Utf-8"',
    "application/json; charset=utf8",
    "application/problem+json; charset=utf-8",
  ])("accepts %s", (type) => {
    expect(() => requireUncompressedUtf8Json(withType(type))).not.toThrow();
  });

  it.each([
    ["application/json; charset=iso-8859-1", "iso-8859-1"],
    ["application/json;charset=UTF-16", "UTF-16"],
    ['application/json; charset="windows-1252"', "windows-1252"],
    ["application/json; charset=utf-8; charset=latin1", "latin1"],
  ])("refuses %s with 415 naming the charset", (type, charset) => {
    expect(() => requireUncompressedUtf8Json(withType(type))).toThrow(
      expect.objectContaining({
        code: "UNSUPPORTED_MEDIA_TYPE",
        status: 415,
        message: `The charset "${charset}" is not supported: JSON bodies must be UTF-8`,
      }),
    );
  });

  const withCoding = (coding: string) =>
    ({ headers: { "content-type": "application/json", "content-encoding": coding } }) as IncomingMessage;

  it.each(["identity", "IDENTITY", "", " identity , identity"])("accepts content-encoding %j", (coding) => {
    expect(() => requireUncompressedUtf8Json(withCoding(coding))).not.toThrow();
  });

  it.each([
    ["gzip", "gzip"],
    ["br", "br"],
    ["identity, Deflate", "Deflate"],
    ["zstd, gzip", "zstd"],
  ])("refuses content-encoding %j with 415 naming %s and accepting identity", (coding, named) => {
    expect(() => requireUncompressedUtf8Json(withCoding(coding))).toThrow(
      expect.objectContaining({
        code: "UNSUPPORTED_MEDIA_TYPE",
        status: 415,
        message: `The content-encoding "${named}" is not supported: send the JSON body uncompressed`,
        headers: { "accept-encoding": "identity" },
      }),
    );
  });

  it("accepts an application/…+json type, in any letter case", () => {
    for (const type of ["application/vnd.api+json", "Application/LD+JSON", "application/json-patch+json"]) {
      expect(() => requireUncompressedUtf8Json(withType(type))).not.toThrow();
    }
  });

  it("still refuses a type that is not JSON with 415, naming the +json types it takes", () => {
    for (const type of [undefined, "text/plain; charset=utf-8", "text/vnd.api+json", "application/jsonx"]) {
      expect(() => requireUncompressedUtf8Json(withType(type))).toThrow(
        expect.objectContaining({
          code: "UNSUPPORTED_MEDIA_TYPE",
          message:
            "Content-Type must be application/json or an application/…+json type (such as application/vnd.api+json)",
        }),
      );
    }
  });
});
