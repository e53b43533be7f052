import { randomBytes } from "node:crypto";
import { request as httpRequest } from "node:http";
import { Readable, Writable } from "node:stream";
import { afterEach, describe, expect, it } from "vitest";
import { startLocalServer } from "../../test/support/local-server.js";
import type { VaultFile } from "../images/local-vault.js";
import { createUrlSigner } from "../images/signed-url.js";
import { createLogger } from "../observability/logger.js";
import { type ImageRouteDeps, registerImageRoutes } from "./image-routes.js";
import { Router } from "./router.js";
import { sendError } from "./send.js";

/**
 * GET /v1/vault/* alone, served over real HTTP by a bare router (no app around it), for a vault file
 * the test makes: its `open` answers `file`. A thrown error is answered as the app answers it (the
 * envelope, or the answer cut once begun). Returns its URL for `path`, and the log lines written.
 */
async function serveVault(file: VaultFile, vaultReadWindows?: ImageRouteDeps["vaultReadWindows"]) {
  const signer = createUrlSigner(randomBytes(32));
  const lines: Array<Record<string, unknown>> = [];
  const logger = createLogger(
    "debug",
    new Writable({
      write(chunk, _encoding, done) {
        lines.push(JSON.parse(String(chunk)) as Record<string, unknown>);
        done();
      },
    }),
  );
  const router = new Router();
  registerImageRoutes(router, {
    now: () => new Date(),
    logger,
    localVault: { signer, open: async () => file },
    ...(vaultReadWindows ? { vaultReadWindows } : {}),
  } as unknown as ImageRouteDeps);
  const server = await startLocalServer((request, response) => {
    const url = request.url ?? "/";
    const queryAt = url.indexOf("?");
    const path = url.slice(0, queryAt);
    const lookup = router.find(request.method ?? "GET", path);
    if (lookup.kind !== "found") throw new Error(`no route for ${path}`);
    response.setHeader("x-request-id", "req-vault-1");
    void (async () => {
      try {
        await lookup.handler({
          request,
          response,
          params: lookup.params,
          requestId: "req-vault-1",
          startedAt: performance.now(),
          clientIp: "127.0.0.1",
          path,
          query: url.slice(queryAt + 1),
          writesOwnHeaders: false,
          corsHeaders: null,
        });
      } catch (error) {
        sendError(response, error, "req-vault-1");
      }
    })();
  });
  const path = "team1/generated-images/prj_1/2026/01/01/a.png";
  return { server, lines, url: signer.sign(server.url, path, 60) };
}

/** What a GET of `url` got: its status and the bytes before the answer ended or was cut. */
async function get(
  url: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; bytes: number; cut: boolean }> {
  const { status, bytes, cut } = await getWhole(url, headers);
  return { status, bytes: bytes.length, cut };
}

/** What a GET of `url` got: its status, headers, and the bytes before the answer ended or was cut. */
function getWhole(
  url: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; headers: Record<string, unknown>; bytes: Buffer; cut: boolean }> {
  return new Promise((resolve, reject) => {
    httpRequest(url, { headers }, (response) => {
      const chunks: Buffer[] = [];
      response.on("data", (chunk: Buffer) => chunks.push(chunk));
      const done = (cut: boolean) =>
        resolve({
          status: response.statusCode ?? 0,
          headers: response.headers,
          bytes: Buffer.concat(chunks),
          cut,
        });
      response.once("end", () => done(false));
      response.once("error", () => done(true));
    })
      .once("error", reject)
      .end();
  });
}

/** A file of `size` bytes whose read fails (EIO) after its first `good` bytes (none: on its first read). */
function failingFile(size: number, good: number): VaultFile & { closed: boolean } {
  const file = {
    size,
    modified: new Date("2026-01-01T00:00:00Z"),
    closed: false,
    stream: () => {
      let sent = false;
      return new Readable({
        read() {
          if (!sent && good > 0) {
            sent = true;
            this.push(Buffer.alloc(good, 1));
          } else
            setImmediate(() =>
              this.destroy(Object.assign(new Error("EIO: i/o error, read"), { code: "EIO", errno: -5 })),
            );
        },
        destroy(error, callback) {
          file.closed = true;
          callback(error);
        },
      });
    },
    close: async () => {
      file.closed = true;
    },
  };
  return file;
}

