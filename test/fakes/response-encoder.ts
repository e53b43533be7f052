import type { ServerResponse } from "node:http";
import { createBrotliCompress, createDeflate, createGzip } from "node:zlib";

export type ResponseCoding = "gzip" | "deflate" | "br";

export interface ResponseEncoder {
  /** Compresses `text` and flushes it to the client, so a stream still arrives event by event. */
  write(text: string | Buffer): Promise<void>;
  /** Writes the compressed stream's end (not the response's). */
  end(): Promise<void>;
}

/**
 * A streaming compressor in front of a fake provider's response, as a server that compresses
 * whatever the client asked for does. With `recorded`, every compressed byte sent is kept in its
 * `sentBody`, so a test can compare what the client received.
 */
export function createResponseEncoder(
  coding: ResponseCoding,
  response: ServerResponse,
  recorded?: { sentBody?: Buffer },
): ResponseEncoder {
  const encoder =
    coding === "gzip" ? createGzip() : coding === "deflate" ? createDeflate() : createBrotliCompress();
  encoder.on("data", (bytes: Buffer) => {
    if (recorded) recorded.sentBody = Buffer.concat([recorded.sentBody ?? Buffer.alloc(0), bytes]);
    if (response.destroyed) return;
    if (!response.write(bytes)) {
      encoder.pause();
      response.once("drain", () => encoder.resume());
    }
  });
  const ended = new Promise<void>((resolve) => encoder.once("end", resolve));
  return {
    write: (text) =>
      new Promise<void>((resolve) => {
        encoder.write(text);
        encoder.flush(() => resolve());
      }),
    async end() {
      encoder.end();
      await ended;
    },
  };
}
