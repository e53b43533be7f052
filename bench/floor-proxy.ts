import { createServer } from "node:http";
import { Pool } from "undici";

/**
 * The floor DESIGN.md measures against: a minimal node:http + undici Pool.request pass-through.
 * The small request body is read into one Buffer and sent with content-length; the response is
 * copied with write/drain. No auth, no limits, no usage: what any proxy must at least do.
 */
const upstream = process.argv[2];
if (!upstream) throw new Error("usage: floor-proxy <upstream origin>");
const pool = new Pool(upstream, { connections: 256, keepAliveTimeout: 30_000 });

const server = createServer((request, response) => {
  const chunks: Buffer[] = [];
  request.on("data", (chunk: Buffer) => chunks.push(chunk));
  request.on("end", () => {
    const body = Buffer.concat(chunks);
    pool
      .request({
        path: request.url ?? "/",
        method: (request.method ?? "GET") as "POST",
        headers: {
          "content-type": request.headers["content-type"] ?? "application/json",
          "content-length": String(body.length),
          authorization: "Bearer floor",
        },
        body,
      })
      .then(({ statusCode, headers, body: upstreamBody }) => {
        const { connection: _c, "keep-alive": _k, "transfer-encoding": _t, ...rest } = headers;
        response.writeHead(statusCode, rest);
        upstreamBody.on("data", (chunk: Buffer) => {
          if (!response.write(chunk)) upstreamBody.pause();
        });
        response.on("drain", () => upstreamBody.resume());
        upstreamBody.on("end", () => response.end());
        upstreamBody.on("error", () => response.destroy());
      })
      .catch(() => {
        response.writeHead(502).end();
      });
  });
});
server.listen(0, "127.0.0.1", () => {
  const address = server.address();
  process.stdout.write(
    `${JSON.stringify({ url: `http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}` })}\n`,
  );
});
process.once("SIGTERM", () => process.exit(0));