describe("GET /v1/vault/* when the file fails to read in the middle of its answer", () => {
  let close: (() => Promise<void>) | null = null;
  afterEach(async () => {
    await close?.();
    close = null;
  });

  it("cuts the answer short, closes the file, and logs the failure once at warn, without the URL's signature", async () => {
    const file = failingFile(100_000, 1000);
    const { server, lines, url } = await serveVault(file);
    close = server.close;
    const answer = await get(url);
    expect(answer.status).toBe(200);
    expect(answer.cut).toBe(true);
    expect(answer.bytes).toBe(1000);
    expect(file.closed).toBe(true);
    await expect.poll(() => lines.filter((line) => line.msg === "vault read failed")).toHaveLength(1);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({
      level: "warn",
      dependency: "vault",
      code: "EIO",
      cause: "EIO: i/o error, read",
      requestId: "req-vault-1",
      route: "/v1/vault/*",
      path: "team1/generated-images/prj_1/2026/01/01/a.png",
    });
    const signature = new URL(url).searchParams.get("signature") as string;
    expect(JSON.stringify(lines)).not.toContain(signature);
    expect(JSON.stringify(lines)).not.toContain("expires");
  });

  it("logs one line per error code and 10 s window, then how many it left out when the window ends", async () => {
    let clock = 0;
    // Each failure logged or counted reads the clock once.
    let failures = 0;
    const ends: Array<{ run: () => void; ms: number }> = [];
    const file = failingFile(100_000, 1000);
    const { server, lines, url } = await serveVault(file, {
      now: () => {
        failures++;
        return clock;
      },
      schedule: (run, ms) => ends.push({ run, ms }),
    });
    close = server.close;
    const failed = () => lines.filter((line) => line.msg === "vault read failed");
    // A failing disk under traffic: every answer cut short, one line for them all.
    for (let answer = 0; answer < 4; answer++) {
      expect(await get(url)).toMatchObject({ status: 200, cut: true });
      clock += 1000;
    }
    await expect.poll(() => failures).toBe(4);
    expect(ends).toHaveLength(1);
    expect(failed()).toHaveLength(1);
    expect(ends[0]?.ms).toBe(10_000);
    expect(lines).toHaveLength(1);
    ends[0]?.run();
    expect(lines).toHaveLength(2);
    expect(lines[1]).toEqual(
      expect.objectContaining({
        level: "warn",
        msg: "vault read failures suppressed",
        dependency: "vault",
        code: "EIO",
        route: "/v1/vault/*",
        suppressed: 3,
        windowMs: 10_000,
      }),
    );
    // The next window's first failure is written again.
    clock += 10_000;
    expect(await get(url)).toMatchObject({ status: 200, cut: true });
    await expect.poll(() => failed()).toHaveLength(2);
    expect(JSON.stringify(lines)).not.toContain(new URL(url).searchParams.get("signature") as string);
  });

  it("logs nothing for a file read whole", async () => {
    const bytes = randomBytes(5000);
    const { server, lines, url } = await serveVault({
      size: bytes.length,
      modified: new Date("2026-01-01T00:00:00Z"),
      stream: () => Readable.from([bytes]),
      close: async () => {},
    });
    close = server.close;
    expect(await get(url)).toEqual({ status: 200, bytes: 5000, cut: false });
    expect(lines).toEqual([]);
  });
});

describe("GET /v1/vault/* when the file fails to read before its answer begins", () => {
  let close: (() => Promise<void>) | null = null;
  afterEach(async () => {
    await close?.();
    close = null;
  });

  // A read that fails on its first chunk (EIO, EISDIR) leaves the answer unbegun: the client is owed
  // the 503 an open that fails gets, not a closed connection.
  it.each([
    ["the whole file", {}],
    ["a range", { range: "bytes=10-99" }],
  ])(
    "answers 503 SERVICE_UNAVAILABLE, retryable, with Retry-After, for %s, and closes the file",
    async (_, headers) => {
      const file = failingFile(100_000, 0);
      const { server, lines, url } = await serveVault(file);
      close = server.close;
      const answer = await getWhole(url, headers);
      expect(answer.cut).toBe(false);
      expect(answer.status).toBe(503);
      expect(answer.headers["retry-after"]).toBe("5");
      expect(answer.headers["content-type"]).toBe("application/json; charset=utf-8");
      expect(answer.headers["x-request-id"]).toBe("req-vault-1");
      // Nothing of the file's answer: a 503 that says a max-age, a tag or a range could be kept.
      for (const name of ["etag", "last-modified", "cache-control", "content-range", "accept-ranges"])
        expect(answer.headers[name]).toBeUndefined();
      expect(JSON.parse(answer.bytes.toString())).toEqual({
        error: {
          code: "SERVICE_UNAVAILABLE",
          message: "The image vault could not read this file",
          requestId: "req-vault-1",
          details: { retryable: true },
        },
      });
      expect(file.closed).toBe(true);
      // Logged as the app logs every 503 of a dependency (`vault call failed`), not as a cut answer.
      expect(lines.filter((line) => line.msg === "vault read failed")).toEqual([]);
    },
  );
});
