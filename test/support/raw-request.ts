import { request as httpRequest } from "node:http";

export interface RawAnswer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** An answer with its body as the bytes that came (no content-coding undone, as fetch would). */
export interface RawBytesAnswer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

/**
 * Sends `headers` as given, on a connection of its own: a list value goes out as that many header
 * lines (fetch and undici would join them into one), so a test can repeat a header.
 */
export async function sendRawHeaders(
  url: string,
  headers: Record<string, string | string[]>,
  body: string,
  method = "POST",
): Promise<RawAnswer> {
  const answer = await sendRawBytes(url, headers, body, method);
  return { ...answer, body: answer.body.toString() };
}

/** `sendRawHeaders`, its answer's body kept as bytes. */
export function sendRawBytes(
  url: string,
  headers: Record<string, string | string[]>,
  body: string,
  method = "POST",
): Promise<RawBytesAnswer> {
  return new Promise((resolve, reject) => {
    const outgoing = httpRequest(url, { method, agent: false }, (incoming) => {
      const chunks: Buffer[] = [];
      incoming.on("data", (chunk: Buffer) => chunks.push(chunk));
      incoming.on("end", () =>
        resolve({
          status: incoming.statusCode ?? 0,
          headers: incoming.headers,
          body: Buffer.concat(chunks),
        }),
      );
      incoming.on("error", reject);
    });
    outgoing.on("error", reject);
    for (const [name, value] of Object.entries(headers)) outgoing.setHeader(name, value);
    outgoing.end(body);
  });
}
